package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// HostState is what the disturbed-host guard reads before and after a
// measurement: the load average, and the CPU-throttling counter of the cgroup
// this process (and so every process it times) runs in.
type HostState struct {
	Load1     float64 `json:"load1"`
	Load5     float64 `json:"load5"`
	Load15    float64 `json:"load15"`
	LoadError string  `json:"load_error,omitempty"`
	// Throttled is nr_throttled from CPUStatPath; CPUStatError says why it
	// could not be read, and then Throttled means nothing.
	Throttled    uint64 `json:"cpu_nr_throttled"`
	CPUStatPath  string `json:"cpu_stat_path,omitempty"`
	CPUStatError string `json:"cpu_stat_error,omitempty"`
	// StealTicks and TotalTicks are /proc/stat's steal and all-fields
	// CPU time: the share the hypervisor gave other guests. 0 when
	// unreadable (not held against the run).
	StealTicks uint64 `json:"steal_ticks"`
	TotalTicks uint64 `json:"total_ticks"`
	// BusyCores is how many CPUs' worth of time the host spent busy (user,
	// system, interrupts: not idle, iowait or steal) over the BusyWindowMs
	// at an end of a run (ReadBusy); 0 and 0 when not measured.
	BusyCores    float64 `json:"busy_cores,omitempty"`
	BusyWindowMs float64 `json:"busy_window_ms,omitempty"`
}

// BusyWindow is how long ReadBusy watches the host's CPUs. The start and
// the end of a run are judged by what the CPUs do then, not by the 1-minute load
// average, which still carries the last minute: a previous suite's own
// load, long gone.
const BusyWindow = time.Second

// MaxBusyShare is the share of the cores busy just before a run above
// which the host is disturbed.
const MaxBusyShare = 0.5

// MaxSteal is the share of CPU time stolen by the hypervisor, between
// two host states, above which figures are about the neighbours.
const MaxSteal = 0.05

// Verdict says whether figures measured between two host states can be
// trusted. A disturbed host's figures are reported as NOT MEASURED.
type Verdict struct {
	Disturbed bool     `json:"disturbed"`
	Reasons   []string `json:"reasons,omitempty"`
}

// Guard reads host states for one machine; Judge decides between two of them.
type Guard struct {
	// Cores is the limit for the 1-minute load average.
	Cores int
	// TrustHost makes Judge find no host disturbed: a test's guard, whose
	// test is about the runner, not about the machine that runs it.
	TrustHost bool
	cpuStat   string
	statsErr  error
}

// NewGuard finds this process's CPU cgroup once, so each Read is two small
// file reads.
func NewGuard(cores int) *Guard {
	g := &Guard{Cores: cores}
	host, err := cgroup.Detect()
	if err != nil {
		g.statsErr = fmt.Errorf("detect cgroups: %w", err)
		return g
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		g.statsErr = fmt.Errorf("read /proc/self/cgroup: %w", err)
		return g
	}
	g.cpuStat, g.statsErr = cpuStatPath(string(self), host)
	return g
}

// ReadBusy is Read with the host's busy cores measured over BusyWindow
// first: how the start and the end of a series suite are judged.
func (g *Guard) ReadBusy() HostState {
	b0, t0 := readBusy()
	start := time.Now()
	time.Sleep(BusyWindow)
	b1, t1 := readBusy()
	window := time.Since(start)
	s := g.Read()
	if t1 > t0 && b1 >= b0 {
		s.BusyCores = float64(b1-b0) / float64(t1-t0) * float64(g.Cores)
		s.BusyWindowMs = float64(window) / 1e6
	}
	return s
}

// Read samples the load average and the throttling counter now.
func (g *Guard) Read() HostState {
	var s HostState
	if b, err := os.ReadFile("/proc/loadavg"); err != nil {
		s.LoadError = err.Error()
	} else if s.Load1, s.Load5, s.Load15, err = parseLoadavg(string(b)); err != nil {
		s.LoadError = err.Error()
	}
	s.StealTicks, s.TotalTicks = readSteal()
	s.CPUStatPath = g.cpuStat
	if g.statsErr != nil {
		s.CPUStatError = g.statsErr.Error()
		return s
	}
	if b, err := os.ReadFile(g.cpuStat); err != nil {
		s.CPUStatError = err.Error()
	} else if s.Throttled, err = parseNrThrottled(string(b)); err != nil {
		s.CPUStatError = fmt.Sprintf("%s: %v", g.cpuStat, err)
	}
	return s
}

// Judge decides whether the host was disturbed between before and after:
// more than MaxBusyShare of the cores busy at an end measured with ReadBusy,
// else a 1-minute load average above cores there, an unreadable load
// average, any CPU throttling of this process's cgroup in between, or a
// hypervisor that stole more than MaxSteal of the CPU time. An
// unreadable throttling counter is recorded in the states, not held against
// the run: many hosts do not expose it.
func Judge(cores int, before, after HostState) Verdict {
	return judge(cores, MaxSteal, before, after)
}

