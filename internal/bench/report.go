package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// notMeasured replaces every figure of a group measured on a disturbed host.
const notMeasured = "NOT MEASURED"

// WriteTable prints r for people: per group a table of variant, n, p50, p90,
// p99 and the p50 ratio to the reference, the headline ratio and targets,
// then failures, then the fingerprint.
func WriteTable(w io.Writer, r Report) error {
	p := &printer{w: w}
	p.printf("tine bench %s: %d rounds after %d warm-up rounds (discarded), variants interleaved in balanced order\n",
		r.Suite, r.Config.Rounds, r.Config.Warmup)
	for _, g := range r.Groups {
		p.printf("\n")
		writeGroup(p, g)
	}
	p.printf("\n")
	writeFingerprint(p, r.Fingerprint)
	return p.err
}

func writeGroup(p *printer, g GroupResult) {
	// Names align left; figures are padded to the right by column so that
	// their decimal points line up.
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%5s\t%9s\t%9s\t%9s\t%9s\t\n", g.Name, "n", "p50 ms", "p90 ms", "p99 ms", "p50/"+g.Reference)
	for _, v := range g.Variants {
		name := "  " + v.Name
		if v.Name == g.Reference {
			name += " (reference)"
		}
		switch {
		case v.Unavailable != "":
			fmt.Fprintf(tw, "%s\t%5s\t%9s\t%9s\t%9s\t%9s\t%s\n", name, "-", "-", "-", "-", "-", v.Unavailable)
		case v.Failure != nil:
			fmt.Fprintf(tw, "%s\t%5s\t%9s\t%9s\t%9s\t%9s\tFAILED (below)\n", name, "-", "-", "-", "-", "-")
		case g.Verdict.Disturbed:
			fmt.Fprintf(tw, "%s\t%5d\t%9s\t%9s\t%9s\t%9s\t\n", name, v.Stats.N, notMeasured, notMeasured, notMeasured, notMeasured)
		default:
			fmt.Fprintf(tw, "%s\t%5d\t%9s\t%9s\t%9s\t%9s\t\n", name, v.Stats.N,
				millis(v.Stats.P50Ns), millis(v.Stats.P90Ns), millis(v.Stats.P99Ns), ratio(v.P50Ratio))
		}
	}
	tw.Flush()
	for line := range strings.Lines(table.String()) {
		p.printf("%s\n", strings.TrimRight(line, " \n")) // padding of the empty last cells
	}

	if g.Verdict.Disturbed {
		p.printf("  %s: %s\n", notMeasured, strings.Join(g.Verdict.Reasons, "; "))
	}
	if g.Subject != "" {
		subject, _ := g.Variant(g.Subject)
		headline := ratio(subject.P50Ratio)
		switch {
		case g.Verdict.Disturbed:
			headline = notMeasured
		case subject.P50Ratio == nil:
			headline = "none (" + whyNoFigures(subject) + ")"
		}
		p.printf("  %s p50 / %s p50 = %s\n", g.Subject, g.Reference, headline)
	}
	for _, t := range g.Targets {
		verdict := strings.ToUpper(string(t.Outcome))
		if t.Why != "" {
			verdict += " (" + t.Why + ")"
		}
		if t.P50ExtraMs != nil {
			verdict += fmt.Sprintf(" (p50 %+.2f ms)", *t.P50ExtraMs)
		} else if t.Reference != "" && t.P50Ratio != nil {
			verdict += fmt.Sprintf(" (p50 / %s p50 = %s)", t.Reference, ratio(t.P50Ratio))
		}
		p.printf("  target: %s: %s\n", t.Text, verdict)
	}
	for _, c := range g.Checks {
		verdict := strings.ToUpper(string(c.Outcome))
		if c.Why != "" {
			verdict += " (" + c.Why + ")"
		}
		switch {
		case c.Bar != 0:
			p.printf("  target %s: %.3g (bar %.3g) %s\n", c.Text, c.Value, c.Bar, verdict)
		case c.Outcome == NotMeasured:
			p.printf("  %s: %s\n", c.Text, verdict)
		default: // a figure without a bar
			p.printf("  %s: %.3g\n", c.Text, c.Value)
		}
	}
	for _, v := range g.Variants {
		if f := v.Failure; f != nil {
			p.printf("  %s failed in %s run %d: %s\n    command: %s\n", v.Name, f.Phase, f.Run, f.Error, shellJoin(v.Argv))
			if stderr := strings.TrimSpace(f.Stderr); stderr != "" {
				p.printf("    stderr: %s\n", strings.ReplaceAll(stderr, "\n", "\n            "))
			}
		}
	}
}

func writeFingerprint(p *printer, fp Fingerprint) {
	cgroup := fp.Cgroup
	if len(fp.CgroupEnforceable) > 0 {
		cgroup += " (" + strings.Join(fp.CgroupEnforceable, " ") + ")"
	}
	p.printf("host:  kernel %s, %d × %s, %.1f GiB, cgroup %s\n",
		fp.Kernel, fp.CPUs, fp.CPUModel, float64(fp.MemTotalBytes)/(1<<30), cgroup)
	p.printf("load:  1-min %s before, %s after (limit %d cores); CPU throttling %s\n",
		load1(fp.Before), load1(fp.After), fp.CPUs, throttling(fp.Before, fp.After))
	p.printf("tine:  %s (%s), %s\n", fp.TineVersion, fp.GoVersion, fp.Date)
}

func load1(s HostState) string {
	if s.LoadError != "" {
		return "unreadable"
	}
	if s.BusyWindowMs > 0 {
		return fmt.Sprintf("%.2f (CPUs busy %.2f)", s.Load1, s.BusyCores)
	}
	return fmt.Sprintf("%.2f", s.Load1)
}

func throttling(before, after HostState) string {
	if err := cmp.Or(before.CPUStatError, after.CPUStatError); err != "" {
		return "unreadable: " + err
	}
	out := fmt.Sprintf("nr_throttled %d → %d (%s)", before.Throttled, after.Throttled, after.CPUStatPath)
	if d := after.TotalTicks - before.TotalTicks; after.TotalTicks > before.TotalTicks {
		out += fmt.Sprintf("; hypervisor steal %.1f%%", 100*float64(after.StealTicks-before.StealTicks)/float64(d))
	}
	return out
}

func millis(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) }

func ratio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}

// printer keeps the first write error so the printing code stays linear.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *printer) printf(format string, args ...any) { fmt.Fprintf(p, format, args...) }

// WriteJSON writes r, indented, to path.
func WriteJSON(path string, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
