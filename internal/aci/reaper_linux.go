package aci

// An exec's reaper: the guest's own binary run again (argv[0] reaperArg0)
// between the guest and the command. It is a child subreaper, so what the
// command starts stays its descendant however it detaches (setsid, a
// double fork): at the timeout, or when the guest asks (SIGTERM) or dies,
// it kills that whole tree. A command that ends by itself is reported at
// once; what it left in the background keeps running.
//
// It reports on descriptor 3, one line: "exit WAITSTATUS", "timeout",
// "killed", or "start EXITCODE MESSAGE" for a command it could not start.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/procstat"
	"golang.org/x/sys/unix"
)

const reaperArg0 = "tine-aci-exec"

// The reaper role starts before anything else of the binary it is in (the
// tine binary, or a test binary of a package that imports aci).
func init() {
	if len(os.Args) > 3 && os.Args[0] == reaperArg0 {
		os.Exit(reaperMain(os.Args[1], os.Args[2], os.Args[3:]))
	}
}

// reaperCommand is the command that runs argv under a reaper with timeout.
func reaperCommand(timeout time.Duration, argv []string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", append([]string{strconv.Itoa(os.Getpid()), strconv.FormatInt(timeout.Milliseconds(), 10)}, argv...)...)
	cmd.Args[0] = reaperArg0
	return cmd
}

type reaped struct {
	pid int
	ws  unix.WaitStatus
}

func reaperMain(guest, timeoutMs string, argv []string) int {
	status := os.NewFile(3, "exec status")
	unix.CloseOnExec(3)
	ms, err := strconv.ParseInt(timeoutMs, 10, 64)
	if err != nil || ms <= 0 {
		fmt.Fprintf(status, "start 126 exec reaper: bad timeout %q", timeoutMs)
		return 1
	}
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// The guest gone: nobody can stop the command any more but this.
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0)
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	if strconv.Itoa(os.Getppid()) != guest {
		return 1 // the guest died before the death signal was armed
	}

	path, err := exec.LookPath(argv[0])
	var p *os.Process
	if err == nil {
		p, err = os.StartProcess(path, argv, &os.ProcAttr{
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
			// Its own process group: the guest's signals are not its.
			Sys: &syscall.SysProcAttr{Setpgid: true},
		})
	}
	if err != nil {
		code := 127
		if errors.Is(err, fs.ErrPermission) {
			code = 126
		}
		fmt.Fprintf(status, "start %d %s", code, err)
		return 0
	}
	// Every child, the command and the orphans it leaves, is reaped here.
	exits := make(chan reaped, 16)
	go func() {
		defer close(exits)
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return // ECHILD: no child left
			}
			exits <- reaped{pid, ws}
		}
	}()
	timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
	for {
		select {
		case r, ok := <-exits:
			if !ok {
				fmt.Fprint(status, "killed")
				return 0
			}
			if r.pid == p.Pid {
				fmt.Fprintf(status, "exit %d", uint32(r.ws))
				return 0
			}
		case <-timer.C:
			killTree(exits)
			fmt.Fprint(status, "timeout")
			return 0
		case <-term:
			killTree(exits)
			fmt.Fprint(status, "killed")
			return 0
		}
	}
}

// killTree kills every descendant until none is left: a process killed
// leaves its children to this subreaper, and one that forked before it
// died adds a round.
func killTree(exits <-chan reaped) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	self := os.Getpid()
	for {
		for _, pid := range descendants(self) {
			unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case _, ok := <-exits:
			if !ok {
				return // no child left, so no descendant either
			}
		case <-tick.C:
		}
	}
}

// descendants lists the processes below pid, from /proc's parent links.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procstat.Fields(p)
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
