package server

import (
	"net"
	"testing"
)

// BenchmarkAllowedPeer: what the published ports' peer check costs a
// connection (reading /proc/net/tcp).
func BenchmarkAllowedPeer(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// The check runs on the accepting side: swap the ends.
	peer := swapped{c}
	for b.Loop() {
		if err := allowedPeer(peer); err != nil {
			b.Fatal(err)
		}
	}
}

type swapped struct{ net.Conn }

func (s swapped) LocalAddr() net.Addr  { return s.Conn.RemoteAddr() }
func (s swapped) RemoteAddr() net.Addr { return s.Conn.LocalAddr() }
