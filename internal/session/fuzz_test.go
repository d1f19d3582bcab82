package session

import (
	"encoding/binary"
	"testing"
)

// FuzzAgentFrames: the daemon's decoder of what the interpreter sends,
// which a cell can write to itself (fd 0). Any bytes: no panic, a frame
// only when one is whole and valid, nothing over maxFrame buffered as
// one, and the buffer only ever shrinks by whole frames.
func FuzzAgentFrames(f *testing.F) {
	frame := func(s string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
	}
	for _, s := range []string{
		`{"type":"ready","pid":7,"out":0,"err":0}`,
		`{"type":"result","data":{"text/plain":"42","application/json":{"a":[1,2]}},"main":true,"out":3,"err":0}`,
		`{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"…"}`,
		`{"type":"end","count":3}`, `{"type":"held","threads":1,"sockets":[4],"children":[9]}`,
		`{"type":"end","count":"x"}`, `not json`, ``,
	} {
		f.Add(frame(s))
		f.Add(append(frame(s), frame(s)[:3]...))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, b []byte) {
		a := &agent{inbuf: append([]byte(nil), b...)}
		for {
			before := len(a.inbuf)
			fr, err := a.parse()
			if err != nil || fr == nil {
				if fr == nil && err == nil && before >= 4 && int(binary.BigEndian.Uint32(a.inbuf)) <= len(a.inbuf)-4 {
					t.Fatalf("a whole frame left unparsed: %q", a.inbuf)
				}
				return
			}
			if len(a.inbuf) >= before {
				t.Fatalf("a frame was returned but the buffer did not shrink")
			}
		}
	})
}
