package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRotation(t *testing.T) {
	want := [][]int{{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}, {0, 1, 3, 2}}
	for round, w := range want {
		if got := Rotation(4, round); !slices.Equal(got, w) {
			t.Errorf("Rotation(4, %d) = %v, want %v", round, got, w)
		}
	}
	for k := 1; k <= 7; k++ {
		rounds := k
		if k%2 == 1 {
			rounds = 2 * k
		}
		// Every variant takes every position, and follows every other
		// variant, equally often.
		pos := make([][]int, k)
		after := make([][]int, k)
		for v := range k {
			pos[v], after[v] = make([]int, k), make([]int, k)
		}
		for round := range rounds {
			order := Rotation(k, round)
			seen := make([]bool, k)
			for i, v := range order {
				if seen[v] {
					t.Fatalf("Rotation(%d, %d) = %v runs %d twice", k, round, order, v)
				}
				seen[v] = true
				pos[v][i]++
				if i > 0 {
					after[v][order[i-1]]++
				}
			}
		}
		for v := range k {
			for i := range k {
				if pos[v][i] != rounds/k {
					t.Errorf("k=%d: variant %d ran at position %d %d times in %d rounds, want %d", k, v, i, pos[v][i], rounds, rounds/k)
				}
				if i != v && after[v][i] != rounds/k {
					t.Errorf("k=%d: variant %d ran straight after %d %d times in %d rounds, want %d", k, v, i, after[v][i], rounds, rounds/k)
				}
			}
		}
	}
}

// quietOptions' guard never finds the host disturbed (not by load, busy
// cores or steal): these tests are about the runner, not about the host
// that runs them.
func quietOptions(rounds, warmup int) Options {
	g := NewGuard(2)
	g.TrustHost = true
	return Options{Rounds: rounds, Warmup: warmup, Guard: g}
}

