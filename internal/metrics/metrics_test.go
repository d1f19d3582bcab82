package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func scrape(t *testing.T, cs ...Collector) string {
	t.Helper()
	r := NewRegistry()
	r.MustRegister(cs...)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func same(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestCounterVec(t *testing.T) {
	c := NewCounterVec("x_total", "Things, by kind.", "kind", "code")
	c.WithLabelValues("b", "2").Inc()
	c.WithLabelValues("a", "9").Add(2.5)
	c.WithLabelValues("b", "2").Inc()
	c.WithLabelValues("a", "10").Inc()
	// Labels are written sorted by name (code before kind) and series are
	// sorted by values in that order, whatever order they were made in.
	same(t, scrape(t, c), `# HELP x_total Things, by kind.
# TYPE x_total counter
x_total{code="10",kind="a"} 1
x_total{code="2",kind="b"} 2
x_total{code="9",kind="a"} 2.5
`)
	if v := c.WithLabelValues("b", "2").Value(); v != 2 {
		t.Errorf("value %v, want 2", v)
	}
}

func TestCounterPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"negative add":     func() { new(Counter).Add(-1) },
		"too few values":   func() { NewCounterVec("a", "", "x", "y").WithLabelValues("1") },
		"bad metric name":  func() { NewCounterVec("1a", "") },
		"bad label name":   func() { NewCounterVec("a", "", "a-b") },
		"reserved label":   func() { NewCounterVec("a", "", "__x") },
		"duplicate label":  func() { NewCounterVec("a", "", "x", "x") },
		"le on histogram":  func() { NewHistogramVec("a", "", nil, "le") },
		"unsorted buckets": func() { NewHistogramVec("a", "", []float64{1, 1}) },
		"func of histo":    func() { NewFunc("a", "", HistogramType, nil, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("did not panic")
				}
			}()
			f()
		})
	}
}

func TestGauge(t *testing.T) {
	g := NewGauge("temp_celsius", "A temperature.")
	g.Set(3)
	g.Add(0.5)
	g.Dec()
	g.Inc()
	g.Add(-5)
	same(t, scrape(t, g), `# HELP temp_celsius A temperature.
# TYPE temp_celsius gauge
temp_celsius -1.5
`)
	g.Set(math.Inf(1))
	same(t, scrape(t, g), "# HELP temp_celsius A temperature.\n# TYPE temp_celsius gauge\ntemp_celsius +Inf\n")
	g.Set(math.NaN())
	same(t, scrape(t, g), "# HELP temp_celsius A temperature.\n# TYPE temp_celsius gauge\ntemp_celsius NaN\n")
	g.Set(1.5e9)
	same(t, scrape(t, g), "# HELP temp_celsius A temperature.\n# TYPE temp_celsius gauge\ntemp_celsius 1.5e+09\n")
}

func TestFunc(t *testing.T) {
	n := 0
	f := NewFunc("boxes", "Boxes, by state.", GaugeType, []string{"state"}, func(emit func(float64, ...string)) {
		n++
		emit(float64(n), "running")
		emit(0, "exited")
	})
	scrape(t, f)
	same(t, scrape(t, f), `# HELP boxes Boxes, by state.
# TYPE boxes gauge
boxes{state="exited"} 0
boxes{state="running"} 2
`)
}

func TestHistogram(t *testing.T) {
	h := NewHistogramVec("req_seconds", "Request time.", []float64{0.1, 0.5, 1, math.Inf(1)}, "route")
	for _, v := range []float64{0.05, 0.1, 0.3, 0.7, 1, 2, 100} {
		h.WithLabelValues("/a").Observe(v)
	}
	h.WithLabelValues("/b").Observe(0.2)
	// 0.1 and 1 land in their own buckets (le is "less or equal"); 2 and
	// 100 only in +Inf.
	same(t, scrape(t, h), `# HELP req_seconds Request time.
# TYPE req_seconds histogram
req_seconds_bucket{route="/a",le="0.1"} 2
req_seconds_bucket{route="/a",le="0.5"} 3
req_seconds_bucket{route="/a",le="1"} 5
req_seconds_bucket{route="/a",le="+Inf"} 7
req_seconds_sum{route="/a"} 104.15
req_seconds_count{route="/a"} 7
req_seconds_bucket{route="/b",le="0.1"} 0
req_seconds_bucket{route="/b",le="0.5"} 1
req_seconds_bucket{route="/b",le="1"} 1
req_seconds_bucket{route="/b",le="+Inf"} 1
req_seconds_sum{route="/b"} 0.2
req_seconds_count{route="/b"} 1
`)
}

