package zygote

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/units"
)

// ErrInvalidSpec marks a function spec the daemon cannot run.
var ErrInvalidSpec = errors.New("invalid function spec")

// Defaults of a function spec.
const (
	DefaultHandler     = "handler"
	DefaultConcurrency = 4
	DefaultMemory      = 256 << 20
	DefaultPids        = 64
	DefaultTimeout     = 30 * time.Second
	DefaultColdAfter   = 10 * time.Minute
	// MaxConcurrency bounds a function's simultaneous requests.
	MaxConcurrency = 256
)

// What a function's requests share of the network (FunctionSpec.Network).
const (
	// NetworkIsolated: each request has a network namespace of its own.
	NetworkIsolated = "isolated"
	// NetworkShared: requests share the sandbox's loopback.
	NetworkShared = "shared"
	// NetworkEgress: requests share the sandbox's egress network (a
	// sandbox's network mode "egress", under the function's allow/deny).
	NetworkEgress = "egress"
)

func validNetwork(n string) error {
	if n != "" && n != NetworkIsolated && n != NetworkShared && n != NetworkEgress {
		return fmt.Errorf("%w: network %q: want %q (each request its own loopback, the default), %q (the function's requests can reach each other's listeners) or %q (they share an interface out, under allow and deny)", ErrInvalidSpec, n, NetworkIsolated, NetworkShared, NetworkEgress)
	}
	return nil
}

// validPolicy checks an egress function's allow and deny rules.
func validPolicy(s *api.FunctionSpec) error {
	if (len(s.Allow) > 0 || len(s.Deny) > 0) && s.Network != NetworkEgress {
		return fmt.Errorf("%w: allow and deny are an egress policy: they need network = %q", ErrInvalidSpec, NetworkEgress)
	}
	if _, err := network.ParsePolicy(s.Allow, s.Deny); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	return nil
}

// Runtimes a function can have.
const (
	RuntimePython = "python"
	RuntimeNode   = "node"
	RuntimeExec   = "exec"
)

// tomlSpec is a spec file as written: sizes and durations as text.
type tomlSpec struct {
	Name         string   `toml:"name"`
	Runtime      string   `toml:"runtime"`
	Entry        string   `toml:"entry"`
	Handler      string   `toml:"handler"`
	Command      []string `toml:"command"`
	Preload      []string `toml:"preload"`
	Python       string   `toml:"python"`
	Image        string   `toml:"image"`
	Requirements string   `toml:"requirements"`
	FindLinks    string   `toml:"find_links"`
	IndexURL     string   `toml:"index_url"`
	Node         string   `toml:"node"`
	Network      string   `toml:"network"`
	Allow        []string `toml:"allow"`
	Deny         []string `toml:"deny"`
	Concurrency  int      `toml:"concurrency"`
	ColdAfter    string   `toml:"cold_after"`
	Limits       struct {
		Memory  string  `toml:"memory"`
		CPUs    float64 `toml:"cpus"`
		Pids    int64   `toml:"pids"`
		Timeout string  `toml:"timeout"`
	} `toml:"limits"`
}

// ParseSpec reads a function spec file (TOML). Relative paths in it are
// taken from dir, the file's directory. Unknown keys are errors that name
// the key and its line.
func ParseSpec(src []byte, dir string) (*api.FunctionSpec, error) {
	var t tomlSpec
	md, err := toml.NewDecoder(bytes.NewReader(src)).Decode(&t)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The line from the error's byte offset: the decoder's Line is
			// one short (0 on the first line) for an error at the end of
			// the input, such as an unterminated string.
			line := 1 + bytes.Count(src[:min(max(pe.Position.Start, 0), len(src))], []byte("\n"))
			return nil, fmt.Errorf("%w: line %d: %s", ErrInvalidSpec, line, pe.Message)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0].String()
		return nil, fmt.Errorf("%w: unknown key %q (line %d); known keys: name, runtime, entry, handler, command, preload, python, image, requirements, find_links, index_url, node, network, allow, deny, concurrency, cold_after, [limits] memory, cpus, pids, timeout", ErrInvalidSpec, k, lineOf(src, und[0]))
	}
	s := &api.FunctionSpec{
		Name: t.Name, Runtime: t.Runtime, Entry: t.Entry, Handler: t.Handler, Command: t.Command,
		Preload: t.Preload, Python: t.Python, Image: t.Image, Requirements: t.Requirements, FindLinks: t.FindLinks, IndexURL: t.IndexURL, Node: t.Node, Network: t.Network, Allow: t.Allow, Deny: t.Deny, Concurrency: t.Concurrency,
		Limits: api.FunctionLimits{CPUs: t.Limits.CPUs, Pids: t.Limits.Pids},
	}
	for _, p := range []*string{&s.Entry, &s.Requirements, &s.FindLinks} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if err := validNetwork(s.Network); err != nil {
		return nil, fmt.Errorf("%w (line %d)", err, lineOf(src, toml.Key{"network"}))
	}
	if t.Limits.Memory != "" {
		if s.Limits.MemoryBytes, err = units.ParseSize(t.Limits.Memory); err != nil {
			return nil, fmt.Errorf("%w: limits.memory %q (line %d): %v", ErrInvalidSpec, t.Limits.Memory, lineOf(src, toml.Key{"limits", "memory"}), err)
		}
	}
	for _, d := range []struct {
		key  toml.Key
		text string
		out  *float64
	}{
		{toml.Key{"limits", "timeout"}, t.Limits.Timeout, &s.Limits.TimeoutSeconds},
		{toml.Key{"cold_after"}, t.ColdAfter, &s.ColdAfterSeconds},
	} {
		if d.text == "" {
			continue
		}
		v, err := units.ParseDuration(d.text)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q (line %d): %v", ErrInvalidSpec, d.key, d.text, lineOf(src, d.key), err)
		}
		*d.out = v.Seconds()
	}
	return s, Validate(s)
}

