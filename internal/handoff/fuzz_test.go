package handoff

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// FuzzReceiveStdio: the daemon takes a client's stdio over a real unix
// socket only when exactly three descriptors come with its byte, and
// every descriptor it does not take is closed, not left open in the
// daemon.
func FuzzReceiveStdio(f *testing.F) {
	for n := range uint8(8) {
		f.Add(n, []byte{0}, false)
	}
	f.Add(uint8(3), []byte{}, true)
	f.Add(uint8(3), []byte("more than one byte"), false)
	f.Fuzz(func(t *testing.T, nfds uint8, data []byte, hangUp bool) {
		nfds %= 12
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		client := os.NewFile(uintptr(pair[1]), "client")
		defer client.Close()
		end := os.NewFile(uintptr(pair[0]), "daemon")
		fc, err := net.FileConn(end) // a copy of end
		end.Close()
		if err != nil {
			t.Fatal(err)
		}
		daemon := fc.(*net.UnixConn)
		defer daemon.Close()
		before := openFDs(t)
		fds := make([]int, nfds)
		for i := range fds {
			fds[i] = int(client.Fd()) // the same descriptor, nfds times
		}
		if len(data) == 0 {
			data = []byte{0} // a message needs a byte to carry descriptors
		}
		if hangUp {
			unix.Shutdown(pair[1], unix.SHUT_WR)
		} else if err := unix.Sendmsg(pair[1], data, unix.UnixRights(fds...), nil, 0); err != nil {
			t.Fatal(err)
		}
		got, err := receiveStdio(daemon)
		if (err == nil) != (nfds == 3 && !hangUp) {
			t.Fatalf("%d descriptors, hang-up %v: got %v, %v", nfds, hangUp, got, err)
		}
		for _, fd := range got {
			unix.Close(fd)
		}
		if after := openFDs(t); after != before {
			t.Fatalf("%d descriptors, hang-up %v (%v): %d open before, %d after", nfds, hangUp, err, before, after)
		}
	})
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
