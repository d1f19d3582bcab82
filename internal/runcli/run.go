package runcli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
)

// Flags are tine run's flags but for the image ones.
type Flags struct {
	Memory, CPUs, Pids, Timeout, Disk string
	RootFS, Workdir, Hostname         string
	Seccomp, HostView                 string
	Volumes, Env                      []string
	TTY                               bool
	Outcome                           string
	Verbose, InProcess, UserNS        bool
	Socket                            string
}

// Register defines f's flags on fl, with their defaults and help.
func (f *Flags) Register(fl *pflag.FlagSet) {
	fl.StringVar(&f.Memory, "memory", "", "memory limit, e.g. 512m or 2g (exceeding it kills the command: exit 137, reason oom; default 1g as root, none rootless)")
	fl.StringVar(&f.CPUs, "cpus", "", "CPU quota in cores, e.g. 0.5 or 2")
	fl.StringVar(&f.Pids, "pids", "", "maximum number of processes and threads (default 1024 as root, none rootless)")
	fl.StringVar(&f.Timeout, "timeout", "", "kill the whole sandbox after this long, e.g. 30s (exit 124, reason timeout)")
	fl.StringVar(&f.Disk, "disk", "256m", "size of the sandbox's writable storage: the layer over the root, /tmp and /run together")
	fl.StringVar(&f.RootFS, "rootfs", "", "directory to use as the read-only root instead of the host's root (relative to the current directory)")
	fl.StringVar(&f.HostView, "host-view", "os", HostViewUsage)
	fl.BoolVar(&f.UserNS, "userns", false, UsernsUsage)
	fl.StringArrayVarP(&f.Volumes, "volume", "v", nil, "bind HOST:GUEST[:ro] (repeatable; a relative HOST is taken from the current directory; HOST may not be a symlink, GUEST is resolved inside the sandbox)")
	fl.StringVarP(&f.Workdir, "workdir", "w", "/", "working directory inside the sandbox")
	fl.StringArrayVarP(&f.Env, "env", "e", nil, "set KEY=VALUE, or KEY to pass the host's value (repeatable)")
	fl.StringVar(&f.Hostname, "hostname", "tine", "host name inside the sandbox")
	fl.StringVar(&f.Seccomp, "seccomp", "default", "syscall policy: default (Docker's), strict, or unconfined")
	fl.BoolVarP(&f.TTY, "tty", "t", false, "give the command a pseudo-terminal")
	fl.StringVar(&f.Outcome, "outcome", "", "write a JSON outcome (exit code, reason, phase timings, peak memory, CPU time) to FILE")
	fl.BoolVar(&f.Verbose, "verbose", false, "say whether the run was handed to the daemon or ran in-process")
	fl.BoolVar(&f.InProcess, "in-process", false, "never hand the run to a daemon")
	fl.StringVar(&f.Socket, "socket", "", "the daemon's socket (default $TINE_SOCKET, else /run/tine/tine.sock)")
}

// ImageFunc makes s's root from the image its flags name (tine's --image),
// before the run; release ends the image's use once the run is over.
type ImageFunc func(s *sandbox.Spec) (release func(), err error)

