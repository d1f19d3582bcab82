package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"
)

// Variant is one way of doing the thing a group measures: a command line to
// exec and wait for, or a Go function to call.
type Variant struct {
	Name string
	// Argv is exec'd directly (no shell); Argv[0] is looked up in $PATH once,
	// before any timing.
	Argv []string
	// Func, when set, is timed instead of Argv.
	Func func(context.Context) error
	// Before, when set, runs before each timed Func call, untimed (e.g. to
	// space the calls out).
	Before func(context.Context) error
	// After, when set, runs after each timed Func call, untimed (e.g. to
	// delete what Func created).
	After func(context.Context) error
	// Verify, when set, runs once before the warm-ups and must prove that
	// the variant really does the work (a stub that exits 0 at once would
	// otherwise post the best time). An error marks the variant failed.
	Verify func(context.Context) error
	// Unavailable says why this variant cannot run on this host; it is
	// reported instead of run.
	Unavailable string
}

// Group is a set of variants measured together, interleaved, under one
// host-state window, and compared with Reference by the ratio of p50s.
type Group struct {
	Name      string
	Reference string
	// Subject is the variant the group is about (tine's); its ratio to the
	// reference is the group's headline.
	Subject  string
	Variants []Variant
	Targets  []Target
	// Measure, when set, measures figures that are not latencies (memory
	// per fork child, …) after the rounds, inside the group's host window,
	// each against its bar.
	Measure func(ctx context.Context) ([]Check, error)
}

// Failure is the first failed run of a variant. The variant is not run again,
// and it has no figures: a command that fails now and then would mix timings
// of two different things.
type Failure struct {
	// Phase is "preflight", "warm-up" or "measured"; Run counts from 1 within it.
	Phase  string `json:"phase"`
	Run    int    `json:"run"`
	Error  string `json:"error"`
	Stderr string `json:"stderr,omitempty"`
}

// VariantResult is what became of one variant.
type VariantResult struct {
	Name        string   `json:"name"`
	Argv        []string `json:"argv,omitempty"`
	Unavailable string   `json:"unavailable,omitempty"`
	Failure     *Failure `json:"failure,omitempty"`
	Stats       *Stats   `json:"stats,omitempty"`
	// P50Ratio is this variant's p50 over the reference's, when both exist.
	P50Ratio *float64 `json:"p50_ratio_to_reference,omitempty"`
	// SamplesNs are the measured runs in the order they ran (for a failed
	// variant, those before the failure); WarmupNs the discarded ones. Both
	// are kept so that nothing measured is hidden.
	SamplesNs []int64 `json:"samples_ns,omitempty"`
	WarmupNs  []int64 `json:"warmup_samples_ns,omitempty"`
}

// Measured reports whether the variant has figures.
func (v VariantResult) Measured() bool { return v.Stats != nil && v.Stats.N > 0 }

// GroupResult is one group's figures with the host states that bracket them.
type GroupResult struct {
	Name      string          `json:"name"`
	Reference string          `json:"reference"`
	Subject   string          `json:"subject,omitempty"`
	Before    HostState       `json:"before"`
	After     HostState       `json:"after"`
	Verdict   Verdict         `json:"verdict"`
	Variants  []VariantResult `json:"variants"`
	Targets   []TargetResult  `json:"targets,omitempty"`
	// Checks are Group.Measure's figures (NOT MEASURED on a disturbed host).
	Checks []Check `json:"checks,omitempty"`
}

// Variant returns the result of the variant called name.
func (g GroupResult) Variant(name string) (VariantResult, bool) {
	for _, v := range g.Variants {
		if v.Name == name {
			return v, true
		}
	}
	return VariantResult{}, false
}

// Options configure a run; they are recorded in the JSON as its config.
type Options struct {
	Rounds int `json:"rounds"`
	Warmup int `json:"warmup_rounds"`
	// Timeout bounds one run; a run that takes longer is killed and fails.
	Timeout time.Duration `json:"run_timeout_ns"`
	// Order documents the interleaving for readers of the JSON.
	Order string `json:"order"`
	// Guard reads the host state; nil means NewGuard(runtime.NumCPU()).
	Guard *Guard `json:"-"`
	// Progress, if set, gets one line as each group starts.
	Progress io.Writer `json:"-"`
}

// DefaultTimeout bounds a single run when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

const rotatedOrder = "balanced: round r runs variants (r + w_i) mod k, w = 0, 1, k-1, 2, k-2, ... (reversed in odd blocks of k rounds when k is odd), so each variant takes each position and follows each other variant equally often"

// stderrLimit caps how much of a failed command's stderr is kept.
const stderrLimit = 4 << 10

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Guard == nil {
		o.Guard = NewGuard(runtime.NumCPU())
	}
	o.Order = rotatedOrder
	return o
}

