package cli

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/tine-run/tine/internal/oci"
	"golang.org/x/sys/unix"
)

// criuFlags are the criu options runc's checkpoint and restore share (and
// go-runc passes to both): the ones tine cannot honour are refused when
// set, saying why, rather than ignored.
type criuFlags struct {
	imagePath, workPath string
	cgroupsMode         string
	emptyNS             []string
}

// refusedCRIU are criu options tine does not offer, their kind of value
// (a flag, "string" or "int"), and why.
var refusedCRIU = []struct{ name, kind, why string }{
	{"tcp-established", "", "criu 4.1 cannot dump internet sockets on Linux 6.16 and later, and tine closes TCP connections at a checkpoint (ADR 0016)"},
	{"ext-unix-sk", "", "a unix socket connected outside the container cannot be carried: the restored container is a new one, with nothing at the other end"},
	{"parent-path", "string", "pre-dumps need the kernel's soft-dirty page tracking, which tine does not use: take full checkpoints"},
	{"pre-dump", "", "pre-dumps need the kernel's soft-dirty page tracking, which tine does not use: take full checkpoints"},
	{"auto-dedup", "", "it deduplicates against a parent image, and tine takes no pre-dumps"},
	{"lazy-pages", "", "lazy pages need criu's page server and userfaultfd in the restored container"},
	{"status-fd", "int", "it reports lazy pages' readiness, which tine does not offer"},
	{"page-server", "string", "tine writes images to --image-path only"},
	{"lsm-profile", "string", "tine sets no AppArmor or SELinux label"},
	{"lsm-mount-context", "string", "tine sets no SELinux mount context"},
}

func (c *criuFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&c.imagePath, "image-path", "", "directory of the criu images (default: checkpoint in the working directory, as runc)")
	fs.StringVar(&c.workPath, "work-path", "", "directory where an error of criu is left (dump.log, restore.log)")
	fs.StringVar(&c.cgroupsMode, "manage-cgroups-mode", "", "only ignore: the restored container is in the cgroup its bundle names, with its limits")
	fs.StringArrayVar(&c.emptyNS, "empty-ns", nil, "accepted: tine never saves namespaces (a restore makes them from the bundle)")
	fs.Bool("shell-job", false, "accepted: tine always restores the processes into the new container's session")
	fs.Bool("file-locks", false, "accepted: tine always dumps file locks")
	for _, r := range refusedCRIU {
		switch r.kind {
		case "string":
			fs.String(r.name, "", "refused: "+r.why)
		case "int":
			fs.Int(r.name, -1, "refused: "+r.why)
		default:
			fs.Bool(r.name, false, "refused: "+r.why)
		}
	}
}

// check refuses the options tine cannot honour and fills in the image path.
func (c *criuFlags) check(fs *pflag.FlagSet) error {
	for _, r := range refusedCRIU {
		if f := fs.Lookup(r.name); f != nil && fs.Changed(r.name) && f.Value.String() != f.DefValue {
			return fmt.Errorf("--%s is not supported by tine's OCI runtime: %s", r.name, r.why)
		}
	}
	if c.cgroupsMode != "" && c.cgroupsMode != "ignore" {
		return fmt.Errorf("--manage-cgroups-mode %s is not supported by tine's OCI runtime: criu leaves cgroups alone, and the restored container is in the cgroup its bundle names, with its limits (use ignore, or leave it out)", c.cgroupsMode)
	}
	known := []string{"network", "ipc", "uts", "pid", "mount", "mnt", "cgroup", "user", "time"}
	for _, ns := range c.emptyNS {
		if !slices.Contains(known, ns) {
			return usageError{fmt.Sprintf("--empty-ns %q: not a namespace (want one of %v)", ns, known)}
		}
	}
	if c.imagePath == "" {
		c.imagePath = "checkpoint"
	}
	p, err := filepath.Abs(c.imagePath)
	c.imagePath = p
	return err
}

