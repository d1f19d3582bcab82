package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// opts are the criu options every dump and restore share.
func opts() *rpc.CriuOpts {
	return &rpc.CriuOpts{
		ImagesDirFd: proto.Int32(-1),
		ImagesDir:   proto.String("/proc/self/fd/" + strconv.Itoa(fdImages)),
		// The trees' sessions began with a launch whose shell is gone (or
		// outside them): they are restored into criu's.
		ShellJob: proto.Bool(true),
		// Established connections are not carried (docs/snapshots.md).
		TcpClose: proto.Bool(true),
		// The replica's cgroup is made by tine: criu leaves cgroups alone
		// and the restored processes are born in criu's, the replica's.
		ManageCgroupsMode: rpc.CriuCgMode_IGNORE.Enum(),
		FileLocks:         proto.Bool(true),
		LogToStderr:       proto.Bool(true),
		LogLevel:          proto.Int32(2),
	}
}

// Dump checkpoints every process tree under sb's PID 1 into dir (which it
// creates) and leaves them stopped (SIGSTOP, criu's leave-stopped), with
// the sandbox's tmpfs directories copied as they left them: the caller
// captures the rest of the files and then calls Resume, so files and
// memory are of one instant. A sandbox with no process but PID 1 dumps to
// an empty manifest. On error nothing stays stopped.
func (t *Tier) Dump(sb Sandbox, dir string) (*Dumped, error) {
	return t.DumpWith(sb, dir, Options{})
}

// DumpWith is Dump with o's external files.
func (t *Tier) DumpWith(sb Sandbox, dir string, o Options) (_ *Dumped, err error) {
	if err := t.Usable(); err != nil {
		return nil, err
	}
	pid1 := sb.Pid()
	roots, err := children(pid1)
	if err != nil {
		return nil, fmt.Errorf("list the sandbox's processes: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the images directory: %w", err)
	}
	// criu caches what it learnt of the kernel in /run/criu.kdat, which is
	// the sandbox's /run here: a file the tenant could have written. The
	// dump's criu probes afresh; its cache goes with the images (a
	// restoring criu in a Landlock domain cannot probe: the probes mount).
	unlinkInRoot(pid1, kdatPath)
	m := &Manifest{Version: FormatVersion}
	out := &Dumped{}
	defer func() {
		if err != nil {
			out.Resume()
		}
	}()
	for i, root := range roots {
		tree := Tree{Dir: fmt.Sprintf("tree-%d", i)}
		if tree.Root, err = nsPid(root, ""); errors.Is(err, os.ErrNotExist) {
			continue // it ended since PID 1 was asked: nothing to dump
		} else if err != nil {
			return nil, err
		}
		var host []int
		if tree.Pids, host, tree.Top, err = treePids(root); err != nil {
			return nil, err
		}
		// Held before the dump, to continue them after: not the ones
		// stopped already (by their own job control), which stay so.
		out.stopped = append(out.stopped, pidfdsOfRunning(host)...)
		if err := t.dumpTree(sb, tree, filepath.Join(dir, tree.Dir), o.External); err != nil {
			return nil, err
		}
		// The tree ran until criu stopped it: what it forked meanwhile is
		// in the images, stopped too. Listed again now that nothing in it
		// runs, so the restore keeps those pids free (criu's helpers would
		// take them: "Can't fork for N: File exists") and Resume
		// continues them.
		var after []int
		if tree.Pids, after, tree.Top, err = treePids(root); err != nil {
			return nil, err
		}
		var forked []int
		for _, pid := range after {
			if !slices.Contains(host, pid) {
				forked = append(forked, pid)
			}
		}
		out.stopped = append(out.stopped, pidfdsOf(forked)...)
		m.Trees = append(m.Trees, tree)
		out.Processes += len(tree.Pids)
	}
	if len(roots) > 0 {
		kdat, err := readInRoot(pid1, kdatPath, 1<<20)
		unlinkInRoot(pid1, kdatPath)
		if errors.Is(err, os.ErrNotExist) {
			kdat, err = t.freshKdat()
		}
		if err != nil {
			return nil, fmt.Errorf("keep criu's kernel cache: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, kdatName), kdat, 0o600); err != nil {
			return nil, fmt.Errorf("keep criu's kernel cache: %w", err)
		}
		// The sandbox's tmpfs directories are not in its file layer, and
		// the processes may hold files (or sockets bound) there.
		if m.Tmpfs, err = saveTmpfs(pid1, filepath.Join(dir, tmpfsDir)); err != nil {
			return nil, err
		}
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestName), b, 0o600); err != nil {
		return nil, fmt.Errorf("write the images manifest: %w", err)
	}
	out.Bytes, err = dirBytes(dir)
	return out, err
}

