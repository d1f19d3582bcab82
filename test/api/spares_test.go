package api_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// cgroupsOf is a host process's cgroup per hierarchy ("memory" → path),
// as /proc/PID/cgroup lists them.
func cgroupsOf(pid int) map[string]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] != "" {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

// nsPid is a host process's pid in its innermost pid namespace.
func nsPid(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" {
			return f[len(f)-1]
		}
	}
	return ""
}

// A warm function's spares wait inside request cgroups of their own (a
// request then pays no cgroup move), and a request served by one runs in
// the cgroup it waited in.
func TestSparesWaitInTheirRequestCgroups(t *testing.T) {
	require.Landlock(t, 6)
	d := startDaemon(t)
	putFunction(t, d, api.FunctionSpec{Name: "sp", Entry: writeHandler(t, spareHandler)})
	invoke(t, d, "sp", nil) // warm
	f, err := d.c.Function(t.Context(), "sp")
	if err != nil {
		t.Fatal(err)
	}
	zygotes := childrenOf(f.Pid)
	if len(zygotes) != 1 {
		t.Fatalf("the function's PID 1 (%d) has children %v, want its one zygote", f.Pid, zygotes)
	}
	zygote := cgroupsOf(zygotes[0])
	if zygote["memory"] == "" {
		t.Skip("no v1 memory hierarchy: warm functions need v1 controllers")
	}
	// Every spare is in a group nested in the sandbox's (the zygote's
	// memory group), its own, in every hierarchy tine controls.
	sandboxGroup := zygote["memory"]
	var spares []int
	joined := func() bool {
		spares = childrenOf(zygotes[0])
		if len(spares) != 2 {
			return false
		}
		seen := map[string]bool{}
		for _, pid := range spares {
			cg := cgroupsOf(pid)
			own := cg["memory"]
			if !strings.HasPrefix(own, sandboxGroup+"/") {
				return false
			}
			for h, zp := range zygote {
				if zp != "/" && cg[h] != own {
					return false
				}
			}
			seen[own] = true
		}
		return len(seen) == 2
	}
	if !testbin.Eventually(patience, joined) {
		for _, pid := range spares {
			t.Logf("spare %d: %v", pid, cgroupsOf(pid))
		}
		t.Fatalf("the zygote (%v) has children %v, want 2 spares each waiting in a request cgroup of its own", zygote, spares)
	}
	before := map[string]map[string]string{}
	for _, pid := range spares {
		before[nsPid(pid)] = cgroupsOf(pid)
	}
	// The next request goes to the oldest spare: it answers from the
	// group it waited in (its pid is one of the spares').
	got := resultOf[struct {
		Pid    int
		Cgroup string
	}](t, invoke(t, d, "sp", nil))
	cg, ok := before[fmt.Sprint(got.Pid)]
	if !ok {
		t.Fatalf("request ran as pid %d, want one of the spares %v", got.Pid, slices.Collect(maps.Keys(before)))
	}
	if want := path.Base(cg["memory"]); path.Base(memoryLine(got.Cgroup)) != want {
		t.Errorf("request's cgroups %q, want the group its spare waited in (%s)", got.Cgroup, want)
	}

	// Spares killed from outside: the requests their groups were armed for
	// get fresh forks, which join those groups themselves.
	if !testbin.Eventually(patience, joined) {
		t.Fatalf("no 2 spares in their groups again: %v", spares)
	}
	killed := map[string]bool{}
	for _, pid := range spares {
		killed[nsPid(pid)] = true
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// Gone first: a spare dying while the zygote hands it a request takes
	// that request with it (it answers crashed), as it did before.
	testbin.Eventually(patience, func() bool {
		for _, pid := range spares {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return false
			}
		}
		return true
	})
	for i := range 2 {
		inv := invoke(t, d, "sp", nil)
		if inv.Status != api.StatusOK {
			t.Fatalf("request %d after its spare was killed: %s %+v", i, inv.Status, inv.Error)
		}
		var r struct {
			Pid    int
			Cgroup string
		}
		json.Unmarshal(inv.Result, &r)
		if killed[fmt.Sprint(r.Pid)] {
			t.Errorf("request %d answered from a killed spare's pid %d", i, r.Pid)
		}
		if !strings.HasPrefix(path.Base(memoryLine(r.Cgroup)), "r") {
			t.Errorf("request %d ran in %q, not in a request group", i, memoryLine(r.Cgroup))
		}
	}
}

const spareHandler = `import os

def handler(event):
    return {"pid": os.getpid(), "cgroup": open("/proc/self/cgroup").read()}
`

// memoryLine is the memory hierarchy's path in a /proc/PID/cgroup text.
func memoryLine(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "memory" {
			return parts[2]
		}
	}
	return ""
}
