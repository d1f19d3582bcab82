// Package bench measures tine against its peers and floors on the host it
// runs on, following the project's BENCHMARKING rules: variants of one task run interleaved
// in the same run and are compared by ratio; figures are p50/p90/p99 with n,
// warm-ups discarded and every raw datapoint kept; each result carries the
// host's fingerprint; and a host that was loaded or CPU-throttled while it
// was measured gets NOT MEASURED instead of a number.
//
// A suite is a list of Groups (RunSuite); each group is a set of Variants
// (commands or Go functions) with a reference variant and optional Targets.
// The suites themselves (cold, ...) are plain data built by functions such
// as ColdGroups; the `tine bench` command only parses flags and prints.
package bench

import (
	"context"
	"os"
)

// Report is a whole suite's result: what WriteJSON writes and WriteTable
// prints.
type Report struct {
	Suite string `json:"suite"`
	// Command is the command line that produced the report, to rerun it.
	Command     []string      `json:"command"`
	Fingerprint Fingerprint   `json:"fingerprint"`
	Config      Options       `json:"config"`
	Groups      []GroupResult `json:"groups"`
}

// RunSuite fingerprints the host, then runs each group in turn. Each group
// has its own host-state window, so a disturbance spoils only the figures
// measured while it lasted.
func RunSuite(ctx context.Context, suite string, groups []Group, opts Options) (Report, error) {
	fp := TakeFingerprint()
	if opts.Guard == nil {
		opts.Guard = NewGuard(fp.CPUs)
	}
	opts = opts.withDefaults()
	r := Report{Suite: suite, Command: os.Args, Fingerprint: fp, Config: opts}
	r.Fingerprint.Before = opts.Guard.Read()
	for _, g := range groups {
		res, err := RunGroup(ctx, g, opts)
		if err != nil {
			return r, err
		}
		r.Groups = append(r.Groups, res)
	}
	r.Fingerprint.After = opts.Guard.Read()
	return r, nil
}

// Failed reports whether any variant failed (unavailable ones do not count).
func (r Report) Failed() bool {
	for _, g := range r.Groups {
		for _, v := range g.Variants {
			if v.Failure != nil {
				return true
			}
		}
	}
	return false
}

// Disturbed reports whether any group was measured on a disturbed host.
func (r Report) Disturbed() bool {
	for _, g := range r.Groups {
		if g.Verdict.Disturbed {
			return true
		}
	}
	return false
}

// Missed reports whether any target was missed.
func (r Report) Missed() bool {
	for _, g := range r.Groups {
		for _, t := range g.Targets {
			if t.Outcome == Missed {
				return true
			}
		}
		for _, c := range g.Checks {
			if c.Outcome == Missed {
				return true
			}
		}
	}
	return false
}

// ExitCode maps a report to the exit status of `tine bench`, in one place for
// every suite: 1 when a variant failed (broken, whatever the host did), else
// 2 when the host was disturbed (NOT MEASURED: run it again later), else 1
// when a target was missed, else 0. An unavailable peer alone is not an error.
func (r Report) ExitCode() int {
	switch {
	case r.Failed():
		return 1
	case r.Disturbed():
		return 2
	case r.Missed():
		return 1
	}
	return 0
}
