package bench

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Every published figure bench all compares with is in docs/benchmarks.md
// as it is written there: a figure updated there and not here fails.
func TestPublishedFiguresAreInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range PublishedFigures {
		if !strings.Contains(string(doc), p.Doc) {
			t.Errorf("%s %q: docs/benchmarks.md does not say %q", p.Suite, p.Figure, p.Doc)
		}
	}
}

func TestSuiteFiguresAndCompare(t *testing.T) {
	p50 := int64(30_000_000) // 30 ms: outside the band of cold's 7.4
	group := Report{Suite: "cold", Groups: []GroupResult{{Name: "/bin/true", Reference: "bwrap",
		Variants: []VariantResult{{Name: "tine", Stats: &Stats{N: 3, P50Ns: 20_000_000}}, {Name: "bwrap", Stats: &Stats{N: 3, P50Ns: p50}}},
		Targets:  []TargetResult{{Target: Target{Text: "t1"}, P50Ratio: ptr(0.7), Outcome: Missed}}}}}
	series := SeriesReport{Suite: "warm", Series: []Series{{Name: "warm function (16 imports)", Latency: Stats{N: 5, P50Ns: 2_500_000}}},
		Checks: []Check{{Text: "c1", Value: 1.1, Bar: 4, Outcome: Met}}}
	figs := map[string]map[string]float64{}
	var rows []SummaryRow
	for _, r := range []struct {
		suite  string
		report any
	}{{"cold", group}, {"warm", series}} {
		b, _ := json.Marshal(r.report)
		suite := r.suite
		rs, f, err := SuiteFigures(suite, b)
		if err != nil {
			t.Fatal(err)
		}
		rows, figs[suite] = append(rows, rs...), f
	}
	if len(rows) != 2 || rows[0].Target != "t1" || rows[0].Value != 0.7 || rows[0].Outcome != Missed || rows[1].Target != "c1" || rows[1].Outcome != Met {
		t.Errorf("rows %+v", rows)
	}
	byFigure := map[string]Comparison{}
	for _, c := range Compare(figs) {
		byFigure[c.Figure] = c
	}
	if c := byFigure["/bin/true / tine"]; !c.Within || c.Now != 20 {
		t.Errorf("tine %+v, want 20 ms within the band of 22.086", c)
	}
	if c := byFigure["/bin/true / bwrap"]; c.Within {
		t.Errorf("bwrap %+v, want outside the band", c)
	}
	if c := byFigure["warm function (16 imports)"]; !c.Within || c.Now != 2.5 {
		t.Errorf("warm %+v", c)
	}
	if _, ok := byFigure["tine via daemon"]; ok {
		t.Error("a figure not measured was compared")
	}
}

// A series suite without charts of its own gets a latency CDF of its series.
func TestSeriesLatencyCDF(t *testing.T) {
	dir := t.TempDir()
	r := &SeriesReport{Suite: "warm", Series: []Series{
		{Name: "warm function (16 imports)", Latency: Stats{N: 3}, Samples: []int64{1_000_000, 2_000_000, 3_000_000}},
		{Name: "no samples"},
	}}
	files, err := r.WritePlots(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("wrote %v, %v; want one chart", files, err)
	}
	b, _ := os.ReadFile(files[0])
	if !strings.Contains(string(b), "warm function (16 imports) (n=3)") || strings.Contains(string(b), "no samples") {
		t.Errorf("chart %s does not show exactly the series with samples", files[0])
	}
}

// A suite whose needs are absent is named with what it lacks, and one
// whose needs are present is not.
func TestSuiteNeeds(t *testing.T) {
	if why := needsBinaries("sh", "tine-no-such-binary"); why() != "needs tine-no-such-binary in $PATH" {
		t.Errorf("missing binary: %q", why())
	}
	if why := needsBinaries("sh"); why() != "" {
		t.Errorf("present binary: %q", why())
	}
	if why := needsFiles("the test's files", "all_test.go", "no/such/file"); !strings.Contains(why(), "no/such/file") {
		t.Errorf("missing file: %q", why())
	}
	if why := needsFiles("the test's files", "all_test.go"); why() != "" {
		t.Errorf("present file: %q", why())
	}
}
