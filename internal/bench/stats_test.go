package bench

import (
	"slices"
	"testing"
	"time"
)

func millisRange(from, to int) []time.Duration {
	var ds []time.Duration
	for i := from; i <= to; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	return ds
}

func TestPercentileNearestRank(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"1..100 p50", millisRange(1, 100), 50, 50 * ms},
		{"1..100 p90", millisRange(1, 100), 90, 90 * ms},
		{"1..100 p99", millisRange(1, 100), 99, 99 * ms},
		{"1..100 p100", millisRange(1, 100), 100, 100 * ms},
		{"1..10 p50", millisRange(1, 10), 50, 5 * ms},
		{"1..10 p90", millisRange(1, 10), 90, 9 * ms},
		{"1..10 p99 rounds up to the max", millisRange(1, 10), 99, 10 * ms},
		{"1..4 p50 is the lower median", millisRange(1, 4), 50, 2 * ms},
		{"one sample", millisRange(7, 7), 99, 7 * ms},
		{"tiny p never below the min", millisRange(1, 10), 0.001, 1 * ms},
		{"empty", nil, 50, 0},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	samples := []time.Duration{5, 1, 4, 2, 3}
	orig := slices.Clone(samples)
	got := Summarize(samples, 2)
	want := Stats{N: 5, Discarded: 2, MinNs: 1, P50Ns: 3, P90Ns: 5, P99Ns: 5, MaxNs: 5, MeanNs: 3}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if !slices.Equal(samples, orig) {
		t.Errorf("Summarize reordered its input: %v", samples)
	}
	if got := Summarize(nil, 3); got != (Stats{Discarded: 3}) {
		t.Errorf("Summarize(nil) = %+v, want only the discarded count", got)
	}
}
