package main

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

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/handoff"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
)

type runFlags struct {
	memory, cpus, pids, timeout, disk string
	rootfs, workdir, hostname         string
	seccompMode, hostView             string
	volumes, env                      []string
	tty                               bool
	outcome                           string
	verbose, inProcess, userns        bool
	socket                            string
	img                               runImageFlags
}

func newRunCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]   (with --image the command may be left out)",
		Short: "Run a command once in a fresh sandbox",
		Long: `Run a command once in a fresh sandbox and exit with its exit code.

The sandbox has its own pid, mount, ipc, uts, net (only lo, up) and cgroup
namespaces. Its root is the host's root filesystem (or --rootfs DIR, or the
layers of --image REF, whose Env, Entrypoint/Cmd, WorkingDir and User apply:
see tine pull --help and docs/images.md) as the read-only base of an overlay
whose writable layer is a tmpfs of --disk bytes (shared with /tmp and /run):
the command can write anywhere and nothing reaches the host. Of the host's root it sees the operating system only
(--host-view os): other top-level directories, most of /var and the files of
/etc that others cannot read are empty. It gets a fresh /proc, a minimal /dev,
a read-only /sys, Docker's default seccomp policy and capabilities,
no_new_privs, Landlock rules that allow writes only beneath its writable
mounts, and as root 1g of memory and 1024 processes unless --memory and --pids
say otherwise (--userns also maps its root to an unprivileged host uid).

Exit codes: the command's own; 128+N when killed by signal N; 137 when killed
for exceeding --memory (reason "oom"); 124 on --timeout (the whole process
tree dies); 127 when the command is not found in the sandbox, 126 when it
cannot be executed; 2 for invalid flags; 1 when the sandbox could not be set up.`,
		Example: `  tine run -- /bin/true
  tine run --memory 512m --pids 128 --timeout 30s -- python3 -c 'print(1)'
  tine run -v $PWD:/work:ro --workdir /work -- ls -la
  tine run -t -- /bin/bash
  tine run --image python:3.12-slim -- python3 -c 'print(1)'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && f.img.image == "" {
				return usageError{"run: no command given; usage: tine run [flags] -- CMD [ARGS...]"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.img.workdirSet = cmd.Flags().Changed("workdir")
			return runOnce(f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512m or 2g (exceeding it kills the command: exit 137, reason oom; default 1g as root, none rootless)")
	fl.StringVar(&f.cpus, "cpus", "", "CPU quota in cores, e.g. 0.5 or 2")
	fl.StringVar(&f.pids, "pids", "", "maximum number of processes and threads (default 1024 as root, none rootless)")
	fl.StringVar(&f.timeout, "timeout", "", "kill the whole sandbox after this long, e.g. 30s (exit 124, reason timeout)")
	fl.StringVar(&f.disk, "disk", "256m", "size of the sandbox's writable storage: the layer over the root, /tmp and /run together")
	fl.StringVar(&f.rootfs, "rootfs", "", "directory to use as the read-only root instead of the host's root (relative to the current directory)")
	fl.StringVar(&f.hostView, "host-view", "os", hostViewUsage)
	fl.BoolVar(&f.userns, "userns", false, usernsUsage)
	fl.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind HOST:GUEST[:ro] (repeatable; a relative HOST is taken from the current directory; HOST may not be a symlink, GUEST is resolved inside the sandbox)")
	fl.StringVarP(&f.workdir, "workdir", "w", "/", "working directory inside the sandbox")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE, or KEY to pass the host's value (repeatable)")
	fl.StringVar(&f.hostname, "hostname", "tine", "host name inside the sandbox")
	fl.StringVar(&f.seccompMode, "seccomp", "default", "syscall policy: default (Docker's), strict, or unconfined")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a pseudo-terminal")
	fl.StringVar(&f.outcome, "outcome", "", "write a JSON outcome (exit code, reason, phase timings, peak memory, CPU time) to FILE")
	fl.BoolVar(&f.verbose, "verbose", false, "say whether the run was handed to the daemon or ran in-process")
	fl.BoolVar(&f.inProcess, "in-process", false, "never hand the run to a daemon")
	fl.StringVar(&f.socket, "socket", "", "the daemon's socket (default $TINE_SOCKET, else /run/tine/tine.sock)")
	f.img.register(cmd)
	return cmd
}

// specFromFlags validates every flag and builds the sandbox spec.
func specFromFlags(f runFlags, args []string) (*sandbox.Spec, error) {
	s := &sandbox.Spec{Args: args, Workdir: f.workdir, Hostname: f.hostname}
	var err error
	// Host paths are made absolute here: a run handed to the daemon would
	// find a relative one under the daemon's working directory, not ours.
	if f.rootfs != "" {
		if s.RootFS, err = filepath.Abs(f.rootfs); err != nil {
			return nil, fmt.Errorf("--rootfs %s: %w", f.rootfs, err)
		}
	}
	if s.Limits.MemoryBytes, s.Limits.CPUs, s.Limits.Pids, err = parseLimits(f.memory, f.cpus, f.pids); err != nil {
		return nil, err
	}
	// Applied in-process where cgroups are driven; a daemon that takes
	// the run applies its own (tine serve --default-memory, --default-pids).
	s.DefaultLimits = cgroup.Limits{MemoryBytes: sandbox.DefaultMemory, Pids: sandbox.DefaultPids}
	if f.timeout != "" {
		if s.Timeout, err = parseDuration("timeout", f.timeout); err != nil {
			return nil, err
		}
	}
	if s.DiskBytes, err = parseSize("disk", f.disk); err != nil {
		return nil, err
	}
	if s.HostView, err = parseHostView(f.hostView, f.rootfs); err != nil {
		return nil, err
	}
	if s.Seccomp, err = seccomp.ParseMode(f.seccompMode); err != nil {
		return nil, usageError{fmt.Sprintf("invalid --seccomp %q: want default, strict or unconfined", f.seccompMode)}
	}
	for _, v := range f.volumes {
		if src, rest, ok := strings.Cut(v, ":"); ok && src != "" && !filepath.IsAbs(src) {
			abs, err := filepath.Abs(src)
			if err != nil {
				return nil, usageError{fmt.Sprintf("invalid --volume %q: %v", v, err)}
			}
			v = abs + ":" + rest
		}
		b, err := sandbox.ParseBind(v)
		if err != nil {
			return nil, usageError{fmt.Sprintf("invalid --volume: %v", err)}
		}
		s.Binds = append(s.Binds, b)
	}
	for _, e := range f.env {
		if k, _, ok := cutEnv(e); ok {
			s.Env = append(s.Env, e)
		} else if v, set := os.LookupEnv(k); set {
			s.Env = append(s.Env, k+"="+v)
		}
	}
	if s.RootFS != "" {
		if st, err := os.Stat(s.RootFS); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--rootfs %s: not a directory you can use as a root (%v); give an unpacked root filesystem, or leave --rootfs out to use the host's root", f.rootfs, errOrNotDir(err))
		}
	}
	s.TTY = f.tty
	s.UserNS = f.userns
	return s, nil
}

// hostViewUsage is --host-view's help, for tine run and tine create.
const hostViewUsage = "what the sandbox sees of the host's root: os (the operating system: /usr, /etc, /opt and the package databases; every other top-level directory, /var/log, /var/mail, /var/spool, the rest of /var/lib and the files of /etc others cannot read are empty) or full (everything but password hashes, SSH host keys and /root)"

// usernsUsage is --userns's help, for tine run and tine create.
const usernsUsage = "run in a user namespace as root too: the sandbox's root is an unprivileged host uid (root's range in /etc/subuid, else 2147483648 on), with no DAC override on host files; host files show as owned by nobody inside"

// parseHostView checks --host-view, which only applies to the host's root.
func parseHostView(v, rootfs string) (sandbox.HostView, error) {
	hv, err := sandbox.ParseHostView(v)
	if err != nil {
		return "", usageError{fmt.Sprintf("invalid --host-view %q: want os or full", v)}
	}
	if rootfs != "" && hv == sandbox.HostViewFull {
		return "", usageError{"--host-view full is a view of the host's root; with --rootfs the root is that directory as it is: drop one of them"}
	}
	return hv, nil
}

func cutEnv(e string) (string, string, bool) {
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

func runOnce(f runFlags, args []string) error {
	// A one-shot run allocates a few megabytes and exits: collecting
	// garbage would only cost start-up time.
	debug.SetGCPercent(-1)
	s, err := specFromFlags(f, args)
	if err != nil {
		return err
	}
	lease, err := f.img.apply(s, true)
	if err != nil {
		return err
	}
	defer lease.Release()
	// Catch signals before the sandbox exists, so none is lost in between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT)
	defer signal.Stop(sigs)

	var o *sandbox.Outcome
	handed := false
	socket := f.socket
	if socket == "" {
		socket = daemonSocket()
	}
	// A run from an image is handed over resolved (its layers, config and
	// user); this process holds the image's lease until the run ends.
	if !s.TTY && !f.inProcess && os.Getenv("TINE_NO_DAEMON") == "" {
		o, handed, err = runThroughDaemon(socket, s, sigs, f.verbose)
		if handed && err != nil {
			return err
		}
	}
	if !handed {
		if f.verbose {
			why := "no daemon on " + socket
			switch {
			case s.TTY:
				why = "-t runs in-process"
			case f.inProcess:
				why = "--in-process"
			case os.Getenv("TINE_NO_DAEMON") != "":
				why = "TINE_NO_DAEMON is set"
			}
			fmt.Fprintf(os.Stderr, "tine: running in-process (%s)\n", why)
		}
		if o, err = runInProcess(s, sigs); err != nil {
			return err
		}
	}
	if o.Reason == "not-found" {
		fmt.Fprintf(os.Stderr, "tine: %s: not found in sandbox\n", s.Args[0])
	}
	if f.outcome != "" {
		b, _ := json.MarshalIndent(o, "", "  ")
		if err := os.WriteFile(f.outcome, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --outcome: %w", err)
		}
	}
	switch o.Reason {
	case "not-found":
		return exitError{o.ExitCode}
	case "timeout":
		fmt.Fprintf(os.Stderr, "tine: %s: timed out after %s; the sandbox was killed\n", s.Args[0], s.Timeout)
	case "oom":
		limit := f.memory
		if limit == "" {
			limit = "the default; raise it with --memory"
		}
		fmt.Fprintf(os.Stderr, "tine: %s: killed: out of memory (limit %s)\n", s.Args[0], limit)
	}
	if o.ExitCode != 0 {
		return exitError{o.ExitCode}
	}
	return nil
}

// runInProcess runs s as a child of this process.
func runInProcess(s *sandbox.Spec, sigs <-chan os.Signal) (*sandbox.Outcome, error) {
	p, err := sandbox.Start(s)
	if err != nil {
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			return &sandbox.Outcome{ExitCode: 127, Reason: "not-found"}, nil
		case errors.Is(err, sandbox.ErrPermission):
			fmt.Fprintf(os.Stderr, "tine: %s: permission denied in sandbox\n", s.Args[0])
			return nil, exitError{126}
		case errors.Is(err, sandbox.ErrInvalidSpec):
			return nil, usageError{err.Error()} // a bad -v, --workdir or -e: exit 2
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
	o, err := p.Wait()
	if term != nil {
		term.Close()
	}
	return o, err
}

// daemonSocket is where `tine serve` listens by default.
func daemonSocket() string {
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
				return nil, true, usageError{ae.Message} // exit 2, as in-process
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
