// Package network gives sandboxes their networks: the modes (none,
// loopback, egress), an egress sandbox's veth pair, address and NAT, the
// resolver tine runs for its sandboxes, the per-sandbox nftables rules
// that enforce its egress policy, published ports, and the reaping of all
// of it after a daemon died (ADR 0018, docs/network.md).
package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Mode is how much network a sandbox has.
type Mode string

const (
	// ModeNone: a network namespace of its own with lo down, so no
	// interface is usable at all.
	ModeNone Mode = "none"
	// ModeLoopback: a network namespace of its own with lo up (the default).
	ModeLoopback Mode = "loopback"
	// ModeEgress: lo, and a veth pair to the host with an address from the
	// daemon's pool, NAT out, tine's resolver and the egress policy.
	ModeEgress Mode = "egress"
)

// ErrInvalid is a bad mode, rule or published port.
var ErrInvalid = errors.New("invalid network setting")

// ParseMode parses --network; "" is loopback.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeLoopback:
		return ModeLoopback, nil
	case ModeNone, ModeEgress:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: network %q: want none (no interface), loopback (lo only, the default) or egress (an interface out through the host, under --allow/--deny)", ErrInvalid, s)
}

// Rule is one --allow or --deny entry: a name, a domain's subdomains, or
// an address range, optionally on one port.
type Rule struct {
	// Name is an exact host name (lower case, no trailing dot), or with
	// Subdomains the domain whose subdomains match ("*.example.com"
	// matches a.example.com and a.b.example.com, not example.com).
	Name       string
	Subdomains bool
	// Net is an IPv4 range (a single address is a /32); valid when Name
	// is empty.
	Net netip.Prefix
	// Port limits the rule to one TCP or UDP port (0: every port).
	Port uint16
}

// String is the rule as it is written.
func (r Rule) String() string {
	s := r.Name
	switch {
	case r.Subdomains:
		s = "*." + r.Name
	case r.Name == "":
		s = r.Net.String()
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// IsName says whether the rule is about names (enforced by the resolver
// and the addresses it answered) rather than addresses.
func (r Rule) IsName() bool { return r.Name != "" }

// ParseRule parses HOST, *.DOMAIN, ADDRESS or CIDR, each with an optional
// :PORT.
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: rule %q: %s; want HOST, *.DOMAIN, ADDRESS or CIDR, each with an optional :PORT (e.g. pypi.org, *.github.com:443, 203.0.113.0/24:80)", ErrInvalid, s, why)
	}
	var r Rule
	body := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || p == 0 {
			return bad("the port must be 1 to 65535")
		}
		r.Port, body = uint16(p), s[:i]
	}
	if body == "" {
		return bad("empty")
	}
	if pfx, err := netip.ParsePrefix(body); err == nil {
		if !pfx.Addr().Is4() {
			return bad("only IPv4 ranges: egress sandboxes have no IPv6")
		}
		r.Net = pfx.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(body); err == nil {
		if !a.Is4() {
			return bad("only IPv4 addresses: egress sandboxes have no IPv6")
		}
		r.Net = netip.PrefixFrom(a, 32)
		return r, nil
	}
	name := strings.ToLower(strings.TrimSuffix(body, "."))
	if _, err := netip.ParseAddr(name); err == nil {
		// "1.2.3.4." is no name: it would print back as an address rule.
		return bad("an address with a trailing dot; give the address without it")
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Subdomains, name = true, rest
	}
	if err := checkName(name); err != nil {
		return bad(err.Error())
	}
	r.Name = name
	return r, nil
}

// checkName accepts host names of letters, digits, hyphens and
// underscores in dot-separated labels.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return errors.New("a host name has 1 to 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("each label of a name has 1 to 63 characters")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a letter, digit, '-' or '_'", c)
			}
		}
	}
	return nil
}

// MatchesName says whether the name rule r covers name (lower case, no
// trailing dot).
func (r Rule) MatchesName(name string) bool {
	if r.Subdomains {
		return strings.HasSuffix(name, "."+r.Name)
	}
	return r.Name != "" && name == r.Name
}

// Policy is a sandbox's egress policy. With no allow rule, everything
// that is not denied and not always refused is allowed; with any, only
// what an allow rule names is.
type Policy struct {
	Allow []Rule `json:"-"`
	Deny  []Rule `json:"-"`
}

// ParsePolicy parses the --allow and --deny lists.
func ParsePolicy(allow, deny []string) (Policy, error) {
	var p Policy
	for _, s := range allow {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, fmt.Errorf("allow: %w", err)
		}
		p.Allow = append(p.Allow, r)
	}
	for _, s := range deny {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, fmt.Errorf("deny: %w", err)
		}
		if r.IsName() && r.Port != 0 {
			return Policy{}, fmt.Errorf("%w: deny rule %q: a denied name is not resolved at all, so a port means nothing; deny the name, or an address range with a port", ErrInvalid, s)
		}
		p.Deny = append(p.Deny, r)
	}
	return p, nil
}

// Strings gives the rules back as they are written.
func (p Policy) Strings() (allow, deny []string) {
	for _, r := range p.Allow {
		allow = append(allow, r.String())
	}
	for _, r := range p.Deny {
		deny = append(deny, r.String())
	}
	return allow, deny
}

// Open says the policy has no allow rule: everything not denied and not
// always refused is allowed.
func (p Policy) Open() bool { return len(p.Allow) == 0 }

// NamePorts says whether the resolver answers name for the sandbox and,
// if so, for which ports its addresses become reachable: any (true when
// an allow rule without a port, or no allow rule, covers it) and the
// ports of the allow rules with one.
func (p Policy) NamePorts(name string) (answer, anyPort bool, ports []uint16) {
	for _, r := range p.Deny {
		if r.MatchesName(name) {
			return false, false, nil
		}
	}
	if p.Open() {
		return true, true, nil
	}
	for _, r := range p.Allow {
		if !r.MatchesName(name) {
			continue
		}
		answer = true
		if r.Port == 0 {
			anyPort = true
		} else {
			ports = append(ports, r.Port)
		}
	}
	return answer, anyPort, ports
}

// ExplicitlyAllows says whether an allow rule names a range holding a:
// only such a rule opens an always-refused address (see Refused).
func (p Policy) ExplicitlyAllows(a netip.Addr) bool {
	for _, r := range p.Allow {
		if !r.IsName() && r.Net.Contains(a) {
			return true
		}
	}
	return false
}

// namePorts lists every port an allow rule for names has: each gets a set
// of its own in the kernel.
func (p Policy) namePorts() []uint16 {
	var ports []uint16
	seen := map[uint16]bool{}
	for _, r := range p.Allow {
		if r.IsName() && r.Port != 0 && !seen[r.Port] {
			seen[r.Port] = true
			ports = append(ports, r.Port)
		}
	}
	return ports
}

// alwaysRefused are the ranges no sandbox reaches unless an allow rule
// names them: this host's networks and other sandboxes (private and
// shared ranges), link-local (cloud metadata at 169.254.169.254), and what
// is not unicast. The daemon adds its own pool and the host's addresses.
var alwaysRefused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Refused says whether a is in a range refused unless explicitly allowed.
func Refused(a netip.Addr) bool {
	for _, p := range alwaysRefused {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