// Spec validates every flag and builds the sandbox spec.
func Spec(f Flags, args []string) (*sandbox.Spec, error) {
	s := &sandbox.Spec{Args: args, Workdir: f.Workdir, Hostname: f.Hostname}
	var err error
	// Host paths are made absolute here: a run handed to the daemon would
	// find a relative one under the daemon's working directory, not ours.
	if f.RootFS != "" {
		if s.RootFS, err = filepath.Abs(f.RootFS); err != nil {
			return nil, fmt.Errorf("--rootfs %s: %w", f.RootFS, err)
		}
	}
	if s.Limits.MemoryBytes, s.Limits.CPUs, s.Limits.Pids, err = ParseLimits(f.Memory, f.CPUs, f.Pids); err != nil {
		return nil, err
	}
	// Applied in-process where cgroups are driven; a daemon that takes
	// the run applies its own (tine serve --default-memory, --default-pids).
	s.DefaultLimits = cgroup.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids}
	if f.Timeout != "" {
		if s.Timeout, err = ParseDuration("timeout", f.Timeout); err != nil {
			return nil, err
		}
	}
	if s.DiskBytes, err = ParseSize("disk", f.Disk); err != nil {
		return nil, err
	}
	if s.HostView, err = ParseHostView(f.HostView, f.RootFS); err != nil {
		return nil, err
	}
	if s.Seccomp, err = seccomp.ParseMode(f.Seccomp); err != nil {
		return nil, usage("invalid --seccomp %q: want default, strict or unconfined", f.Seccomp)
	}
	for _, v := range f.Volumes {
		if src, rest, ok := strings.Cut(v, ":"); ok && src != "" && !filepath.IsAbs(src) {
			abs, err := filepath.Abs(src)
			if err != nil {
				return nil, usage("invalid --volume %q: %v", v, err)
			}
			v = abs + ":" + rest
		}
		b, err := sandbox.ParseBind(v)
		if err != nil {
			return nil, usage("invalid --volume: %v", err)
		}
		s.Binds = append(s.Binds, b)
	}
	for _, e := range f.Env {
		if k, _, ok := CutEnv(e); ok {
			s.Env = append(s.Env, e)
		} else if v, set := os.LookupEnv(k); set {
			s.Env = append(s.Env, k+"="+v)
		}
	}
	if s.RootFS != "" {
		if st, err := os.Stat(s.RootFS); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--rootfs %s: not a directory you can use as a root (%v); give an unpacked root filesystem, or leave --rootfs out to use the host's root", f.RootFS, errOrNotDir(err))
		}
	}
	s.TTY = f.TTY
	s.UserNS = f.UserNS
	return s, nil
}

// HostViewUsage is --host-view's help, for tine run and tine create.
const HostViewUsage = "what the sandbox sees of the host's root: os (the operating system: /usr, /etc, /opt and the package databases; every other top-level directory, /var/log, /var/mail, /var/spool, the rest of /var/lib and the files of /etc others cannot read are empty) or full (everything but password hashes, SSH host keys and /root)"

// UsernsUsage is --userns's help, for tine run and tine create.
const UsernsUsage = "run in a user namespace as root too: the sandbox's root is an unprivileged host uid (root's range in /etc/subuid, else 2147483648 on), with no DAC override on host files; host files show as owned by nobody inside"

// ParseHostView checks --host-view, which only applies to the host's root.
func ParseHostView(v, rootfs string) (sandbox.HostView, error) {
	hv, err := sandbox.ParseHostView(v)
	if err != nil {
		return "", usage("invalid --host-view %q: want os or full", v)
	}
	if rootfs != "" && hv == sandbox.HostViewFull {
		return "", UsageError{"--host-view full is a view of the host's root; with --rootfs the root is that directory as it is: drop one of them"}
	}
	return hv, nil
}

func CutEnv(e string) (string, string, bool) {
	for i := 0; i < len(e); i++ {
		if e[i] == '=' {
			return e[:i], e[i+1:], true
		}
	}
	return e, "", false
}

func errOrNotDir(err error) error {
	if err != nil {
		return err
	}
	return errors.New("not a directory")
}

