package network

import (
	"maps"
	"strings"
	"testing"
)

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.github.com:443", "10.0.0.0/8:22", "1.2.3.4", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		// What parses prints back to a rule that parses the same.
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q → %q → %+v, %v", s, r.String(), again, err)
		}
	})
}

func FuzzParsePort(f *testing.F) {
	for _, s := range []string{"8080:80", "0.0.0.0:53:53/udp", "1:2:3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePort(s)
		if err != nil {
			return
		}
		again, err := ParsePort(p.String())
		if err != nil || again != p {
			t.Fatalf("%q → %q → %+v, %v", s, p.String(), again, err)
		}
	})
}

func FuzzParseInjection(f *testing.F) {
	for _, s := range []string{"https://api.example.com:Authorization=Bearer k", "a.test:X-Key=v", "x:=", "h:A=\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseInjection(s)
		if err != nil {
			said, _, _ := strings.Cut(err.Error(), "; want") // the usage example has values of its own
			if eq := strings.IndexByte(s, '='); eq >= 0 && eq < len(s)-1 && strings.Contains(said, s[eq:]) {
				t.Fatalf("the error shows the value: %v", err)
			}
			return
		}
		// An accepted injection is one header whose value cannot split a
		// request, and it prints back to itself.
		if len(in.Headers) != 1 {
			t.Fatalf("%q: %d headers", s, len(in.Headers))
		}
		for k, v := range in.Headers {
			if strings.ContainsAny(v, "\r\n\x00") || k == "" {
				t.Fatalf("%q: header %q=%q", s, k, v)
			}
			back := in.Host + ":" + k + "=" + v
			if in.TLS {
				back = "https://" + back
			}
			again, err := ParseInjection(back)
			if err != nil || again.Host != in.Host || again.TLS != in.TLS || !maps.Equal(again.Headers, in.Headers) {
				t.Fatalf("%q → %q → %+v, %v", s, back, again, err)
			}
		}
	})
}