// Judge is the package's Judge with g's cores and steal limit.
func (g *Guard) Judge(before, after HostState) Verdict {
	if g.TrustHost {
		return Verdict{}
	}
	return judge(g.Cores, MaxSteal, before, after)
}

func judge(cores int, maxSteal float64, before, after HostState) Verdict {
	var v Verdict
	for _, end := range []struct {
		when  string
		state HostState
	}{{"before", before}, {"after", after}} {
		switch {
		case end.state.BusyWindowMs > 0:
			if end.state.BusyCores > MaxBusyShare*float64(cores) {
				v.Reasons = append(v.Reasons, fmt.Sprintf("the host was busy on %.2f of %d cores over the %.0f ms %s (more than %.0f%%)",
					end.state.BusyCores, cores, end.state.BusyWindowMs, end.when, MaxBusyShare*100))
			}
		case end.state.LoadError != "":
			v.Reasons = append(v.Reasons, fmt.Sprintf("load average unreadable %s: %s", end.when, end.state.LoadError))
		case end.state.Load1 > float64(cores):
			v.Reasons = append(v.Reasons, fmt.Sprintf("1-minute load average %.2f %s exceeds %d cores", end.state.Load1, end.when, cores))
		}
	}
	if before.CPUStatError == "" && after.CPUStatError == "" && after.Throttled > before.Throttled {
		v.Reasons = append(v.Reasons, fmt.Sprintf("this process's cgroup was CPU-throttled %d times (nr_throttled in %s)",
			after.Throttled-before.Throttled, after.CPUStatPath))
	}
	if total := after.TotalTicks - before.TotalTicks; after.TotalTicks > before.TotalTicks && after.StealTicks >= before.StealTicks {
		if share := float64(after.StealTicks-before.StealTicks) / float64(total); share > maxSteal {
			v.Reasons = append(v.Reasons, fmt.Sprintf("the hypervisor stole %.0f%% of the CPU time (steal in /proc/stat; over %.0f%% the figures are about other guests)", share*100, maxSteal*100))
		}
	}
	v.Disturbed = len(v.Reasons) > 0
	return v
}

// readBusy reads the busy and the total CPU time from /proc/stat's cpu
// line: busy is user, nice, system, irq and softirq.
func readBusy() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:9] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
			busy += n
		}
	}
	return busy, total
}

// readSteal reads the steal and the total CPU time from /proc/stat's cpu
// line (user nice system idle iowait irq softirq steal ...).
func readSteal() (steal, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i < 8 {
			total += n // guest time is already in user and nice
		}
		if i == 7 {
			steal = n
		}
	}
	return steal, total
}

// parseLoadavg reads the three load averages from /proc/loadavg.
func parseLoadavg(s string) (l1, l5, l15 float64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("parse /proc/loadavg %q: want 3 averages", s)
	}
	var loads [3]float64
	for i := range loads {
		if loads[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("parse /proc/loadavg: %w", err)
		}
	}
	return loads[0], loads[1], loads[2], nil
}

// parseNrThrottled finds nr_throttled in a cpu.stat (same key on v1 and v2).
func parseNrThrottled(stat string) (uint64, error) {
	for line := range strings.Lines(stat) {
		key, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && key == "nr_throttled" {
			return strconv.ParseUint(val, 10, 64)
		}
	}
	// A v2 cpu.stat without the cpu controller enabled carries usage only.
	return 0, errors.New("no nr_throttled (is the cpu controller enabled for this cgroup?)")
}

// cpuStatPath finds the cpu.stat of this process's CPU cgroup from the text of
// /proc/self/cgroup: the v1 "cpu" hierarchy when it is mounted, otherwise the
// v2 ("0::") cgroup.
func cpuStatPath(selfCgroup string, host *cgroup.Host) (string, error) {
	for line := range strings.Lines(selfCgroup) {
		// hierarchy-id:controller-list:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := strings.Split(parts[1], ","), parts[2]
		if mnt := host.V1Mounts["cpu"]; mnt != "" && slices.Contains(controllers, "cpu") {
			return statUnder(mnt, path), nil
		}
	}
	if host.V2Mount != "" {
		for line := range strings.Lines(selfCgroup) {
			if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
				return statUnder(host.V2Mount, path), nil
			}
		}
	}
	return "", errors.New("no cpu cgroup for this process (neither a v1 cpu hierarchy nor a v2 cgroup is mounted)")
}

// statUnder joins a cgroup path to its mount. When the mount is itself a
// cgroup below the hierarchy root (a container without a cgroup namespace,
// whose /sys/fs/cgroup/cpu is its own cgroup) the joined path does not exist,
// and the mount's own cpu.stat is the one that counts for this process.
func statUnder(mount, cgroupPath string) string {
	p := filepath.Join(mount, cgroupPath, "cpu.stat")
	if _, err := os.Stat(p); err != nil {
		return filepath.Join(mount, "cpu.stat")
	}
	return p
}
