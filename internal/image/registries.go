package image

import (
	"errors"
	"fmt"
	"os"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultRegistriesFile is read when no other registries file is named.
const DefaultRegistriesFile = "/etc/tine/registries.toml"

// Registries configure how registries are reached, by host
// ("docker.io", "ghcr.io", "localhost:5000"):
//
//	[[registry]]
//	host = "docker.io"
//	mirrors = ["mirror.gcr.io"]   # tried in order before the host itself
//
//	[[registry]]
//	host = "registry.lan:5000"
//	insecure = true               # plain HTTP
type Registries struct {
	Registry []Registry `toml:"registry" json:"registry"`
}

// Registry is one host's settings.
type Registry struct {
	Host     string   `toml:"host" json:"host"`
	Mirrors  []string `toml:"mirrors" json:"mirrors,omitempty"`
	Insecure bool     `toml:"insecure" json:"insecure,omitempty"`
}

// LoadRegistries reads a registries file; a missing default file is no
// error (no mirrors, TLS everywhere but loopback).
func LoadRegistries(path string) (Registries, error) {
	var r Registries
	explicit := path != ""
	if !explicit {
		path = DefaultRegistriesFile
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("registries file: %w", err)
	}
	md, err := toml.Decode(string(b), &r)
	if err != nil {
		return r, fmt.Errorf("registries file %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		return r, fmt.Errorf("registries file %s: unknown key %s (want registry.host, .mirrors, .insecure)", path, un[0])
	}
	for _, reg := range r.Registry {
		if reg.Host == "" {
			return r, fmt.Errorf("registries file %s: a [[registry]] without host", path)
		}
	}
	return r, nil
}

func (rs Registries) find(host string) Registry {
	for _, r := range rs.Registry {
		h := r.Host
		if h == "docker.io" {
			h = name.DefaultRegistry
		}
		if h == host {
			return r
		}
	}
	return Registry{Host: host}
}

// insecure reports whether host is to be reached over plain HTTP.
func (rs Registries) insecure(host string) bool { return rs.find(host).Insecure }

// sources lists the references to try for ref: through each mirror of
// its registry, then the registry itself.
func (rs Registries) sources(ref name.Reference) ([]name.Reference, error) {
	reg := rs.find(ref.Context().RegistryStr())
	var out []name.Reference
	for _, m := range append(append([]string(nil), reg.Mirrors...), ref.Context().RegistryStr()) {
		var opts []name.Option
		if rs.insecure(m) || (m == ref.Context().RegistryStr() && reg.Insecure) {
			opts = append(opts, name.Insecure)
		}
		var r name.Reference
		var err error
		switch t := ref.(type) {
		case name.Digest:
			r, err = name.NewDigest(m+"/"+t.RepositoryStr()+"@"+t.DigestStr(), opts...)
		case name.Tag:
			r, err = name.NewTag(m+"/"+t.RepositoryStr()+":"+t.TagStr(), opts...)
		}
		if err != nil {
			return nil, fmt.Errorf("mirror %s for %s: %w", m, ref, err)
		}
		out = append(out, r)
	}
	return out, nil
}
