package server

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/inroot"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
)

// boxNet is what a sandbox holds of the network: an egress sandbox's
// attachment, a none sandbox's namespace, the published ports.
type boxNet struct {
	mode  network.Mode
	att   *network.Attachment
	ns    *os.File // the namespace published ports dial into
	specs []network.PortSpec
	ports []*network.Published
	proxy []int // ports reachable through the daemon's TCP listener (portproxy.go)

	closeOnce sync.Once
	closeErr  error
}

// injections checks a request's header injections.
func injections(a *api.SandboxSpec) ([]network.Injection, error) {
	var out []network.Injection
	for _, in := range a.Inject {
		ni := network.Injection{Host: in.Host, TLS: in.TLS, Headers: map[string]string{}}
		if len(in.Headers) == 0 {
			return nil, fmt.Errorf("%w: inject for %q has no headers", ErrInvalidArgument, in.Host)
		}
		for k, v := range in.Headers {
			one, err := network.ParseInjection(in.Host + ":" + k + "=" + v)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
			}
			maps.Copy(ni.Headers, one.Headers)
			ni.Host = one.Host
		}
		out = append(out, ni)
	}
	if len(out) > 0 && a.Network != string(network.ModeEgress) {
		return nil, fmt.Errorf("%w: inject needs network \"egress\": the proxy is on its gateway", ErrInvalidArgument)
	}
	return out, nil
}

// redacted is spec as the API shows it: injected values hidden.
func redacted(spec api.SandboxSpec) api.SandboxSpec {
	if len(spec.Inject) == 0 {
		return spec
	}
	inj := make([]api.Injection, len(spec.Inject))
	for i, in := range spec.Inject {
		h := map[string]string{}
		for k := range in.Headers {
			h[k] = api.Redacted
		}
		inj[i] = api.Injection{Host: in.Host, Headers: h, TLS: in.TLS}
	}
	spec.Inject = inj
	return spec
}

// proxiedPorts are the request's ports published through the daemon's
// TCP listener.
func proxiedPorts(a *api.SandboxSpec) []int {
	var ports []int
	for _, p := range a.Publish {
		if p.Proxy {
			ports = append(ports, p.Port)
		}
	}
	return ports
}

// proxied says whether port is published through the daemon's listener.
func (bn *boxNet) proxied(port int) bool { return slices.Contains(bn.proxy, port) }

