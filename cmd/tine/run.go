package main

import (
	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/runcli"
	"github.com/tine-run/tine/internal/sandbox"
)

// run's flags: runcli's and the image ones.
type runFlags struct {
	core runcli.Flags
	img  runImageFlags
}

// What tine create shares with tine run.
const (
	hostViewUsage = runcli.HostViewUsage
	usernsUsage   = runcli.UsernsUsage
)

var parseHostView = runcli.ParseHostView

// runLong is run's help; tine-run gives the same (it asks tine for it).
const runLong = `Run a command once in a fresh sandbox and exit with its exit code.

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
cannot be executed; 2 for invalid flags; 1 when the sandbox could not be set up.`

func newRunCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]   (with --image the command may be left out)",
		Short: "Run a command once in a fresh sandbox",
		Long:  runLong,
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
			return runcli.Run(f.core, args, func(s *sandbox.Spec) (func(), error) {
				return f.img.apply(s, true)
			})
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	f.core.Register(fl)
	f.img.register(cmd)
	return cmd
}
