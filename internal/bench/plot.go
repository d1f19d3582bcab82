package bench

import (
	"bytes"
	"fmt"
	"html"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WritePlots writes one SVG per group of r into dir: the latency CDF of every
// measured variant on a log time axis, where a shift is a ratio and a tail is
// visible at a glance. It returns the files written.
func WritePlots(dir string, r Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot directory: %w", err)
	}
	var written []string
	for _, g := range r.Groups {
		svg, ok := latencyCDF(r.Suite, g)
		if !ok {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%s-cdf.svg", r.Suite, fileSlug(g.Name)))
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			return written, fmt.Errorf("write plot: %w", err)
		}
		written = append(written, path)
	}
	return written, nil
}

// Plot geometry, in SVG user units.
const (
	plotWidth, plotHeight = 720, 420
	marginLeft, marginTop = 60, 40
	marginRight           = 20
	marginBottom          = 50
)

var plotColors = []string{"#1b6ca8", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f"}

// latencyCDF draws g, or reports false when no variant has samples.
func latencyCDF(suite string, g GroupResult) ([]byte, bool) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range g.Variants {
		if !v.Measured() {
			continue
		}
		for _, ns := range v.SamplesNs {
			lo, hi = min(lo, float64(ns)), max(hi, float64(ns))
		}
	}
	if math.IsInf(lo, 1) {
		return nil, false
	}
	// Whole decades around the data keep the axis readable.
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo { // every sample the same power of ten
		hi = lo * 10
	}
	innerW := float64(plotWidth - marginLeft - marginRight)
	innerH := float64(plotHeight - marginTop - marginBottom)
	x := func(ns float64) float64 {
		return marginLeft + innerW*(math.Log10(ns)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	y := func(fraction float64) float64 { return marginTop + innerH*(1-fraction) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("tine bench %s: %s, latency CDF", suite, g.Name)
	if g.Verdict.Disturbed {
		title += " (NOT MEASURED: host disturbed)"
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", marginLeft, html.EscapeString(title))

	for decade := lo; decade <= hi*1.0001; decade *= 10 {
		for _, step := range []float64{1, 2, 5} {
			tick := decade * step
			if tick > hi*1.0001 {
				break
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(tick), marginTop, x(tick), y(0))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(tick), y(0)+16, tickLabel(tick))
		}
	}
	for _, q := range []struct {
		fraction float64
		label    string
	}{{0, "0"}, {0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, y(q.fraction), x(hi), y(q.fraction))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginLeft-6, y(q.fraction)+4, q.label)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">time per run (log scale)</text>`+"\n", marginLeft+innerW/2, plotHeight-10)

	legend := 0
	for _, v := range g.Variants {
		if !v.Measured() {
			continue
		}
		color := plotColors[legend%len(plotColors)]
		sorted := slices.Clone(v.SamplesNs)
		slices.Sort(sorted)
		var points []string
		for i, ns := range sorted {
			// A step: the fraction rises at each sample.
			points = append(points,
				fmt.Sprintf("%.1f,%.1f", x(float64(ns)), y(float64(i)/float64(len(sorted)))),
				fmt.Sprintf("%.1f,%.1f", x(float64(ns)), y(float64(i+1)/float64(len(sorted)))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(points, " "))
		label := fmt.Sprintf("%s (n=%d)", v.Name, len(sorted))
		ly := marginTop + 16 + 16*legend
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", marginLeft+10, ly-4, marginLeft+30, ly-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", marginLeft+36, ly, html.EscapeString(label))
		legend++
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), true
}

// tickLabel prints a time in the unit that keeps it short.
func tickLabel(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%gµs", ns/1e3)
	}
	return fmt.Sprintf("%gns", ns)
}

// fileSlug turns a group name such as "/usr/bin/python3 -c pass" into a file
// name part ("usr-bin-python3-c-pass").
func fileSlug(name string) string {
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, name)
	for strings.Contains(slug, "--") {
		slug = strings.ReplaceAll(slug, "--", "-")
	}
	return strings.Trim(slug, "-")
}

// xySeries is one line of an x-y chart: its points, and the least-squares
// line through them when it has one.
type xySeries struct {
	name   string
	xs, ys []float64
	fit    *Line
}

// xyChart draws series on linear axes from zero (or below, for a negative
// value) to a little above the largest value, each as its points joined,
// with its fitted line dashed.
func xyChart(title, xLabel, yLabel string, series []xySeries) []byte {
	xMax, yMin, yMax := 0.0, 0.0, 0.0
	for _, s := range series {
		for i := range s.xs {
			xMax, yMin, yMax = max(xMax, s.xs[i]), min(yMin, s.ys[i]), max(yMax, s.ys[i])
		}
	}
	// Round axes, in steps of 1, 2 or 5 times a power of ten.
	xStep := niceStep(xMax / 5)
	xMax = math.Ceil(xMax/xStep) * xStep
	yStep := niceStep((yMax - yMin) / 5)
	yMin, yMax = math.Floor(yMin/yStep)*yStep, math.Ceil(yMax*1.02/yStep)*yStep
	innerW := float64(plotWidth - marginLeft - marginRight)
	innerH := float64(plotHeight - marginTop - marginBottom)
	x := func(v float64) float64 { return marginLeft + innerW*v/xMax }
	y := func(v float64) float64 { return marginTop + innerH*(1-(v-yMin)/(yMax-yMin)) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", marginLeft, html.EscapeString(title))
	for xv := 0.0; xv <= xMax+xStep/2; xv += xStep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(xv), marginTop, x(xv), y(yMin))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(xv), y(yMin)+16, xv)
	}
	for yv := yMin; yv <= yMax+yStep/2; yv += yStep {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, y(yv), x(xMax), y(yv))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", marginLeft-6, y(yv)+4, yv)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", marginLeft+innerW/2, plotHeight-10, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`+"\n",
		marginTop+innerH/2, marginTop+innerH/2, html.EscapeString(yLabel))
	for k, s := range series {
		color := plotColors[k%len(plotColors)]
		var points []string
		for i := range s.xs {
			points = append(points, fmt.Sprintf("%.1f,%.1f", x(s.xs[i]), y(s.ys[i])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x(s.xs[i]), y(s.ys[i]), color)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1" points="%s"/>`+"\n", color, strings.Join(points, " "))
		label := s.name
		if s.fit != nil {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="5,4"/>`+"\n",
				x(0), y(s.fit.Intercept), x(xMax), y(s.fit.Intercept+s.fit.Slope*xMax), color)
			label += fmt.Sprintf(" (slope %.4g)", s.fit.Slope)
		}
		ly := marginTop + 16 + 16*k
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", marginLeft+10, ly-4, marginLeft+30, ly-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", marginLeft+36, ly, html.EscapeString(label))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceStep is the smallest of 1, 2 or 5 times a power of ten that is at
// least rough (1 for rough <= 0).
func niceStep(rough float64) float64 {
	if rough <= 0 || math.IsNaN(rough) || math.IsInf(rough, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(rough)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= rough*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// WritePlots writes the charts of a series suite into dir: density's
// memory against live sandboxes with the fitted slopes, soak's daemon
// readings over time, and for the others a latency CDF of every series
// with samples. It returns the files written.
func (r *SeriesReport) WritePlots(dir string) ([]string, error) {
	charts := map[string][]byte{}
	switch raw := r.Raw.(type) {
	case DensityRaw:
		charts["density-memory.svg"] = densityChart(raw)
	case SoakRaw:
		rss, counts := soakCharts(raw)
		charts["soak-rss.svg"], charts["soak-fds-goroutines.svg"] = rss, counts
	default:
		// The series drawn as the variants of one group.
		g := GroupResult{Name: "every series", Verdict: r.Verdict}
		for _, s := range r.Series {
			if len(s.Samples) > 0 {
				g.Variants = append(g.Variants, VariantResult{Name: s.Name, Stats: &s.Latency, SamplesNs: s.Samples})
			}
		}
		if svg, ok := latencyCDF(r.Suite, g); ok {
			charts[r.Suite+"-cdf.svg"] = svg
		}
	}
	if len(charts) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot directory: %w", err)
	}
	var written []string
	for _, name := range slices.Sorted(maps.Keys(charts)) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, charts[name], 0o644); err != nil {
			return written, fmt.Errorf("write plot: %w", err)
		}
		written = append(written, path)
	}
	return written, nil
}

func densityChart(raw DensityRaw) []byte {
	var live, pss, cg, host []float64
	for _, p := range raw.Points {
		live = append(live, float64(p.Live))
		pss = append(pss, mib(p.ProcessPSSBytes))
		cg = append(cg, mib(p.CgroupBytes))
		host = append(host, mib(p.HostUsedBytes-raw.Points[0].HostUsedBytes))
	}
	inMiB := func(l Line, shift int64) *Line {
		return &Line{Slope: l.Slope / (1 << 20), Intercept: (l.Intercept - float64(shift)) / (1 << 20), N: l.N}
	}
	return xyChart("tine bench density: memory against idle sandboxes (slopes in MiB per sandbox)", "live sandboxes", "MiB", []xySeries{
		{"PSS, daemon + sandbox processes", live, pss, inMiB(raw.Fits["process_pss"], 0)},
		{"cgroup-charged", live, cg, inMiB(raw.Fits["cgroup"], 0)},
		{"host used, from the first point", live, host, inMiB(raw.Fits["host_used"], raw.Points[0].HostUsedBytes)},
	})
}

func soakCharts(raw SoakRaw) (rss, counts []byte) {
	var mins, rssMiB, fds, gor, thr, conns []float64
	for _, s := range raw.Samples {
		mins = append(mins, s.Seconds/60)
		rssMiB = append(rssMiB, mib(s.RSSBytes))
		fds, gor = append(fds, float64(s.FDsBeyondConns)), append(gor, s.GoroutinesBeyondConns)
		thr, conns = append(thr, float64(s.Threads)), append(conns, float64(s.ClientConns))
	}
	fit := func(key string, scale float64) *Line {
		l, ok := raw.Slopes[key]
		if !ok {
			return nil
		}
		return &Line{Slope: l.Slope / scale, Intercept: l.Intercept / scale, N: l.N}
	}
	title := fmt.Sprintf("tine bench soak: the daemon over time (slopes per minute, fitted after the %.0fs warm-up)", raw.WarmupSeconds)
	rss = xyChart(title, "minutes", "RSS, MiB", []xySeries{{"daemon RSS", mins, rssMiB, fit("rss_bytes_per_min", 1<<20)}})
	counts = xyChart(title, "minutes", "count", []xySeries{
		{"open descriptors beyond the suite's connections", mins, fds, fit("fds_per_min", 1)},
		{"goroutines beyond the suite's connections", mins, gor, fit("goroutines_per_min", 1)},
		{"threads", mins, thr, fit("threads_per_min", 1)},
		{"the suite's connections", mins, conns, nil},
	})
	return rss, counts
}
