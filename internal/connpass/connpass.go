// Package connpass hands accepted connections from the process that
// accepts them to the process that serves them, as descriptors over a unix
// socket (SCM_RIGHTS), so that the bytes then flow between the client and
// the server with no process in between.
//
// The daemon accepts OSWorld's connections on a desktop's published TCP
// port, checks the peer, and passes each one into the desktop's guest,
// which serves HTTP on it directly (ADR 0020, sixth session). A forward
// that copied every byte through the daemon cost a hop each way and its
// own wakes on every request.
package connpass

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Pass sends c's descriptor over u with a one-byte message. The caller
// still owns c and closes its copy afterwards: closing a descriptor does
// not end the connection while the receiver holds its own.
func Pass(u *net.UnixConn, c syscall.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("pass a connection: %w", err)
	}
	var sendErr error
	if err := raw.Control(func(fd uintptr) {
		_, _, sendErr = u.WriteMsgUnix([]byte{0}, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return fmt.Errorf("pass a connection: %w", err)
	}
	if sendErr != nil {
		return fmt.Errorf("pass a connection: %w", sendErr)
	}
	return nil
}

// receiveTimeout bounds how long Accept waits for a sender that has
// connected to send its descriptor. The daemon sends at once; anything
// slower is not the daemon and must not hold the listener up for long.
const receiveTimeout = time.Second

// Listener is a net.Listener whose connections are the ones passed to a
// unix socket: each sender connects, sends one descriptor with Pass, and
// hangs up.
type Listener struct {
	l *net.UnixListener
}

// Listen listens on the unix socket at path (replacing a stale one) with
// mode 0600: only the listener's own user may pass connections to it.
func Listen(path string) (*Listener, error) {
	os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for passed connections on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen for passed connections on %s: %w", path, err)
	}
	return &Listener{l: l}, nil
}

// Accept returns the next connection passed to the listener. A sender
// that sends no descriptor, more than one, or one that is not a socket is
// hung up on and skipped.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		u, err := l.l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		c, err := receive(u)
		u.Close()
		if err == nil {
			return c, nil
		}
	}
}

// receive reads one descriptor from u and makes it a connection.
func receive(u *net.UnixConn) (net.Conn, error) {
	u.SetReadDeadline(time.Now().Add(receiveTimeout))
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, flags, _, err := u.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) != 1 || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("want exactly one descriptor")
	}
	f := os.NewFile(uintptr(fds[0]), "passed connection")
	defer f.Close() // FileConn holds a duplicate
	return net.FileConn(f)
}

// Close stops the listener; connections already accepted go on.
func (l *Listener) Close() error { return l.l.Close() }

// Addr is the unix socket's address.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }
