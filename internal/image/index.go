package image

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/tine-run/tine/internal/network"
)

// ErrNoEgress means a build needs a package index but the store was given
// no network to reach it with.
var ErrNoEgress = errors.New("no egress network for the package index")

// CheckIndexURL says whether u can name the package index of a build.
func CheckIndexURL(u string) error {
	_, err := indexRule(u)
	return err
}

// indexRule is the one egress rule a build from index u gets: its host
// and port (pip follows the index's links, so the packages must be on that
// host too).
func indexRule(u string) (network.Rule, error) {
	bad := func(why string) (network.Rule, error) {
		return network.Rule{}, fmt.Errorf("--index-url %q: %s", u, why)
	}
	p, err := url.Parse(u)
	if err != nil {
		return bad(err.Error())
	}
	port := p.Port()
	switch p.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return bad("want an http:// or https:// URL of a PEP 503 simple index (e.g. https://pypi.org/simple)")
	}
	host := p.Hostname()
	if host == "" {
		return bad("no host")
	}
	if a, err := netip.ParseAddr(host); err == nil && (a.IsLoopback() || a.IsUnspecified()) || strings.EqualFold(host, "localhost") {
		return bad("a loopback address is the build sandbox's own, not this host's: serve the index on an address the sandbox can reach, or install from --find-links")
	}
	r, err := network.ParseRule(net.JoinHostPort(host, port))
	if err != nil {
		return bad(err.Error())
	}
	return r, nil
}

// pipReason picks what says why pip failed from its output: its ERROR
// lines and its last warning (where a connection failure is told); the
// output's tail when it has neither.
func pipReason(out string, n int) string {
	var errs []string
	var retry string
	for _, l := range strings.Split(out, "\n") {
		switch l = strings.TrimSpace(l); {
		case strings.HasPrefix(l, "ERROR:"):
			errs = append(errs, l)
		case strings.HasPrefix(l, "WARNING:"):
			retry = l
		}
	}
	if retry != "" {
		errs = append([]string{retry}, errs...)
	}
	if len(errs) == 0 {
		return tail(out, n)
	}
	return tail(strings.Join(errs, "\n"), n)
}

// indexArgs are pip's arguments for the packages' sources: the index, or
// none (find-links only); the retries are few, since a build waits on them.
// A plain-HTTP index was asked for as such, so pip is told to trust it
// (it ignores one otherwise).
func indexArgs(req Requirements) string {
	var b strings.Builder
	if req.IndexURL != "" {
		b.WriteString(" --retries 2 --timeout 30 --index-url " + shellQuote(req.IndexURL))
		if u, err := url.Parse(req.IndexURL); err == nil && u.Scheme == "http" {
			b.WriteString(" --trusted-host " + shellQuote(u.Host))
		}
	} else {
		b.WriteString(" --no-index")
	}
	if req.FindLinks != "" {
		b.WriteString(" --find-links /tine/build/find-links")
	}
	return b.String()
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
