package server

import (
	"context"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

// TestNetworkValidation: bad network fields are a 400 naming what is
// wrong, before anything is made; a policy for a sandbox without egress
// is a 409.
func TestNetworkValidation(t *testing.T) {
	ts := newTestServer(t, Config{})
	cases := []struct{ body, says string }{
		{`{"network": "bridge"}`, `network "bridge"`},
		{`{"network": "egress", "allow": ["bad rule!"]}`, `bad rule!`},
		{`{"network": "egress", "deny": ["x.test:80"]}`, `a denied name is not resolved`},
		{`{"allow": ["pypi.org"]}`, `need network "egress"`},
		{`{"network": "none", "publish": [{"port": 80}]}`, `no interface to publish`},
		{`{"publish": [{"port": 0}]}`, `the sandbox's port`},
		{`{"publish": [{"port": 80, "protocol": "sctp"}]}`, `tcp or udp`},
		{`{"publish": [{"port": 80, "host_ip": "::1"}]}`, `IPv4`},
		{`{"inject": [{"host": "a.test", "headers": {"X-Key": "v"}}]}`, `inject needs network "egress"`},
		{`{"network": "egress", "inject": [{"host": "a.test", "headers": {"X-Key": "v\r\nEvil: 1"}}]}`, `no line breaks`},
		{`{"network": "egress", "inject": [{"host": "a.test", "headers": {}}]}`, `has no headers`},
	}
	for _, c := range cases {
		resp, e := ts.raw(t, "POST", "/v1/sandboxes", c.body)
		if resp.StatusCode != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, c.says) {
			t.Errorf("POST %s: got %d %s (%s), want 400 saying %q", c.body, resp.StatusCode, e.Code, e.Message, c.says)
		}
		if strings.Contains(e.Message, "v\r\nEvil") {
			t.Errorf("the error shows the injected value: %s", e.Message)
		}
	}
	sb, err := ts.c.Create(context.Background(), &api.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network == nil || sb.Network.Mode != "loopback" {
		t.Errorf("a default sandbox's network: %+v", sb.Network)
	}
	resp, e := ts.raw(t, "PUT", "/v1/sandboxes/"+sb.ID+"/network", `{"allow": ["a.test"]}`)
	if resp.StatusCode != 409 || !strings.Contains(e.Message, "no egress network") {
		t.Errorf("a policy for a loopback sandbox: %d %s", resp.StatusCode, e.Message)
	}
	resp, e = ts.raw(t, "PUT", "/v1/sandboxes/nope/network", `{}`)
	if resp.StatusCode != 404 {
		t.Errorf("a policy for no sandbox: %d %s", resp.StatusCode, e.Message)
	}
}
