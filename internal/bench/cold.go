package bench

import (
	"os"
	"slices"
	"strings"
)

// ColdTargets are the issues' bars for a one-shot run, applied to both ways
// tine runs one: in-process, and handed to a daemon with a ready pool. The
// first issue asked for 0.6x bwrap; issue 16 for at most 1.0x, with the
// limits, seccomp and Landlock on: both are reported.
var ColdTargets = []Target{
	{Variant: "tine", MaxRatio: 0.6, Text: "tine run /bin/true p50 at most 0.6x bwrap's p50 (in-process)"},
	{Variant: "tine via daemon", MaxRatio: 0.6, Text: "tine run /bin/true p50 at most 0.6x bwrap's p50 (handed to tine serve)"},
	{Variant: "tine", MaxRatio: 1.0, Text: "tine run /bin/true p50 at most 1.0x bwrap's p50 (in-process; issue 16)"},
	{Variant: "tine via daemon", MaxRatio: 1.0, Text: "tine run /bin/true p50 at most 1.0x bwrap's p50 (handed to tine serve; issue 16)"},
}

// ColdPayloads are what the cold suite starts: the cheapest possible process,
// and an interpreter that maps and reads a good deal more.
var ColdPayloads = [][]string{
	{"/bin/true"},
	// Explicitly /usr/bin: a python3 found on PATH may be a slow pyenv shim.
	{"/usr/bin/python3", "-c", "pass"},
}

// ColdGroups is the cold-start suite: per payload, one group that runs it
// bare (the floor), under tine run with limits (seccomp and Landlock are on
// by default) in-process, in-process with --userns, and handed to the
// daemon on socket, the same two under tine-run (the small binary of
// tine run's own code, found next to tine: ADR 0023), under bwrap
// (the reference) and under unshare. tinePath is the tine binary to
// measure; socket empty (or daemonWhy set) makes the daemon variants
// unavailable.
func ColdGroups(tinePath, socket, daemonWhy string) []Group {
	limits := []string{"--memory", "512m", "--pids", "256", "--cpus", "1", "--"}
	tineRun, runWhy := tinePath+"-run", ""
	if _, err := os.Stat(tineRun); err != nil {
		runWhy = "not available: no tine-run next to tine (make build makes it)"
	}
	runDaemonWhy := runWhy
	if daemonWhy != "" {
		runDaemonWhy = daemonWhy
	}
	wrappers := []struct {
		name   string
		prefix []string
		why    string
	}{
		{"bare", nil, ""},
		{"tine", slices.Concat([]string{tinePath, "run", "--in-process"}, limits), ""},
		{"tine via daemon", slices.Concat([]string{tinePath, "run", "--socket", socket}, limits), daemonWhy},
		{"tine-run", slices.Concat([]string{tineRun, "--in-process"}, limits), runWhy},
		{"tine-run via daemon", slices.Concat([]string{tineRun, "--socket", socket}, limits), runDaemonWhy},
		// The same run with its root mapped to an unprivileged uid range:
		// what the stronger wall costs.
		{"tine --userns", slices.Concat([]string{tinePath, "run", "--in-process", "--userns"}, limits), ""},
		{"bwrap", []string{"bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"}, ""},
		{"unshare", []string{"unshare", "-fpmn", "--mount-proc"}, ""},
	}
	var groups []Group
	for _, payload := range ColdPayloads {
		g := Group{Name: strings.Join(payload, " "), Reference: "bwrap", Subject: "tine"}
		if payload[0] == "/bin/true" {
			g.Targets = ColdTargets
		}
		var missing string
		if _, err := os.Stat(payload[0]); err != nil {
			missing = "not available: " + err.Error()
		}
		for _, w := range wrappers {
			v := Variant{Name: w.name, Argv: slices.Concat(w.prefix, payload), Unavailable: missing}
			if w.why != "" {
				v.Unavailable = w.why
			}
			if w.prefix != nil {
				// Only a wrapper that ran the payload and passed its
				// status on exits 7 here.
				v.Verify = VerifyExitCode(slices.Concat(w.prefix, []string{"/bin/sh", "-c", "exit 7"}), 7)
			}
			g.Variants = append(g.Variants, v)
		}
		groups = append(groups, g)
	}
	return groups
}
