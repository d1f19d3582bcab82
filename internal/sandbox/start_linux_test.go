package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// TestStartRefusedPlanLeavesNoGroup: Start makes the sandbox's cgroup while
// it makes the plan; a plan refused (here: set-user-ID programs with a
// user namespace) must leave no group of this process behind.
func TestStartRefusedPlanLeavesNoGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	h, err := hostOnce()
	if err != nil || h.cgroup.Version == cgroup.None {
		t.Skip("no cgroups")
	}
	dir := h.cgroup.V2Mount
	if h.cgroup.Version == cgroup.V1 {
		dir = h.cgroup.V1Mounts["memory"]
	}
	dir += "/" + cgroup.Parent
	mine := func() []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), strconv.Itoa(os.Getpid())+".") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	before := mine()
	for range 3 {
		_, err := Start(&Spec{Args: []string{"true"}, Setuid: true, UserNS: true})
		if !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("Start: %v, want ErrInvalidSpec", err)
		}
	}
	// A group left would be made by now.
	time.Sleep(200 * time.Millisecond)
	if after := mine(); len(after) != len(before) {
		t.Fatalf("groups of this process before %v, after %v", before, after)
	}
}
