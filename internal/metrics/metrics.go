// Package metrics owns tine's Prometheus metrics: counters, gauges and
// histograms kept in memory, the Go and process figures an operator
// watches (computed when scraped), and a Registry that writes them all in
// the Prometheus text exposition format, version 0.0.4.
//
// It exists so that tine does not link github.com/prometheus/client_golang.
// tine is one binary for the daemon and for `tine run`, and whatever a
// linked package does in init every `tine run` pays: client_golang (with
// procfs, protobuf, client_model, common/model, expvar and runtime/metrics
// behind it) cost about 2 ms of package init per process start, measured with
// GODEBUG=inittrace=1, on a `tine run` whose whole budget is about 4 ms.
// Its init registers the default Go and process collectors whenever the
// package is linked, so a lazy registry cannot avoid the cost. This package
// has no init work: no package-level state beyond constants, no
// runtime/metrics (whose init alone is ≈0.14 ms), no regexp. See
// docs/decisions/0006-metrics-without-client-golang.md.
//
// What it does not do: summaries, exemplars, native histograms, the
// OpenMetrics or protobuf formats, gzip, or content negotiation.
//
// Everything here is safe for concurrent use. Output is deterministic:
// families sorted by name, series sorted by their label values (taken in
// the order of sorted label names), labels in a series written sorted by
// name, as client_golang wrote them.
package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Type is a metric family's type, as the `# TYPE` line writes it.
type Type string

const (
	CounterType   Type = "counter"
	GaugeType     Type = "gauge"
	HistogramType Type = "histogram"
)

// Family is one metric family as a scrape sees it.
type Family struct {
	Name   string
	Help   string
	Type   Type
	Labels []string // label names, in the order each Series gives its Values
	Series []Series
}

// Series is one labelled sample of a Family: Value for a counter or a
// gauge, Hist for a histogram.
type Series struct {
	Values []string // label values, in the order of Family.Labels
	Value  float64
	Hist   *HistogramSnapshot
}

// HistogramSnapshot is a histogram's state at one instant.
type HistogramSnapshot struct {
	Bounds []float64 // upper bounds, ascending, without +Inf
	Counts []uint64  // Counts[i]: observations in (Bounds[i-1], Bounds[i]], not cumulative
	Count  uint64    // every observation, those above the last bound too
	Sum    float64
}

// A Collector hands its families to emit at scrape time.
type Collector interface {
	Collect(emit func(Family))
}

// Registry is a set of collectors; it writes what they collect.
type Registry struct {
	mu         sync.Mutex
	collectors []Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// MustRegister adds collectors. A family name collected twice is found at
// scrape time: WriteText fails and ServeHTTP answers 500.
func (r *Registry) MustRegister(cs ...Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		if c == nil {
			panic("metrics: nil collector")
		}
		r.collectors = append(r.collectors, c)
	}
}

// Gather collects every family, sorted by name, each with its series
// sorted. Families without series are left out.
func (r *Registry) Gather() ([]Family, error) {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	r.mu.Unlock()
	var fams []Family
	for _, c := range cs {
		c.Collect(func(f Family) {
			if len(f.Series) > 0 {
				fams = append(fams, f)
			}
		})
	}
	slices.SortFunc(fams, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	for i := range fams {
		if i > 0 && fams[i].Name == fams[i-1].Name {
			return nil, fmt.Errorf("metrics: family %s collected twice", fams[i].Name)
		}
		if err := sortSeries(&fams[i]); err != nil {
			return nil, err
		}
	}
	return fams, nil
}

// WriteText writes every family in the text exposition format 0.0.4.
func (r *Registry) WriteText(w io.Writer) error {
	fams, err := r.Gather()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	for i := range fams {
		writeFamily(bw, &fams[i])
	}
	return bw.Flush()
}

// ContentType is what ServeHTTP answers with.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP answers a scrape.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	if req.Method == http.MethodHead {
		return
	}
	w.Write(buf.Bytes())
}