// freshKdat is criu's kernel cache for a sandbox whose /run is no tmpfs,
// where criu keeps none ("Can't keep kdat cache on non-tempfs"): an OCI
// container's under containerd's CRI plugin, which mounts no /run. criu
// check runs on the host, from an OS thread with a mount namespace of its
// own and a fresh tmpfs at /run (the host's may be no tmpfs either, and
// is not written), where its cache is read before the thread ends.
func (t *Tier) freshKdat() ([]byte, error) {
	type result struct {
		kdat []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, and its mount namespace, end with
		// this goroutine. What it forks (criu) starts in that namespace.
		runtime.LockOSThread()
		kdat, err := func() ([]byte, error) {
			if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
				return nil, fmt.Errorf("unshare a mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return nil, fmt.Errorf("make the mounts private: %w", err)
			}
			if err := unix.Mount("tine-criu-kdat", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,mode=0700"); err != nil {
				return nil, fmt.Errorf("mount a tmpfs at /run: %w", err)
			}
			if out, err := exec.Command(t.criu.criu, "check").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("criu check: %v: %s", err, logTail(string(out), 5))
			}
			return os.ReadFile(kdatPath)
		}()
		done <- result{kdat, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, fmt.Errorf("the sandbox's /run is no tmpfs, where criu keeps its kernel cache; making one on the host: %w", r.err)
	}
	return r.kdat, nil
}

// dumpTree runs one criu dump, which leaves the tree stopped.
func (t *Tier) dumpTree(sb Sandbox, tree Tree, dir string, external []string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create the images directory: %w", err)
	}
	images, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer images.Close()
	s, err := t.start(sb, images, nil, nil)
	if err != nil {
		return err
	}
	o := opts()
	o.External = external
	o.Pid = proto.Int32(int32(tree.Root))
	o.LeaveStopped = proto.Bool(true)
	// Deleted files still open are kept in the images up to this size.
	o.GhostLimit = proto.Uint32(64 << 20)
	if _, err := s.call(rpc.CriuReqType_DUMP, o, false); err != nil {
		return fmt.Errorf("dump process %d of the sandbox: %w", tree.Root, err)
	}
	if err := s.close(); err != nil {
		return fmt.Errorf("%w: %w", ErrCRIU, err)
	}
	return nil
}

// start starts criu in sb's namespaces (startCRIU) while none of sb's
// processes runs, and returns once criu answered a first request: criu's
// loader, running as root before criu's own code, reads
// /etc/ld.so.preload in the sandbox's mount namespace and would load what
// it names, so that file must be absent and stay absent until criu runs.
func (t *Tier) start(sb Sandbox, images *os.File, wall func() error, extra []*os.File) (*session, error) {
	if err := sb.Freeze(); err != nil {
		return nil, fmt.Errorf("freeze the sandbox while criu starts: %w", err)
	}
	defer sb.Thaw()
	if err := refuseLoaderFiles(sb.Pid()); err != nil {
		return nil, err
	}
	s, err := startCRIU(t.criu, sb.Pid(), images, wall, extra)
	if err != nil {
		return nil, err
	}
	if _, err := s.call(rpc.CriuReqType_VERSION, nil, true); err != nil {
		return nil, err
	}
	return s, nil
}

// loaderFiles are files of a sandbox's root that criu's dynamic loader
// reads (--inhibit-cache keeps it from ld.so.cache).
var loaderFiles = []string{"/etc/ld.so.preload"}

// refuseLoaderFiles refuses a sandbox whose root holds a loaderFile, or
// a path to one that cannot be told apart (a loop, a magic link).
func refuseLoaderFiles(pid1 int) error {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid1), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	for _, f := range loaderFiles {
		// Resolved as the loader does, symlinks followed, in the root.
		fd, err := unix.Openat2(root, f, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err == nil {
			unix.Close(fd)
		}
		return fmt.Errorf("%w: the sandbox has %s, which criu's loader would load into criu, a process running as root outside the sandbox's walls: remove it before a checkpoint (%v)", ErrRefused, f, err)
	}
	return nil
}

// pidfdsOfRunning opens pidfds of the processes of pids that are not
// stopped (state T) now.
func pidfdsOfRunning(pids []int) []int {
	var running []int
	for _, pid := range pids {
		if s := procstat.State(pid); s == "" || s == "T" {
			continue
		}
		running = append(running, pid)
	}
	return pidfdsOf(running)
}

// pidfdsOf opens pidfds of pids (those still there).
func pidfdsOf(pids []int) []int {
	var fds []int
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// Resume continues the processes Dump left stopped. It is safe to call
// more than once, and on nil.
func (d *Dumped) Resume() {
	if d == nil {
		return
	}
	d.once.Do(func() {
		for _, fd := range d.stopped {
			unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0)
			unix.Close(fd)
		}
	})
}

