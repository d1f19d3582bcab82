package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func ptr(f float64) *float64 { return &f }

// sampleGroup has a measured reference, a measured subject with a target it
// meets, a failed peer and an unavailable one.
func sampleGroup() GroupResult {
	g := GroupResult{
		Name: "/bin/true", Reference: "bwrap", Subject: "tine",
		Variants: []VariantResult{
			{Name: "tine", Stats: &Stats{N: 3, P50Ns: 1_000_000, P90Ns: 2_000_000, P99Ns: 3_000_000}, P50Ratio: ptr(0.5), SamplesNs: []int64{1, 2, 3}},
			{Name: "bwrap", Stats: &Stats{N: 3, P50Ns: 2_000_000, P90Ns: 2_000_000, P99Ns: 2_000_000}, P50Ratio: ptr(1)},
			{Name: "unshare", Argv: []string{"unshare", "-f", "/bin/true"}, Failure: &Failure{Phase: "measured", Run: 2, Error: "exit status 1", Stderr: "unshare: nope\n"}},
			{Name: "other", Unavailable: "not available: other not installed"},
		},
	}
	g.Targets = evaluateTargets([]Target{{Variant: "tine", MaxRatio: 0.6, Text: "tine at most 0.6x"}}, g)
	return g
}

func TestEvaluateTarget(t *testing.T) {
	g := sampleGroup()
	for _, tc := range []struct {
		name    string
		target  Target
		mutate  func(*GroupResult)
		outcome Outcome
	}{
		{"met", Target{Variant: "tine", MaxRatio: 0.6}, nil, Met},
		{"missed", Target{Variant: "tine", MaxRatio: 0.4}, nil, Missed},
		{"failed variant", Target{Variant: "unshare", MaxRatio: 9}, nil, NotMeasured},
		{"unavailable variant", Target{Variant: "other", MaxRatio: 9}, nil, NotMeasured},
		{"unknown variant", Target{Variant: "nope", MaxRatio: 9}, nil, NotMeasured},
		{"disturbed host", Target{Variant: "tine", MaxRatio: 0.6}, func(g *GroupResult) { g.Verdict.Disturbed = true }, NotMeasured},
	} {
		g := g
		g.Variants = append([]VariantResult(nil), g.Variants...)
		if tc.mutate != nil {
			tc.mutate(&g)
		}
		r := evaluateTarget(tc.target, g)
		if r.Outcome != tc.outcome {
			t.Errorf("%s: outcome %q (%s), want %q", tc.name, r.Outcome, r.Why, tc.outcome)
		}
		if r.Outcome == NotMeasured && r.Why == "" {
			t.Errorf("%s: not measured without a reason", tc.name)
		}
	}
}

func TestWriteTable(t *testing.T) {
	r := Report{Suite: "cold", Config: Options{Rounds: 3, Warmup: 1}, Groups: []GroupResult{sampleGroup()}}
	var out bytes.Buffer
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.000", "0.50x", "tine p50 / bwrap p50 = 0.50x", "tine at most 0.6x: MET",
		"unshare failed in measured run 2: exit status 1", "stderr: unshare: nope", "not available: other not installed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), notMeasured) {
		t.Errorf("quiet host's table says %s:\n%s", notMeasured, out.String())
	}

	r.Groups[0].Verdict = Verdict{Disturbed: true, Reasons: []string{"1-minute load average 3.00 after exceeds 2 cores"}}
	r.Groups[0].Targets = evaluateTargets([]Target{{Variant: "tine", MaxRatio: 0.6, Text: "tine at most 0.6x"}}, r.Groups[0])
	out.Reset()
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NOT MEASURED: 1-minute load average", "tine p50 / bwrap p50 = NOT MEASURED", "tine at most 0.6x: NOT MEASURED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("disturbed table lacks %q:\n%s", want, out.String())
		}
	}
	for _, figure := range []string{"1.000", "0.50x"} {
		if strings.Contains(out.String(), figure) {
			t.Errorf("disturbed table still shows the figure %q:\n%s", figure, out.String())
		}
	}
}

func TestExitCode(t *testing.T) {
	quiet := Report{Groups: []GroupResult{{Targets: []TargetResult{{Outcome: Met}}}}}
	missed := Report{Groups: []GroupResult{{Targets: []TargetResult{{Outcome: Missed}}}}}
	disturbed := Report{Groups: []GroupResult{{Verdict: Verdict{Disturbed: true}}}}
	failedOnDisturbed := Report{Groups: []GroupResult{{Verdict: Verdict{Disturbed: true}, Variants: []VariantResult{{Failure: &Failure{}}}}}}
	unavailable := Report{Groups: []GroupResult{{Variants: []VariantResult{{Unavailable: "not available: x"}}}}}
	for name, tc := range map[string]struct {
		r    Report
		want int
	}{
		"quiet": {quiet, 0}, "missed": {missed, 1}, "disturbed": {disturbed, 2},
		"failed on a disturbed host": {failedOnDisturbed, 1}, "unavailable peer": {unavailable, 0},
	} {
		if got := tc.r.ExitCode(); got != tc.want {
			t.Errorf("%s: ExitCode = %d, want %d", name, got, tc.want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cold.json")
	r := Report{Suite: "cold", Fingerprint: TakeFingerprint(), Groups: []GroupResult{sampleGroup()}}
	if err := WriteJSON(path, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	for _, key := range []string{`"samples_ns": [`, `"p50_ns": 1000000`, `"kernel":`, `"tine_version":`, `"outcome": "met"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestWritePlots(t *testing.T) {
	dir := t.TempDir()
	empty := GroupResult{Name: "nothing measured", Variants: []VariantResult{{Name: "x", Unavailable: "not available: x"}}}
	files, err := WritePlots(dir, Report{Suite: "cold", Groups: []GroupResult{sampleGroup(), empty}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "cold-bin-true-cdf.svg")}; !slices.Equal(files, want) {
		t.Fatalf("wrote %q, want %q (a group without samples gets no chart)", files, want)
	}
	svg, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
	}
	if !bytes.Contains(svg, []byte("<polyline")) || !bytes.Contains(svg, []byte("tine (n=3)")) {
		t.Errorf("chart lacks the tine curve:\n%s", svg)
	}
}
