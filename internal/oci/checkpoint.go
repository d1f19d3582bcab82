package oci

// runc's checkpoint and restore, through tine's memory tier
// (internal/checkpoint, ADR 0016): criu runs inside the container's
// namespaces and dumps the command's process tree, not tine's PID 1 nor
// the namespaces and mounts, which a restore makes anew from the bundle
// as create does; the restored command is then adopted by the new PID 1
// (sandbox.Spec.Adopt) instead of one forked.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/tine-run/tine/internal/checkpoint"
	"github.com/tine-run/tine/internal/sandbox"
	"golang.org/x/sys/unix"
)

// imageName is tine-runc's own file among the criu images.
const imageName = "tine-oci.json"

// imageVersion is the version of imageName this code writes: 2 since the
// image directory is flat (flat.go).
const imageVersion = 2

// image is what a restore needs besides criu's images.
type image struct {
	Version int `json:"version"`
	// Command is the command's pid in the container: the tree the
	// restored container's PID 1 adopts and waits for.
	Command int `json:"command"`
	// Stdio are criu's keys of the descriptors the container's command
	// was given as stdin, stdout and stderr when they came from outside it
	// (containerd's shim's pipes, a file, the host's /dev/null), "" when
	// not: a restore hands its own stdio in their place.
	Stdio [3]string `json:"stdio"`
}

// CheckpointOptions are checkpoint's flags tine honours.
type CheckpointOptions struct {
	// ImagePath is the directory the images go to (made if missing; it
	// must be empty).
	ImagePath string
	// WorkPath, when set, gets criu's error as dump.log (containerd's shim
	// copies it into the bundle when a checkpoint fails).
	WorkPath string
	// LeaveRunning lets the container run on; otherwise it is killed once
	// dumped, as runc does.
	LeaveRunning bool
}

// Checkpoint dumps a running container's processes into o.ImagePath.
func (r *Runtime) Checkpoint(id string, o CheckpointOptions) (err error) {
	defer func() { writeWorkLog(o.WorkPath, "dump.log", err) }()
	st, _, err := r.load(id)
	if err != nil {
		return err
	}
	s := st.status()
	if s != specs.StateRunning && s != "paused" {
		return fmt.Errorf("container %s is %s: only a running or paused container can be checkpointed", id, s)
	}
	tier := checkpoint.New()
	if err := tier.Usable(); err != nil {
		return err
	}
	if err := emptyDir(o.ImagePath); err != nil {
		return err
	}
	sb, err := joinContainer(st.Bundle, st.CgroupPath, st.Pid)
	if err != nil {
		return err
	}
	defer sb.Close()
	if sb.Spec().TTY {
		return fmt.Errorf("container %s has a terminal (process.terminal): its master is the shim's, outside the container, which criu cannot carry; checkpoint containers without one: %w", id, ErrUnsupported)
	}
	cmd, err := firstChild(st.Pid)
	if err != nil {
		return err
	}
	img := image{Version: imageVersion, Stdio: st.Stdio}
	if img.Command, err = nsPid(cmd); err != nil {
		return err
	}
	var external []string
	for _, k := range st.Stdio {
		if strings.HasPrefix(k, "file[") {
			external = append(external, k)
		}
	}
	if s == "paused" {
		// ctr checkpoint pauses first. criu cannot seize frozen processes,
		// and runc's way (criu's freeze-cgroup) would seize tine's PID 1
		// too, which is not dumped: the container is thawed for criu,
		// which stops its processes itself, and frozen again after.
		// Until criu has stopped them they run on (milliseconds).
		if err := sb.Thaw(); err != nil {
			return err
		}
	}
	stage := filepath.Join(o.ImagePath, stageName)
	defer os.RemoveAll(stage)
	d, err := tier.DumpWith(sb, stage, checkpoint.Options{External: external})
	stopped := false // killed after its checkpoint: never frozen again
	defer func() {
		if s == "paused" && !stopped {
			// First: the processes continue paused. Not a killed
			// container: on v1 a frozen task does not die of SIGKILL
			// until thawed, so it would stay frozen, dying, for good.
			sb.Freeze()
		}
		d.Resume() // what the dump left stopped
	}()
	if err != nil {
		return err
	}
	if err := flatten(stage, o.ImagePath); err != nil {
		return fmt.Errorf("write the checkpoint: %w", err)
	}
	if err := writeJSON(filepath.Join(o.ImagePath, imageName), img); err != nil {
		return fmt.Errorf("write the checkpoint: %w", err)
	}
	if !o.LeaveRunning {
		// runc's default: the container ends with its checkpoint.
		if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
			return fmt.Errorf("stop container %s after its checkpoint: %w", id, err)
		}
		stopped = true
	}
	return nil
}

// RestoreOptions are restore's flags tine honours.
type RestoreOptions struct {
	// Bundle, PidFile and ConsoleSocket as for create.
	CreateOptions
	// ImagePath holds a checkpoint made by tine-runc checkpoint.
	ImagePath string
	// WorkPath, when set, gets criu's error as restore.log.
	WorkPath string
}

