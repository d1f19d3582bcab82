package metrics

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Counter is a value that only goes up. The zero value is 0, ready to use.
type Counter struct{ bits atomic.Uint64 }

// Inc adds 1.
func (c *Counter) Inc() { c.Add(1) }

// Add adds v, which must not be negative.
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("metrics: counter decreased")
	}
	addFloat(&c.bits, v)
}

// Value is the counter's current value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

// CounterVec is a counter family with labels; its series appear once
// WithLabelValues first names them.
type CounterVec struct {
	name, help string
	v          vec[Counter]
}

// NewCounterVec returns a counter family; it panics on an invalid name or
// label.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	checkName(name)
	checkLabels(name, labels)
	return &CounterVec{name: name, help: help, v: newVec(name, labels, func() *Counter { return new(Counter) })}
}

// WithLabelValues returns the counter of these label values, in the order
// the labels were given; it panics on the wrong number of values.
func (c *CounterVec) WithLabelValues(values ...string) *Counter { return c.v.get(values) }

// Collect implements Collector.
func (c *CounterVec) Collect(emit func(Family)) {
	f := Family{Name: c.name, Help: c.help, Type: CounterType, Labels: c.v.labels}
	c.v.each(func(values []string, m *Counter) {
		f.Series = append(f.Series, Series{Values: values, Value: m.Value()})
	})
	emit(f)
}

// Gauge is a single value that goes up and down, without labels.
type Gauge struct {
	name, help string
	bits       atomic.Uint64
}

// NewGauge returns a gauge at 0; it panics on an invalid name.
func NewGauge(name, help string) *Gauge {
	checkName(name)
	return &Gauge{name: name, help: help}
}

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds v, which may be negative.
func (g *Gauge) Add(v float64) { addFloat(&g.bits, v) }

// Inc adds 1.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.Add(-1) }

// Value is the gauge's current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// Collect implements Collector.
func (g *Gauge) Collect(emit func(Family)) {
	emit(Family{Name: g.name, Help: g.help, Type: GaugeType, Series: []Series{{Value: g.Value()}}})
}

// Func is a counter or gauge family whose series are computed at scrape
// time.
type Func struct {
	name, help string
	typ        Type
	labels     []string
	collect    func(emit func(value float64, labelValues ...string))
}

// NewFunc returns a family of type typ (CounterType or GaugeType) whose
// collect emits each series, its label values in the order of labels. It
// panics on an invalid name, label or type.
func NewFunc(name, help string, typ Type, labels []string, collect func(emit func(value float64, labelValues ...string))) *Func {
	checkName(name)
	checkLabels(name, labels)
	if typ != CounterType && typ != GaugeType {
		panic(fmt.Sprintf("metrics: %s: a Func is a counter or a gauge, not %s", name, typ))
	}
	return &Func{name: name, help: help, typ: typ, labels: slices.Clone(labels), collect: collect}
}

// Collect implements Collector.
func (f *Func) Collect(emit func(Family)) {
	fam := Family{Name: f.name, Help: f.help, Type: f.typ, Labels: f.labels}
	f.collect(func(v float64, values ...string) {
		fam.Series = append(fam.Series, Series{Values: slices.Clone(values), Value: v})
	})
	emit(fam)
}

// Histogram counts observations into buckets.
type Histogram struct {
	bounds []float64 // shared by the family, read-only

	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

// Observe records v: it lands in the first bucket whose upper bound is at
// least v, or above them all (+Inf only).
func (h *Histogram) Observe(v float64) {
	i := len(h.bounds)
	if !math.IsNaN(v) {
		i, _ = slices.BinarySearch(h.bounds, v)
	}
	h.mu.Lock()
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.count++
	h.sum += v
	h.mu.Unlock()
}

func (h *Histogram) snapshot() *HistogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &HistogramSnapshot{Bounds: h.bounds, Counts: slices.Clone(h.counts), Count: h.count, Sum: h.sum}
}

// HistogramVec is a histogram family with labels.
type HistogramVec struct {
	name, help string
	v          vec[Histogram]
}

// NewHistogramVec returns a histogram family with these bucket upper
// bounds (ascending; a last +Inf is implied and may be left out). It panics
// on an invalid name, label (le is reserved) or bucket list.
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	checkName(name)
	checkLabels(name, labels, "le")
	bounds := slices.Clone(buckets)
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], 1) {
		bounds = bounds[:n-1]
	}
	for i, b := range bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || i > 0 && b <= bounds[i-1] {
			panic(fmt.Sprintf("metrics: %s: buckets %v are not strictly ascending finite numbers", name, buckets))
		}
	}
	return &HistogramVec{name: name, help: help, v: newVec(name, labels, func() *Histogram {
		return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
	})}
}

// WithLabelValues returns the histogram of these label values, in the
// order the labels were given; it panics on the wrong number of values.
func (h *HistogramVec) WithLabelValues(values ...string) *Histogram { return h.v.get(values) }

// Collect implements Collector.
func (h *HistogramVec) Collect(emit func(Family)) {
	f := Family{Name: h.name, Help: h.help, Type: HistogramType, Labels: h.v.labels}
	h.v.each(func(values []string, m *Histogram) {
		f.Series = append(f.Series, Series{Values: values, Hist: m.snapshot()})
	})
	emit(f)
}

// vec holds the series of a labelled family, by label values.
type vec[T any] struct {
	name   string
	labels []string
	create func() *T

	mu       sync.RWMutex
	children map[string]*child[T]
}

type child[T any] struct {
	values []string
	m      *T
}

func newVec[T any](name string, labels []string, create func() *T) vec[T] {
	return vec[T]{name: name, labels: slices.Clone(labels), create: create, children: map[string]*child[T]{}}
}

func (v *vec[T]) get(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s: %d label values for labels %v", v.name, len(values), v.labels))
	}
	key := seriesKey(values)
	v.mu.RLock()
	c := v.children[key]
	v.mu.RUnlock()
	if c != nil {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c = v.children[key]; c == nil {
		c = &child[T]{values: slices.Clone(values), m: v.create()}
		v.children[key] = c
	}
	return c.m
}

// each calls fn for every series; the values fn gets are not to be changed.
func (v *vec[T]) each(fn func(values []string, m *T)) {
	v.mu.RLock()
	cs := make([]*child[T], 0, len(v.children))
	for _, c := range v.children {
		cs = append(cs, c)
	}
	v.mu.RUnlock()
	for _, c := range cs {
		fn(c.values, c.m)
	}
}

// seriesKey encodes label values unambiguously: each with its length.
func seriesKey(values []string) string {
	var b strings.Builder
	for _, s := range values {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}

func addFloat(bits *atomic.Uint64, v float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}
