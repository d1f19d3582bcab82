package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/network"
)

// netFlags are a sandbox's (or desktop's) network flags.
type netFlags struct {
	mode              string
	allow, deny, pubs []string
	inject            []string
}

const networkUsage = "none (no usable interface), loopback (lo only), or egress (an interface out through the host, under --allow/--deny; docs/network.md)"

func addNetFlags(fl *pflag.FlagSet, f *netFlags) {
	fl.StringVar(&f.mode, "network", "loopback", networkUsage)
	fl.StringArrayVar(&f.allow, "allow", nil, "egress: allow HOST, *.DOMAIN, ADDRESS or CIDR, each with an optional :PORT (repeatable; with any, everything else is refused)")
	fl.StringArrayVar(&f.deny, "deny", nil, "egress: refuse HOST, *.DOMAIN, ADDRESS or CIDR[:PORT] (repeatable)")
	fl.StringArrayVar(&f.inject, "inject", nil, "egress: add a header to plain-HTTP requests for HOST through tine's proxy, [https://]HOST:HEADER=VALUE (https://: sent on over HTTPS; the sandbox asks for http://HOST/); the value never enters the sandbox (repeatable)")
	fl.StringArrayVarP(&f.pubs, "publish", "p", nil, "publish [ADDR:]HOSTPORT:PORT[/tcp|udp] on the host (ADDR default 127.0.0.1, HOSTPORT 0: any), or proxy:PORT through the daemon's TCP listener (requests with the header Tine-Port: ID:PORT); repeatable")
}

// apply checks the flags and writes them into the request.
func (f netFlags) apply() (mode string, allow, deny []string, ports []api.Port, err error) {
	if _, err := network.ParseMode(f.mode); err != nil {
		return "", nil, nil, nil, usageError{err.Error()}
	}
	if _, err := network.ParsePolicy(f.allow, f.deny); err != nil {
		return "", nil, nil, nil, usageError{err.Error()}
	}
	for _, s := range f.pubs {
		if n, ok := strings.CutPrefix(s, "proxy:"); ok {
			port, err := strconv.Atoi(n)
			if err != nil || port < 1 || port > 65535 {
				return "", nil, nil, nil, usageError{fmt.Sprintf("invalid --publish %q: want proxy:PORT, PORT 1 to 65535", s)}
			}
			ports = append(ports, api.Port{Port: port, Proxy: true})
			continue
		}
		p, err := network.ParsePort(s)
		if err != nil {
			return "", nil, nil, nil, usageError{err.Error()}
		}
		ports = append(ports, portToAPI(p))
	}
	return f.mode, f.allow, f.deny, ports, nil
}

func portToAPI(p network.PortSpec) api.Port {
	ip := ""
	if p.HostIP != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		ip = p.HostIP.String()
	}
	return api.Port{HostIP: ip, HostPort: int(p.HostPort), Port: int(p.Port), Protocol: p.Proto}
}

// injections parses --inject values into the request's form.
func injections(vals []string) ([]api.Injection, error) {
	var out []api.Injection
	for _, v := range vals {
		in, err := network.ParseInjection(v)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		out = append(out, api.Injection{Host: in.Host, Headers: in.Headers, TLS: in.TLS})
	}
	return out, nil
}