// Rotation is the order in which round runs k variants: a balanced Latin
// square (Williams's), shifted by one variant a round. Every variant takes
// every position equally often (over k rounds), and runs straight after
// every other variant equally often (over k rounds for an even k, 2k for
// an odd one, whose square is run forwards, then backwards): work a
// variant leaves behind (a daemon's refill after its run, a dirty cache)
// falls on each peer alike, not always on the one after it.
func Rotation(k, round int) []int {
	order := make([]int, k)
	lo, hi := 0, k-1
	for i := range order { // 0, 1, k-1, 2, k-2, ...
		switch {
		case i == 0:
			order[i], lo = 0, 1
		case i%2 == 1:
			order[i], lo = lo, lo+1
		default:
			order[i], hi = hi, hi-1
		}
	}
	if k%2 == 1 && (round/k)%2 == 1 {
		slices.Reverse(order)
	}
	for i := range order {
		order[i] = (order[i] + round) % k
	}
	return order
}

// RunGroup measures g: it verifies each available variant, runs
// opts.Warmup rounds whose times are discarded, then opts.Rounds rounds,
// each running every variant still standing once in balanced order
// (Rotation). It reads the host state before and after and judges it. The error is only for a cancelled
// ctx or a failure to set up; a failing variant is part of the result.
func RunGroup(ctx context.Context, g Group, opts Options) (GroupResult, error) {
	opts = opts.withDefaults()
	res := GroupResult{Name: g.Name, Reference: g.Reference, Subject: g.Subject, Variants: make([]VariantResult, len(g.Variants))}

	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return res, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer devNull.Close()

	timers := make([]timer, len(g.Variants))
	for i, v := range g.Variants {
		res.Variants[i] = VariantResult{Name: v.Name, Argv: v.Argv, Unavailable: v.Unavailable}
		if v.Unavailable != "" {
			continue
		}
		t, why, err := newTimer(v, devNull, opts.Timeout)
		if err != nil {
			closeTimers(timers)
			return res, err
		}
		if why != "" {
			res.Variants[i].Unavailable = why
			continue
		}
		timers[i] = t
	}
	defer closeTimers(timers)

	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "measuring %s: %d variants, %d warm-up + %d rounds\n",
			g.Name, len(g.Variants), opts.Warmup, opts.Rounds)
	}

	for i, v := range g.Variants {
		if timers[i] == nil || v.Verify == nil {
			continue
		}
		if err := v.Verify(ctx); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			f := &Failure{Phase: "preflight", Run: 1, Error: err.Error()}
			if ce, ok := errors.AsType[*CommandError](err); ok {
				f.Stderr = ce.Output
			}
			res.Variants[i].Failure = f
			timers[i].close()
			timers[i] = nil
		}
	}

	runtime.GC() // start each group with a clean heap, not a pending collection
	res.Before = opts.Guard.ReadBusy()
	warmups := make([][]time.Duration, len(timers))
	samples := make([][]time.Duration, len(timers))
	for i := range timers {
		// Room for every run up front: no slice growth between two timings.
		warmups[i] = make([]time.Duration, 0, opts.Warmup)
		samples[i] = make([]time.Duration, 0, opts.Rounds)
	}
	for round := range opts.Warmup + opts.Rounds {
		for _, i := range Rotation(len(timers), round) {
			t := timers[i]
			if t == nil {
				continue
			}
			d, err := t.once()
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if err != nil {
				res.Variants[i].Failure = t.failure(round, opts.Warmup, err)
				t.close()
				timers[i] = nil
				continue
			}
			if round < opts.Warmup {
				warmups[i] = append(warmups[i], d)
			} else {
				samples[i] = append(samples[i], d)
			}
		}
	}
	if g.Measure != nil {
		checks, err := g.Measure(ctx)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if err != nil {
			checks = append(checks, Check{Text: g.Name + ": measure", Outcome: NotMeasured, Why: err.Error()})
		}
		res.Checks = checks
	}
	// Judged at both ends by what the CPUs do over a second, not by the
	// 1-minute load average, which carries the group's own fan-outs.
	res.After = opts.Guard.ReadBusy()
	res.Verdict = opts.Guard.Judge(res.Before, res.After)
	if res.Verdict.Disturbed {
		for i := range res.Checks {
			res.Checks[i].Outcome, res.Checks[i].Why = NotMeasured, "host disturbed"
		}
	}

	for i := range res.Variants {
		v := &res.Variants[i]
		v.WarmupNs = nanoseconds(warmups[i])
		v.SamplesNs = nanoseconds(samples[i]) // a failed variant's runs before it failed, too
		if v.Failure != nil || v.Unavailable != "" {
			continue
		}
		st := Summarize(samples[i], len(warmups[i]))
		v.Stats = &st
	}
	if ref, ok := res.Variant(g.Reference); ok && ref.Measured() && ref.Stats.P50Ns > 0 {
		for i := range res.Variants {
			if v := &res.Variants[i]; v.Measured() {
				ratio := float64(v.Stats.P50Ns) / float64(ref.Stats.P50Ns)
				v.P50Ratio = &ratio
			}
		}
	}
	res.Targets = evaluateTargets(g.Targets, res)
	return res, nil
}

func nanoseconds(ds []time.Duration) []int64 {
	if len(ds) == 0 {
		return nil
	}
	ns := make([]int64, len(ds))
	for i, d := range ds {
		ns[i] = int64(d)
	}
	return ns
}
