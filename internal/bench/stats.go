package bench

import (
	"math"
	"slices"
	"time"
)

// Stats summarises the kept samples of one variant. Every time is in
// nanoseconds; the field names say so because the JSON is read by other tools.
type Stats struct {
	N int `json:"n"`
	// Discarded counts the warm-up runs left out of every figure below.
	Discarded int   `json:"discarded_warmups"`
	MinNs     int64 `json:"min_ns"`
	P50Ns     int64 `json:"p50_ns"`
	P90Ns     int64 `json:"p90_ns"`
	P99Ns     int64 `json:"p99_ns"`
	MaxNs     int64 `json:"max_ns"`
	MeanNs    int64 `json:"mean_ns"`
}

// Summarize computes Stats over samples, which it leaves in their order;
// discarded is the number of warm-up runs that were thrown away before them.
// With no samples every figure is zero.
func Summarize(samples []time.Duration, discarded int) Stats {
	s := Stats{N: len(samples), Discarded: discarded}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	s.MinNs = int64(sorted[0])
	s.MaxNs = int64(sorted[len(sorted)-1])
	s.MeanNs = int64(sum) / int64(len(sorted))
	s.P50Ns = int64(Percentile(sorted, 50))
	s.P90Ns = int64(Percentile(sorted, 90))
	s.P99Ns = int64(Percentile(sorted, 99))
	return s
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be in ascending order: the smallest sample that at least
// p% of the samples do not exceed. Nearest rank always reports a time that was
// actually measured, never an interpolation between two runs.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// p*n before the division keeps whole percentages exact (99*100/100 is 99,
	// where 0.99*100 is not).
	rank := int(math.Ceil(p * float64(n) / 100))
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// mean is the arithmetic mean of xs, 0 for none.
func mean[T int64 | float64](xs []T) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	return sum / float64(len(xs))
}
