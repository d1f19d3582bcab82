package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestFitLine(t *testing.T) {
	for _, tc := range []struct {
		name             string
		xs, ys           []float64
		slope, intercept float64
	}{
		{"exact", []float64{1, 100, 250, 500, 1000}, []float64{7e6 + 512<<10, 7e6 + 100*512<<10, 7e6 + 250*512<<10, 7e6 + 500*512<<10, 7e6 + 1000*512<<10}, 512 << 10, 7e6},
		// Residuals +1 -1 -1 +1 around y = 2x: the fit sees through them.
		{"noisy", []float64{0, 1, 2, 3}, []float64{1, 1, 3, 7}, 2, 0},
		{"falling", []float64{0, 60}, []float64{10, 4}, -0.1, 10},
	} {
		l, err := FitLine(tc.xs, tc.ys)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if math.Abs(l.Slope-tc.slope) > 1e-6*math.Max(1, math.Abs(tc.slope)) || math.Abs(l.Intercept-tc.intercept) > 1e-6*math.Max(1, math.Abs(tc.intercept)) {
			t.Errorf("%s: got slope %g intercept %g, want %g and %g", tc.name, l.Slope, l.Intercept, tc.slope, tc.intercept)
		}
		if l.N != len(tc.xs) {
			t.Errorf("%s: N %d, want %d", tc.name, l.N, len(tc.xs))
		}
	}
	for _, bad := range [][2][]float64{{{1}, {1}}, {{2, 2, 2}, {1, 2, 3}}, {{1, 2}, {1}}} {
		if l, err := FitLine(bad[0], bad[1]); err == nil {
			t.Errorf("FitLine(%v, %v) = %+v, want an error", bad[0], bad[1], l)
		}
	}
}

const smapsRollup = `55d0c0a2c000-7ffd2d1f3000 ---p 00000000 00:00 0                          [rollup]
Rss:                2356 kB
Pss:                 700 kB
Pss_Dirty:           696 kB
Pss_Anon:            696 kB
`

func TestParsePss(t *testing.T) {
	// Pss_Dirty and Pss_Anon follow Pss: only the "Pss:" line counts.
	if got, err := parsePss(smapsRollup); err != nil || got != 700<<10 {
		t.Errorf("parsePss = %d, %v; want %d", got, err, 700<<10)
	}
	for _, bad := range []string{"", "Rss: 1 kB\n", "Pss: 12 MB\n", "Pss: x kB\n"} {
		if got, err := parsePss(bad); err == nil {
			t.Errorf("parsePss(%q) = %d, want an error", bad, got)
		}
	}
}

func TestParseStatusAndMeminfo(t *testing.T) {
	status := "Name:\ttine\nVmRSS:\t   15624 kB\nThreads:\t1007\n"
	if got, err := parseKBField(status, "VmRSS:"); err != nil || got != 15624<<10 {
		t.Errorf("VmRSS = %d, %v", got, err)
	}
	if got, err := parseIntField(status, "Threads:"); err != nil || got != 1007 {
		t.Errorf("Threads = %d, %v", got, err)
	}
	if _, err := parseIntField(status, "FDSize:"); err == nil {
		t.Error("a missing field parsed")
	}
	meminfo := "MemTotal:       24683728 kB\nMemFree:        24472624 kB\nMemAvailable:   24404216 kB\n"
	if got, err := parseHostUsed(meminfo); err != nil || got != (24683728-24404216)<<10 {
		t.Errorf("host used = %d, %v", got, err)
	}
	k, err := parseHostKernel(meminfo + "KernelStack:       36184 kB\nPageTables:      2342136 kB\nSUnreclaim:      1032644 kB\n")
	if err != nil || k != (HostKernel{PageTablesBytes: 2342136 << 10, KernelStackBytes: 36184 << 10, SlabUnreclaimBytes: 1032644 << 10}) {
		t.Errorf("host kernel = %+v, %v", k, err)
	}
	if _, err := parseHostUsed("MemTotal: 1 kB\n"); err == nil {
		t.Error("meminfo without MemAvailable parsed")
	}
}

