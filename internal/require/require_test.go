package require

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/probe"
)

func TestParseStrict(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"", nil},
		{"root", []string{"root"}},
		{"root,userns,netns,overlayfs,cgroup,seccomp,landlock,bwrap",
			[]string{"bwrap", "cgroup", "landlock", "ns.net", "overlayfs", "root", "seccomp", "userns"}},
		{" ns.pid , mntns,,", []string{"ns.mount", "ns.pid"}},
		{"ns", []string{"ns.cgroup", "ns.ipc", "ns.mount", "ns.net", "ns.pid", "ns.uts"}},
		{"bin:python3,criu", []string{"bin:python3", "criu"}},
	} {
		got, err := parseStrict(tc.value)
		if err != nil {
			t.Errorf("parseStrict(%q): %v", tc.value, err)
			continue
		}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tc.want) {
			t.Errorf("parseStrict(%q) = %v, want %v", tc.value, keys, tc.want)
		}
	}
	for _, bad := range []string{"overlay", "root,netns,landlok", "bin:", "NETNS"} {
		if _, err := parseStrict(bad); err == nil {
			t.Errorf("parseStrict(%q) accepted an unknown name", bad)
		}
	}
}

// recorder is a testing.TB that records skips and failures instead of
// ending the test, so gates can be watched from outside.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestBinaryGate(t *testing.T) {
	const absent = "tine-no-such-program"
	for _, tc := range []struct {
		strict         string
		skip, fail     bool
		messageHasText string
	}{
		{strict: "", skip: true, messageHasText: "needs " + absent + ": not found on PATH"},
		{strict: "root", skip: true, messageHasText: "needs " + absent},
		{strict: "bin:" + absent, fail: true, messageHasText: "TINE_STRICT lists bin:" + absent},
		{strict: "landlok", fail: true, messageHasText: `unknown feature "landlok"`},
	} {
		t.Setenv(StrictEnv, tc.strict)
		r := &recorder{TB: t}
		Binary(r, absent)
		if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
			t.Errorf("TINE_STRICT=%q: skipped %q, failed %q; want skip %v, fail %v", tc.strict, r.skipped, r.failed, tc.skip, tc.fail)
		}
		if msg := r.skipped + r.failed; !strings.Contains(msg, tc.messageHasText) {
			t.Errorf("TINE_STRICT=%q: message %q lacks %q", tc.strict, msg, tc.messageHasText)
		}
	}
}

// A present program passes its gate, but an unreadable TINE_STRICT still fails.
func TestPresentBinaryPassesUnlessStrictListIsBad(t *testing.T) {
	t.Setenv(StrictEnv, "bin:sh")
	r := &recorder{TB: t}
	Binary(r, "sh")
	if r.skipped != "" || r.failed != "" {
		t.Errorf("Binary(sh): skipped %q, failed %q", r.skipped, r.failed)
	}
	t.Setenv(StrictEnv, "overlay")
	r = &recorder{TB: t}
	Binary(r, "sh")
	if r.failed == "" {
		t.Error("Binary(sh) with TINE_STRICT=overlay did not fail")
	}
}

// Gates agree with the probe: a gate passes exactly when its check does,
// and a missing feature listed as strict fails rather than skips.
func TestGatesAgreeWithProbe(t *testing.T) {
	for _, name := range probe.Names() {
		c := probe.Get(name)
		for _, strict := range []string{"", name} {
			t.Setenv(StrictEnv, strict)
			r := &recorder{TB: t}
			Feature(r, name)
			switch {
			case c.OK && (r.skipped != "" || r.failed != ""):
				t.Errorf("%s is OK but the gate stopped the test: %q %q", name, r.skipped, r.failed)
			case !c.OK && strict == "" && r.skipped != "needs "+name+": "+c.Detail:
				t.Errorf("%s missing: skip message %q, want %q", name, r.skipped, "needs "+name+": "+c.Detail)
			case !c.OK && strict != "" && r.failed == "":
				t.Errorf("%s missing and strict, but the gate did not fail", name)
			}
		}
	}
}

func TestLandlockGate(t *testing.T) {
	t.Setenv(StrictEnv, "")
	c := probe.Get("landlock")
	r := &recorder{TB: t}
	Landlock(r, 1000)
	want := fmt.Sprintf("needs Landlock ABI >= 1000: found ABI %d", c.Value)
	if !c.OK {
		want = "needs Landlock ABI >= 1000: " + c.Detail
	}
	if r.skipped != want {
		t.Errorf("Landlock(1000) skipped %q, want %q", r.skipped, want)
	}
	if c.OK {
		r = &recorder{TB: t}
		Landlock(r, c.Value)
		if r.skipped != "" || r.failed != "" {
			t.Errorf("Landlock(%d) on ABI %d: skipped %q, failed %q", c.Value, c.Value, r.skipped, r.failed)
		}
	}
}

func TestCRIUGate(t *testing.T) {
	t.Setenv(StrictEnv, "")
	c := probe.Get("criu")
	r := &recorder{TB: t}
	CRIU(r, "999.0")
	if want := "needs criu >= 999.0: " + c.Detail; r.skipped != want {
		t.Errorf("CRIU(999.0) skipped %q, want %q", r.skipped, want)
	}
	t.Setenv(StrictEnv, "criu")
	r = &recorder{TB: t}
	CRIU(r, "999.0")
	if r.failed == "" {
		t.Errorf("CRIU(999.0) with TINE_STRICT=criu did not fail")
	}
}

func TestUnknownFeatureFails(t *testing.T) {
	t.Setenv(StrictEnv, "")
	r := &recorder{TB: t}
	Feature(r, "overlay")
	if r.failed == "" || r.skipped != "" {
		t.Errorf("Feature(overlay): skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}
