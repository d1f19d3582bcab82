// Package cli is the command line of tine-runc, tine's OCI runtime: runc's
// (create, start, exec, state, kill, delete, ps, pause, resume, list,
// features, run, update, checkpoint, restore), for containerd's runc shim
// and CRI-O.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/kernel/caps"
	"github.com/tine-run/tine/internal/oci"
	"golang.org/x/sys/unix"
)

// exitError carries an exit code up to Main without printing anything.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is bad command-line input: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// Main runs the command line as name and exits.
func Main(name string) {
	cmd := NewCommand(name)
	cmd.SetArgs(runcArgs(os.Args[1:]))
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	err := cmd.Execute()
	if err == nil {
		os.Exit(0)
	}
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(2)
	}
	os.Exit(1)
}

// ociFlags are runc's global flags.
type ociFlags struct {
	root, log, logFormat string
	systemdCgroup        bool
	rootless             string
	debug                bool
	criu                 string
}

// NewCommand is the command line, named use.
func NewCommand(use string) *cobra.Command {
	var f ociFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run OCI bundles, as containerd's runc shim and CRI-O expect (tine as an OCI runtime)",
		Long: `tine as an OCI runtime: the command line of runc (create, start, exec, state,
kill, delete, ps, pause, resume, list, features, run, update, checkpoint,
restore), for containerd's runc shim (io.containerd.runc.v2 with BinaryName
pointing at tine-runc, ctr or the CRI plugin's runtime handlers) and CRI-O.
A container is a tine sandbox made from the bundle's config.json: its rootfs
written in place, new pid and mount namespaces, ipc, uts and network
namespaces of its own or joined by path (a pod's) or the host's when the
config leaves them out, the cgroup at its cgroupsPath, the config's user, OOM
score, namespaced sysctls and seccomp profile (stacked on tine's walls:
Docker's seccomp policy, Landlock, its masks, no_new_privs). checkpoint and
restore go through tine's CRIU memory tier. Every config field or option tine
cannot honour is refused with an error naming it. See docs/kubernetes.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if f.systemdCgroup {
				return errors.New("--systemd-cgroup: tine drives cgroupfs only; configure the runtime with SystemdCgroup = false")
			}
			if f.rootless == "true" {
				return errors.New("--rootless true: tine's OCI runtime needs root")
			}
			if f.logFormat != "json" && f.logFormat != "text" {
				return usageError{fmt.Sprintf("--log-format %q: want json or text", f.logFormat)}
			}
			if f.criu != "" {
				// internal/probe finds criu there first.
				os.Setenv("TINE_CRIU", f.criu)
			}
			return nil
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.root, "root", oci.DefaultRoot, "directory for the containers' state")
	pf.StringVar(&f.log, "log", "", "append errors to this file (as --log-format)")
	pf.StringVar(&f.logFormat, "log-format", "text", "format of --log: text or json")
	pf.BoolVar(&f.systemdCgroup, "systemd-cgroup", false, "refused: tine drives cgroupfs")
	pf.StringVar(&f.rootless, "rootless", "auto", "refused when true: the runtime needs root")
	pf.BoolVar(&f.debug, "debug", false, "accepted for runc compatibility")
	pf.StringVar(&f.criu, "criu", "", "the criu binary for checkpoint and restore (default: the one tine doctor finds)")
	rt := func() *oci.Runtime { return &oci.Runtime{Root: f.root} }
	logged := func(run func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			err := run(cmd, args)
			if err != nil && f.log != "" {
				logError(f.log, f.logFormat, err)
			}
			return err
		}
	}

	var co oci.CreateOptions
	var noPivot, noNewKeyring bool
	var preserveFDs int
	create := &cobra.Command{
		Use:   "create [flags] ID",
		Short: "Make a container from a bundle; its command waits for start",
		Args:  cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			co.PreserveFDs = preserveFDs
			return rt().Create(args[0], co)
		}),
	}
	addCreateFlags := func(c *cobra.Command) {
		c.Flags().StringVarP(&co.Bundle, "bundle", "b", ".", "the bundle directory (holding config.json)")
		c.Flags().StringVar(&co.PidFile, "pid-file", "", "write the container's PID 1 (host pid) to this file")
		c.Flags().StringVar(&co.ConsoleSocket, "console-socket", "", "send the terminal's master to this unix socket (with process.terminal)")
		c.Flags().BoolVar(&noPivot, "no-pivot", false, "accepted; tine always pivots into the root")
		c.Flags().BoolVar(&noNewKeyring, "no-new-keyring", false, "accepted; tine makes no session keyring")
		c.Flags().IntVar(&preserveFDs, "preserve-fds", 0, "pass this many descriptors from 3 up to the container's command")
	}
	addCreateFlags(create)

	run := &cobra.Command{
		Use:   "run [flags] ID",
		Short: "Create and start a container, wait for it, and delete it",
		Args:  cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			r, id := rt(), args[0]
			co.PreserveFDs = preserveFDs
			if err := r.Create(id, co); err != nil {
				return err
			}
			defer r.Delete(id, true)
			st, err := r.State(id)
			if err != nil {
				return err
			}
			if err := r.Start(id); err != nil {
				return err
			}
			// This process made PID 1: it is its child.
			return waitChild(st.Pid)
		}),
	}
	addCreateFlags(run)

	var all bool
	kill := &cobra.Command{
		Use:   "kill [flags] ID [SIGNAL]",
		Short: "Send a signal (default SIGTERM) to a container",
		Args:  cobra.RangeArgs(1, 2),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			sig := syscall.SIGTERM
			if len(args) == 2 {
				s, err := parseSignal(args[1])
				if err != nil {
					return err
				}
				sig = s
			}
			return rt().Kill(args[0], sig, all)
		}),
	}
	kill.Flags().BoolVarP(&all, "all", "a", false, "signal every process of the container")

	var force bool
	del := &cobra.Command{
		Use:   "delete [flags] ID",
		Short: "Remove a stopped or created container (any with --force)",
		Args:  cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			err := rt().Delete(args[0], force)
			if force && errors.Is(err, oci.ErrNotExist) {
				return nil
			}
			return err
		}),
	}
	del.Flags().BoolVarP(&force, "force", "f", false, "kill the container first when it runs")

	var psFormat string
	ps := &cobra.Command{
		Use:   "ps [flags] ID",
		Short: "List a container's processes",
		Args:  cobra.MinimumNArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			pids, err := rt().Ps(args[0])
			if err != nil {
				return err
			}
			if psFormat == "json" {
				if pids == nil {
					pids = []int{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(pids)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "PID")
			for _, p := range pids {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		}),
	}
	ps.Flags().StringVarP(&psFormat, "format", "f", "table", "table or json")

	var listFormat string
	var quiet bool
	list := &cobra.Command{
		Use:   "list [flags]",
		Short: "List the containers",
		Args:  cobra.NoArgs,
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			states, err := rt().List()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case quiet:
				for _, s := range states {
					fmt.Fprintln(out, s.ID)
				}
			case listFormat == "json":
				if states == nil {
					states = []*oci.State{}
				}
				return json.NewEncoder(out).Encode(states)
			default:
				w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tPID\tSTATUS\tBUNDLE\tCREATED\tOWNER")
				for _, s := range states {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Pid, s.Status, s.Bundle, s.Created.Format(time.RFC3339Nano), s.Owner)
				}
				w.Flush()
			}
			return nil
		}),
	}
	list.Flags().StringVarP(&listFormat, "format", "f", "table", "table or json")
	list.Flags().BoolVarP(&quiet, "quiet", "q", false, "only the IDs")

	one := func(use, short string, do func(*oci.Runtime, string) error) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: cobra.ExactArgs(1),
			RunE: logged(func(cmd *cobra.Command, args []string) error { return do(rt(), args[0]) })}
	}
	state := &cobra.Command{
		Use:   "state ID",
		Short: "Print a container's state (the runtime-spec's JSON)",
		Args:  cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			s, err := rt().State(args[0])
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}),
	}
	feats := &cobra.Command{
		Use:   "features",
		Short: "Print what this runtime supports (the runtime-spec's features JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(ociFeatures())
		},
	}
	cmd.AddCommand(create, run, one("start", "Start a created container's command", (*oci.Runtime).Start), state, kill, del, ps, list,
		one("pause", "Freeze every process of a running container", (*oci.Runtime).Pause),
		one("resume", "Thaw a paused container", (*oci.Runtime).Resume), feats,
		newOCIExecCommand(rt, logged),
		newUpdateCommand(rt, logged),
		newCheckpointCommand(rt, logged),
		newRestoreCommand(rt, logged))
	return cmd
}

// logError appends err to the runtime's log the way runc writes it: its
// callers (containerd's shim) show the last error line when a call fails.
func logError(path, format string, err error) {
	f, ferr := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if ferr != nil {
		return
	}
	defer f.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if format == "json" {
		b, _ := json.Marshal(map[string]string{"level": "error", "msg": err.Error(), "time": now})
		f.Write(append(b, '\n'))
		return
	}
	fmt.Fprintf(f, "time=%q level=error msg=%q\n", now, err.Error())
}

// parseSignal takes SIGTERM, TERM or 15.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d: out of range 1-64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("signal %q: not a signal name (such as SIGTERM) or number", s)
}

func ociFeatures() *features.Features {
	t := true
	f := false
	return &features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{},
		MountOptions:  []string{"ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "sync", "dirsync", "noatime", "nodiratime", "relatime", "strictatime", "bind", "rbind", "private", "rprivate"},
		Linux: &features.Linux{
			Namespaces:   []string{string(specs.PIDNamespace), string(specs.NetworkNamespace), string(specs.MountNamespace), string(specs.IPCNamespace), string(specs.UTSNamespace), string(specs.CgroupNamespace)},
			Capabilities: caps.Default,
			Cgroup:       &features.Cgroup{V1: &t, V2: &t, Systemd: &f, SystemdUser: &f},
			Seccomp:      &features.Seccomp{Enabled: &f},
			Apparmor:     &features.Apparmor{Enabled: &f},
			Selinux:      &features.Selinux{Enabled: &f},
		},
		Annotations: map[string]string{"run.tine.walls": "seccomp (Docker's default policy), Landlock, masks, no_new_privs"},
	}
}

func newOCIExecCommand(rt func() *oci.Runtime, logged func(func(*cobra.Command, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	var o oci.ExecOptions
	var processFile, cwd string
	var env []string
	var tty bool
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [COMMAND [ARG...]]",
		Short: "Run another process in a running container, behind its walls",
		Long: `exec runs a process in a running container: the one described by --process
(a runtime-spec process JSON, as containerd's shim passes), or COMMAND. With
--detach it returns once the process runs, its pid in --pid-file; otherwise it
waits and exits with the process's exit code.`,
		Args: cobra.MinimumNArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			var p specs.Process
			switch {
			case processFile != "":
				b, err := os.ReadFile(processFile)
				if err != nil {
					return fmt.Errorf("read --process: %w", err)
				}
				if err := json.Unmarshal(b, &p); err != nil {
					return fmt.Errorf("parse --process %s: %w", processFile, err)
				}
			case len(args) > 1:
				p = specs.Process{Args: args[1:], Env: env, Cwd: cwd, Terminal: tty}
			default:
				return usageError{"exec: give a command, or --process FILE"}
			}
			code, err := rt().Exec(args[0], &p, o)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&processFile, "process", "p", "", "the process to run, as runtime-spec process JSON")
	f.BoolVarP(&o.Detach, "detach", "d", false, "return once it runs; its pid goes to --pid-file")
	f.StringVar(&o.PidFile, "pid-file", "", "write the process's pid to this file (with --detach)")
	f.StringVar(&o.ConsoleSocket, "console-socket", "", "send the terminal's master to this unix socket")
	f.BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	f.StringVar(&cwd, "cwd", "", "working directory inside the container")
	f.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE for the command (repeatable)")
	f.SetInterspersed(false)
	return cmd
}

