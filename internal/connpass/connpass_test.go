package connpass

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A TCP connection accepted by one side and passed to the listener is
// served by the receiver alone: the sender's copy is closed before the
// receiver writes, and the client still reads what the receiver wrote and
// the receiver what the client wrote.
func TestPassedConnectionOutlivesTheSendersCopy(t *testing.T) {
	pl, tl := listeners(t)
	client, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	pass(t, pl, accepted)
	accepted.Close()
	got := acceptWithin(t, pl)
	defer got.Close()
	if _, err := io.WriteString(got, "from the receiver"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := client.Read(buf)
	if err != nil || string(buf[:n]) != "from the receiver" {
		t.Fatalf("client read %q, %v", buf[:n], err)
	}
	io.WriteString(client, "from the client")
	n, err = got.Read(buf)
	if err != nil || string(buf[:n]) != "from the client" {
		t.Fatalf("receiver read %q, %v", buf[:n], err)
	}
}

// Messages that pass no descriptor, or one that is not a socket, are
// dropped, and the descriptor they carried is not kept: the next good
// connection is the one Accept returns, and the pipe whose read end was
// passed is broken once the sender closes its own read end.
func TestAcceptSkipsWhatIsNotOneSocket(t *testing.T) {
	pl, tl := listeners(t)
	socket := pl.Addr().String()

	u, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write([]byte{0})

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := Pass(u, r); err != nil {
		t.Fatal(err)
	}
	r.Close()

	client, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	pass(t, pl, accepted)
	accepted.Close()
	got := acceptWithin(t, pl)
	defer got.Close()
	if _, ok := got.(*net.TCPConn); !ok {
		t.Fatalf("Accept returned a %T, want the passed TCP connection", got)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to the pipe whose read end was passed: %v, want EPIPE (the receiver kept the descriptor)", err)
	}
}

// listeners returns a connpass listener and a TCP listener on loopback,
// both closed when the test ends.
func listeners(t *testing.T) (*Listener, net.Listener) {
	t.Helper()
	pl, err := Listen(filepath.Join(t.TempDir(), "passed.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	if st, err := os.Stat(pl.Addr().String()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v: want 0600", st.Mode(), err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	return pl, tl
}

// pass sends c to pl.
func pass(t *testing.T, pl *Listener, c net.Conn) {
	t.Helper()
	u, err := Dial(pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := Pass(u, c.(*net.TCPConn)); err != nil {
		t.Fatal(err)
	}
}

// acceptWithin is pl.Accept, failing the test after 5 s.
func acceptWithin(t *testing.T, pl *Listener) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() { c, err := pl.Accept(); ch <- result{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return a passed connection within 5 s")
		return nil
	}
}
