package handoff

import (
	"reflect"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
)

// Every field of tine run's spec reaches the wire request.
func TestFromSpec(t *testing.T) {
	s := &sandbox.Spec{
		Args: []string{"sh", "-c", "exit 3"}, Env: []string{"A=1"}, Workdir: "/tmp", Hostname: "box",
		RootFS: "/srv/root", DiskBytes: 1 << 30, Timeout: 1500 * time.Millisecond, Seccomp: seccomp.Strict,
		Binds:  []sandbox.Bind{{Source: "/a", Target: "/b", ReadOnly: true}},
		Limits: cgroup.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 32},
	}
	want := Request{
		Args: s.Args, Env: s.Env, Workdir: "/tmp", Hostname: "box", RootFS: "/srv/root", DiskBytes: 1 << 30,
		Binds:  []api.Bind{{Source: "/a", Target: "/b", ReadOnly: true}},
		Limits: api.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 32}, TimeoutMs: 1500, Seccomp: "strict",
	}
	if got := FromSpec(s); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
