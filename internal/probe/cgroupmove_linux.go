package probe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/osthread"
	"golang.org/x/sys/unix"
)

// MoveCost is what moving a process between cgroups costs on this host.
// Since Linux 6.0 the kernel's cgroup lock returns to a reader-fast mode
// after a quiet spell, and the first move after one waits for an RCU
// grace period; favordynmods on the cgroup2 mount keeps the lock ready for
// writers, at a cost to every fork and exit on the host.
type MoveCost struct {
	// Hierarchy is the mount the probe moved a process in (any hierarchy
	// takes the same global lock).
	Hierarchy string `json:"hierarchy"`
	// QuietMs is the median move after QuietGapMs of no moves; BusyMs the
	// median move right after another.
	QuietMs    float64 `json:"quiet_ms"`
	BusyMs     float64 `json:"busy_ms"`
	QuietGapMs float64 `json:"quiet_gap_ms"`
	Samples    int     `json:"samples"`
	// Cgroup2Mount is the cgroup2 mount favordynmods applies to ("" when
	// none is mounted); FavorDynmods whether it is on.
	Cgroup2Mount string `json:"cgroup2_mount,omitempty"`
	FavorDynmods bool   `json:"favordynmods"`
	// ThreadQuietMs is the median move of a thread into a v1 group by
	// itself (writing 0 to the group's tasks file) after QuietGapMs of no
	// moves: how tine's processes join their groups on v1, which the
	// kernel does without the global lock (0 when no v1 pids hierarchy is
	// mounted); ThreadHierarchy is where it was measured.
	ThreadQuietMs   float64 `json:"thread_quiet_ms,omitempty"`
	ThreadHierarchy string  `json:"thread_hierarchy,omitempty"`
}

// MeasureCgroupMove moves a sleeping child between two cgroups of its own,
// samples times: each time once after quiet and once right after. It needs
// root. The groups are made at the hierarchy's root (not under tine's
// groups, whose reaper owns them) and removed.
func MeasureCgroupMove(samples int, quiet time.Duration) (MoveCost, error) {
	c := MoveCost{QuietGapMs: float64(quiet) / 1e6, Samples: samples}
	mounts, err := cgroupMountsInfo()
	if err != nil {
		return c, err
	}
	c.Cgroup2Mount = mounts.v2
	c.FavorDynmods = slices.Contains(mounts.v2Opts, "favordynmods")
	c.Hierarchy = mounts.v2
	if c.Hierarchy == "" {
		c.Hierarchy = mounts.v1
	}
	if c.Hierarchy == "" {
		return c, errors.New("no cgroup hierarchy is mounted")
	}
	if os.Geteuid() != 0 {
		return c, errors.New("measuring a cgroup move needs root")
	}
	base := filepath.Join(c.Hierarchy, fmt.Sprintf("tine-doctor-%d", os.Getpid()))
	a, b := base+"-a", base+"-b"
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return c, fmt.Errorf("make a cgroup to move a process in: %w", err)
		}
		defer rmdirWhenEmpty(d)
	}
	child := exec.Command("/bin/sleep", "600")
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := child.Start(); err != nil {
		return c, fmt.Errorf("start a process to move: %w", err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	pid := []byte(strconv.Itoa(child.Process.Pid))
	move := func(dir string) (time.Duration, error) {
		t0 := time.Now()
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0)
		return time.Since(t0), err
	}
	if _, err := move(a); err != nil {
		return c, fmt.Errorf("move a process: %w", err)
	}
	var q, bz []time.Duration
	for range samples {
		time.Sleep(quiet)
		d1, err := move(b)
		if err != nil {
			return c, fmt.Errorf("move a process: %w", err)
		}
		d2, err := move(a)
		if err != nil {
			return c, fmt.Errorf("move a process: %w", err)
		}
		q, bz = append(q, d1), append(bz, d2)
	}
	c.QuietMs, c.BusyMs = medianMs(q), medianMs(bz)
	if h, err := cgroup.Detect(); err == nil && h.V1Mounts["pids"] != "" {
		c.ThreadHierarchy = h.V1Mounts["pids"]
		if c.ThreadQuietMs, err = measureThreadMove(c.ThreadHierarchy, samples, quiet); err != nil {
			return c, err
		}
	}
	return c, nil
}