// newUpdateCommand is runc's update: the resources as runtime-spec JSON
// (--resources FILE, or - for stdin, which containerd's shim uses), or
// the memory, cpu and pids flags.
func newUpdateCommand(rt func() *oci.Runtime, logged func(func(*cobra.Command, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	var file string
	var memory, pids, cpuQuota int64
	var cpuPeriod, cpuShares uint64
	cmd := &cobra.Command{
		Use:   "update [flags] ID",
		Short: "Change a running container's memory, cpu and pids limits",
		Args:  cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			var res specs.LinuxResources
			if file != "" {
				var b []byte
				var err error
				if file == "-" {
					b, err = io.ReadAll(cmd.InOrStdin())
				} else {
					b, err = os.ReadFile(file)
				}
				if err != nil {
					return fmt.Errorf("read --resources: %w", err)
				}
				if err := json.Unmarshal(b, &res); err != nil {
					return fmt.Errorf("parse --resources: %w", err)
				}
			}
			fl := cmd.Flags()
			if fl.Changed("memory") {
				res.Memory = &specs.LinuxMemory{Limit: &memory}
			}
			if fl.Changed("pids-limit") {
				res.Pids = &specs.LinuxPids{Limit: pids}
			}
			if fl.Changed("cpu-quota") || fl.Changed("cpu-period") || fl.Changed("cpu-shares") {
				res.CPU = &specs.LinuxCPU{}
				if fl.Changed("cpu-quota") {
					res.CPU.Quota = &cpuQuota
				}
				if fl.Changed("cpu-period") {
					res.CPU.Period = &cpuPeriod
				}
				if fl.Changed("cpu-shares") {
					res.CPU.Shares = &cpuShares
				}
			}
			return rt().Update(args[0], &res)
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&file, "resources", "r", "", "the resources as runtime-spec JSON (linux.resources); - reads stdin")
	f.Int64Var(&memory, "memory", 0, "memory limit in bytes")
	f.Int64Var(&pids, "pids-limit", 0, "maximum number of processes")
	f.Int64Var(&cpuQuota, "cpu-quota", 0, "CPU time in microseconds per --cpu-period")
	f.Uint64Var(&cpuPeriod, "cpu-period", 0, "CPU quota period in microseconds (default 100000)")
	f.Uint64Var(&cpuShares, "cpu-shares", 0, "CPU weight (2 to 262144)")
	return cmd
}
