package handoff

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
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

// FuzzRequestJSON: the request the client writes by hand is byte for byte
// what encoding/json marshals, for every field set or not, strings with
// quotes, controls, HTML characters, U+2028 and invalid UTF-8, and CPUs
// from tiny to huge; and the daemon's encoding/json reads it back.
func FuzzRequestJSON(f *testing.F) {
	f.Add("/bin/true", "A=1", "/w", "h", "/r", "os", "default", "/src", "/dst", int64(512<<20), 1.0, int64(256), int64(0), uint32(0), true, true)
	f.Add("", "", "", "", "", "", "", "", "", int64(0), 0.0, int64(0), int64(0), uint32(0), false, false)
	f.Add("sh\x00-c\n\"x\"\\ <a&b> \u2028\u2029 \xff\xfe é 日本", "K=\t\r\b\f\x1f", "/w d", "", "", "", "", "", "", int64(-1), 1e-7, int64(1), int64(30000), uint32(1000), false, true)
	f.Add("x", "", "", "", "", "", "", "", "", int64(0), 123456789e20, int64(0), int64(0), uint32(7), true, false)
	f.Add("x", "", "", "", "", "", "", "", "", int64(0), 0.5, int64(0), int64(1), uint32(0), true, false)
	f.Fuzz(func(t *testing.T, arg, env, workdir, hostname, rootfs, hostView, seccomp, src, dst string, mem int64, cpus float64, pids, timeout int64, uid uint32, userns, ro bool) {
		if cpus != cpus || cpus > 1e308 || cpus < -1e308 {
			return // Dial hands NaN and infinities to encoding/json, which refuses them
		}
		for _, r := range []Request{
			{Args: []string{arg, arg + env}, Workdir: workdir, Hostname: hostname, RootFS: rootfs, HostView: hostView, Seccomp: seccomp,
				UserNS: userns, DiskBytes: mem, TimeoutMs: timeout, Limits: api.Limits{MemoryBytes: mem, CPUs: cpus, Pids: pids}},
			{Args: []string{arg}, Env: []string{env}, Layers: []string{rootfs, src}, User: &sandbox.User{UID: uid, GID: uid + 1, Groups: []uint32{uid, 5}},
				Binds: []api.Bind{{Source: src, Target: dst, ReadOnly: ro}, {Source: dst, Target: src}}, Limits: api.Limits{CPUs: cpus}},
			{Args: []string{}, User: &sandbox.User{}, Limits: api.Limits{Pids: pids}},
			{},
		} {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got := r.appendJSON(nil)
			if string(got) != string(want) {
				t.Fatalf("appendJSON\n got %s\nwant %s", got, want)
			}
			var back Request
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
		}
	})
}

// FuzzFrameJSON: the client reads its started and outcome frames by hand
// when they are exactly what the daemon's encoding/json writes, and any
// other line with encoding/json. So for any line the hand reader either
// declines or gives what encoding/json gives (and never takes a line that
// encoding/json refuses), and it takes every started and outcome frame the
// daemon can write, whatever the numbers.
func FuzzFrameJSON(f *testing.F) {
	enc := func(fr Frame) []byte {
		var b bytes.Buffer
		json.NewEncoder(&b).Encode(fr)
		return b.Bytes()
	}
	f.Add(enc(Frame{Started: &Started{Pooled: true}}), 0, "exit", 0, 1.5, 2.25e-7, 3e21, int64(524288), 3.266, "v1", false)
	f.Add(enc(Frame{Outcome: &sandbox.Outcome{ExitCode: 137, Reason: "oom", Signal: 9}}), 137, "signal", 9, 0.0, -0.0, 123.456, int64(-1), 0.0, "none", true)
	f.Add([]byte(`{"outcome":{"exit_code":01,"reason":"exit","phases_ms":{"plan":1.,"start":-.5,"run":+1},"peak_memory_bytes":1e3,"cpu_time_ms":0,"cgroup":"v\u0031","rootless":false}}`+"\n"), 2, "ti\"me", -1, 1e-9, 5.0, 6.0, int64(1)<<62, 1e300, "v2", true)
	f.Add([]byte(`{"started":{"pooled":true}} `), 0, "", 0, 0.0, 0.0, 0.0, int64(0), 0.0, "", false)
	// One number each that is not JSON, or not an integer, in a frame
	// otherwise the daemon's.
	for _, n := range [][2]string{{"01", "1"}, {"0", "+1"}, {"0", "1."}, {"0", "-.5"}, {"0", "00"}, {"1e3", "1"}, {"-0", "-01"}} {
		f.Add([]byte(`{"outcome":{"exit_code":`+n[0]+`,"reason":"exit","phases_ms":{"plan":`+n[1]+`,"start":1,"run":2},"peak_memory_bytes":3,"cpu_time_ms":4,"cgroup":"v1","rootless":false}}`+"\n"), 0, "", 0, 0.0, 0.0, 0.0, int64(0), 0.0, "", false)
	}
	f.Fuzz(func(t *testing.T, line []byte, code int, reason string, sig int, plan, start, run float64, peak int64, cpu float64, cg string, rootless bool) {
		check := func(line []byte) (taken bool) {
			got, ok := readFrameFast(line)
			if !ok {
				return false
			}
			var want Frame
			if err := json.Unmarshal(line, &want); err != nil {
				t.Fatalf("%q: taken by hand, refused by encoding/json: %v", line, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: by hand %+v %+v, encoding/json %+v %+v", line, got.Started, got.Outcome, want.Started, want.Outcome)
			}
			return true
		}
		check(line)
		for _, v := range []float64{plan, start, run, cpu} {
			if v != v || v > 1e308 || v < -1e308 {
				return // NaN and infinities are not JSON: the daemon cannot send them
			}
		}
		o := &sandbox.Outcome{ExitCode: code, Reason: reason, Signal: sig, Phases: sandbox.Phases{Plan: plan, Start: start, Run: run},
			PeakMemoryBytes: peak, CPUTimeMs: cpu, Cgroup: cg, Rootless: rootless}
		plain := func(s string) bool {
			for i := 0; i < len(s); i++ {
				if s[i] < 0x20 || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\' || s[i] == '<' || s[i] == '>' || s[i] == '&' {
					return false
				}
			}
			return true
		}
		if taken := check(enc(Frame{Outcome: o})); !taken && plain(reason) && plain(cg) {
			t.Fatalf("the daemon's outcome frame %q was not taken by hand", enc(Frame{Outcome: o}))
		}
		if !check(enc(Frame{Started: &Started{Pooled: rootless}})) {
			t.Fatal("the daemon's started frame was not taken by hand")
		}
	})
}