func TestHistogramUnlabelled(t *testing.T) {
	h := NewHistogramVec("h", "", []float64{.0005, 2.5, 60})
	h.WithLabelValues().Observe(3)
	same(t, scrape(t, h), `# TYPE h histogram
h_bucket{le="0.0005"} 0
h_bucket{le="2.5"} 0
h_bucket{le="60"} 1
h_bucket{le="+Inf"} 1
h_sum 3
h_count 1
`)
}

func TestEscaping(t *testing.T) {
	c := NewCounterVec("esc_total", "Help with \\ and\nnewline and \"quotes\".", "v")
	c.WithLabelValues("a\"b\\c\nd").Inc()
	c.WithLabelValues("bad\xffutf8").Inc()
	same(t, scrape(t, c), `# HELP esc_total Help with \\ and\nnewline and "quotes".
# TYPE esc_total counter
esc_total{v="a\"b\\c\nd"} 1
esc_total{v="bad`+"\uFFFD"+`utf8"} 1
`)
}

func TestFamiliesSortedAndEmptyLeftOut(t *testing.T) {
	b := NewCounterVec("b_total", "")
	b.WithLabelValues().Inc()
	a := NewGauge("a", "")
	empty := NewCounterVec("c_total", "", "x")
	same(t, scrape(t, b, empty, a), "# TYPE a gauge\na 0\n# TYPE b_total counter\nb_total 1\n")
}

func TestDuplicates(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGauge("a", ""), NewGauge("a", ""))
	if err := r.WriteText(new(strings.Builder)); err == nil {
		t.Error("a family collected twice was written")
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}

	r = NewRegistry()
	r.MustRegister(NewFunc("f", "", GaugeType, []string{"k"}, func(emit func(float64, ...string)) {
		emit(1, "x")
		emit(2, "x")
	}))
	if err := r.WriteText(new(strings.Builder)); err == nil {
		t.Error("a series collected twice was written")
	}
}

func TestServeHTTP(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGauge("a", "A."))
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	same(t, rec.Body.String(), "# HELP a A.\n# TYPE a gauge\na 0\n")
}

func TestConcurrent(t *testing.T) {
	c := NewCounterVec("c_total", "", "k")
	h := NewHistogramVec("h", "", []float64{1}, "k")
	r := NewRegistry()
	r.MustRegister(c, h)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			k := strconv.Itoa(i % 2)
			for range 1000 {
				c.WithLabelValues(k).Inc()
				h.WithLabelValues(k).Observe(0.5)
			}
		})
		wg.Go(func() {
			for range 20 {
				if err := r.WriteText(new(strings.Builder)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, k := range []string{"0", "1"} {
		if v := c.WithLabelValues(k).Value(); v != 4000 {
			t.Errorf("counter %s = %v, want 4000", k, v)
		}
		if s := h.WithLabelValues(k).snapshot(); s.Count != 4000 || s.Counts[0] != 4000 || s.Sum != 2000 {
			t.Errorf("histogram %s = %+v", k, s)
		}
	}
}

func TestGoAndProcess(t *testing.T) {
	// CPU time is counted in clock ticks (10 ms): use a few first, so a
	// fresh test process does not read 0.
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	r := NewRegistry()
	r.MustRegister(NewGoCollector(), NewProcessCollector())
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		got[f.Name] = f.Series[0].Value
	}
	for _, name := range []string{
		"go_goroutines", "go_memstats_heap_alloc_bytes", "go_threads",
		"process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total",
		"process_start_time_seconds", "process_max_fds", "process_virtual_memory_bytes",
	} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, got[name])
		}
	}
	// The process started within the last hour, not at the epoch nor
	// in the future.
	start := time.Unix(int64(got["process_start_time_seconds"]), 0)
	if time.Since(start) < -2*time.Second || time.Since(start) > time.Hour {
		t.Errorf("process_start_time_seconds %v is not when the test started", start)
	}
	if rss := got["process_resident_memory_bytes"]; rss < 1<<20 || rss > 1<<34 {
		t.Errorf("process_resident_memory_bytes %v is implausible", rss)
	}
	// The descriptor that reads /proc/self/fd is not counted: opening one
	// more file counts one more.
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, _ := openFDs(); float64(n) != got["process_open_fds"]+1 {
		t.Errorf("with one more file open: %d fds, want %v", n, got["process_open_fds"]+1)
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and a parenthesis, as proc(5) allows.
	line := "4242 (tine (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 123456 1906147328 3247 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, ok := parseStat([]byte(line))
	if !ok {
		t.Fatal("not parsed")
	}
	want := selfStat{utime: 250, stime: 75, starttime: 123456, vsize: 1906147328, rssPages: 3247}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	if _, ok := parseStat([]byte("1 (x) S 1 2")); ok {
		t.Error("a short line parsed")
	}
}
