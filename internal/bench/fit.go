package bench

import "errors"

// Line is a least-squares fit y = Slope·x + Intercept over N points.
type Line struct {
	Slope     float64 `json:"slope"`
	Intercept float64 `json:"intercept"`
	N         int     `json:"n"`
}

// FitLine fits a line to the points (xs[i], ys[i]) by least squares. The
// slope is how a per-instance cost is read off totals measured at several
// counts: the first instance's share of what all of them share does not
// weigh on it as it would on total/N.
func FitLine(xs, ys []float64) (Line, error) {
	if len(xs) != len(ys) {
		return Line{}, errors.New("fit: as many x as y values needed")
	}
	n := float64(len(xs))
	if len(xs) < 2 {
		return Line{}, errors.New("fit: at least two points needed")
	}
	var sx, sy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
	}
	mx, my := sx/n, sy/n
	// Centred sums: no cancellation between large totals (bytes at x in
	// the thousands).
	var sxx, sxy float64
	for i := range xs {
		dx := xs[i] - mx
		sxx += dx * dx
		sxy += dx * (ys[i] - my)
	}
	if sxx == 0 {
		return Line{}, errors.New("fit: every x is the same, so there is no slope")
	}
	slope := sxy / sxx
	return Line{Slope: slope, Intercept: my - slope*mx, N: len(xs)}, nil
}
