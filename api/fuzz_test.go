package api

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzACISplit: a binary ACI message is taken apart only when its 4-byte
// header length fits what follows (a length field claiming 4 GiB is
// refused, not trusted), and joining the parts gives the message back.
func FuzzACISplit(f *testing.F) {
	for _, m := range [][]byte{
		ACIJoin([]byte(`{"id":1,"op":"write_file","file":"/tmp/a.txt"}`), []byte("hello")),
		ACIJoin([]byte(`{"id":2,"ok":true,"format":"png","bytes":3}`), []byte{0x89, 'P', 'N'}),
		ACIJoin(nil, nil), ACIJoin([]byte("{}"), nil),
		nil, {0}, {0, 0, 0}, {0, 0, 0, 5, '{', '}'}, {0xff, 0xff, 0xff, 0xff}, {0xff, 0xff, 0xff, 0xff, 'x'},
	} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		head, payload, ok := ACISplit(msg)
		if !ok {
			if len(msg) >= 4 && uint64(binary.BigEndian.Uint32(msg)) <= uint64(len(msg)-4) {
				t.Fatalf("ACISplit(%q) refused a message whose header fits", msg)
			}
			return
		}
		if uint64(len(head)) != uint64(binary.BigEndian.Uint32(msg)) || len(head)+len(payload)+4 != len(msg) {
			t.Fatalf("ACISplit(%q) = %q, %q", msg, head, payload)
		}
		if back := ACIJoin(head, payload); !bytes.Equal(back, msg) {
			t.Fatalf("ACIJoin(ACISplit(%q)) = %q", msg, back)
		}
	})
}

// FuzzACIJoin: what ACIJoin lays out, ACISplit takes apart into the same
// header and payload.
func FuzzACIJoin(f *testing.F) {
	f.Add([]byte(`{"id":1,"op":"write_file","file":"/tmp/a"}`), []byte("content"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, head, payload []byte) {
		h, p, ok := ACISplit(ACIJoin(head, payload))
		if !ok || !bytes.Equal(h, head) || !bytes.Equal(p, payload) {
			t.Fatalf("ACISplit(ACIJoin(%q, %q)) = %q, %q, %v", head, payload, h, p, ok)
		}
	})
}
