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

	"golang.org/x/sys/unix"
)

// Pass sends c's descriptor over u (from Dial) with a one-byte message.
// The caller
// still owns c and closes its copy afterwards: closing a descriptor does
// not end the connection while the receiver holds its own.
func Pass(u *net.UnixConn, c syscall.Conn) error {
	conn, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("pass a connection: %w", err)
	}
	out, err := u.SyscallConn()
	if err != nil {
		return fmt.Errorf("pass a connection: %w", err)
	}
	// Go's WriteMsgUnix refuses a connected datagram socket; the raw
	// sendmsg waits in the poller while the listener's queue is full.
	var sendErr error
	err = conn.Control(func(fd uintptr) {
		rights := unix.UnixRights(int(fd))
		err := out.Write(func(sock uintptr) bool {
			sendErr = unix.Sendmsg(int(sock), []byte{0}, rights, nil, 0)
			return sendErr != unix.EAGAIN
		})
		if sendErr == nil {
			sendErr = err
		}
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return fmt.Errorf("pass a connection: %w", err)
	}
	return nil
}

// Listener is a net.Listener whose connections are the ones passed to a
// unix datagram socket, one descriptor a message (Pass): no connection
// of its own to accept and close for each one passed.
type Listener struct {
	u *net.UnixConn
}

// Listen binds a unix datagram socket at path (replacing a stale one)
// with mode 0600: only the listener's own user may pass connections to
// it.
func Listen(path string) (*Listener, error) {
	os.Remove(path)
	u, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("listen for passed connections on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		u.Close()
		return nil, fmt.Errorf("listen for passed connections on %s: %w", path, err)
	}
	return &Listener{u: u}, nil
}

// Dial connects a datagram socket to a Listener's at path, for Pass.
func Dial(path string) (*net.UnixConn, error) {
	u, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("connect to %s to pass connections: %w", path, err)
	}
	return u, nil
}

// Accept returns the next connection passed to the listener. A message
// with no descriptor, more than one, or one that is not a socket is
// dropped.
func (l *Listener) Accept() (net.Conn, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		_, oobn, flags, _, err := l.u.ReadMsgUnix(b[:], oob)
		if err != nil {
			return nil, err
		}
		if c, err := connection(oob[:oobn], flags); err == nil {
			return c, nil
		}
	}
}

// connection makes the one descriptor a message carried a connection,
// and closes whatever else it carried.
func connection(oob []byte, flags int) (net.Conn, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
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

// Close stops the listener; connections already accepted go on, and
// those passed but not yet accepted are closed with its socket.
func (l *Listener) Close() error { return l.u.Close() }

// Addr is the unix socket's address.
func (l *Listener) Addr() net.Addr { return l.u.LocalAddr() }
