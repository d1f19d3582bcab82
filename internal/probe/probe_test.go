package probe

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAllOnThisHost(t *testing.T) {
	start := time.Now()
	checks := All()
	t.Logf("All() took %s", time.Since(start))

	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
		t.Logf("%-10s ok=%-5v %s", c.Name, c.OK, c.Detail)
		if c.Detail == "" {
			t.Errorf("%s: empty Detail", c.Name)
		}
		if !c.OK && c.Fix == "" {
			t.Errorf("%s failed without a Fix", c.Name)
		}
		if c.OK && c.Fix != "" {
			t.Errorf("%s passed but has Fix %q", c.Name, c.Fix)
		}
		if c.Name != "kernel" && c.Affects == "" {
			t.Errorf("%s: empty Affects", c.Name)
		}
	}
	if !slices.Equal(names, Names()) {
		t.Errorf("All() names = %v, want Names() = %v", names, Names())
	}

	if got, want := Get("root").OK, os.Geteuid() == 0; got != want {
		t.Errorf("root.OK = %v, euid %d", got, os.Geteuid())
	}
	if k := Get("kernel"); !k.OK || Kernel() == "" || Kernel() == "unknown" {
		t.Errorf("kernel check = %+v, Kernel() = %q", k, Kernel())
	}
	if l := Get("landlock"); l.OK && l.Value < 1 {
		t.Errorf("landlock OK with ABI %d", l.Value)
	}
	if l := Get("landlock"); !l.OK && l.Value != 0 {
		t.Errorf("landlock failed but reports ABI %d", l.Value)
	}
	if c := Get("criu"); c.OK && !VersionAtLeast(c.Version, "1") {
		t.Errorf("criu OK with unreadable version %q", c.Version)
	}
	// The namespaces Go itself relies on for os/exec must be creatable by
	// root on any Linux tine supports; this also proves the tries run.
	if os.Geteuid() == 0 && !Get("ns.mount").OK {
		t.Errorf("root cannot create a mount namespace: %s", Get("ns.mount").Detail)
	}
}

func TestGetIsCachedAndKnowsItsNames(t *testing.T) {
	a, b := Get("pidfd"), Get("pidfd")
	if a != b {
		t.Errorf("two Get(pidfd) differ: %+v, %+v", a, b)
	}
	if Known("no-such-check") || Get("no-such-check").OK {
		t.Error("an unknown check is known or OK")
	}
	for _, n := range Names() {
		if !Known(n) {
			t.Errorf("Names() lists %q but Known says no", n)
		}
	}
}

// The overlay try must leave nothing on the host: no mount and no directory.
func TestOverlayTryLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root: euid %d", os.Geteuid())
	}
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	leftovers := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), "tine-probe-overlay-*"))
		return m
	}
	already := leftovers()
	onTmpfs, overHostRoot := tryOverlayMounts()
	t.Logf("overlay on tmpfs: %v; over host root: %v", onTmpfs, overHostRoot)
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("mount table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := leftovers(); len(got) != len(already) {
		t.Errorf("temporary directories left: %v", got)
	}
	if onTmpfs == nil && filesystemListed("overlay") == false {
		t.Error("overlay mounted but /proc/filesystems does not list it")
	}
}

func TestBlockersMatchChecks(t *testing.T) {
	blockers := Blockers()
	for _, n := range []string{"ns.pid", "ns.mount", "ns.ipc", "ns.uts", "ns.net", "ns.cgroup", "overlayfs", "seccomp"} {
		if got, want := slices.Contains(blockers, n), !Get(n).OK; got != want {
			t.Errorf("Blockers() lists %s = %v, but %s.OK = %v", n, got, n, Get(n).OK)
		}
	}
}

// TestCRIUPathPrefersTINE_CRIU proves the override is used, and that a bad
// override is an error naming it rather than a silent fall back to PATH.
func TestCRIUPathPrefersTINE_CRIU(t *testing.T) {
	t.Setenv("TINE_CRIU", "/bin/true")
	if p, err := CRIUPath(); err != nil || p != "/bin/true" {
		t.Errorf("CRIUPath() with TINE_CRIU=/bin/true = %q, %v", p, err)
	}
	t.Setenv("TINE_CRIU", "/no/such/criu")
	if p, err := CRIUPath(); err == nil || !strings.Contains(err.Error(), "TINE_CRIU=/no/such/criu") {
		t.Errorf("CRIUPath() with a missing TINE_CRIU = %q, %v; want an error naming it", p, err)
	}
}
