package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/sandbox"
	"golang.org/x/sys/unix"
)

// DefaultRoot is where container state lives unless --root says.
const DefaultRoot = "/run/tine-runc"

// Runtime manages the containers whose state is under Root.
type Runtime struct {
	Root string
}

// state is what Runtime keeps of a container, in Root/ID/state.json.
type state struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	StartTime   uint64            `json:"start_time"` // of Pid, in clock ticks since boot
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Started     bool              `json:"started"`
	CgroupPath  string            `json:"cgroup_path"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Stdio are criu's keys of the descriptors the command was given
	// (stdioKeys), for a checkpoint to hand over to its restore.
	Stdio [3]string `json:"stdio"`
}

// State is the runtime-spec's state of a container, with runc's extra
// fields (rootfs, created, owner) that its callers read.
type State struct {
	specs.State
	Rootfs  string    `json:"rootfs"`
	Created time.Time `json:"created"`
	Owner   string    `json:"owner"`
}

// ErrNotExist says no container has the ID.
var ErrNotExist = errors.New("container does not exist")

// validID matches a container ID; the length (at most 128) is checked
// apart, since a bounded repetition compiles at every start of the binary
// into a program as long as the bound.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

func (r *Runtime) dir(id string) (string, error) {
	if len(id) > 128 || !validID.MatchString(id) {
		return "", fmt.Errorf("container ID %q: want letters, digits and _ . + - (at most 128, starting with a letter or digit)", id)
	}
	return filepath.Join(r.Root, id), nil
}

// CreateOptions are create's flags.
type CreateOptions struct {
	Bundle        string
	PidFile       string
	ConsoleSocket string
	// PreserveFDs passes this process's descriptors 3 to 3+N-1 to the
	// container's command as its 3 to 3+N-1 (--preserve-fds).
	PreserveFDs int
}

// Create sets a container up from its bundle: its PID 1 is made, in its
// namespaces, cgroup and walls, and waits for Start. The calling process
// may exit; PID 1 outlives it (containerd's shim, a subreaper, inherits it).
func (r *Runtime) Create(id string, o CreateOptions) error {
	return r.create(id, o, nil)
}

// restoreHook is Restore's part of create: it names the restored command
// PID 1 adopts instead of forking one (sandbox.Spec.Adopt) and restores
// its tree into the created container, whose PID 1 is pid.
type restoreHook struct {
	adopt   int
	restore func(c *Container, pid int) error
}

// create makes the container; with rh it restores a checkpoint into it and
// starts it (PID 1 then adopts the restored command).
func (r *Runtime) create(id string, o CreateOptions, rh *restoreHook) (err error) {
	dir, err := r.dir(id)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("tine's OCI runtime needs root (it drives cgroups and makes the container's namespaces)")
	}
	bundle, err := filepath.Abs(o.Bundle)
	if err != nil {
		return err
	}
	c, err := LoadBundle(bundle)
	if err != nil {
		return err
	}
	if c.Spec.CgroupPath == "" {
		c.Spec.CgroupPath = "/tine-oci/" + id
	}
	if rh != nil {
		c.Spec.Adopt = rh.adopt
	}
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		return fmt.Errorf("create state root: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("container %s exists already (delete it first)", id)
		}
		return fmt.Errorf("create container state: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := checkCommand(&c.Spec); err != nil {
		return err
	}
	if err := checkOOMScore(c.Spec.OOMScoreAdj); err != nil {
		return err
	}
	for i := 0; i < o.PreserveFDs; i++ {
		f := os.NewFile(uintptr(3+i), fmt.Sprintf("preserved descriptor %d", 3+i))
		var st unix.Stat_t
		if f == nil || unix.Fstat(3+i, &st) != nil {
			return fmt.Errorf("--preserve-fds %d: descriptor %d is not open", o.PreserveFDs, 3+i)
		}
		c.Spec.ExtraFiles = append(c.Spec.ExtraFiles, f)
	}
	for t, path := range c.JoinNS {
		f, err := openNamespace(t, path)
		if err != nil {
			return err
		}
		defer f.Close()
		switch t {
		case specs.NetworkNamespace:
			c.Spec.NetNS = f
		case specs.IPCNamespace:
			c.Spec.IPCNS = f
		case specs.UTSNamespace:
			c.Spec.UTSNS = f
		}
	}
	p, err := sandbox.Start(&c.Spec)
	if err != nil {
		return err
	}
	pid := p.Pid()
	defer func() {
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
			removeGroup(c.Spec.CgroupPath)
		}
	}()
	if c.CPUShares != 0 {
		// PID 1 waits for start: the weight is there before the command.
		g, err := openGroup(c.Spec.CgroupPath)
		if err != nil {
			return err
		}
		if err := g.SetCPUShares(c.CPUShares); err != nil {
			return fmt.Errorf("linux.resources.cpu.shares: %w", err)
		}
	}
	if err := setSysctls(pid, c.Config.Linux.Sysctl); err != nil {
		return err
	}
	for _, rl := range c.Rlimits {
		if err := unix.Prlimit(pid, rl.Resource, &unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}, nil); err != nil {
			return fmt.Errorf("set rlimit %d: %w", rl.Resource, err)
		}
	}
	if c.Spec.TTY {
		if o.ConsoleSocket == "" {
			return errors.New("process.terminal is set but no --console-socket was given to send the terminal to")
		}
		if err := sendConsole(o.ConsoleSocket, p.TTY()); err != nil {
			return err
		}
	} else if o.ConsoleSocket != "" {
		return errors.New("--console-socket given, but process.terminal is not set")
	}
	st := state{ID: id, Pid: pid, StartTime: procstat.StartTime(pid), Bundle: bundle, Rootfs: c.Spec.RootFS,
		Created: time.Now().UTC(), CgroupPath: c.Spec.CgroupPath, Annotations: c.Config.Annotations, Stdio: stdioKeys()}
	if err := writeJSON(filepath.Join(dir, "state.json"), st); err != nil {
		return err
	}
	if o.PidFile != "" {
		if err := writeAtomic(o.PidFile, []byte(strconv.Itoa(pid))); err != nil {
			return fmt.Errorf("write pid file: %w", err)
		}
	}
	if err := p.Commit(); err != nil || rh == nil {
		return err
	}
	if err := rh.restore(c, pid); err != nil {
		return err
	}
	st.Started = true
	if err := writeJSON(filepath.Join(dir, "state.json"), st); err != nil {
		return err
	}
	if err := unix.Kill(pid, sandbox.StartSignal); err != nil {
		return fmt.Errorf("start the restored container %s: %w", id, err)
	}
	return nil
}

// checkCommand finds the command in the container's root before anything
// runs, so that create, not start, reports a missing one (as runc does).
func checkCommand(s *sandbox.Spec) error {
	name := s.Args[0]
	rootFD, err := unix.Open(s.RootFS, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's root %s: %w", s.RootFS, err)
	}
	defer unix.Close(rootFD)
	exists := func(p string) bool {
		fd, err := unix.Openat2(rootFD, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			return false
		}
		unix.Close(fd)
		return true
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.Workdir, p)
		}
		if exists(p) {
			return nil
		}
		return fmt.Errorf("%s: no such file in the container's root %s", name, s.RootFS)
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range s.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d != "" && exists(filepath.Join(d, name)) {
			return nil
		}
	}
	return fmt.Errorf("%s: not found in the container's PATH (%s)", name, path)
}

// sendConsole sends the terminal's master to the console socket, as runc
// does: one message holding the descriptor.
func sendConsole(socket string, tty *os.File) error {
	if tty == nil {
		return errors.New("the container has no terminal to send")
	}
	conn, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(conn)
	if err := unix.Connect(conn, &unix.SockaddrUnix{Name: socket}); err != nil {
		return fmt.Errorf("connect to console socket %s: %w", socket, err)
	}
	if err := unix.Sendmsg(conn, []byte("/dev/ptmx"), unix.UnixRights(int(tty.Fd())), nil, 0); err != nil {
		return fmt.Errorf("send the terminal on %s: %w", socket, err)
	}
	tty.Close()
	return nil
}

func (r *Runtime) load(id string) (*state, string, error) {
	dir, err := r.dir(id)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("container %s: %w", id, ErrNotExist)
	}
	if err != nil {
		return nil, "", err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, "", fmt.Errorf("container %s: corrupt state: %w", id, err)
	}
	return &st, dir, nil
}

// status reads what the container is doing now.
func (st *state) status() specs.ContainerState {
	if st.StartTime == 0 || procstat.StartTime(st.Pid) != st.StartTime || zombie(st.Pid) {
		return specs.StateStopped
	}
	if g, err := openGroup(st.CgroupPath); err == nil && g.Frozen() {
		return "paused"
	}
	if st.Started {
		return specs.StateRunning
	}
	return specs.StateCreated
}

// State reports a container's state.
func (r *Runtime) State(id string) (*State, error) {
	st, _, err := r.load(id)
	if err != nil {
		return nil, err
	}
	s := &State{State: specs.State{Version: specs.Version, ID: st.ID, Status: st.status(), Bundle: st.Bundle, Annotations: st.Annotations},
		Rootfs: st.Rootfs, Created: st.Created, Owner: "root"}
	if s.Status != specs.StateStopped {
		s.Pid = st.Pid
	}
	return s, nil
}

// Start runs the command of a created container.
func (r *Runtime) Start(id string) error {
	st, dir, err := r.load(id)
	if err != nil {
		return err
	}
	if s := st.status(); s != specs.StateCreated {
		return fmt.Errorf("container %s is %s: only a created container can be started", id, s)
	}
	st.Started = true
	if err := writeJSON(filepath.Join(dir, "state.json"), st); err != nil {
		return err
	}
	if err := unix.Kill(st.Pid, sandbox.StartSignal); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	return nil
}

// Kill sends sig to the container's PID 1 (which passes it on to the
// command), or with all to every process in its cgroup.
func (r *Runtime) Kill(id string, sig syscall.Signal, all bool) error {
	st, _, err := r.load(id)
	if err != nil {
		return err
	}
	if st.status() == specs.StateStopped {
		// "container not running" is what containerd's shim looks for
		// (checkKillError) to take a kill of an exited container as done.
		return fmt.Errorf("signal container %s: container not running", id)
	}
	if all {
		g, err := openGroup(st.CgroupPath)
		if err != nil {
			return err
		}
		for _, pid := range g.Procs() {
			unix.Kill(pid, sig)
		}
		if sig == unix.SIGKILL {
			g.Thaw() // a frozen task dies of SIGKILL only once thawed
		}
		return nil
	}
	if err := unix.Kill(st.Pid, sig); err != nil {
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	if sig == unix.SIGKILL {
		if g, err := openGroup(st.CgroupPath); err == nil {
			g.Thaw()
		}
	}
	return nil
}

// Delete removes a stopped or created container (any with force): its
// processes, its cgroup and its state.
func (r *Runtime) Delete(id string, force bool) error {
	st, dir, err := r.load(id)
	if err != nil {
		return err
	}
	switch s := st.status(); s {
	case specs.StateStopped, specs.StateCreated:
	default:
		if !force {
			return fmt.Errorf("container %s is %s: stop it first, or delete it with --force", id, s)
		}
	}
	if st.status() != specs.StateStopped {
		unix.Kill(st.Pid, unix.SIGKILL)
	}
	if err := removeGroup(st.CgroupPath); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// Ps lists the pids of a container's processes.
func (r *Runtime) Ps(id string) ([]int, error) {
	st, _, err := r.load(id)
	if err != nil {
		return nil, err
	}
	g, err := openGroup(st.CgroupPath)
	if err != nil {
		return nil, err
	}
	return g.Procs(), nil
}

// Pause freezes every process of a running container; Resume thaws them.
func (r *Runtime) Pause(id string) error  { return r.freeze(id, true) }
func (r *Runtime) Resume(id string) error { return r.freeze(id, false) }

func (r *Runtime) freeze(id string, frozen bool) error {
	st, _, err := r.load(id)
	if err != nil {
		return err
	}
	s := st.status()
	if frozen && s != specs.StateRunning || !frozen && s != "paused" {
		return fmt.Errorf("container %s is %s", id, s)
	}
	g, err := openGroup(st.CgroupPath)
	if err != nil {
		return err
	}
	if frozen {
		return g.Freeze()
	}
	return g.Thaw()
}

// List returns the states of every container under Root.
func (r *Runtime) List() ([]*State, error) {
	entries, err := os.ReadDir(r.Root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*State
	for _, e := range entries {
		if s, err := r.State(e.Name()); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

func openGroup(path string) (*cgroup.Group, error) {
	h, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	return h.OpenAt(path)
}

// removeGroup kills what is left in the container's cgroup and removes it.
func removeGroup(path string) error {
	g, err := openGroup(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	g.Kill()
	if err := g.Remove(); err != nil {
		return fmt.Errorf("remove the container's cgroup: %w", err)
	}
	return nil
}

func zombie(pid int) bool {
	s := procstat.State(pid)
	return s == "Z" || s == "X"
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(path, b)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ExecOptions are exec's flags.
type ExecOptions struct {
	// Detach leaves the process running when exec returns (the shim's
	// way): PidFile gets its pid, and whoever inherits it reaps it.
	Detach        bool
	PidFile       string
	ConsoleSocket string
}

// Exec runs process p in a running container, behind the container's
// walls. Without Detach it waits and returns the process's exit code.
func (r *Runtime) Exec(id string, p *specs.Process, o ExecOptions) (int, error) {
	st, _, err := r.load(id)
	if err != nil {
		return 0, err
	}
	if s := st.status(); s != specs.StateRunning {
		return 0, fmt.Errorf("container %s is %s: exec needs a running container", id, s)
	}
	c, err := LoadBundle(st.Bundle)
	if err != nil {
		return 0, err
	}
	c.Spec.CgroupPath = st.CgroupPath
	if len(p.Args) == 0 {
		return 0, errors.New("exec: no command given")
	}
	if p.User.Umask != nil {
		return 0, fmt.Errorf("exec: process.user.umask: %w", ErrUnsupported)
	}
	// The exec's process says who it runs as, root included.
	c.Spec.User = nil
	if u := p.User; u.UID != 0 || u.GID != 0 || len(u.AdditionalGids) > 0 {
		c.Spec.User = &sandbox.User{UID: u.UID, GID: u.GID, Groups: u.AdditionalGids}
	}
	if p.Capabilities != nil {
		if err := sameCaps(p.Capabilities); err != nil {
			return 0, err
		}
		if c.Spec.User != nil && c.Spec.User.UID != 0 && len(p.Capabilities.Ambient) > 0 {
			return 0, fmt.Errorf("exec: process.capabilities.ambient for user %d (a non-root command gets no capabilities): %w", c.Spec.User.UID, ErrUnsupported)
		}
		c.Spec.Capabilities = p.Capabilities.Bounding
	}
	sb, err := sandbox.Join(&c.Spec, st.Pid)
	if err != nil {
		return 0, err
	}
	defer sb.Close()
	if p.Terminal && o.ConsoleSocket == "" && o.Detach {
		return 0, errors.New("a detached exec with a terminal needs --console-socket")
	}
	proc, err := sb.Exec(&sandbox.ExecSpec{Args: p.Args, Env: p.Env, Workdir: p.Cwd, TTY: p.Terminal, Detach: o.Detach,
		Stdio: [3]*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		return 0, err
	}
	if p.Terminal && o.ConsoleSocket != "" {
		if err := sendConsole(o.ConsoleSocket, proc.TTY()); err != nil {
			proc.Signal(unix.SIGKILL)
			return 0, err
		}
	}
	if !o.Detach {
		out, err := proc.Wait()
		if err != nil {
			return 0, err
		}
		return out.ExitCode, nil
	}
	if o.PidFile != "" {
		if err := writeAtomic(o.PidFile, []byte(strconv.Itoa(proc.Pid()))); err != nil {
			proc.Signal(unix.SIGKILL)
			return 0, fmt.Errorf("write pid file: %w", err)
		}
	}
	return 0, proc.Commit()
}

// nsTypes are the setns(2) types of the namespaces a container may join.
var nsTypes = map[specs.LinuxNamespaceType]int{specs.NetworkNamespace: unix.CLONE_NEWNET, specs.IPCNamespace: unix.CLONE_NEWIPC, specs.UTSNamespace: unix.CLONE_NEWUTS}

// openNamespace opens the namespace of type t at path (a bind-mounted one,
// or /proc/PID/ns/...), refusing anything else, a namespace of another
// type included.
func openNamespace(t specs.LinuxNamespaceType, path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s namespace %s: %w", t, path, err)
	}
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil || st.Type != unix.NSFS_MAGIC {
		f.Close()
		return nil, fmt.Errorf("%s is not a namespace (want a bind-mounted one or /proc/PID/ns/%s)", path, nsFile[t])
	}
	if got, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || got != nsTypes[t] {
		f.Close()
		return nil, fmt.Errorf("%s: not a namespace of type %s", path, t)
	}
	return f, nil
}

// Update changes a live container's resources (runc update): the limits
// tine enforces are set on its cgroup, anything else is refused, as at
// create. A limit left out (zero) stays as it is.
func (r *Runtime) Update(id string, res *specs.LinuxResources) error {
	st, _, err := r.load(id)
	if err != nil {
		return err
	}
	if s := st.status(); s == specs.StateStopped {
		return fmt.Errorf("container %s is stopped", id)
	}
	if c := res.CPU; c != nil && c.Quota != nil && *c.Quota < 0 || res.Memory != nil && res.Memory.Limit != nil && *res.Memory.Limit < 0 {
		return fmt.Errorf("update: lifting a cpu quota or memory limit (-1): %w", ErrUnsupported)
	}
	lim, err := limits(res, func(format string, a ...any) error {
		return fmt.Errorf("update: %s: %w", fmt.Sprintf(format, a...), ErrUnsupported)
	})
	if err != nil {
		return err
	}
	g, err := openGroup(st.CgroupPath)
	if err != nil {
		return err
	}
	if err := g.SetLimits(lim); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if res.CPU != nil && res.CPU.Shares != nil && *res.CPU.Shares != 0 {
		if err := g.SetCPUShares(*res.CPU.Shares); err != nil {
			return fmt.Errorf("update container %s: cpu shares: %w", id, err)
		}
	}
	return nil
}