func TestRunGroupRealCommands(t *testing.T) {
	g := Group{
		Name:      "cheap",
		Reference: "true",
		Variants: []Variant{
			{Name: "true", Argv: []string{"/bin/true"}},
			{Name: "sleep", Argv: []string{"/bin/sleep", "0"}},
			{Name: "failing", Argv: []string{"/bin/sh", "-c", "echo boom >&2; exit 3"}},
			{Name: "missing", Argv: []string{"/nonexistent/tine-bench-peer"}},
			{Name: "declared", Argv: []string{"/bin/true"}, Unavailable: "not available: declared so"},
		},
	}
	res, err := RunGroup(context.Background(), g, quietOptions(5, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Variants) != len(g.Variants) {
		t.Fatalf("got %d variant results, want %d: nothing is dropped", len(res.Variants), len(g.Variants))
	}
	for _, name := range []string{"true", "sleep"} {
		v, _ := res.Variant(name)
		if v.Failure != nil || v.Unavailable != "" || !v.Measured() {
			t.Fatalf("%s: not measured: %+v", name, v)
		}
		if v.Stats.N != 5 || v.Stats.Discarded != 2 || len(v.SamplesNs) != 5 || len(v.WarmupNs) != 2 {
			t.Errorf("%s: n=%d discarded=%d samples=%d warm-ups=%d, want 5 2 5 2",
				name, v.Stats.N, v.Stats.Discarded, len(v.SamplesNs), len(v.WarmupNs))
		}
		for _, ns := range slices.Concat(v.SamplesNs, v.WarmupNs) {
			if ns <= 0 {
				t.Errorf("%s: non-positive sample %d", name, ns)
			}
		}
		if s := v.Stats; !(s.MinNs <= s.P50Ns && s.P50Ns <= s.P90Ns && s.P90Ns <= s.P99Ns && s.P99Ns <= s.MaxNs) {
			t.Errorf("%s: figures out of order: %+v", name, s)
		}
		if v.P50Ratio == nil {
			t.Errorf("%s: no ratio to the reference", name)
		}
	}
	if ref, _ := res.Variant("true"); ref.P50Ratio == nil || *ref.P50Ratio != 1 {
		t.Errorf("reference ratio = %v, want 1", ref.P50Ratio)
	}

	failing, _ := res.Variant("failing")
	if f := failing.Failure; f == nil {
		t.Errorf("failing command not reported as failed: %+v", failing)
	} else {
		if f.Phase != "warm-up" || f.Run != 1 || f.Error != "exit status 3" || strings.TrimSpace(f.Stderr) != "boom" {
			t.Errorf("failure = %+v, want warm-up run 1, exit status 3, stderr boom", f)
		}
		if failing.Stats != nil || failing.P50Ratio != nil {
			t.Errorf("failed variant has figures: %+v", failing)
		}
	}
	if missing, _ := res.Variant("missing"); !strings.HasPrefix(missing.Unavailable, "not available: ") || missing.Stats != nil {
		t.Errorf("missing binary: %+v, want not available and no figures", missing)
	}
	if declared, _ := res.Variant("declared"); declared.Unavailable != "not available: declared so" || declared.Stats != nil {
		t.Errorf("declared unavailable: %+v", declared)
	}
}

func TestRunGroupInterleavesAndVerifies(t *testing.T) {
	var log []string
	record := func(name string) func(context.Context) error {
		return func(context.Context) error { log = append(log, name); return nil }
	}
	g := Group{
		Name:      "funcs",
		Reference: "a",
		Variants: []Variant{
			{Name: "a", Func: record("a")},
			{Name: "b", Func: record("b")},
			{Name: "stub", Func: record("stub"), Verify: func(context.Context) error { return errors.New("did not run the payload") }},
			{Name: "c", Func: record("c"), Verify: func(context.Context) error { return nil }},
		},
	}
	res, err := RunGroup(context.Background(), g, quietOptions(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	// Rounds 0, 1, 2 of Rotation(4) over a b stub c (a b c stub, b stub a
	// c, stub c b a), with the stub never run.
	want := []string{"a", "b", "c", "b", "a", "c", "c", "b", "a"}
	if !slices.Equal(log, want) {
		t.Errorf("run order %v, want %v", log, want)
	}
	stub, _ := res.Variant("stub")
	if stub.Failure == nil || stub.Failure.Phase != "preflight" || stub.Failure.Error != "did not run the payload" {
		t.Errorf("stub failure = %+v, want a preflight failure", stub.Failure)
	}
}

func TestRunGroupStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	g := Group{Name: "cancel", Reference: "a", Variants: []Variant{
		{Name: "a", Func: func(context.Context) error { calls++; cancel(); return nil }},
	}}
	if _, err := RunGroup(ctx, g, quietOptions(100, 0)); !errors.Is(err, context.Canceled) {
		t.Errorf("RunGroup after cancel: %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("ran %d times after cancel, want 1", calls)
	}
}

func TestVerifyExitCode(t *testing.T) {
	ctx := context.Background()
	if err := VerifyExitCode([]string{"/bin/sh", "-c", "exit 7"}, 7)(ctx); err != nil {
		t.Errorf("a command exiting 7 failed the check for 7: %v", err)
	}
	err := VerifyExitCode([]string{"/bin/sh", "-c", "echo stub >&2"}, 7)(ctx)
	ce, ok := errors.AsType[*CommandError](err)
	if !ok {
		t.Fatalf("a command exiting 0 passed the check for 7 (err %v)", err)
	}
	if strings.TrimSpace(ce.Output) != "stub" || !strings.Contains(ce.Error(), `/bin/sh -c 'echo stub >&2'`) {
		t.Errorf("CommandError = %q, output %q", ce.Error(), ce.Output)
	}
}

func TestRunGroupKeepsRunsBeforeAFailure(t *testing.T) {
	calls := 0
	g := Group{Name: "flaky", Reference: "flaky", Variants: []Variant{
		{Name: "flaky", Func: func(context.Context) error {
			if calls++; calls == 4 {
				return errors.New("fourth call fails")
			}
			return nil
		}},
	}}
	res, err := RunGroup(context.Background(), g, quietOptions(5, 1))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Variants[0]
	if v.Failure == nil || v.Failure.Phase != "measured" || v.Failure.Run != 3 {
		t.Fatalf("failure = %+v, want measured run 3", v.Failure)
	}
	if len(v.WarmupNs) != 1 || len(v.SamplesNs) != 2 || v.Stats != nil || calls != 4 {
		t.Errorf("warm-ups %d samples %d stats %v calls %d; want 1 kept warm-up, 2 kept samples, no figures, no run after the failure",
			len(v.WarmupNs), len(v.SamplesNs), v.Stats, calls)
	}
}

// A group's Measure runs after its rounds; its checks are in the result,
// a missed one misses the report, and a failed Measure reads NOT MEASURED.
func TestRunGroupMeasures(t *testing.T) {
	ran := 0
	g := Group{
		Name:     "mem",
		Variants: []Variant{{Name: "a", Func: func(context.Context) error { ran++; return nil }}},
		Measure: func(context.Context) ([]Check, error) {
			if ran != 3 {
				t.Errorf("Measure ran after %d of 3 runs", ran)
			}
			return []Check{check("MiB per child (at most)", 3, 2, true), {Text: "MiB after", Value: 4}}, nil
		},
	}
	res, err := RunGroup(context.Background(), g, quietOptions(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Checks) != 2 || res.Checks[0].Outcome != Missed {
		t.Fatalf("checks %+v, want the bar missed", res.Checks)
	}
	if r := (Report{Groups: []GroupResult{res}}); !r.Missed() {
		t.Error("a missed check does not miss the report")
	}
	g.Measure = func(context.Context) ([]Check, error) { return nil, errors.New("no children") }
	res, err = RunGroup(context.Background(), g, quietOptions(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Checks) != 1 || res.Checks[0].Outcome != NotMeasured || res.Checks[0].Why != "no children" {
		t.Errorf("a failed Measure: %+v", res.Checks)
	}
}
