package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/client"
)

// FuzzControlPlane sends any method, path and body through the real
// handler, with the key, to a daemon that is not there: no panic, and
// every error is the {code, message} body the SDKs read, its code the
// HTTP status.
func FuzzControlPlane(f *testing.F) {
	for _, s := range [][3]string{
		{"POST", "/v2/sandboxes", `{"templateID":"base","timeout":30,"metadata":{"a":"b"},"envVars":{"X":"1"}}`},
		{"POST", "/sandboxes", `{"templateID":"base","timeout":-1}`},
		{"POST", "/v2/sandboxes", `{"network":{"allowOut":["1.1.1.1"]}}`},
		{"GET", "/v2/sandboxes?state=running,paused&limit=0&metadata=a%3Db", ``},
		{"GET", "/v2/sandboxes?nextToken=x&startedAfter=yesterday", ``},
		{"POST", "/sandboxes/abc/timeout", `{"timeout":"ten"}`},
		{"POST", "/sandboxes/abc/fork", `{"count":1000}`},
		{"DELETE", "/templates/x", ``},
		{"PATCH", "/nowhere", `{`},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	s, err := New(Config{Client: client.NewUnix(filepath.Join(f.TempDir(), "absent.sock")), Keys: []string{"e2b_00"}, EnvdBinary: "/bin/true"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(method, " \t\r\n") || method == "" {
			return
		}
		r, err := newRequest(method, path, body)
		if err != nil {
			return
		}
		r.Header.Set("X-API-KEY", "e2b_00")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code < 400 {
			return
		}
		var e apiError
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Message == "" || e.Code != w.Code {
			t.Fatalf("%s %s: status %d, body %q: want {code: %d, message}", method, path, w.Code, w.Body.Bytes(), w.Code)
		}
	})
}

// newRequest is httptest.NewRequest, which panics on what a client could
// not send at all.
func newRequest(method, path string, body []byte) (r *http.Request, err error) {
	defer func() {
		if recover() != nil {
			err = errors.New("not a request")
		}
	}()
	return httptest.NewRequest(method, path, bytes.NewReader(body)), nil
}
