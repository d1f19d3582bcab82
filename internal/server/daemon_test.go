package server

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "tine.sock")
	ln, err := ListenUnix(sock, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket mode %v, want a socket with 0660", st.Mode())
	}
	// A second daemon must not displace a live one.
	if _, err := ListenUnix(sock, 0o660); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("listen over a live socket: got %v, want a refusal", err)
	}
	// A socket nobody answers on is stale: it is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l2, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	l2.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the stale socket file should still exist: %v", err)
	}
	l3, err := ListenUnix(stale, 0o600)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	l3.Close()
	ln.Close()
	// A regular file is not a socket: leave it alone.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("keep"), 0o644)
	if _, err := ListenUnix(plain, 0o660); err == nil {
		t.Fatal("listening over a regular file succeeded")
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatal("a regular file in the socket's place was changed")
	}
}

func TestLoadOrCreateToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || len(tok) < 32 {
		t.Fatalf("token file mode %v, token %d chars; want 0600 and a long token", st.Mode().Perm(), len(tok))
	}
	again, err := LoadOrCreateToken(path)
	if err != nil || again != tok {
		t.Fatalf("second load: %q, %v; want the same token", again, err)
	}
}
