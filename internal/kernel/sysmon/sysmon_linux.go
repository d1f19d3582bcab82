// Package sysmon widens the timer slack of the Go runtime's system monitor
// thread, so that it wakes less often while the process is busy.
//
// sysmon sleeps 20 µs between its rounds for as long as the process keeps
// a P busy (and for 50 rounds after any syscall that found it asleep), in
// nanosleep. On this project's 2-vCPU VMs each of those wakes costs ≈ 20 µs
// of CPU (a context switch and a timer programmed through the hypervisor):
// in a daemon serving warm calls it was 40% of the daemon's CPU, ≈ 0.9 ms
// per request (docs/decisions/0007-warm-functions.md). A thread's timer
// slack lets the kernel fire its sleep anywhere in [20 µs, 20 µs + slack],
// together with another timer when one is due; sysmon's duties (taking a P
// from a goroutine blocked in a syscall, preempting a goroutine after
// 10 ms, polling the network after 10 ms) tolerate a millisecond more.
package sysmon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Slack is the timer slack Relax gives sysmon: its fast rounds then come
// at most about a millisecond apart instead of 20 µs, well inside the 10 ms
// the runtime itself waits between rounds when the process is quiet.
const Slack = time.Millisecond

// Thread returns the thread id of this process's sysmon. The runtime
// starts sysmon first, from the main thread, before any other thread of
// the process exists (runtime.main, before package init): it is the
// earliest-started thread other than the main one, and of those started
// in the same clock tick the one with the lowest id (ids are handed out
// in order).
func Thread() (int, error) {
	pid := unix.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("find sysmon: %w", err)
	}
	best, bestStart := 0, uint64(0)
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		start, err := startTime(tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if best == 0 || start < bestStart || start == bestStart && tid < best {
			best, bestStart = tid, start
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("find sysmon: no thread besides the main one in /proc/self/task")
	}
	return best, nil
}

// startTime is field 22 of the thread's stat: when it started, in clock
// ticks since boot.
func startTime(tid int) (uint64, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the name may hold spaces and parentheses
	if i < 0 {
		return 0, fmt.Errorf("thread %d: stat without a name: %q", tid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("thread %d: stat has %d fields after the name, want 20 or more", tid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// childSlack is the main thread's timer slack as Relax found it (0 before).
var childSlack atomic.Uint64

// ChildSlack is the timer slack a process this one starts should set for
// itself: the process's own (its main thread's) from before Relax, or 0
// when Relax has not changed any thread's, and none has inherited sysmon's.
func ChildSlack() uintptr { return uintptr(childSlack.Load()) }

// Relax sets sysmon's timer slack to slack and returns its thread id. It
// needs CAP_SYS_NICE (the thread is not the caller's): without it the error
// says so and nothing changed.
func Relax(slack time.Duration) (int, error) {
	tid, err := Thread()
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/self/timerslack_ns") // the main thread's
	if err != nil {
		return tid, fmt.Errorf("read this process's timer slack: %w", err)
	}
	own, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || own == 0 {
		return tid, fmt.Errorf("read this process's timer slack: %q", b)
	}
	childSlack.Store(own)
	// /proc/<tid>, not /proc/self/task/<tid>: only the former has the file.
	path := "/proc/" + strconv.Itoa(tid) + "/timerslack_ns"
	if err := os.WriteFile(path, []byte(strconv.FormatInt(slack.Nanoseconds(), 10)), 0); err != nil {
		return tid, fmt.Errorf("set sysmon's timer slack (thread %d): %w", tid, err)
	}
	return tid, nil
}
