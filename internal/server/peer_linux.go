package server

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// OSWorld's client speaks plain HTTP with no credentials, so a published
// port has none either; what guards it is who may connect. A connection
// from this machine's loopback is accepted only from a process of the
// daemon's own user (root, as the daemon's unix socket is): the kernel
// lists the peer's socket, with its owner, in /proc/net/tcp. Connections
// from elsewhere reach the port only when the operator published it on a
// non-loopback address (tine serve --osworld-host), and are accepted.
func allowedPeer(c net.Conn) error {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || !remote.IP.IsLoopback() {
		return nil
	}
	uid, err := socketOwner(remote, local)
	if err != nil {
		return err
	}
	if uid != uint32(os.Geteuid()) {
		return fmt.Errorf("peer %s belongs to uid %d, not the daemon's %d", remote, uid, os.Geteuid())
	}
	return nil
}

// socketOwner finds the TCP socket whose local end is local and remote end
// remote in /proc/net/tcp{,6} and returns its owner's uid.
func socketOwner(local, remote *net.TCPAddr) (uint32, error) {
	want := [2]string{procAddr(local), procAddr(remote)}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 8 || !strings.EqualFold(fields[1], want[0]) || !strings.EqualFold(fields[2], want[1]) {
				continue
			}
			f.Close()
			uid, err := strconv.ParseUint(fields[7], 10, 32)
			return uint32(uid), err
		}
		f.Close()
	}
	return 0, fmt.Errorf("the peer %s is not among this machine's sockets", local)
}

// procAddr writes an address as /proc/net/tcp does: the IP's 32-bit words
// in host (little-endian) order, in hex, then the port.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i < len(ip); i += 4 {
		w := []byte{ip[i+3], ip[i+2], ip[i+1], ip[i]}
		b.WriteString(strings.ToUpper(hex.EncodeToString(w)))
	}
	return fmt.Sprintf("%s:%04X", b.String(), a.Port)
}
