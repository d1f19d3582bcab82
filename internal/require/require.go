// Package require holds the test gates: a test that needs root, a kernel
// feature or a program calls one first, and is skipped with
// "needs <what>: <observed>" when the host lacks it. The gates ask
// internal/probe — the same checks `tine doctor` reports — so what the
// tests skip and what the product says about a host never disagree.
//
// Strict mode: TINE_STRICT holds a comma-separated list of features the
// host is supposed to have (CI sets it). A gate whose feature is listed
// fails the test with the same message instead of skipping. Accepted names:
//
//   - every probe check: root, userns, ns.pid, ns.mount, ns.ipc, ns.uts,
//     ns.net, ns.cgroup, overlayfs, cgroup, seccomp, landlock, clone3, pidfd,
//     criu, containerd2, xvfb, bwrap, kernel;
//   - the namespace aliases pidns, mountns (or mntns), ipcns, utsns, netns,
//     cgroupns, and "ns" for all six;
//   - bin:NAME for Binary(t, NAME), e.g. bin:python3. Binary gates for
//     programs that have a check (bwrap, xvfb, criu) are also strict under
//     that check's name.
//
// Landlock and CRIU gates are strict under "landlock" and "criu" even when
// the feature is present but older than the test needs. An unknown name
// fails every gate, so a typo cannot quietly turn strict mode off.
package require

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/probe"
)

// StrictEnv names the environment variable listing strict features.
const StrictEnv = "TINE_STRICT"

// namespaceAliases maps the short names CI scripts use to probe checks.
var namespaceAliases = map[string]string{
	"pidns":    "ns.pid",
	"mountns":  "ns.mount",
	"mntns":    "ns.mount",
	"ipcns":    "ns.ipc",
	"utsns":    "ns.uts",
	"netns":    "ns.net",
	"cgroupns": "ns.cgroup",
}

// parseStrict turns a TINE_STRICT value into the set of keys gates look up:
// probe check names and bin:NAME entries.
func parseStrict(value string) (map[string]bool, error) {
	strict := map[string]bool{}
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "ns":
			for _, check := range namespaceAliases {
				strict[check] = true
			}
		case namespaceAliases[name] != "":
			strict[namespaceAliases[name]] = true
		case probe.Known(name):
			strict[name] = true
		case strings.HasPrefix(name, "bin:") && len(name) > len("bin:"):
			strict[name] = true
		default:
			return nil, fmt.Errorf("unknown feature %q (accepted: %s, the aliases ns, pidns, mountns, mntns, ipcns, utsns, netns, cgroupns, or bin:NAME)",
				name, strings.Join(probe.Names(), ", "))
		}
	}
	return strict, nil
}

// strictSet reads TINE_STRICT for a gate, failing t when it names an
// unknown feature — even if the gate would pass, so that a typo does not
// go unnoticed just because this host happens to be complete.
func strictSet(t testing.TB) (strict map[string]bool, ok bool) {
	t.Helper()
	strict, err := parseStrict(os.Getenv(StrictEnv))
	if err != nil {
		t.Fatalf("%s: %v", StrictEnv, err)
		return nil, false
	}
	return strict, true
}

// missing skips t with msg, or fails it when strict holds any of keys.
func missing(t testing.TB, strict map[string]bool, msg string, keys ...string) {
	t.Helper()
	for _, key := range keys {
		if strict[key] {
			t.Fatalf("%s (%s lists %s, so this test must not skip)", msg, StrictEnv, key)
			return
		}
	}
	t.Skip(msg)
}

// Root gates on running as root (euid 0).
func Root(t testing.TB) {
	t.Helper()
	Feature(t, "root")
}

// Feature gates on a probe check passing, e.g. Feature(t, "ns.net").
func Feature(t testing.TB, name string) {
	t.Helper()
	if !probe.Known(name) {
		t.Fatalf("require.Feature: no probe check named %q (checks: %s)", name, strings.Join(probe.Names(), ", "))
		return
	}
	strict, ok := strictSet(t)
	if !ok {
		return
	}
	if c := probe.Get(name); !c.OK {
		missing(t, strict, fmt.Sprintf("needs %s: %s", name, c.Detail), name)
	}
}

// Landlock gates on the kernel's Landlock ABI being at least minABI.
func Landlock(t testing.TB, minABI int) {
	t.Helper()
	strict, ok := strictSet(t)
	if !ok {
		return
	}
	c := probe.Get("landlock")
	switch {
	case !c.OK:
		missing(t, strict, fmt.Sprintf("needs Landlock ABI >= %d: %s", minABI, c.Detail), "landlock")
	case c.Value < minABI:
		missing(t, strict, fmt.Sprintf("needs Landlock ABI >= %d: found ABI %d", minABI, c.Value), "landlock")
	}
}

// Binary gates on a program being on PATH.
func Binary(t testing.TB, name string) {
	t.Helper()
	strict, ok := strictSet(t)
	if !ok {
		return
	}
	if _, err := exec.LookPath(name); err != nil {
		keys := []string{"bin:" + name}
		if check := strings.ToLower(name); probe.Known(check) {
			keys = append(keys, check)
		}
		missing(t, strict, fmt.Sprintf("needs %s: not found on PATH", name), keys...)
	}
}

// CRIU gates on a criu of version min or newer whose `criu check` passes.
func CRIU(t testing.TB, min string) {
	t.Helper()
	strict, ok := strictSet(t)
	if !ok {
		return
	}
	c := probe.Get("criu")
	if !c.OK || !probe.VersionAtLeast(c.Version, min) {
		missing(t, strict, fmt.Sprintf("needs criu >= %s: %s", min, c.Detail), "criu")
	}
}