func newCheckpointCommand(rt func() *oci.Runtime, logged func(func(*cobra.Command, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	var cf criuFlags
	var o oci.CheckpointOptions
	cmd := &cobra.Command{
		Use:   "checkpoint [flags] ID",
		Short: "Dump a running container's processes with criu (then stop it, unless --leave-running)",
		Long: `checkpoint dumps the processes of a running container into --image-path
with criu, through tine's memory tier: criu runs inside the container's
namespaces and dumps its command's process tree (memory, descriptors, pids,
seccomp filters, capabilities), with its /run and /dev/shm when they are
mounts of their own, not tine's PID 1 nor the namespaces and mounts, which
restore makes anew from the bundle. The rootfs is the caller's to carry
(containerd's --rw checkpoints do). The container is killed once dumped,
unless --leave-running. Pipes and files from outside the container given as
its stdio (containerd's shim's) are handed to the restored command anew.
Not carried: a terminal (process.terminal), TCP sockets, unix sockets
connected outside, System V IPC, processes of exec.`,
		Args: cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			if err := cf.check(cmd.Flags()); err != nil {
				return err
			}
			o.ImagePath, o.WorkPath = cf.imagePath, cf.workPath
			return rt().Checkpoint(args[0], o)
		}),
	}
	cf.add(cmd.Flags())
	cmd.Flags().BoolVar(&o.LeaveRunning, "leave-running", false, "let the container run on after its checkpoint")
	return cmd
}

func newRestoreCommand(rt func() *oci.Runtime, logged func(func(*cobra.Command, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	var cf criuFlags
	var o oci.RestoreOptions
	var detach bool
	cmd := &cobra.Command{
		Use:   "restore [flags] ID",
		Short: "Make a container from a bundle and a checkpoint of tine-runc, running",
		Long: `restore makes container ID from its bundle as create does (namespaces,
cgroup, limits, walls), restores the processes of --image-path (a checkpoint
of tine-runc checkpoint) into it with criu, and starts it: its PID 1 adopts
the restored command, with the same pids, memory and descriptors, and the
container is running for state, kill, exec and delete. criu brings back each
process's seccomp filters, capabilities and no_new_privs; tine adds the
Landlock domain (criu carries none). The restored command's stdio are this
process's, where it held the checkpointed container's. With --detach it
returns once the container runs (its PID 1 in --pid-file); otherwise it
waits, exits with the container's exit code and deletes it.`,
		Args: cobra.ExactArgs(1),
		RunE: logged(func(cmd *cobra.Command, args []string) error {
			if err := cf.check(cmd.Flags()); err != nil {
				return err
			}
			o.ImagePath, o.WorkPath = cf.imagePath, cf.workPath
			r, id := rt(), args[0]
			if err := r.Restore(id, o); err != nil {
				return err
			}
			if detach {
				return nil
			}
			defer r.Delete(id, true)
			st, err := r.State(id)
			if err != nil {
				return err
			}
			return waitChild(st.Pid)
		}),
	}
	f := cmd.Flags()
	cf.add(f)
	f.StringVarP(&o.Bundle, "bundle", "b", ".", "the bundle directory (holding config.json)")
	f.StringVar(&o.PidFile, "pid-file", "", "write the container's PID 1 (host pid) to this file")
	f.StringVar(&o.ConsoleSocket, "console-socket", "", "refused: a container with a terminal cannot be checkpointed")
	f.BoolVarP(&detach, "detach", "d", false, "return once the container runs")
	f.Bool("no-subreaper", false, "accepted: tine-runc never becomes a subreaper (the container's PID 1 reaps)")
	f.Bool("no-pivot", false, "accepted; tine always pivots into the root")
	f.Bool("no-new-keyring", false, "accepted; tine makes no session keyring")
	return cmd
}

// waitChild waits for this process's child pid (a container's PID 1 it
// made) and returns its exit code as an exitError.
func waitChild(pid int) error {
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
			break
		}
	}
	if ws.ExitStatus() != 0 {
		return exitError{ws.ExitStatus()}
	}
	return nil
}

// runcArgs rewrites the single-dash long flags runc's command line (Go's
// urfave/cli) accepts and go-runc sends ("-no-subreaper") into the
// double-dash form pflag reads.
func runcArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "-no-subreaper" || a == "-no-pivot" || a == "-detach" {
			out[i] = "-" + a
		}
	}
	return out
}
