package e2b

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", "e2b-key")
	key, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !KeyPattern.MatchString(key) || len(key) != 44 {
		t.Errorf("key %q: want e2b_ and 40 hex digits", key)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	again, err := LoadOrCreateKey(path)
	if err != nil || again != key {
		t.Errorf("second load: %q %v, want the same key", again, err)
	}
	os.WriteFile(path, []byte("not-a-key\n"), 0o600)
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("a malformed key file: %v, want an error saying what to do", err)
	}
}

// sign is the SDK's getSignature.
func sign(path, op, user, token, exp string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

func TestSignature(t *testing.T) {
	tok := "secret"
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Hour).Unix()
	fmtI := func(n int64) string { return strconv.FormatInt(n, 10) }
	cases := []struct {
		name, method, query string
		ok                  bool
	}{
		{"read", "GET", "path=/a&signature=" + sign("/a", "read", "", tok, ""), true},
		{"write", "POST", "path=/a&signature=" + sign("/a", "write", "", tok, ""), true},
		{"read signature used to write", "POST", "path=/a&signature=" + sign("/a", "read", "", tok, ""), false},
		{"another path", "GET", "path=/b&signature=" + sign("/a", "read", "", tok, ""), false},
		{"another token", "GET", "path=/a&signature=" + sign("/a", "read", "", "other", ""), false},
		{"user", "GET", "path=/a&username=root&signature=" + sign("/a", "read", "root", tok, ""), true},
		{"unexpired", "GET", "path=/a&signature_expiration=" + fmtI(future) + "&signature=" + sign("/a", "read", "", tok, fmtI(future)), true},
		{"expired", "GET", "path=/a&signature_expiration=" + fmtI(past) + "&signature=" + sign("/a", "read", "", tok, fmtI(past)), false},
		{"expiration dropped", "GET", "path=/a&signature=" + sign("/a", "read", "", tok, fmtI(future)), false},
		{"none", "GET", "path=/a", false},
	}
	for _, c := range cases {
		// Escaped as the SDK's searchParams.set does (base64 has + and /).
		q, _ := url.ParseQuery(strings.ReplaceAll(c.query, "+", "%2B"))
		r := httptest.NewRequest(c.method, "/files?"+q.Encode(), nil)
		if got := signatureOK(tok, r); got != c.ok {
			t.Errorf("%s: signatureOK = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestHostRoute(t *testing.T) {
	for host, want := range map[string][]string{
		"49983-abc123.example.com":       {"49983", "abc123", "example.com"},
		"8080-abc123.sb.example.com:443": {"8080", "abc123", "sb.example.com"},
		"api.example.com":                nil,
		"49983-ABC.example.com":          nil, // E2B ids are lowercase
		"x-abc.example.com":              nil,
	} {
		m := hostRoute.FindStringSubmatch(host)
		if want == nil {
			if m != nil {
				t.Errorf("%s routed to %v, want the API", host, m)
			}
			continue
		}
		if m == nil || m[1] != want[0] || m[2] != want[1] || m[3] != want[2] {
			t.Errorf("%s: %v, want port %s id %s domain %s", host, m, want[0], want[1], want[2])
		}
	}
}
