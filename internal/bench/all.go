package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// SuiteRun is one suite of `tine bench all`: its name and the arguments it
// runs with (the published command's, or the quick ones).
type SuiteRun struct {
	Name  string   `json:"name"`
	Args  []string `json:"args"`
	Quick []string `json:"-"`
	// Missing says what the suite needs that this host lacks ("" when it
	// can run); bench all then reports it NOT MEASURED with that reason
	// instead of running it to fail.
	Missing func() string `json:"-"`
	// NoPlot: the suite draws no charts (it takes no --plot).
	NoPlot bool `json:"-"`
}

// AllSuites are the suites `tine bench all` runs, in order: the cheap
// one-shot and API suites first, the soak last.
var AllSuites = []SuiteRun{
	{Name: "cold", Args: []string{"-n", "200", "--warmup", "20"}, Quick: []string{"-n", "20", "--warmup", "2"}},
	{Name: "api", Args: []string{"-n", "200", "--warmup", "20"}, Quick: []string{"-n", "20", "--warmup", "2"}},
	{Name: "embed", Args: []string{"-n", "40", "--warmup", "5"}, Quick: []string{"-n", "10", "--warmup", "2"}},
	{Name: "warm", Args: []string{"-n", "3000"}, Quick: []string{"-n", "300", "--sparse", "10"}},
	{Name: "pool", Args: []string{"-n", "1500"}, Quick: []string{"-n", "150", "--scripts", "80"}},
	{Name: "load", Args: nil, Quick: nil},
	{Name: "session", Args: []string{"-n", "40", "--warmup", "5"}, Quick: []string{"-n", "5", "--warmup", "1"}},
	{Name: "image", Args: []string{"-n", "8", "--warmup", "1"}, Quick: []string{"-n", "2", "--warmup", "1"}},
	{Name: "net", Args: []string{"-n", "20", "--warmup", "3"}, Quick: []string{"-n", "5", "--warmup", "1"}},
	{Name: "e2b", Args: nil, Quick: []string{"-n", "5", "--round-trips", "20"}, NoPlot: true, Missing: needsFiles("node_modules of test/e2b (make deps: npm ci --prefix test/e2b)", "test/e2b/node_modules/e2b", "test/e2b/node_modules/@e2b/code-interpreter")},
	{Name: "oci", Args: []string{"-n", "30"}, Quick: []string{"-n", "3", "--warmup", "1"}, Missing: needsBinaries("containerd", "ctr", "runc")},
	{Name: "desktop", Args: nil, Quick: []string{"-n", "500"}},
	{Name: "osworld", Args: []string{"-n", "300"}, Quick: []string{"-n", "50"}},
	{Name: "stream", Args: []string{"--frames", "40", "--cpu-window", "3s"}, Quick: []string{"--frames", "10", "--cpu-window", "1s"}, NoPlot: true},
	{Name: "codec", Args: []string{"--reps", "5"}, Quick: []string{"--reps", "1"}, NoPlot: true, Missing: needsBinaries("tesseract")},
	{Name: "fork", Args: []string{"-n", "3000"}, Quick: []string{"-n", "1500"}},
	{Name: "density", Args: []string{"-n", "1000"}, Quick: []string{"-n", "50", "--execs", "20"}},
	{Name: "soak", Args: nil, Quick: []string{"--duration", "1m", "--warmup", "10s"}},
}

// needsBinaries is a SuiteRun.Missing for commands looked up in $PATH.
func needsBinaries(names ...string) func() string {
	return func() string {
		var missing []string
		for _, n := range names {
			if _, err := exec.LookPath(n); err != nil {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return ""
		}
		return "needs " + strings.Join(missing, ", ") + " in $PATH"
	}
}

// needsFiles is a SuiteRun.Missing for files relative to the working
// directory (a checkout's), described as what.
func needsFiles(what string, paths ...string) func() string {
	return func() string {
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				return "needs the " + what + ": no " + p
			}
		}
		return ""
	}
}

