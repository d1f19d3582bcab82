package sysmon

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func slackOf(t *testing.T, tid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// switches is the thread's voluntary context switches: sysmon's are its
// sleeps.
func switches(t *testing.T, tid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("thread %d: no voluntary_ctxt_switches in status", tid)
	return 0
}

// TestMain is also the ticker busy starts: a process writing a byte to
// its stdout every 3 ms until killed.
func TestMain(m *testing.M) {
	if os.Getenv("TINE_SYSMON_TICKER") != "" {
		for {
			time.Sleep(3 * time.Millisecond)
			if _, err := os.Stdout.Write([]byte{1}); err != nil {
				os.Exit(0)
			}
		}
	}
	os.Exit(m.Run())
}

// busy is this process serving ticks calls, as a daemon does: woken by
// another process's write (a ticker child's, every 3 ms) while every P is
// idle, it reads, works for a millisecond and goes back to waiting. The read
// after a wake from I/O finds sysmon asleep and wakes it into its 20 µs
// rounds.
func busy(t *testing.T, ticks int, ran map[int]bool) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), "TINE_SYSMON_TICKER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var b [1]byte
	for range ticks {
		if _, err := out.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		ran[unix.Gettid()] = true
		for w := time.Now(); time.Since(w) < time.Millisecond; {
			unix.Getppid()
		}
	}
}

// goroutineThreads returns the threads goroutines ran on while many ran
// at once, each locked to its thread for a moment: sysmon runs no
// goroutine, so it is never one of them.
func goroutineThreads() map[int]bool {
	seen := map[int]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			time.Sleep(time.Millisecond) // others run meanwhile: more threads
			mu.Lock()
			seen[unix.Gettid()] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	return seen
}

// Thread finds sysmon: a thread that no goroutine runs on, sleeping in
// one of sysmon's two sleeps, that wakes while the process serves; Relax widens its slack and no other
// thread's. How often it then wakes is logged (a count on a shared host,
// not asserted).
func TestRelaxSetsSysmonsSlackAlone(t *testing.T) {
	if !hasSysNice() {
		t.Skip("needs CAP_SYS_NICE to set another thread's timer slack")
	}
	seen := goroutineThreads()
	if len(seen) < 2 {
		t.Fatalf("goroutines ran on %d thread(s): too few to tell sysmon from the rest", len(seen))
	}
	tid, err := Thread()
	if err != nil {
		t.Fatal(err)
	}
	if tid == unix.Getpid() || seen[tid] {
		t.Fatalf("Thread returned %d, a thread goroutines run on (main %d): not sysmon", tid, unix.Getpid())
	}
	// Sampled until it is asleep ("running" when caught on a CPU).
	for i := 0; ; i++ {
		sc, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
		if err != nil {
			t.Fatal(err)
		}
		nr := strings.Fields(string(sc))[0]
		if nr == strconv.Itoa(unix.SYS_NANOSLEEP) || nr == strconv.Itoa(unix.SYS_FUTEX) {
			break
		}
		if nr != "running" || i == 1000 {
			t.Fatalf("thread %d is in %q, not nanosleep or futex: not sysmon", tid, nr)
		}
		time.Sleep(time.Millisecond)
	}
	others := map[int]int64{}
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if o, _ := strconv.Atoi(e.Name()); o != tid {
			others[o] = slackOf(t, o)
		}
	}
	before := slackOf(t, tid)
	if before == Slack.Nanoseconds() {
		t.Fatalf("sysmon's slack is already %d ns: the check would prove nothing", before)
	}
	s0 := switches(t, tid)
	busy(t, 100, seen)
	fast := switches(t, tid) - s0
	// sysmon wakes on the read after a wake from I/O that found it asleep
	// and in rounds while this works (100 ms of it, where its slowest
	// rounds are 10 ms apart); a parked thread does not wake at all.
	if seen[tid] || fast < 20 {
		t.Fatalf("thread %d woke %d times while the process served (a goroutine ran there: %v): not sysmon", tid, fast, seen[tid])
	}
	got, err := Relax(Slack)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile("/proc/"+strconv.Itoa(tid)+"/timerslack_ns", []byte(strconv.FormatInt(before, 10)), 0)
	})
	if got != tid {
		t.Fatalf("Relax set thread %d, Thread found %d", got, tid)
	}
	if s := slackOf(t, tid); s != Slack.Nanoseconds() {
		t.Fatalf("sysmon's slack is %d ns, want %d", s, Slack.Nanoseconds())
	}
	for o, was := range others {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(o)); err != nil {
			continue // ended meanwhile
		}
		if s := slackOf(t, o); s != was {
			t.Errorf("thread %d's slack changed %d -> %d: only sysmon's may", o, was, s)
		}
	}
	s1 := switches(t, tid)
	busy(t, 100, seen)
	t.Logf("sysmon (thread %d) woke %d times in 100 calls before, %d after a %v slack", tid, fast, switches(t, tid)-s1, Slack)
}

func hasSysNice() bool {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_NICE) != 0
}
