package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// requireToken guards a handler with a bearer token: the TCP listener's
// only defence, as the unix socket's is its file mode.
func (s *Server) requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.viewToken(r); ok && r.Method == http.MethodGet {
			next.ServeHTTP(w, r) // a desktop viewer's page or its ACI (view.go)
			return
		}
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			// Whoever it is gets no kept-alive connection to try again
			// on, nor is its body read.
			w.Header().Set("Connection", "close")
			s.writeError(w, r, fmt.Errorf("%w: this listener needs the header \"Authorization: Bearer <token>\" with the daemon's token (see tine serve --token-file)", ErrUnauthorized))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LoadToken reads the bearer token from path (surrounding space ignored).
func LoadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// LoadOrCreateToken reads the token at path, or, when there is none, makes a
// random one and writes it there with mode 0600.
func LoadOrCreateToken(path string) (string, error) {
	tok, err := LoadToken(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return tok, err
	}
	b := make([]byte, 32)
	rand.Read(b)
	tok = hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create token directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("write token: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("write token: %w", err)
	}
	return tok, nil
}
