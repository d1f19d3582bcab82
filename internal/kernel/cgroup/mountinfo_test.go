package cgroup

import (
	"testing"

	"github.com/tine-run/tine/internal/kernel/procstat"
)

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b\\c`); got != `/a b\\c` {
		t.Fatalf("got %q", got)
	}
}

func TestOwnerNames(t *testing.T) {
	if !ownerAlive(NewName()) {
		t.Fatal("this process's own group is not alive")
	}
	// pid 1 exists, but started at another time than this claims.
	if ownerAlive("1.1-1") && procstat.StartTime(1) != 1 {
		t.Fatal("a reused pid counts as the owner")
	}
	if ownerAlive("999999999.5-1") {
		t.Fatal("a dead pid counts as the owner")
	}
}

// TestParseMountinfo reads a hybrid host's lines: optional fields before
// the separator, co-mounted controllers, an escaped mount point, a second
// mount of a controller (the first wins), a line cut short, no final
// newline.
func TestParseMountinfo(t *testing.T) {
	const mi = `22 27 0:21 / /proc rw,relatime shared:12 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/mem\040ory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /other/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw - cgroup
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
42 31 0:39 / /elsewhere rw,relatime - cgroup2 cgroup2 rw`
	h := &Host{V1Mounts: map[string]string{}}
	parseMountinfo(h, []byte(mi))
	if h.V2Mount != "/sys/fs/cgroup/unified" {
		t.Errorf("v2 mount %q", h.V2Mount)
	}
	want := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"memory": "/sys/fs/cgroup/mem ory", "pids": "/sys/fs/cgroup/pids", "freezer": "/sys/fs/cgroup/pids",
	}
	if len(h.V1Mounts) != len(want) {
		t.Errorf("v1 mounts %v, want %v", h.V1Mounts, want)
	}
	for c, m := range want {
		if h.V1Mounts[c] != m {
			t.Errorf("%s at %q, want %q", c, h.V1Mounts[c], m)
		}
	}
}