// checkNetwork checks a request's network fields.
func checkNetwork(a *api.SandboxSpec) (network.Mode, network.Policy, []network.PortSpec, error) {
	mode, err := network.ParseMode(a.Network)
	if err != nil {
		return "", network.Policy{}, nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	p, err := network.ParsePolicy(a.Allow, a.Deny)
	if err != nil {
		return "", network.Policy{}, nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if mode != network.ModeEgress && (len(a.Allow) > 0 || len(a.Deny) > 0) {
		return "", network.Policy{}, nil, fmt.Errorf("%w: allow and deny rules are an egress policy: they need network \"egress\" (this sandbox's is %q)", ErrInvalidArgument, mode)
	}
	var ports []network.PortSpec
	for _, pt := range a.Publish {
		if pt.Proxy {
			if pt.Port < 1 || pt.Port > 65535 || (pt.Protocol != "" && pt.Protocol != "tcp") || pt.HostIP != "" || pt.HostPort != 0 {
				return "", network.Policy{}, nil, fmt.Errorf("%w: publish port %d with proxy: a TCP port 1 to 65535, without host_ip or host_port (the daemon's TCP listener is the host side)", ErrInvalidArgument, pt.Port)
			}
			continue
		}
		ps, err := network.MakePort(pt.HostIP, pt.HostPort, pt.Port, pt.Protocol)
		if err != nil {
			return "", network.Policy{}, nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		ports = append(ports, ps)
	}
	if _, err := injections(a); err != nil {
		return "", network.Policy{}, nil, err
	}
	if mode == network.ModeNone && len(a.Publish) > 0 {
		return "", network.Policy{}, nil, fmt.Errorf("%w: network \"none\" has no interface to publish a port on; use loopback or egress", ErrInvalidArgument)
	}
	return mode, p, ports, nil
}

// prepareNetwork gives spec the network the request asks for, before the
// sandbox is made; close undoes it.
func (s *Server) prepareNetwork(req *api.SandboxSpec, spec *sandbox.Spec) (*boxNet, error) {
	mode, policy, ports, err := checkNetwork(req)
	if err != nil {
		return nil, err
	}
	bn := &boxNet{mode: mode, specs: ports, proxy: proxiedPorts(req)}
	switch mode {
	case network.ModeNone:
		if bn.ns, err = network.NewNetNS(false); err != nil {
			return nil, err
		}
		spec.NetNS = bn.ns
	case network.ModeEgress:
		if spec.UserNS {
			return nil, fmt.Errorf("%w: network egress needs the host's user namespace (drop userns)", ErrInvalidArgument)
		}
		inject, _ := injections(req) // checked above
		if bn.att, err = s.net.Attach(policy, inject); err != nil {
			return nil, err
		}
		bn.ns = bn.att.NetNS()
		spec.NetNS = bn.ns
		if len(inject) > 0 {
			u := bn.att.ProxyURL()
			spec.Env = append(spec.Env, "http_proxy="+u, "HTTP_PROXY="+u, "https_proxy="+u, "HTTPS_PROXY="+u, "no_proxy=localhost,127.0.0.1", "NO_PROXY=localhost,127.0.0.1")
		}
	}
	return bn, nil
}

// started gives an egress sandbox its resolv.conf and publishes the
// ports, once the sandbox runs (nothing of its own has run in it yet).
func (bn *boxNet) started(inst Instance) error {
	pid := inst.Pid()
	if bn.att != nil {
		root, err := inroot.Open(inst.Root())
		if err != nil {
			return err
		}
		_, err = root.Write("/etc/resolv.conf", bytes.NewReader(bn.att.ResolvConf()), 0o644, 4096, 0, 0)
		root.Close()
		if err != nil {
			return fmt.Errorf("write the sandbox's /etc/resolv.conf: %w", err)
		}
	}
	if len(bn.specs) == 0 && len(bn.proxy) == 0 {
		return nil
	}
	target := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if bn.att != nil {
		target = bn.att.Addr()
	}
	if bn.ns == nil {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			return fmt.Errorf("open the sandbox's network namespace: %w", err)
		}
		bn.ns = f
	}
	for _, ps := range bn.specs {
		p, err := network.Publish(ps, bn.ns, target)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		bn.ports = append(bn.ports, p)
	}
	return nil
}

// close unpublishes the ports and removes the network; the sandbox is
// gone by then.
func (bn *boxNet) close() error {
	if bn == nil {
		return nil
	}
	bn.closeOnce.Do(func() {
		for _, p := range bn.ports {
			p.Close()
		}
		if bn.att != nil {
			bn.closeErr = bn.att.Detach() // closes the namespace
		} else if bn.ns != nil {
			bn.ns.Close()
		}
	})
	return bn.closeErr
}

// info describes the network for the API.
func (bn *boxNet) info() *api.Network {
	if bn == nil {
		return nil
	}
	n := &api.Network{Mode: string(bn.mode)}
	if bn.att != nil {
		n.Address = bn.att.Addr().String()
		n.Resolver = bn.att.Gateway().String()
		n.Allow, n.Deny = bn.att.Policy().Strings()
	}
	for _, p := range bn.ports {
		n.Ports = append(n.Ports, api.Port{HostIP: p.Spec.HostIP.String(), HostPort: int(p.Spec.HostPort), Port: int(p.Spec.Port), Protocol: p.Spec.Proto})
	}
	for _, p := range bn.proxy {
		n.Ports = append(n.Ports, api.Port{Port: p, Protocol: "tcp", Proxy: true})
	}
	return n
}

// setNetwork is PUT /v1/sandboxes/{id}/network: a live egress sandbox's
// new policy, in force when the answer comes.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	var req api.NetworkPolicy
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	b, err := s.lookup(r)
	if err != nil {
		return err
	}
	if b.net == nil || b.net.att == nil {
		return fmt.Errorf("%w: sandbox %s has no egress network: a policy applies to network \"egress\" (create it with one)", ErrConflictState, b.id)
	}
	p, err := network.ParsePolicy(req.Allow, req.Deny)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := b.net.att.SetPolicy(p); err != nil {
		if errors.Is(err, network.ErrUnavailable) {
			return fmt.Errorf("%w: sandbox %s is being destroyed", ErrNotRunning, b.id)
		}
		return err
	}
	b.mu.Lock()
	b.spec.Allow, b.spec.Deny = req.Allow, req.Deny
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, b.net.info())
	return nil
}
