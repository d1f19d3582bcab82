package sandbox

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// cpuNow is the CPU time this process and its reaped children used.
func cpuNow() time.Duration {
	var self, kids unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &self)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// What a live fork's child costs on the fork's path (ns/op), made at the
// fork (Create with ForkOf) or completed from a spare made ahead
// (Complete), and the CPU time of the whole child, its making ahead and
// its Destroy included (cpu-ms/op; its processes' once reaped):
//
//	go test -run '^$' -bench ForkChild -cpu 1 -count 5 ./internal/sandbox/
func BenchmarkForkChild(b *testing.B) {
	require.Root(b)
	require.Feature(b, "cgroup")
	parent, err := Create(&Spec{Hostname: "parent", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}})
	if err != nil {
		b.Fatal(err)
	}
	defer parent.Destroy()
	layer := spareLayer(b, "layer", "l")
	spec := func() *Spec {
		return &Spec{Hostname: "child", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64}, ForkOf: parent}
	}
	// ahead, when not nil, is the part made off the fork's path; onPath
	// the part timed.
	run := func(b *testing.B, ahead func() (*Spare, error), onPath func(*Spare) (*Sandbox, error)) {
		var cpu time.Duration
		b.StopTimer()
		for range b.N {
			c0 := cpuNow()
			var sp *Spare
			if ahead != nil {
				var err error
				if sp, err = ahead(); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			sb, err := onPath(sp)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			sb.Destroy()
			cpu += cpuNow() - c0
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
	b.Run("made", func(b *testing.B) {
		run(b, nil, func(*Spare) (*Sandbox, error) {
			s := spec()
			s.Layers = []string{layer}
			return Create(s)
		})
	})
	b.Run("spare", func(b *testing.B) {
		run(b, func() (*Spare, error) { return CreateSpare(spec(), layer) }, func(sp *Spare) (*Sandbox, error) { return sp.Complete([]string{layer}) })
	})
}