// Restore restores the trees dumped into dir into sb, a live sandbox made
// from the same snapshot's files: each tree keeps its pids in sb's pid
// namespace, where its PID 1 adopts it, and is born in sb's cgroup.
func (t *Tier) Restore(sb Sandbox, dir string) (*Restored, error) {
	return t.RestoreWith(sb, dir, Options{})
}

// RestoreWith is Restore with o's inherited descriptors.
func (t *Tier) RestoreWith(sb Sandbox, dir string, o Options) (*Restored, error) {
	if err := t.Usable(); err != nil {
		return nil, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	out := &Restored{}
	if len(m.Trees) == 0 {
		return out, nil
	}
	t0 := time.Now()
	kdat, err := os.ReadFile(filepath.Join(dir, kdatName))
	if err != nil {
		return nil, fmt.Errorf("the memory images: %w", err)
	}
	if err := writeInRoot(sb.Pid(), kdatPath, kdat); errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("seed criu's kernel cache: the sandbox's root has no %s, where criu reads it: give the image one: %w", filepath.Dir(kdatPath), err)
	} else if err != nil {
		return nil, fmt.Errorf("seed criu's kernel cache: %w", err)
	}
	defer unlinkInRoot(sb.Pid(), kdatPath)
	if err := restoreTmpfs(sb.Pid(), filepath.Join(dir, tmpfsDir), m.Tmpfs); err != nil {
		return nil, err
	}
	// criu and the helpers it forks must not take a pid a restored process
	// needs: the sandbox's next pids start past the highest of them.
	if err := raiseLastPid(sb.Pid(), m.maxPid()+1); err != nil {
		return nil, err
	}
	for _, tree := range m.Trees {
		if err := t.restoreTree(sb, tree, filepath.Join(dir, tree.Dir), o.Inherit); err != nil {
			return nil, err
		}
		out.Processes += len(tree.Pids)
	}
	out.Took = time.Since(t0)
	return out, nil
}

func (t *Tier) restoreTree(sb Sandbox, tree Tree, dir string, inherit []Inherit) error {
	images, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open the images: %w", err)
	}
	defer images.Close()
	files := make([]*os.File, len(inherit))
	for i, in := range inherit {
		files[i] = in.File
	}
	// criu restores seccomp filters, capabilities and no_new_privs from
	// the images, but no Landlock domain: the restored processes get the
	// one criu is born in, made of the sandbox's rules.
	writable := openForWriting(files)
	wall := func() error { return sb.RestrictThread(writable...) }
	// criu answered a first request (start's), so it exists to be moved,
	// and it has forked nothing yet.
	s, err := t.start(sb, images, wall, files)
	if err != nil {
		return err
	}
	pid, err := s.criuPid()
	if err == nil {
		err = sb.Adopt(pid)
	}
	if err != nil {
		return s.failed(fmt.Errorf("place criu in the sandbox's cgroup: %w", err))
	}
	o := opts()
	for i, in := range inherit {
		o.InheritFd = append(o.InheritFd, &rpc.InheritFd{Key: proto.String(in.Key), Fd: proto.Int32(int32(s.extra + i))})
	}
	if _, err := s.call(rpc.CriuReqType_RESTORE, o, false); err != nil {
		return fmt.Errorf("restore process %d: %w", tree.Root, err)
	}
	if err := s.close(); err != nil {
		return fmt.Errorf("%w: %w", ErrCRIU, err)
	}
	return nil
}

// openForWriting are the files of files (not pipes or sockets) open for
// writing. criu reopens an inherited file through /proc/self/fd with the
// flags it had, which the restoring criu's Landlock domain refuses for
// writing unless it allows those files.
func openForWriting(files []*os.File) []*os.File {
	var out []*os.File
	for _, f := range files {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFDIR:
			continue
		}
		if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil && fl&unix.O_ACCMODE != unix.O_RDONLY {
			out = append(out, f)
		}
	}
	return out
}

// raiseLastPid makes the next pid of pid1's pid namespace next: a shell
// inside it writes ns_last_pid, which names the writer's own namespace.
func raiseLastPid(pid1, next int) error {
	cmd := fmt.Sprintf("echo %d > /proc/sys/kernel/ns_last_pid", next-1)
	out, err := execNsenter(pid1, "/bin/sh", "-c", cmd)
	if err != nil {
		return fmt.Errorf("%w: set the sandbox's next pid: %v: %s", ErrCRIU, err, strings.TrimSpace(out))
	}
	return nil
}

