package server

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// OSWorld's client speaks plain HTTP with no credentials, so a published
// port has none either; what guards it is who may connect. A connection
// from this machine's loopback is accepted only from a process of the
// daemon's own user (root, as the daemon's unix socket is): the kernel
// tells the peer socket's owner (sock_diag, the netlink query ss uses; a
// read of /proc/net/tcp walks every socket and took ~4 ms here).
// Connections from elsewhere reach the port only when the operator
// published it on a non-loopback address (tine serve --osworld-host), and
// are accepted.
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

// socketOwner asks the kernel (NETLINK_SOCK_DIAG, one exact lookup) for
// the owner of the TCP socket whose local end is local and remote end
// remote.
func socketOwner(local, remote *net.TCPAddr) (uint32, error) {
	family, ipLen := uint8(unix.AF_INET), 4
	if local.IP.To4() == nil {
		family, ipLen = unix.AF_INET6, 16
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	// nlmsghdr (16) + inet_diag_req_v2 (56).
	req := make([]byte, 16+56)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	r := req[16:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]                                      // inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], uint16(local.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(remote.Port))
	copy(id[4:4+ipLen], ipBytes(local.IP, ipLen))
	copy(id[20:20+ipLen], ipBytes(remote.IP, ipLen))
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return 0, fmt.Errorf("sock_diag: an answer of %d bytes: %v", n, err)
	}
	m := msgs[0]
	if m.Header.Type == unix.NLMSG_ERROR {
		errno := int32(binary.NativeEndian.Uint32(m.Data))
		return 0, fmt.Errorf("the peer %s is not among this machine's sockets: %w", local, unix.Errno(-errno))
	}
	// inet_diag_msg: family, state, timer, retrans (4), sockid (48),
	// expires, rqueue, wqueue (12), then uid.
	if len(m.Data) < 68 {
		return 0, fmt.Errorf("sock_diag: a short answer (%d bytes)", len(m.Data))
	}
	return binary.NativeEndian.Uint32(m.Data[64:]), nil
}

func ipBytes(ip net.IP, n int) []byte {
	if n == 4 {
		return ip.To4()
	}
	return ip.To16()
}
