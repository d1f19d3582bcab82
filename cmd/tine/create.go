package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
)

type createFlags struct {
	memory, cpus, pids, disk  string
	rootfs, workdir, hostname string
	image                     string
	seccompMode               string
	net                       netFlags
	hostView                  string
	userns                    bool
	ttl, idle                 string
	volumes, env              []string
}

func newCreateCommand() *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a live sandbox in the daemon and print its id",
		Long: `create asks the daemon (tine serve) for a live sandbox with the same
isolation as tine run, and prints its id. Exec commands into it with
tine exec ID -- CMD; destroy it with tine rm ID, or let --ttl or
--idle-timeout do it.`,
		Example: `  id=$(tine create --memory 512m --ttl 10m)
  tine exec $id -- python3 -c 'print(1)'
  tine rm $id
  tine create --network egress --allow pypi.org --allow files.pythonhosted.org -p 8080:80`,
		Args: cobra.NoArgs,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512m or 2g (default: the daemon's --default-memory)")
	fl.StringVar(&f.cpus, "cpus", "", "CPU quota in cores, e.g. 0.5 or 2")
	fl.StringVar(&f.pids, "pids", "", "maximum number of processes and threads (default: the daemon's --default-pids)")
	fl.StringVar(&f.disk, "disk", "256m", "size of the sandbox's writable storage: the layer over the root, /tmp and /run together")
	fl.StringVar(&f.rootfs, "rootfs", "", "directory to use as the read-only root instead of the host's root")
	fl.StringVar(&f.image, "image", "", "an OCI image as the read-only root (the daemon pulls it when missing); its Env and WorkingDir apply to execs")
	fl.StringVar(&f.hostView, "host-view", "os", hostViewUsage)
	fl.BoolVar(&f.userns, "userns", false, usernsUsage)
	fl.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind HOST:GUEST[:ro] (repeatable; HOST may not be a symlink, GUEST is resolved inside the sandbox)")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "default working directory of execs (default /)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE for every exec, or KEY to pass this shell's value (repeatable)")
	fl.StringVar(&f.hostname, "hostname", "", "host name inside the sandbox (default tine)")
	fl.StringVar(&f.seccompMode, "seccomp", "default", "syscall policy: default (Docker's), strict, or unconfined")
	addNetFlags(fl, &f.net)
	fl.StringVar(&f.ttl, "ttl", "", "destroy the sandbox this long after creation, e.g. 10m")
	fl.StringVar(&f.idle, "idle-timeout", "", "destroy the sandbox after this long without an exec or file request")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		spec, err := specFromCreateFlags(f)
		if err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		sb, err := c.Create(cmd.Context(), spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
		return nil
	}
	return cmd
}

func specFromCreateFlags(f createFlags) (*api.SandboxSpec, error) {
	s := &api.SandboxSpec{RootFS: f.rootfs, Image: f.image, Workdir: f.workdir, Hostname: f.hostname, Seccomp: f.seccompMode}
	hv, err := parseHostView(f.hostView, f.rootfs)
	if err != nil {
		return nil, err
	}
	if s.Network, s.Allow, s.Deny, s.Publish, err = f.net.apply(); err != nil {
		return nil, err
	}
	if s.Inject, err = injections(f.net.inject); err != nil {
		return nil, err
	}
	s.HostView, s.UserNS = string(hv), f.userns
	if s.Limits.MemoryBytes, s.Limits.CPUs, s.Limits.Pids, err = parseLimits(f.memory, f.cpus, f.pids); err != nil {
		return nil, err
	}
	if s.DiskBytes, err = parseSize("disk", f.disk); err != nil {
		return nil, err
	}
	seconds := func(flag, v string) (int64, error) {
		d, err := parseDuration(flag, v)
		if err != nil {
			return 0, err
		}
		return int64((d + time.Second - 1) / time.Second), nil
	}
	if f.ttl != "" {
		if s.TTLSeconds, err = seconds("ttl", f.ttl); err != nil {
			return nil, err
		}
	}
	if f.idle != "" {
		if s.IdleTimeoutSeconds, err = seconds("idle-timeout", f.idle); err != nil {
			return nil, err
		}
	}
	for _, v := range f.volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
			return nil, usageError{fmt.Sprintf("invalid --volume %q: want HOST:GUEST or HOST:GUEST:ro", v)}
		}
		s.Binds = append(s.Binds, api.Bind{Source: parts[0], Target: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	}
	s.Env = envFromFlags(f.env)
	return s, nil
}

// envFromFlags turns -e values into KEY=VALUE pairs: KEY alone passes this
// process's value, when it has one.
func envFromFlags(vals []string) []string {
	var env []string
	for _, e := range vals {
		if k, _, ok := strings.Cut(e, "="); ok {
			env = append(env, e)
		} else if v, set := os.LookupEnv(k); set {
			env = append(env, k+"="+v)
		}
	}
	return env
}
