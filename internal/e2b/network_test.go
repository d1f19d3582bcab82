package e2b

import (
	"slices"
	"strings"
	"testing"
)

func TestNetworkOf(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		name        string
		internet    *bool
		raw         map[string]any
		mode        string
		allow, deny []string
		errHas      string
	}{
		{name: "nothing said: tine's default", mode: ""},
		{name: "internet", internet: &yes, mode: "egress"},
		{name: "no internet", internet: &no, mode: "loopback"},
		{name: "allowOut alone", raw: map[string]any{"allowOut": []any{"pypi.org", "1.1.1.1"}}, mode: "egress", allow: []string{"pypi.org", "1.1.1.1"}},
		{name: "allowOut with the catch-all deny", raw: map[string]any{"allowOut": []any{"pypi.org"}, "denyOut": []any{"0.0.0.0/0"}}, mode: "egress", allow: []string{"pypi.org"}},
		{name: "denyOut alone", internet: &yes, raw: map[string]any{"denyOut": []any{"8.8.8.8"}}, mode: "egress", deny: []string{"8.8.8.8"}},
		{name: "deny everything", raw: map[string]any{"denyOut": []any{"0.0.0.0/0"}}, mode: "loopback"},
		{name: "allow wins over deny in E2B, not in tine", raw: map[string]any{"allowOut": []any{"a.com"}, "denyOut": []any{"a.com"}}, errHas: "E2B lets allowOut win"},
		{name: "no internet with rules", internet: &no, raw: map[string]any{"allowOut": []any{"a.com"}}, errHas: "give one of them"},
		{name: "unsupported field", raw: map[string]any{"egressProxy": map[string]any{}}, errHas: "network.egressProxy is not supported"},
		{name: "not strings", raw: map[string]any{"allowOut": 3}, errHas: "lists of strings"},
	} {
		mode, p, err := networkOf(c.internet, c.raw)
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.errHas)
			}
			continue
		}
		if err != nil || mode != c.mode || !slices.Equal(p.Allow, c.allow) || !slices.Equal(p.Deny, c.deny) {
			t.Errorf("%s: mode %q allow %q deny %q err %v; want %q %q %q", c.name, mode, p.Allow, p.Deny, err, c.mode, c.allow, c.deny)
		}
	}
}

func TestIsImageRef(t *testing.T) {
	for id, want := range map[string]bool{
		"base": false, "desktop": false, "code-interpreter-v1": false, "snap1a2b": false,
		"python:3.12-slim": true, "ghcr.io/o/app": true, "app@sha256:00": true, "127.0.0.1:5000/e2b/bash:1": true,
	} {
		if got := isImageRef(id); got != want {
			t.Errorf("isImageRef(%q) = %v, want %v", id, got, want)
		}
	}
}