// sortSeries checks a family and sorts its series by label values, taken
// in the order of sorted label names.
func sortSeries(f *Family) error {
	perm := sortedOrder(f.Labels)
	for _, s := range f.Series {
		if len(s.Values) != len(f.Labels) {
			return fmt.Errorf("metrics: %s: series with %d label values, want %d", f.Name, len(s.Values), len(f.Labels))
		}
		if (f.Type == HistogramType) != (s.Hist != nil) {
			return fmt.Errorf("metrics: %s: a %s series must have a histogram snapshot exactly when it is a histogram", f.Name, f.Type)
		}
	}
	cmp := func(a, b Series) int {
		for _, i := range perm {
			if c := strings.Compare(a.Values[i], b.Values[i]); c != 0 {
				return c
			}
		}
		return 0
	}
	slices.SortStableFunc(f.Series, cmp)
	for i := 1; i < len(f.Series); i++ {
		if cmp(f.Series[i-1], f.Series[i]) == 0 {
			return fmt.Errorf("metrics: %s: series %q collected twice", f.Name, f.Series[i].Values)
		}
	}
	return nil
}

// sortedOrder returns the indexes of names in the order of sorted names.
func sortedOrder(names []string) []int {
	perm := make([]int, len(names))
	for i := range perm {
		perm[i] = i
	}
	slices.SortFunc(perm, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	return perm
}

func writeFamily(w *bufio.Writer, f *Family) {
	if f.Help != "" {
		w.WriteString("# HELP ")
		w.WriteString(f.Name)
		w.WriteByte(' ')
		writeEscaped(w, f.Help, false)
		w.WriteByte('\n')
	}
	w.WriteString("# TYPE ")
	w.WriteString(f.Name)
	w.WriteByte(' ')
	w.WriteString(string(f.Type))
	w.WriteByte('\n')
	perm := sortedOrder(f.Labels)
	for i := range f.Series {
		s := &f.Series[i]
		if s.Hist == nil {
			writeSample(w, f.Name, "", f.Labels, s.Values, perm, "", formatFloat(s.Value))
			continue
		}
		h := s.Hist
		var cum uint64
		for j, b := range h.Bounds {
			if j < len(h.Counts) {
				cum += h.Counts[j]
			}
			writeSample(w, f.Name, "_bucket", f.Labels, s.Values, perm, formatFloat(b), strconv.FormatUint(cum, 10))
		}
		writeSample(w, f.Name, "_bucket", f.Labels, s.Values, perm, "+Inf", strconv.FormatUint(h.Count, 10))
		writeSample(w, f.Name, "_sum", f.Labels, s.Values, perm, "", formatFloat(h.Sum))
		writeSample(w, f.Name, "_count", f.Labels, s.Values, perm, "", strconv.FormatUint(h.Count, 10))
	}
}

// writeSample writes one line: name+suffix, the labels in perm's order and
// then le if it is not empty, and the value.
func writeSample(w *bufio.Writer, name, suffix string, labels, values []string, perm []int, le, value string) {
	w.WriteString(name)
	w.WriteString(suffix)
	if len(labels) > 0 || le != "" {
		w.WriteByte('{')
		for n, i := range perm {
			if n > 0 {
				w.WriteByte(',')
			}
			w.WriteString(labels[i])
			w.WriteString(`="`)
			writeEscaped(w, values[i], true)
			w.WriteByte('"')
		}
		if le != "" {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			w.WriteString(`le="`)
			w.WriteString(le)
			w.WriteByte('"')
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(value)
	w.WriteByte('\n')
}

// writeEscaped writes s with \ and newline escaped, and " too in a label
// value; invalid UTF-8 becomes U+FFFD, so the output always parses.
func writeEscaped(w *bufio.Writer, s string, quote bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			w.WriteString(`\\`)
		case c == '\n':
			w.WriteString(`\n`)
		case c == '"' && quote:
			w.WriteString(`\"`)
		default:
			w.WriteByte(c)
		}
	}
}

// formatFloat writes v as Prometheus does: shortest round-trip form,
// +Inf, -Inf, NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// checkName panics unless name is a metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
func checkName(name string) {
	if !validName(name, true) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
}

// checkLabels panics unless labels are valid, distinct label names, none
// of them reserved.
func checkLabels(name string, labels []string, reserved ...string) {
	for i, l := range labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") || slices.Contains(reserved, l) {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
		if slices.Contains(labels[:i], l) {
			panic(fmt.Sprintf("metrics: %s: label %q twice", name, l))
		}
	}
}

func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			i > 0 && c >= '0' && c <= '9' || colon && c == ':'
		if !ok {
			return false
		}
	}
	return true
}
