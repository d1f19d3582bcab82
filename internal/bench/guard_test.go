package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

func TestJudge(t *testing.T) {
	quiet := HostState{Load1: 0.5, Throttled: 10, CPUStatPath: "/sys/fs/cgroup/cpu/cpu.stat"}
	with := func(f func(*HostState)) HostState { s := quiet; f(&s); return s }
	for _, tc := range []struct {
		name          string
		before, after HostState
		disturbed     bool
		reason        string
	}{
		{"quiet", quiet, quiet, false, ""},
		{"load equal to the cores is allowed", with(func(s *HostState) { s.Load1 = 2 }), quiet, false, ""},
		{"loaded before", with(func(s *HostState) { s.Load1 = 2.5 }), quiet, true, "2.50 before exceeds 2 cores"},
		{"loaded after", quiet, with(func(s *HostState) { s.Load1 = 3 }), true, "3.00 after exceeds 2 cores"},
		{"only the 1-minute average counts", with(func(s *HostState) { s.Load5, s.Load15 = 9, 9 }), quiet, false, ""},
		{"throttled", quiet, with(func(s *HostState) { s.Throttled = 13 }), true, "CPU-throttled 3 times"},
		{"throttling unreadable is not held against the run",
			with(func(s *HostState) { s.CPUStatError = "no such file" }), with(func(s *HostState) { s.Throttled = 99 }), false, ""},
		{"load unreadable", quiet, with(func(s *HostState) { s.LoadError = "permission denied" }), true, "load average unreadable after"},
		// A previous suite's load lingers in the 1-minute average; the CPUs
		// measured just before the run are what count when measured.
		{"a busy-cores reading replaces the load average", with(func(s *HostState) { s.Load1, s.BusyCores, s.BusyWindowMs = 3.5, 0.2, 1000 }), quiet, false, ""},
		{"busy before", with(func(s *HostState) { s.BusyCores, s.BusyWindowMs = 1.4, 1000 }), quiet, true, "busy on 1.40 of 2 cores"},
	} {
		v := Judge(2, tc.before, tc.after)
		if v.Disturbed != tc.disturbed {
			t.Errorf("%s: Disturbed = %v, want %v (reasons %q)", tc.name, v.Disturbed, tc.disturbed, v.Reasons)
		}
		if tc.reason != "" && !strings.Contains(strings.Join(v.Reasons, "; "), tc.reason) {
			t.Errorf("%s: reasons %q do not mention %q", tc.name, v.Reasons, tc.reason)
		}
		if !tc.disturbed && len(v.Reasons) != 0 {
			t.Errorf("%s: quiet host has reasons %q", tc.name, v.Reasons)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	l1, l5, l15, err := parseLoadavg("0.11 2.50 10.06 1/88 7560\n")
	if err != nil || l1 != 0.11 || l5 != 2.5 || l15 != 10.06 {
		t.Errorf("parseLoadavg = %v %v %v %v", l1, l5, l15, err)
	}
	if _, _, _, err := parseLoadavg("0.11\n"); err == nil {
		t.Error("parseLoadavg accepted a line with one average")
	}
}

func TestParseNrThrottled(t *testing.T) {
	v1 := "nr_periods 40\nnr_throttled 7\nthrottled_time 12345\n"
	v2 := "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 3\nnr_throttled 2\nthrottled_usec 9\n"
	for stat, want := range map[string]uint64{v1: 7, v2: 2} {
		if got, err := parseNrThrottled(stat); err != nil || got != want {
			t.Errorf("parseNrThrottled(%q) = %d, %v; want %d", stat, got, err, want)
		}
	}
	if _, err := parseNrThrottled("usage_usec 100\nuser_usec 60\n"); err == nil {
		t.Error("parseNrThrottled found a counter in a cpu.stat without one")
	}
}

func TestCPUStatPath(t *testing.T) {
	root := t.TempDir()
	v1cpu := filepath.Join(root, "cpu")
	v2 := filepath.Join(root, "unified")
	for _, dir := range []string{filepath.Join(v1cpu, "job"), filepath.Join(v2, "job")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.stat"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hybrid := &cgroup.Host{V1Mounts: map[string]string{"cpu": v1cpu}, V2Mount: v2}
	unified := &cgroup.Host{V1Mounts: map[string]string{}, V2Mount: v2}
	for _, tc := range []struct {
		name, self string
		host       *cgroup.Host
		want       string
	}{
		{"v1 cpu hierarchy wins on a hybrid host", "4:memory:/x\n2:cpu,cpuacct:/job\n0::/job\n", hybrid, filepath.Join(v1cpu, "job", "cpu.stat")},
		{"v2 only", "0::/job\n", unified, filepath.Join(v2, "job", "cpu.stat")},
		{"cgroup outside the mount falls back to the mount's own", "1:cpu:/docker/abc\n", hybrid, filepath.Join(v1cpu, "cpu.stat")},
	} {
		got, err := cpuStatPath(tc.self, tc.host)
		if err != nil || got != tc.want {
			t.Errorf("%s: cpuStatPath = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := cpuStatPath("4:memory:/x\n", &cgroup.Host{V1Mounts: map[string]string{}}); err == nil {
		t.Error("cpuStatPath found a cpu cgroup on a host with none")
	}
}

func TestGuardReadsThisHost(t *testing.T) {
	s := NewGuard(1).Read()
	if s.LoadError != "" {
		t.Fatalf("read load average: %s", s.LoadError)
	}
	if s.CPUStatError != "" {
		t.Logf("throttling counter unreadable here (allowed): %s", s.CPUStatError)
	}
}

// CPU time stolen by the hypervisor disturbs a run past MaxSteal.
func TestJudgeSteal(t *testing.T) {
	before := HostState{StealTicks: 100, TotalTicks: 10000}
	quiet := HostState{StealTicks: 110, TotalTicks: 11000}  // 1% of 1000
	stolen := HostState{StealTicks: 200, TotalTicks: 11000} // 10% of 1000
	if v := Judge(2, before, quiet); v.Disturbed {
		t.Errorf("1%% steal judged disturbed: %v", v.Reasons)
	}
	if v := Judge(2, before, stolen); !v.Disturbed || !strings.Contains(strings.Join(v.Reasons, ";"), "stole 10%") {
		t.Errorf("10%% steal: %+v", v)
	}
	if s := NewGuard(2).Read(); s.TotalTicks == 0 {
		t.Error("no CPU time read from /proc/stat")
	}
}