// lineOf finds the line that sets key, 0 if not found. The decoder knows
// every key's position but does not export it, so src is decoded again
// into a type with only key, whose value refuses to decode: the decoder's
// error carries the position. Keys a struct tag cannot name fall back to a
// search for a line (or table header) that sets a dotted key ending in
// the key's last part.
func lineOf(src []byte, key toml.Key) int {
	if len(key) == 0 {
		return 0
	}
	typ, named := reflect.TypeFor[keyProbe](), true
	for i := len(key) - 1; i >= 0; i-- {
		// A tag "-" skips the field, "" matches by field name, "," starts options.
		named = named && key[i] != "" && key[i] != "-" && !strings.Contains(key[i], ",")
		typ = reflect.StructOf([]reflect.StructField{{Name: "K", Type: typ, Tag: reflect.StructTag("toml:" + strconv.Quote(key[i]))}})
	}
	var pe toml.ParseError
	if _, err := toml.Decode(string(src), reflect.New(typ).Interface()); named && errors.As(err, &pe) && pe.Position.Line > 0 {
		return pe.Position.Line
	}
	re := regexp.MustCompile(`^\s*(\[\[?)?([^=\]]*\.)?\s*["']?` + regexp.QuoteMeta(key[len(key)-1]) + `["']?\s*[=.\]]`)
	for i, line := range strings.Split(string(src), "\n") {
		if re.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// keyProbe refuses to be decoded (see lineOf).
type keyProbe struct{}

func (keyProbe) UnmarshalTOML(any) error { return errors.New("probe") }

// The spec's patterns are compiled when first used, not at the binary's
// start: compiling them was 0.3 ms of every tine command's package init
// (961 allocations), `tine run` included.
var (
	namePattern = lazyRegexp(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	// modulePattern is a dotted Python module name.
	modulePattern = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	jsIdent       = lazyRegexp(`^[A-Za-z_$][A-Za-z0-9_$]*$`)
	nodeModule    = lazyRegexp(`^(@[a-z0-9._-]+/)?[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
)

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Validate checks s and fills its defaults.
func Validate(s *api.FunctionSpec) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	if !namePattern().MatchString(s.Name) {
		return bad("name %q: want 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", s.Name)
	}
	if v, ok := withNUL(s); ok {
		// No system call takes one: the kernel would read the path or
		// argument as cut short there.
		return bad("%q holds a NUL byte", v)
	}
	switch {
	case s.Requirements != "" && s.Image == "":
		return bad("requirements %q need an image: the environment is built with the image's pip", s.Requirements)
	case s.Requirements != "" && s.FindLinks == "" && s.IndexURL == "":
		return bad("requirements need the packages to install: find_links (a directory of wheels and sdists) or index_url (a package index)")
	case s.Requirements != "" && (!filepath.IsAbs(s.Requirements) || s.FindLinks != "" && !filepath.IsAbs(s.FindLinks)):
		return bad("requirements and find_links must be absolute paths on the daemon's host")
	case s.FindLinks != "" && s.Requirements == "":
		return bad("find_links %q is for requirements", s.FindLinks)
	case s.IndexURL != "" && s.Requirements == "":
		return bad("index_url %q is for requirements", s.IndexURL)
	case s.IndexURL != "" && !isIndexURL(s.IndexURL):
		return bad("index_url %q: want an http:// or https:// URL of a PEP 503 simple index (e.g. https://pypi.org/simple)", s.IndexURL)
	}
	switch s.Runtime {
	case "":
		s.Runtime = RuntimePython
		fallthrough
	case RuntimePython:
		if s.Entry == "" {
			return bad("runtime python needs entry, the handler's .py file")
		}
		if !filepath.IsAbs(s.Entry) || !strings.HasSuffix(s.Entry, ".py") {
			return bad("entry %q: want an absolute path to a .py file", s.Entry)
		}
		if len(s.Command) > 0 {
			return bad("command is for runtime exec; runtime python takes entry and handler")
		}
		if s.Handler == "" {
			s.Handler = DefaultHandler
		}
		if !modulePattern().MatchString(s.Handler) || strings.Contains(s.Handler, ".") {
			return bad("handler %q: want a Python function name", s.Handler)
		}
		for _, m := range s.Preload {
			if !modulePattern().MatchString(m) {
				return bad("preload %q: not a Python module name", m)
			}
		}
		if s.Python != "" && !filepath.IsAbs(s.Python) {
			return bad("python %q: want an absolute path to the interpreter", s.Python)
		}
	case RuntimeExec:
		if len(s.Command) == 0 || s.Command[0] == "" {
			return bad("runtime exec needs command, the program to run per request")
		}
		if s.Entry != "" || len(s.Preload) > 0 || s.Handler != "" {
			return bad("entry, handler and preload are for runtime python; runtime exec takes command")
		}
		if s.Python != "" && !filepath.IsAbs(s.Python) {
			return bad("python %q: want an absolute path to the interpreter (its zygote spawns the command)", s.Python)
		}
	case RuntimeNode:
		if !filepath.IsAbs(s.Entry) || !slices.Contains([]string{".js", ".cjs", ".mjs"}, filepath.Ext(s.Entry)) {
			return bad("runtime node needs entry, an absolute path to the handler's .js, .cjs or .mjs module (got %q)", s.Entry)
		}
		if len(s.Command) > 0 {
			return bad("command is for runtime exec; runtime node takes entry and handler")
		}
		if s.Handler == "" {
			s.Handler = DefaultHandler
		}
		if !jsIdent().MatchString(s.Handler) {
			return bad("handler %q: want the name of a function the module exports", s.Handler)
		}
		for _, m := range s.Preload {
			if !nodeModule().MatchString(m) {
				return bad("preload %q: not a Node module name", m)
			}
		}
		for _, p := range []string{s.Python, s.Node} {
			if p != "" && !filepath.IsAbs(p) {
				return bad("interpreter %q: want an absolute path", p)
			}
		}
	default:
		return bad("runtime %q: want python, node or exec", s.Runtime)
	}
	if err := validNetwork(s.Network); err != nil {
		return err
	}
	if err := validPolicy(s); err != nil {
		return err
	}
	if s.Network == "" {
		s.Network = NetworkIsolated
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	if s.Concurrency < 0 || s.Concurrency > MaxConcurrency {
		return bad("concurrency %d: want 1 to %d", s.Concurrency, MaxConcurrency)
	}
	l := &s.Limits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemory
	}
	if l.MemoryBytes < 4<<20 {
		return bad("limits.memory %d bytes: want at least 4 MiB", l.MemoryBytes)
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.Pids < 1 {
		return bad("limits.pids %d: want at least 1", l.Pids)
	}
	if !(l.CPUs >= 0 && l.CPUs <= cgroup.MaxCPUs) { // NaN too (TOML has nan)
		return bad("limits.cpus %v: want 0 (no quota) to %d cores", l.CPUs, cgroup.MaxCPUs)
	}
	if l.TimeoutSeconds == 0 {
		l.TimeoutSeconds = DefaultTimeout.Seconds()
	}
	if l.TimeoutSeconds < 0 || l.TimeoutSeconds > 24*3600 {
		return bad("limits.timeout: want a duration up to 24h")
	}
	if s.ColdAfterSeconds == 0 {
		s.ColdAfterSeconds = DefaultColdAfter.Seconds()
	}
	if s.ColdAfterSeconds < 0 {
		return bad("cold_after: want a positive duration")
	}
	return nil
}

// isIndexURL says whether u can name a package index (internal/image
// checks the rest when it builds).
func isIndexURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != ""
}

// withNUL returns the first of s's paths and arguments that holds a NUL
// byte.
func withNUL(s *api.FunctionSpec) (string, bool) {
	for _, v := range slices.Concat([]string{s.Entry, s.Handler, s.Python, s.Node}, s.Command, s.Preload) {
		if strings.IndexByte(v, 0) >= 0 {
			return v, true
		}
	}
	return "", false
}
