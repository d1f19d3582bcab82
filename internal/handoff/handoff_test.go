package handoff

import (
	"reflect"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/sandbox"
)

// A spec survives the trip through the wire request unchanged.
func TestRequestRoundTrip(t *testing.T) {
	s := &sandbox.Spec{
		Args: []string{"sh", "-c", "exit 3"}, Env: []string{"A=1"}, Workdir: "/tmp", Hostname: "box",
		RootFS: "/srv/root", DiskBytes: 1 << 30, Timeout: 1500 * time.Millisecond, Seccomp: seccomp.Strict,
		Binds:  []sandbox.Bind{{Source: "/a", Target: "/b", ReadOnly: true}},
		Limits: cgroup.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 32},
	}
	got := FromSpec(s).Spec()
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if def := (Request{Args: []string{"true"}}).Spec(); def.Seccomp != seccomp.Default {
		t.Fatalf("a request without a policy gets %q, want the default", def.Seccomp)
	}
}
