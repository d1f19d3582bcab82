package network

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestParseRule(t *testing.T) {
	for in, want := range map[string]string{
		"PyPI.org.":        "pypi.org",
		"*.github.com:443": "*.github.com:443",
		"203.0.113.7":      "203.0.113.7/32",
		"203.0.113.7:80":   "203.0.113.7/32:80",
		"10.1.2.3/8":       "10.0.0.0/8",
	} {
		r, err := ParseRule(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRule(%q) = %q, %v; want %q", in, r.String(), err, want)
		}
	}
	for _, in := range []string{"", ":80", "a..b", "x.org:0", "x.org:70000", "::1", "2001:db8::/32", "a b.org", "*.", "ex ample"} {
		if r, err := ParseRule(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRule(%q) = %+v, %v; want ErrInvalid", in, r, err)
		}
	}
	if _, err := ParsePolicy(nil, []string{"x.org:80"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a denied name with a port: %v", err)
	}
}

func TestPolicyNames(t *testing.T) {
	p, err := ParsePolicy([]string{"a.test", "*.b.test:443", "b.test:80", "203.0.113.0/24"}, []string{"bad.b.test"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		answer  bool
		anyPort bool
		ports   []uint16
	}{
		{"a.test", true, true, nil},
		{"x.a.test", false, false, nil},
		{"b.test", true, false, []uint16{80}},
		{"www.b.test", true, false, []uint16{443}},
		{"bad.b.test", false, false, nil},
		{"c.test", false, false, nil},
	}
	for _, c := range cases {
		answer, anyPort, ports := p.NamePorts(c.name)
		if answer != c.answer || anyPort != c.anyPort || !slices.Equal(ports, c.ports) {
			t.Errorf("NamePorts(%q) = %v %v %v; want %v %v %v", c.name, answer, anyPort, ports, c.answer, c.anyPort, c.ports)
		}
	}
	if !p.ExplicitlyAllows(netip.MustParseAddr("203.0.113.9")) || p.ExplicitlyAllows(netip.MustParseAddr("198.51.100.1")) {
		t.Error("ExplicitlyAllows does not follow the ranges")
	}
	open, _ := ParsePolicy(nil, []string{"bad.test"})
	if a, any, _ := open.NamePorts("anything.test"); !a || !any {
		t.Error("an open policy answers every name not denied")
	}
	if a, _, _ := open.NamePorts("bad.test"); a {
		t.Error("an open policy answers a denied name")
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]string{
		"8080:80":             "127.0.0.1:8080:80/tcp",
		"0.0.0.0:5353:53/udp": "0.0.0.0:5353:53/udp",
		"0:80":                "127.0.0.1:0:80/tcp",
	} {
		p, err := ParsePort(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePort(%q) = %q, %v; want %q", in, p, err, want)
		}
	}
	for _, in := range []string{"80", "1:2:3:4", "x:80", "80:0", "80:80/sctp", "::1:80:80", "65536:80"} {
		if _, err := ParsePort(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePort(%q): %v; want ErrInvalid", in, err)
		}
	}
}

func TestIntervalElements(t *testing.T) {
	pf := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	got := intervalElements(pf("10.0.0.0/8", "10.1.2.0/24", "240.0.0.0/4", "11.0.0.0/8", "1.2.3.4/32"))
	var s []string
	for _, e := range got {
		a, _ := netip.AddrFromSlice(e.Key)
		if e.IntervalEnd {
			s = append(s, "end "+a.String())
		} else {
			s = append(s, a.String())
		}
	}
	want := []string{"1.2.3.4", "end 1.2.3.5", "10.0.0.0", "end 12.0.0.0", "240.0.0.0"}
	if !slices.Equal(s, want) {
		t.Fatalf("intervals %v; want %v (merged, the last open-ended)", s, want)
	}
}
