package bench

import "testing"

// TestSeriesReportExitCode: a failed request fails the run even on a
// disturbed host (it is about tine, not the machine), as a failed variant
// does in Report.ExitCode; a disturbed host hides a missed target.
func TestSeriesReportExitCode(t *testing.T) {
	disturbed := Verdict{Disturbed: true, Reasons: []string{"load"}}
	missed := []Check{{Text: "x", Outcome: Missed}}
	for _, tc := range []struct {
		name string
		r    SeriesReport
		want int
	}{
		{"clean", SeriesReport{Checks: []Check{{Outcome: Met}}}, 0},
		{"missed", SeriesReport{Checks: missed}, 1},
		{"disturbed hides a miss", SeriesReport{Verdict: disturbed, Checks: missed}, 2},
		{"errored series on a disturbed host", SeriesReport{Verdict: disturbed, Series: []Series{{Errors: 1}}}, 1},
		{"listed errors on a disturbed host", SeriesReport{Verdict: disturbed, Errors: []string{"t+1.0s exec: boom"}}, 1},
	} {
		if got := tc.r.ExitCode(); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}