// Settle waits until the host's CPUs are quiet (busy at most MaxBusyShare
// of the cores over a BusyWindow), at most max, and returns the last
// reading and whether it was quiet. A suite that just ended has left the
// 1-minute load average high for a minute; its CPUs are idle at once.
func Settle(ctx context.Context, g *Guard, max time.Duration) (HostState, bool) {
	deadline := time.Now().Add(max)
	for {
		s := g.ReadBusy()
		if s.BusyWindowMs > 0 && s.BusyCores <= MaxBusyShare*float64(g.Cores) {
			return s, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return s, false
		}
	}
}

// SummaryRow is one target of one suite, as `tine bench all` tabulates it.
type SummaryRow struct {
	Suite   string  `json:"suite"`
	Target  string  `json:"target"`
	Value   float64 `json:"value"`
	Outcome Outcome `json:"outcome"`
	Why     string  `json:"why,omitempty"`
}

// SuiteFigures reads a suite's JSON report (a group report or a series
// report) into its targets and its figures: each variant's or series' p50
// in ms, by name, and a series report's numeric figures.
func SuiteFigures(suite string, b []byte) ([]SummaryRow, map[string]float64, error) {
	var probe struct {
		Groups json.RawMessage `json:"groups"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, nil, fmt.Errorf("%s report: %w", suite, err)
	}
	figures := map[string]float64{}
	var rows []SummaryRow
	if probe.Groups != nil {
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, nil, fmt.Errorf("%s report: %w", suite, err)
		}
		for _, g := range r.Groups {
			for _, v := range g.Variants {
				if v.Measured() {
					figures[g.Name+" / "+v.Name] = float64(v.Stats.P50Ns) / 1e6
				}
			}
			for _, t := range g.Targets {
				row := SummaryRow{Suite: suite, Target: t.Text, Outcome: t.Outcome, Why: t.Why}
				if t.P50Ratio != nil {
					row.Value = *t.P50Ratio
				}
				rows = append(rows, row)
			}
			for _, c := range g.Checks {
				figures[c.Text] = c.Value
				if c.Bar != 0 || c.Outcome == NotMeasured {
					rows = append(rows, SummaryRow{Suite: suite, Target: c.Text, Value: c.Value, Outcome: c.Outcome, Why: c.Why})
				}
			}
		}
		return rows, figures, nil
	}
	var r SeriesReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%s report: %w", suite, err)
	}
	for _, s := range r.Series {
		if s.Latency.N > 0 {
			figures[s.Name] = float64(s.Latency.P50Ns) / 1e6
		}
	}
	for k, v := range r.Figures {
		if f, ok := v.(float64); ok {
			figures[k] = f
		}
	}
	for _, c := range r.Checks {
		rows = append(rows, SummaryRow{Suite: suite, Target: c.Text, Value: c.Value, Outcome: c.Outcome, Why: c.Why})
	}
	if r.Verdict.Disturbed && len(r.Checks) == 0 {
		rows = append(rows, SummaryRow{Suite: suite, Target: "(no targets)", Outcome: NotMeasured, Why: strings.Join(r.Verdict.Reasons, "; ")})
	}
	return rows, figures, nil
}

// Published is a figure docs/benchmarks.md publishes, to compare a run
// with: Doc is its text there (TestPublishedFiguresAreInTheDocs keeps the
// two in step).
type Published struct {
	Suite  string  `json:"suite"`
	Figure string  `json:"figure"` // a key of SuiteFigures
	Value  float64 `json:"value"`  // ms, or the figure's own unit
	Doc    string  `json:"doc"`
}

// PublishedFigures are the headline figures of docs/benchmarks.md.
var PublishedFigures = []Published{
	{"cold", "/bin/true / tine", 22.086, "tine                 100     22.086"},
	{"cold", "/bin/true / tine via daemon", 15.537, "tine via daemon      100     15.537"},
	{"cold", "/bin/true / bwrap", 7.432, "bwrap (reference)    100      7.432"},
	{"api", "exec /bin/true / tine exec (JSON)", 1.885, "tine exec (JSON)               200      1.885"},
	{"api", "live sandbox / tine create→ready", 4.309, "tine create→ready              200      4.309"},
	{"api", "files / tine put 1 MiB", 1.683, "tine put 1 MiB                        200      1.683"},
	{"embed", "16-import script / warm function", 2.862, "warm function            40      2.862"},
	{"embed", "16-import script / tine run", 102.062, "tine run (reference)     40    102.062"},
	{"warm", "warm function (16 imports)", 2.389, "n=2000  p50 2.389"},
	{"warm", "fork()+wait() floor", 1.740, "n=500   p50 1.740"},
	{"pool", "pool, a random script of 1000", 3.041, "pool, a random script of 1000 n=1500  p50 3.041"},
	{"load", "highest sustained rate with no failure (requests/s)", 469, "highest sustained rate with no failure (requests/s): 469"},
	{"desktop", "create→ready (1280x800, openbox, xterm)", 246.822, "create→ready (1280x800, openbox, xterm) n=10    p50 246.822"},
	{"desktop", "screenshot PNG 1280x800", 4.122, "| desktop | PNG 1280x800 p50 | 4.12 ms"},
	{"session", "session state → new sandbox, first cell answered / live fork ×1", 20.350, "| | live fork ×1 → first cell (16 imports, 50 MiB) | **20.4 ms**"},
	{"osworld", "/execute pyautogui.click, fast path (fresh TCP connection)", 2.046, "| osworld | /execute click, fast path p50 | 2.05, 1.90, 2.21 ms"},
	{"osworld", "/screenshot PNG 1280x800 with the cursor (fresh TCP connection)", 5.795, "| | /screenshot p50 | 5.79, 5.52, 6.08 ms"},
	{"oci", "ctr run --rm busybox true / tine", 124.114, "| `ctr run --rm` tine-runc / runc | 124.1 / 155.6 ms"},
}

// Band is how far a figure may be from the published one, either way,
// before the comparison flags it: the VM's speed alone moves figures by
// up to half within a day.
const Band = 2.0

// Comparison is a run's figure next to the published one.
type Comparison struct {
	Published
	Now    float64 `json:"now"`
	Ratio  float64 `json:"ratio"` // now / published
	Within bool    `json:"within_band"`
}

// Compare sets each published figure of the suites run next to the
// measured one; a figure not measured is left out.
func Compare(figures map[string]map[string]float64) []Comparison {
	var out []Comparison
	for _, p := range PublishedFigures {
		now, ok := figures[p.Suite][p.Figure]
		if !ok || p.Value == 0 {
			continue
		}
		r := now / p.Value
		out = append(out, Comparison{Published: p, Now: now, Ratio: r, Within: r <= Band && r >= 1/Band})
	}
	return out
}

// WriteSummary prints every target of every suite and the comparison with
// the published figures.
func WriteSummary(w io.Writer, rows []SummaryRow, cmp []Comparison, exits map[string]int) error {
	p := &printer{w: w}
	p.printf("\ntine bench all: every target\n")
	width := 0
	for _, r := range rows {
		width = max(width, len([]rune(r.Target)))
	}
	for _, r := range rows {
		outcome := strings.ToUpper(string(r.Outcome))
		if r.Why != "" {
			outcome += " (" + r.Why + ")"
		}
		value := formatValue(r.Value)
		if r.Outcome == NotMeasured && r.Value == 0 {
			value = "-"
		}
		p.printf("  %-8s %-*s %10s  %s\n", r.Suite, width, r.Target, value, outcome)
	}
	var names []string
	for n := range exits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if exits[n] != 0 && exits[n] != 1 && exits[n] != 2 {
			p.printf("  %-8s did not finish (exit status %d)\n", n, exits[n])
		}
	}
	if len(cmp) > 0 {
		p.printf("\nagainst docs/benchmarks.md (p50 ms, or the figure's unit; flagged outside %gx either way):\n", Band)
		for _, c := range cmp {
			flag := "within"
			if !c.Within {
				flag = "OUTSIDE"
			}
			p.printf("  %-8s %-55s published %10s  now %10s  %5.2fx  %s\n", c.Suite, c.Figure, formatValue(c.Value), formatValue(c.Now), c.Ratio, flag)
		}
	}
	return p.err
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
