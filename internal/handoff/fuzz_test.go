package handoff

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"slices"
	"syscall"
	"testing"
)

// FuzzSignalFrames: what a client sends after the upgrade is read as
// frames, one JSON line each; exactly the lines of at most maxFrame bytes
// that carry a signal from 1 to 64 reach the run, and reading ends with
// the client's end of file. The reader's buffer is small, so long lines
// cross it.
func FuzzSignalFrames(f *testing.F) {
	frame := func(sig int) string { b, _ := json.Marshal(Frame{Signal: sig}); return string(b) + "\n" }
	for _, s := range []string{
		frame(2), frame(15) + frame(9), frame(28) + `{"signal": 10}` + "\n",
		"", "\n", `{"signal": 0}` + "\n", `{"signal": 65}` + "\n", `{"signal": -1}` + "\n", `{"signal": "2"}` + "\n",
		`{"signal": 2}`, "garbage\n" + frame(1), `{"signal": 2, "outcome": {"exit_code": 1}}` + "\n",
		string(bytes.Repeat([]byte(" "), maxFrame)) + frame(3) + frame(4),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []syscall.Signal
		err := readSignals(bufio.NewReaderSize(bytes.NewReader(data), 16), func(sig syscall.Signal) {
			got = append(got, sig)
		})
		if err != io.EOF {
			t.Fatalf("readSignals ended with %v, want io.EOF", err)
		}
		var want []syscall.Signal
		lines := bytes.SplitAfter(data, []byte("\n"))
		for _, line := range lines[:len(lines)-1] { // the last is no whole line
			var fr Frame
			if len(line) <= maxFrame && json.Unmarshal(line, &fr) == nil && fr.Signal > 0 && fr.Signal < 65 {
				want = append(want, syscall.Signal(fr.Signal))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("signals %v from %q, want %v", got, data, want)
		}
	})
}

// endless is an endless line: no newline, ever.
type endless struct{ left int }

func (e *endless) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), e.left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	e.left -= n
	return n, nil
}

// TestSignalFramesBounded: a client that sends 64 MiB without a newline
// costs the daemon a frame's worth of memory, not 64 MiB (ReadBytes held
// the whole line).
func TestSignalFramesBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := readSignals(bufio.NewReader(&endless{left: 64 << 20}), func(syscall.Signal) { t.Error("a signal from no frame") })
	runtime.ReadMemStats(&after)
	if err != io.EOF {
		t.Fatalf("readSignals: %v, want io.EOF", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("reading a 64 MiB line allocated %d bytes", n)
	}
}