// children returns the host pids of pid's children (PID 1 of a sandbox
// is single-threaded: its main thread has them all).
func children(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("children of %d: %q", pid, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// treePids returns the pids, in the sandbox's pid namespace and on the
// host, of root and every descendant (each thread's children), and the
// highest thread id among them in the sandbox's namespace.
func treePids(root int) (ns, host []int, top int, err error) {
	todo := []int{root}
	for len(todo) > 0 {
		pid := todo[0]
		todo = todo[1:]
		n, err := nsPid(pid, "")
		if ended(err) && pid != root {
			continue // it ended meanwhile
		}
		if err != nil {
			return nil, nil, 0, err
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if ended(err) && pid != root {
			continue // it ended meanwhile
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("threads of %d: %w", pid, err)
		}
		ns, host = append(ns, n), append(host, pid)
		for _, task := range tasks {
			if tid, err := nsPid(pid, task.Name()); err == nil && tid > top {
				top = tid // threads need their ids free too
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			if err != nil {
				continue // the thread ended
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					todo = append(todo, n)
				}
			}
		}
	}
	return ns, host, top, nil
}

// ended says whether err, from reading a process's /proc entries, means
// the process is gone: ENOENT once it is reaped, ESRCH while it exits (a
// zombie's task directory cannot be listed).
func ended(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// nsPid returns host process pid's pid (or that of its thread tid, when
// not "") in its innermost namespace.
func nsPid(pid int, tid string) (int, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	if tid != "" {
		path = fmt.Sprintf("/proc/%d/task/%s/status", pid, tid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return 0, fmt.Errorf("process %d: no NSpid in its status", pid)
}

// tmpfsDirs are the directories every sandbox mounts a tmpfs of its own
// on (outside the overlay, so not in a snapshot's file layer);
// tmpfsDir keeps their copies among the images.
var tmpfsDirs = []string{"/tmp", "/run", "/dev/shm"}

const tmpfsDir = "tmpfs"

// saveTmpfs copies the sandbox's tmpfs directories into dir and returns
// the ones it copied: a sandbox may lack one, and one that is no mount of
// its own is part of the root, whose files are the caller's to carry (an
// OCI container's /tmp is in its rootfs).
func saveTmpfs(pid1 int, dir string) ([]string, error) {
	root, err := openInRoot(pid1, "/", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's root: %w", err)
	}
	rootMount, err := mountID(root)
	root.Close()
	if err != nil {
		return nil, err
	}
	var saved []string
	for _, d := range tmpfsDirs {
		src, err := openInRoot(pid1, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("keep the sandbox's %s: %w", d, err)
		}
		if m, err := mountID(src); err != nil || m == rootMount {
			src.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		err = copyInto(src, filepath.Join(dir, filepath.Base(d)))
		src.Close()
		if err != nil {
			return nil, fmt.Errorf("keep the sandbox's %s: %w", d, err)
		}
		saved = append(saved, d)
	}
	return saved, nil
}

// mountID is the id of the mount f is on.
func mountID(f *os.File) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, fmt.Errorf("statx %s: %w", f.Name(), err)
	}
	return stx.Mnt_id, nil
}

// restoreTmpfs copies the saved directories into the replica's.
func restoreTmpfs(pid1 int, dir string, saved []string) error {
	for _, d := range saved {
		if !slices.Contains(tmpfsDirs, d) {
			return fmt.Errorf("the memory images name %s, not a sandbox's tmpfs", d)
		}
		src, err := os.Open(filepath.Join(dir, filepath.Base(d)))
		if err != nil {
			return fmt.Errorf("the memory images: %w", err)
		}
		dst, err := openInRoot(pid1, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err == nil {
			_, err = store.CopyTree(src, dst, 0)
			dst.Close()
		}
		src.Close()
		if err != nil {
			return fmt.Errorf("put back the sandbox's %s: %w", d, err)
		}
	}
	return nil
}

// copyInto copies the tree open at src into a new directory dst.
func copyInto(src *os.File, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	d, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = store.CopyTree(src, d, 0)
	return err
}

// kdatPath is criu's kernel cache, in criu's mount namespace (the
// sandbox's); kdatName its copy among the images.
const (
	kdatPath = "/run/criu.kdat"
	kdatName = "criu.kdat"
)

var inRoot = &unix.OpenHow{Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}

// openInRoot opens path beneath host process pid's root, following no
// symlink.
func openInRoot(pid int, path string, flags int, mode uint32) (*os.File, error) {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	how := *inRoot
	how.Flags, how.Mode = uint64(flags|unix.O_CLOEXEC|unix.O_NOFOLLOW), uint64(mode)
	fd, err := unix.Openat2(root, path, &how)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func readInRoot(pid int, path string, limit int64) ([]byte, error) {
	f, err := openInRoot(pid, path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

func writeInRoot(pid int, path string, b []byte) error {
	unlinkInRoot(pid, path)
	f, err := openInRoot(pid, path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// unlinkInRoot removes path beneath pid's root (its directory resolved
// without symlinks), if it is there.
func unlinkInRoot(pid int, path string) {
	d, err := openInRoot(pid, filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer d.Close()
	unix.Unlinkat(int(d.Fd()), filepath.Base(path), 0)
}

func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}
