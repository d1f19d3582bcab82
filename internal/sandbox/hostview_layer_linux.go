package sandbox

// The os view's layer made once on the host: the plan still lists the
// view's entries as steps in the stage's view directory (stage/view, what
// the plan's replay and its tests see), but PID 1, instead of making them
// one by one on every run (~150 mkdirs, chowns, chmods and setxattrs, a
// tenth of a run's CPU: ADR 0023), bind-mounts a directory that holds
// exactly those entries over stage/view. The directory is made once per
// distinct view, by root, under /run/tine/views (or /dev/shm/tine-views,
// see viewLayersDirs), named by a hash of its
// entries and never changed once made (built aside, then renamed into
// place), so a sandbox whose overlay stacks it never sees it change. It is
// only ever a lower layer: an overlay writes to its upper, and PID 1's
// bind of it is private and detached with the old root.
//
// A layer in use is locked: the process that plans a sandbox on it (the
// CLI of a run, the daemon) holds a shared flock on the layer's directory
// until it exits, which is as long as its sandboxes live (they die with
// it). `tine gc` removes only the layers it can lock exclusively, so no
// overlay ever has a lower layer removed under it (RemoveUnusedViewLayers).
// PID 1 closes the lock's descriptor with every other one it does not need:
// no host directory is reachable from a sandbox.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// viewLayersDirs are where the made view layers may be kept, in order of
// preference. A layer must not be on the host root's filesystem: the
// overlay stacks that root too, and refuses layers that overlap (ELOOP).
// /run is a tmpfs on most hosts; where it is not, /dev/shm is one.
var viewLayersDirs = []string{path.Dir(StageDir) + "/views", "/dev/shm/tine-views"}

// viewLayersDir returns the directory that holds the view layers, made if
// needed: the first of viewLayersDirs off the root's filesystem, a
// directory root owns that no one else can write; "" when there is none.
var viewLayersDir = sync.OnceValue(func() string {
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		return ""
	}
	for _, dir := range viewLayersDirs {
		var parent unix.Stat_t
		if err := unix.Stat(path.Dir(dir), &parent); err != nil || parent.Dev == root.Dev {
			continue
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 || st.Dev == root.Dev {
			continue
		}
		return dir
	}
	return ""
})

// viewSteps returns the plan's entries of the os view's layer (StepUpper
// steps beneath stage/view), in order.
func viewSteps(p *Plan) []Step {
	prefix := p.Stage + "/view/"
	var steps []Step
	for i, st := range p.Steps {
		if st.Kind == StepUpper && strings.HasPrefix(st.Target, prefix) && !st.InNetns && i >= p.RootSteps {
			steps = append(steps, st)
		}
	}
	return steps
}

