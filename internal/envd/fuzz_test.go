package envd

import (
	"encoding/json"
	"testing"
)

// FuzzMessages decodes any bytes as every request envd takes, through the
// codec the Connect handlers use: no panic, and what decodes survives a
// round trip through the same codec.
func FuzzMessages(f *testing.F) {
	for _, s := range []string{
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"b"},"cwd":"/tmp"},"pty":{"size":{"cols":80,"rows":24}},"tag":"t","stdin":false}`,
		`{"process":{"pid":12},"signal":"SIGNAL_SIGKILL"}`, `{"process":{"tag":"x"},"signal":9}`,
		`{"process":{"pid":1},"input":{"stdin":"aGkK"}}`, `{"path":"/tmp","depth":2}`, `{"source":"a","destination":"b"}`,
		`{"path":"/","recursive":true,"includeEntry":true}`, `{"watcherId":"W"}`, `{"signal":"SIGNAL_NOPE"}`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		targets := []any{&StartRequest{}, &ConnectRequest{}, &SendInputRequest{}, &SendSignalRequest{}, &CloseStdinRequest{},
			&UpdateRequest{}, &PathRequest{}, &MoveRequest{}, &ListDirRequest{}, &WatchDirRequest{}, &WatcherRequest{}}
		for _, v := range targets {
			if jsonCodec.Unmarshal(jsonCodec{}, b, v) != nil {
				continue
			}
			out, err := jsonCodec{}.Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded from %q does not encode: %v", v, b, err)
			}
			if !json.Valid(out) {
				t.Fatalf("%T encodes to invalid JSON %q", v, out)
			}
		}
	})
}