// measureThreadMove times a thread moving itself into a group of its own
// in the v1 hierarchy at mount, after quiet each time. Each sample's thread
// is thrown away afterwards (it leaves the group as it exits).
func measureThreadMove(mount string, samples int, quiet time.Duration) (float64, error) {
	dir := filepath.Join(mount, fmt.Sprintf("tine-doctor-%d-t", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, fmt.Errorf("make a cgroup to move a thread in: %w", err)
	}
	defer rmdirWhenEmpty(dir)
	var ds []time.Duration
	for range samples {
		time.Sleep(quiet)
		var d time.Duration
		var err error
		osthread.Throwaway(func() {
			var fd int
			if fd, err = unix.Open(filepath.Join(dir, "tasks"), unix.O_WRONLY|unix.O_CLOEXEC, 0); err != nil {
				return
			}
			defer unix.Close(fd)
			t0 := time.Now()
			_, err = unix.Write(fd, []byte("0"))
			d = time.Since(t0)
		})
		if err != nil {
			return 0, fmt.Errorf("move a thread: %w", err)
		}
		ds = append(ds, d)
	}
	return medianMs(ds), nil
}

// rmdirWhenEmpty removes a probe's group once its process has gone (the
// kernel frees a group's last process after the exit is reaped).
func rmdirWhenEmpty(dir string) {
	for i := 0; i < 100; i++ {
		if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / 1e6
}

type cgroupMountSet struct {
	v2      string   // the first cgroup2 mount
	v2Opts  []string // its superblock options
	v2Flags []string // its mount's own options (nosuid, relatime, ...)
	v1      string   // the first v1 hierarchy's mount
}

func cgroupMountsInfo() (cgroupMountSet, error) {
	var m cgroupMountSet
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch {
		case qf[0] == "cgroup2" && m.v2 == "":
			m.v2, m.v2Opts, m.v2Flags = pf[4], strings.Split(qf[2], ","), strings.Split(pf[5], ",")
		case qf[0] == "cgroup" && m.v1 == "":
			m.v1 = pf[4]
		}
	}
	return m, sc.Err()
}

// SetFavorDynmods remounts the cgroup2 mount with favordynmods on or off,
// keeping its other options.
func SetFavorDynmods(on bool) error {
	m, err := cgroupMountsInfo()
	if err != nil {
		return err
	}
	if m.v2 == "" {
		return errors.New("no cgroup2 mount: favordynmods is an option of the cgroup2 file system (mount it, e.g. on /sys/fs/cgroup/unified)")
	}
	var opts []string
	for _, o := range m.v2Opts {
		if o != "rw" && o != "ro" && o != "favordynmods" {
			opts = append(opts, o)
		}
	}
	if on {
		opts = append(opts, "favordynmods")
	}
	// A remount sets the mount's own flags too: the ones it has are kept.
	flags := uintptr(unix.MS_REMOUNT)
	for _, o := range m.v2Flags {
		flags |= map[string]uintptr{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
			"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME}[o]
	}
	if err := unix.Mount("none", m.v2, "", flags, strings.Join(opts, ",")); err != nil {
		return fmt.Errorf("remount %s with %q: %w", m.v2, strings.Join(opts, ","), err)
	}
	return nil
}

// ForkExecCost is the median time of fork, exec and wait of /bin/true over
// n runs: what favordynmods adds to, on every fork and exit of the host.
func ForkExecCost(n int) (float64, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			return 0, fmt.Errorf("run /bin/true: %w", err)
		}
		ds = append(ds, time.Since(t0))
	}
	return medianMs(ds), nil
}