// viewLayerKey names a layer of steps: a hash of every entry's path
// (below stage/view), mode, owner and xattr.
func viewLayerKey(stage string, steps []Step) string {
	b := make([]byte, 0, 64*len(steps))
	for _, st := range steps {
		b = append(b, strings.TrimPrefix(st.Target, stage+"/view")...)
		b = append(b, 0)
		b = strconv.AppendUint(b, uint64(st.Mode), 8)
		b = append(b, 0)
		b = strconv.AppendUint(b, uint64(st.UID), 10)
		b = append(b, 0)
		b = strconv.AppendUint(b, uint64(st.GID), 10)
		b = append(b, 0)
		b = append(b, st.Data...)
		b = append(b, '\n')
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// preparedViewLayer returns the host directory that holds p's os view
// entries, making it if it does not exist yet; "" when the plan has none,
// when tine is not root, or when it cannot be made (PID 1 then makes the
// entries itself, as before).
func preparedViewLayer(p *Plan, in inputs) string {
	if in.userns || p.Rootless || os.Geteuid() != 0 {
		return ""
	}
	steps := viewSteps(p)
	if len(steps) == 0 {
		return ""
	}
	layers := viewLayersDir()
	if layers == "" {
		return ""
	}
	dir := layers + "/" + viewLayerKey(p.Stage, steps)
	// Held if it exists (and is not being removed by a gc), else made and
	// held; a gc that removes it again meanwhile leaves PID 1 to make the
	// entries itself.
	if holdViewLayer(dir) {
		return dir
	}
	if err := makeViewLayer(layers, dir, p.Stage+"/view", steps); err != nil || !holdViewLayer(dir) {
		return ""
	}
	return dir
}

// heldViewLayers are the layers this process holds a shared lock on, by
// directory: one descriptor each, for the life of the process.
var heldViewLayers sync.Map

// holdViewLayer takes this process's shared lock on the layer dir, once;
// false when dir is gone or was replaced by the time the lock was taken (a
// gc removed it).
func holdViewLayer(dir string) bool {
	if _, ok := heldViewLayers.Load(dir); ok {
		return true
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false // not there (yet)
	}
	// Blocks only while a gc holds its exclusive lock, to remove the layer.
	var held, named unix.Stat_t
	if unix.Flock(fd, unix.LOCK_SH) != nil || unix.Fstat(fd, &held) != nil ||
		unix.Lstat(dir, &named) != nil || held.Dev != named.Dev || held.Ino != named.Ino {
		unix.Close(fd)
		return false
	}
	if _, loaded := heldViewLayers.LoadOrStore(dir, fd); loaded {
		unix.Close(fd) // another goroutine's lock came first
	}
	return true
}

// RemoveUnusedViewLayers removes the os view layers no running tine holds
// (see holdViewLayer) and returns their paths. A layer being made is left
// to its maker; one whose maker died is removed.
func RemoveUnusedViewLayers() ([]string, error) {
	var removed []string
	var errs []error
	for _, layers := range viewLayersDirs {
		entries, err := os.ReadDir(layers)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		removeStaleBuilds(layers)
		for _, e := range entries {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			dir := layers + "/" + e.Name()
			ok, err := removeViewLayer(layers, dir)
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				removed = append(removed, dir)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeViewLayer removes dir unless a tine holds it: under an exclusive
// lock it is first renamed out of the way (a tine looking for it then makes
// a new one; one waiting for its lock finds the name gone and looks again),
// then removed. false when it is in use.
func removeViewLayer(layers, dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open view layer %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("lock view layer %s: %w", dir, err)
	}
	trash := fmt.Sprintf("%s/.tmp-%d-%d", layers, os.Getpid(), time.Now().UnixNano())
	if err := os.Rename(dir, trash); err != nil {
		return false, fmt.Errorf("remove view layer %s: %w", dir, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return false, fmt.Errorf("remove view layer %s: %w", dir, err)
	}
	return true, nil
}

// makeViewLayer makes dir (in layers) with steps' entries (targets below stage), built
// in a directory beside it and renamed into place, so that dir, once it
// exists, is whole. Another tine making the same layer at once is fine:
// the first rename wins, the other's copy is removed.
func makeViewLayer(layers, dir, stage string, steps []Step) error {
	removeStaleBuilds(layers)
	tmp := fmt.Sprintf("%s/.tmp-%d-%d", layers, os.Getpid(), time.Now().UnixNano())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	for _, st := range steps {
		if err := makeViewEntry(tmp+strings.TrimPrefix(st.Target, stage), st); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil // made meanwhile by another tine
		}
		return err
	}
	return nil
}

// makeViewEntry makes one entry as PID 1's upperOps does: the directory or
// empty file, its owner when it is not root (else it keeps the group a
// set-gid parent gives, as there), then its exact mode (a chown clears
// set-id bits, this process's umask applies to mkdir), then the opaque
// xattr.
func makeViewEntry(target string, st Step) error {
	perm := st.Mode & 0o7777
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = unix.Mkdir(target, perm)
	} else {
		err = unix.Mknod(target, unix.S_IFREG|perm, 0)
	}
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("make %s: %w", target, err)
	}
	if st.UID != 0 || st.GID != 0 {
		if err := unix.Lchown(target, int(st.UID), int(st.GID)); err != nil {
			return fmt.Errorf("chown %s: %w", target, err)
		}
	}
	if err := unix.Chmod(target, perm); err != nil {
		return fmt.Errorf("chmod %s: %w", target, err)
	}
	if st.Data != "" {
		if err := unix.Lsetxattr(target, st.Data, []byte("y"), 0); err != nil {
			return fmt.Errorf("mark %s %s: %w", target, st.Data, err)
		}
	}
	return nil
}

// removeStaleBuilds removes what tines that died while making a layer
// left in layers (.tmp-PID-…, PID no longer running). A PID in use again
// keeps its directory until it, too, is gone.
func removeStaleBuilds(layers string) {
	entries, err := os.ReadDir(layers)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), ".tmp-")
		if !ok {
			continue
		}
		digits, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			os.RemoveAll(layers + "/" + e.Name())
		}
	}
}
