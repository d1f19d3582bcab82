package bench

import "fmt"

// Target is a pre-registered bar: Variant's p50 at most MaxRatio times the
// group's reference p50. Text states it as the issue or design doc does.
type Target struct {
	Variant  string  `json:"variant"`
	MaxRatio float64 `json:"max_p50_ratio"`
	// MaxExtraMs, when set, judges the p50's excess over the reference's
	// instead of the ratio (a cost added to a path, e.g. +2 ms).
	MaxExtraMs float64 `json:"max_p50_extra_ms,omitempty"`
	// Reference, when set, is the variant of the group the ratio is taken
	// against instead of the group's reference (a second bar against
	// another alternative measured in the same run).
	Reference string `json:"reference,omitempty"`
	Text      string `json:"text"`
}

// Outcome is what a run says about a target.
type Outcome string

const (
	Met         Outcome = "met"
	Missed      Outcome = "missed"
	NotMeasured Outcome = "not measured"
)

// TargetResult is a target judged against one group's figures.
type TargetResult struct {
	Target
	P50Ratio *float64 `json:"p50_ratio,omitempty"`
	// P50ExtraMs is the p50's excess over the reference's (MaxExtraMs).
	P50ExtraMs *float64 `json:"p50_extra_ms,omitempty"`
	Outcome    Outcome  `json:"outcome"`
	Why        string   `json:"why,omitempty"`
}

func evaluateTargets(targets []Target, g GroupResult) []TargetResult {
	var out []TargetResult
	for _, t := range targets {
		out = append(out, evaluateTarget(t, g))
	}
	return out
}

func evaluateTarget(t Target, g GroupResult) TargetResult {
	r := TargetResult{Target: t, Outcome: NotMeasured}
	v, _ := g.Variant(t.Variant)
	refName := g.Reference
	if t.Reference != "" {
		refName = t.Reference
	}
	ref, _ := g.Variant(refName)
	ratio := v.P50Ratio
	if t.Reference != "" && v.Measured() && ref.Measured() && ref.Stats.P50Ns > 0 {
		x := float64(v.Stats.P50Ns) / float64(ref.Stats.P50Ns)
		ratio = &x
	}
	switch {
	case g.Verdict.Disturbed:
		r.Why = "host disturbed"
	case !v.Measured():
		r.Why = t.Variant + " " + whyNoFigures(v)
	case !ref.Measured():
		r.Why = "reference " + refName + " " + whyNoFigures(ref)
	case t.MaxExtraMs > 0:
		extra := float64(v.Stats.P50Ns-ref.Stats.P50Ns) / 1e6
		r.P50Ratio, r.P50ExtraMs, r.Outcome = v.P50Ratio, &extra, Met
		if extra > t.MaxExtraMs {
			r.Outcome = Missed
		}
	case ratio == nil:
		r.Why = fmt.Sprintf("reference %s has a zero p50", refName)
	default:
		r.P50Ratio = ratio
		r.Outcome = Met
		if *ratio > t.MaxRatio {
			r.Outcome = Missed
		}
	}
	return r
}

// whyNoFigures explains an unmeasured variant in a few words, to follow its
// name.
func whyNoFigures(v VariantResult) string {
	switch {
	case v.Name == "":
		return "is not a variant of the group"
	case v.Unavailable != "":
		return v.Unavailable
	case v.Failure != nil:
		return "failed"
	}
	return "has no runs"
}