func TestParseMetric(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines_total_fake 99
go_goroutines{x="y"} 98
go_goroutines 1034
go_threads 1041
`
	if got, err := parseMetric(text, "go_goroutines"); err != nil || got != 1034 {
		t.Errorf("go_goroutines = %g, %v; want 1034 (not a prefixed name, labels or comments)", got, err)
	}
	if _, err := parseMetric(text, "process_open_fds"); err == nil {
		t.Error("a missing metric parsed")
	}
}

func TestParseLimit(t *testing.T) {
	limits := `Limit                     Soft Limit           Hard Limit           Units
Max processes             96364                96364                processes
Max open files            20000                524288               files
Max locked memory         unlimited            unlimited            bytes
`
	if soft, hard, err := parseLimit(limits, "Max open files"); err != nil || soft != 20000 || hard != 524288 {
		t.Errorf("open files = %d %d %v", soft, hard, err)
	}
	if soft, hard, err := parseLimit(limits, "Max locked memory"); err != nil || soft != -1 || hard != -1 {
		t.Errorf("locked memory = %d %d %v, want -1 -1 (unlimited)", soft, hard, err)
	}
	if _, _, err := parseLimit(limits, "Max nice priority"); err == nil {
		t.Error("a missing row parsed")
	}
}

func TestDensityCheckpoints(t *testing.T) {
	for count, want := range map[int][]int{
		1000: {1, 100, 250, 500, 1000},
		50:   {1, 5, 12, 25, 50},
		3:    {1, 3},
		2:    {1, 2},
	} {
		if got := DensityCheckpoints(count); !slices.Equal(got, want) {
			t.Errorf("DensityCheckpoints(%d) = %v, want %v", count, got, want)
		}
	}
}

// TestProcessTree reads this very process: the walk starts at the pid,
// finds a child it started, and this process's own PSS is readable and
// not zero.
func TestProcessTree(t *testing.T) {
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
	if err != nil {
		t.Skip("no /bin/sleep:", err)
	}
	defer func() { p.Kill(); p.Wait() }()
	tree := processTree(os.Getpid())
	if tree[0] != os.Getpid() || !slices.Contains(tree, p.Pid) {
		t.Errorf("processTree(self) = %v, want self (%d) first and the child %d in it", tree, os.Getpid(), p.Pid)
	}
	pss, err := processPSS(os.Getpid())
	if err != nil || pss <= 0 {
		t.Errorf("own PSS = %d, %v", pss, err)
	}
	if n, err := openFDs(os.Getpid()); err != nil || n < 3 {
		t.Errorf("own open fds = %d, %v; want at least stdin, stdout, stderr", n, err)
	}
	before, err := openSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	if after, err := openSockets(os.Getpid()); err != nil || after != before+2 {
		t.Errorf("open sockets %d before a socketpair, %d (%v) after; want 2 more", before, after, err)
	}
}

func TestNiceStep(t *testing.T) {
	for rough, want := range map[float64]float64{200: 200, 201: 500, 0.3: 0.5, 18: 20, 1: 1, 0: 1, 7.5e6: 1e7} {
		if got := niceStep(rough); math.Abs(got-want) > 1e-9*want {
			t.Errorf("niceStep(%g) = %g, want %g", rough, got, want)
		}
	}
}

// TestSeriesPlots writes the density and soak charts of made-up readings
// and parses each as XML; a report without charts writes none.
func TestSeriesPlots(t *testing.T) {
	pts := []DensityPoint{{Live: 1, ProcessPSSBytes: 8 << 20, HostUsedBytes: 1 << 30}, {Live: 100, ProcessPSSBytes: 150 << 20, CgroupBytes: 3 << 20, HostUsedBytes: 1<<30 + 200<<20}}
	soak := SoakRaw{Samples: []SoakSample{{Seconds: 0, RSSBytes: 12 << 20, FDs: 72, Goroutines: 29, Threads: 11}, {Seconds: 60, RSSBytes: 13 << 20, FDs: 72, Goroutines: 28, Threads: 12}},
		Slopes: map[string]Line{"rss_bytes_per_min": {Slope: 1 << 20, Intercept: 12 << 20, N: 2}}}
	for _, tc := range []struct {
		raw  any
		want []string
	}{
		{DensityRaw{Points: pts, Fits: map[string]Line{"process_pss": {Slope: 1.4 * (1 << 20), Intercept: 7 << 20}}}, []string{"density-memory.svg"}},
		{soak, []string{"soak-fds-goroutines.svg", "soak-rss.svg"}},
		{nil, nil},
	} {
		dir := t.TempDir()
		files, err := (&SeriesReport{Raw: tc.raw}).WritePlots(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != len(tc.want) {
			t.Fatalf("wrote %v, want %v", files, tc.want)
		}
		for i, f := range files {
			if filepath.Base(f) != tc.want[i] {
				t.Errorf("wrote %s, want %s", f, tc.want[i])
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			d := xml.NewDecoder(bytes.NewReader(b))
			for {
				if _, err := d.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s is not well-formed XML: %v", f, err)
				}
			}
			if !bytes.Contains(b, []byte("<circle")) {
				t.Errorf("%s has no points", f)
			}
		}
	}
}