func Run(f Flags, args []string, image ImageFunc) error {
	// A one-shot run allocates a few megabytes and exits: collecting
	// garbage would only cost start-up time.
	debug.SetGCPercent(-1)
	s, err := Spec(f, args)
	if err != nil {
		return err
	}
	// tine run exits as soon as its command's status is known, leaving
	// the sandbox's end to a cleanup process (sandbox.Process.WaitAndLeave),
	// unless an image's lease must last until the sandbox is gone.
	leave := true
	if image != nil {
		root := s.RootFS
		release, err := image(s)
		if err != nil {
			return err
		}
		defer release()
		leave = s.RootFS == root && len(s.Layers) == 0
	}
	// Catch signals before the sandbox exists, so none is lost in between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT)
	defer signal.Stop(sigs)

	var o *sandbox.Outcome
	handed := false
	socket := f.Socket
	if socket == "" {
		socket = DaemonSocket()
	}
	// A run from an image is handed over resolved (its layers, config and
	// user); this process holds the image's lease until the run ends.
	if !s.TTY && !f.InProcess && os.Getenv("TINE_NO_DAEMON") == "" {
		o, handed, err = runThroughDaemon(socket, s, sigs, f.Verbose)
		if handed && err != nil {
			return err
		}
	}
	if !handed {
		if f.Verbose {
			why := "no daemon on " + socket
			switch {
			case s.TTY:
				why = "-t runs in-process"
			case f.InProcess:
				why = "--in-process"
			case os.Getenv("TINE_NO_DAEMON") != "":
				why = "TINE_NO_DAEMON is set"
			}
			fmt.Fprintf(os.Stderr, "tine: running in-process (%s)\n", why)
		}
		if o, err = runInProcess(s, sigs, leave); err != nil {
			return err
		}
	}
	if o.Reason == "not-found" {
		fmt.Fprintf(os.Stderr, "tine: %s: not found in sandbox\n", s.Args[0])
	}
	if f.Outcome != "" {
		b, _ := json.MarshalIndent(o, "", "  ")
		if err := os.WriteFile(f.Outcome, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --outcome: %w", err)
		}
	}
	switch o.Reason {
	case "not-found":
		return ExitError{o.ExitCode}
	case "timeout":
		fmt.Fprintf(os.Stderr, "tine: %s: timed out after %s; the sandbox was killed\n", s.Args[0], s.Timeout)
	case "oom":
		limit := f.Memory
		if limit == "" {
			limit = "the default; raise it with --memory"
		}
		fmt.Fprintf(os.Stderr, "tine: %s: killed: out of memory (limit %s)\n", s.Args[0], limit)
	}
	if o.ExitCode != 0 {
		return ExitError{o.ExitCode}
	}
	return nil
}

// runInProcess runs s as a child of this process; with leave, the end of
// the sandbox is left to a cleanup process once the command's status is
// known (the caller exits next).
func runInProcess(s *sandbox.Spec, sigs <-chan os.Signal, leave bool) (*sandbox.Outcome, error) {
	p, err := sandbox.Start(s)
	if err != nil {
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			return &sandbox.Outcome{ExitCode: 127, Reason: "not-found"}, nil
		case errors.Is(err, sandbox.ErrPermission):
			fmt.Fprintf(os.Stderr, "tine: %s: permission denied in sandbox\n", s.Args[0])
			return nil, ExitError{126}
		case errors.Is(err, sandbox.ErrInvalidSpec):
			return nil, UsageError{err.Error()} // a bad -v, --workdir or -e: exit 2
		}
		return nil, err
	}
	var term *ttySession
	if m := p.TTY(); m != nil {
		term = attachTTY(m)
	}
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGWINCH && term != nil {
				term.ResizeFromHost()
				continue
			}
			p.Signal(sig.(syscall.Signal))
		}
	}()
	wait := p.Wait
	if leave {
		wait = p.WaitAndLeave
	}
	o, err := wait()
	if term != nil {
		term.Close()
	}
	return o, err
}

// DaemonSocket is where `tine serve` listens by default.
func DaemonSocket() string {
	if s := os.Getenv("TINE_SOCKET"); s != "" {
		return s
	}
	return "/run/tine/tine.sock"
}

// runThroughDaemon hands s to a running daemon with this process's stdio.
// handed is false when no daemon answers; then nothing was started.
func runThroughDaemon(socket string, s *sandbox.Spec, sigs <-chan os.Signal, verbose bool) (o *sandbox.Outcome, handed bool, err error) {
	sess, err := handoff.Dial(socket, handoff.FromSpec(s), [3]*os.File{os.Stdin, os.Stdout, os.Stderr})
	if errors.Is(err, handoff.ErrNoDaemon) {
		return nil, false, nil
	}
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			if ae.Code == api.CodeInvalidArgument {
				return nil, true, UsageError{ae.Message} // exit 2, as in-process
			}
			return nil, true, errors.New(ae.Message)
		}
		return nil, true, err
	}
	if verbose {
		how := "a fresh sandbox"
		if sess.Started.Pooled {
			how = "a ready sandbox from its pool"
		}
		fmt.Fprintf(os.Stderr, "tine: handed to the daemon on %s (%s)\n", socket, how)
	}
	go func() {
		for sig := range sigs {
			if sig != syscall.SIGWINCH {
				sess.Signal(sig.(syscall.Signal))
			}
		}
	}()
	o, err = sess.Wait()
	return o, true, err
}