// Restore makes container id from its bundle, as create does, restores
// the checkpoint in o.ImagePath into it and starts it: its PID 1 adopts
// the restored command, whose stdio are this process's own.
func (r *Runtime) Restore(id string, o RestoreOptions) (err error) {
	defer func() { writeWorkLog(o.WorkPath, "restore.log", err) }()
	img, err := readImage(o.ImagePath)
	if err != nil {
		return err
	}
	tier := checkpoint.New()
	if err := tier.Usable(); err != nil {
		return err
	}
	stage := filepath.Join(o.ImagePath, stageName)
	os.RemoveAll(stage) // a failed restore's
	defer os.RemoveAll(stage)
	if err := unflatten(o.ImagePath, stage); err != nil {
		return fmt.Errorf("read the checkpoint: %w", err)
	}
	m, err := checkpoint.ReadManifest(stage)
	if err != nil {
		return err
	}
	if len(m.Trees) == 0 || m.Trees[0].Root != img.Command {
		return fmt.Errorf("the checkpoint in %s does not hold the container's command (pid %d)", o.ImagePath, img.Command)
	}
	if o.ConsoleSocket != "" {
		return fmt.Errorf("restore --console-socket: a container with a terminal cannot be checkpointed by tine-runc: %w", ErrUnsupported)
	}
	bundle, err := filepath.Abs(o.Bundle)
	if err != nil {
		return err
	}
	return r.create(id, o.CreateOptions, &restoreHook{adopt: img.Command, restore: func(c *Container, pid int) error {
		sb, err := joinContainer(bundle, c.Spec.CgroupPath, pid)
		if err != nil {
			return err
		}
		defer sb.Close()
		var inherit []checkpoint.Inherit
		for fd, key := range img.Stdio {
			if key != "" {
				inherit = append(inherit, checkpoint.Inherit{Key: key, File: []*os.File{os.Stdin, os.Stdout, os.Stderr}[fd]})
			}
		}
		_, err = tier.RestoreWith(sb, stage, checkpoint.Options{Inherit: inherit})
		return err
	}})
}

// joinContainer is a handle on the container made from bundle whose PID 1
// is pid.
func joinContainer(bundle, cgroupPath string, pid int) (*sandbox.Sandbox, error) {
	c, err := LoadBundle(bundle)
	if err != nil {
		return nil, err
	}
	c.Spec.CgroupPath = cgroupPath
	return sandbox.Join(&c.Spec, pid)
}

func readImage(dir string) (*image, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no checkpoint made by tine-runc (no %s): tine restores only its own checkpoints, whose images hold processes, not the namespaces and mounts runc's hold", dir, imageName)
	}
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint: %w", err)
	}
	var img image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("the checkpoint's %s: %w", imageName, err)
	}
	if img.Version != imageVersion {
		return nil, fmt.Errorf("the checkpoint's %s has version %d; this tine-runc reads %d", imageName, img.Version, imageVersion)
	}
	if img.Command < 2 {
		return nil, fmt.Errorf("the checkpoint's %s names command pid %d", imageName, img.Command)
	}
	return &img, nil
}

// emptyDir makes dir if missing and refuses one holding anything.
func emptyDir(dir string) error {
	if dir == "" {
		return errors.New("checkpoint: no --image-path")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the images directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("the images directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("the images directory %s is not empty (it holds %s): give an empty or new one", dir, entries[0].Name())
	}
	return nil
}

// writeWorkLog leaves err in criu's work directory, where runc's callers
// look for criu's log when a checkpoint or restore fails.
func writeWorkLog(dir, name string, err error) {
	if dir == "" || err == nil {
		return
	}
	if os.MkdirAll(dir, 0o700) == nil {
		os.WriteFile(filepath.Join(dir, name), []byte(err.Error()+"\n"), 0o600)
	}
}

// firstChild is the host pid of pid's first child: a container's PID 1
// forks its command first (and a restored one adopts it first), and the
// kernel lists children in the order they came.
func firstChild(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, fmt.Errorf("find the container's command: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("the container's command has exited: nothing to checkpoint")
	}
	return strconv.Atoi(f[0])
}

// nsPid is host process pid's pid in its own pid namespace.
func nsPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("the container's command: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return 0, fmt.Errorf("process %d: no NSpid in its status", pid)
}

// stdioKeys are criu's keys of this process's stdin, stdout and stderr,
// which a container created now gets: "pipe:[INODE]" for a pipe,
// "file[MNTID:INODE]" (hex) for a file, "" for anything else (a socket, a
// descriptor that is not open), which criu handles or refuses itself.
func stdioKeys() (keys [3]string) {
	for fd := range 3 {
		link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			continue
		}
		if strings.HasPrefix(link, "pipe:[") {
			keys[fd] = link
			continue
		}
		if !strings.HasPrefix(link, "/") {
			continue // socket:[…], anon_inode:…
		}
		var stx unix.Statx_t
		if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_MNT_ID, &stx) != nil {
			continue
		}
		keys[fd] = fmt.Sprintf("file[%x:%x]", stx.Mnt_id, stx.Ino)
	}
	return keys
}
