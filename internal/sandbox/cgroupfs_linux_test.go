package sandbox

import (
	"slices"
	"testing"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// TestCgroupFSMounts: v1 shows one hierarchy per controller tine places
// a sandbox in (co-mounted ones once, named like the host's), nothing
// of the others; v2 its one tree.
func TestCgroupFSMounts(t *testing.T) {
	v1 := &cgroup.Host{Version: cgroup.V1, V1Mounts: map[string]string{
		"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct",
		"cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "freezer": "/sys/fs/cgroup/freezer", "devices": "/sys/fs/cgroup/devices"}}
	var got []string
	for _, m := range cgroupFSMounts(v1) {
		got = append(got, m.fstype+":"+m.target+":"+m.data)
	}
	want := []string{"tmpfs:/sys/fs/cgroup:mode=0755,size=64k", "cgroup:/sys/fs/cgroup/memory:memory", "cgroup:/sys/fs/cgroup/pids:pids",
		"cgroup:/sys/fs/cgroup/cpu,cpuacct:cpu,cpuacct", "cgroup:/sys/fs/cgroup/freezer:freezer"}
	if !slices.Equal(got, want) {
		t.Errorf("v1 mounts %v, want %v", got, want)
	}
	if m := cgroupFSMounts(&cgroup.Host{Version: cgroup.V2}); len(m) != 1 || m[0].fstype != "cgroup2" {
		t.Errorf("v2 mounts %+v", m)
	}
}
