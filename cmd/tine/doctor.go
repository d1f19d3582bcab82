package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/probe"
)

func newDoctorCommand() *cobra.Command {
	var asJSON, fix, yes bool
	cmd := &cobra.Command{
		Use:   "doctor [--json] [--fix [--yes]]",
		Short: "Check which host features tine can use",
		Long: `doctor tries each host feature tine uses (namespaces, overlayfs, cgroups,
seccomp, Landlock, criu, ...) and prints what it found, and for what is
missing, what stops working and how to fix it. As root it also measures
what moving a process between cgroups costs here (about a second): on
Linux 6.0 and later the first move after a quiet spell waits for an RCU
grace period. On v1 tine never pays it: each of its processes joins its
group by moving its only thread (a v1 tasks file), which skips that lock
(doctor times that too).
On v2 a command handed to the daemon joins its tracking group by a move.

--fix offers the host setting that removes that wait: favordynmods on the
cgroup2 mount. It measures fork+exec of /bin/true and the move before and
after, since favordynmods puts every fork and exit on the host on the
cgroup lock's slower path, and asks before it remounts (--yes: do not
ask). The setting lasts until the next boot.

It exits 0 when tine run can work on this host (root or unprivileged user
namespaces, every namespace kind, overlayfs and seccomp), 1 otherwise.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("doctor takes no arguments, got %q; usage: tine doctor [--json]", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if yes && !fix {
				return usageError{"--yes answers --fix's question; usage: tine doctor --fix --yes"}
			}
			if fix {
				return fixFavorDynmods(cmd.InOrStdin(), cmd.OutOrStdout(), yes)
			}
			r := newDoctorReport()
			var err error
			if asJSON {
				err = r.writeJSON(cmd.OutOrStdout())
			} else {
				err = r.writeText(cmd.OutOrStdout())
			}
			if err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			if !r.Ready {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON")
	cmd.Flags().BoolVar(&fix, "fix", false, "offer favordynmods on the cgroup2 mount, with its measured cost, and apply it when agreed")
	cmd.Flags().BoolVar(&yes, "yes", false, "with --fix: apply without asking")
	return cmd
}

// doctorReport is what tine doctor prints; its JSON form is for scripts.
type doctorReport struct {
	Kernel string `json:"kernel"`
	// Ready is true when tine run can work here; Blockers says what stops it.
	Ready    bool          `json:"ready"`
	Blockers []string      `json:"blockers"`
	Cgroup   cgroupSummary `json:"cgroup"`
	Checks   []probe.Check `json:"checks"`
	// CgroupMove is the measured cost of a cgroup move (nil when it could
	// not be measured: CgroupMoveError says why).
	CgroupMove      *probe.MoveCost `json:"cgroup_move,omitempty"`
	CgroupMoveError string          `json:"cgroup_move_error,omitempty"`
}

// cgroupSummary is the cgroup interface tine drives on this host.
type cgroupSummary struct {
	Version     string   `json:"version"`
	Enforceable []string `json:"enforceable"`
	Why         string   `json:"why"`
}

func newDoctorReport() doctorReport {
	r := doctorReport{
		Kernel:   probe.Kernel(),
		Checks:   probe.All(),
		Blockers: probe.Blockers(),
	}
	r.Ready = len(r.Blockers) == 0
	if r.Blockers == nil {
		r.Blockers = []string{}
	}
	r.Cgroup = cgroupSummary{Version: "none", Enforceable: []string{}}
	if h, err := probe.Cgroup(); err != nil {
		r.Cgroup.Why = err.Error()
	} else {
		r.Cgroup.Version = h.Version.String()
		r.Cgroup.Why = h.Why
		if h.Enforceable != nil {
			r.Cgroup.Enforceable = h.Enforceable
		}
	}
	if mc, err := probe.MeasureCgroupMove(moveSamples, moveQuiet); err != nil {
		r.CgroupMoveError = err.Error()
	} else {
		r.CgroupMove = &mc
	}
	return r
}

// The cgroup-move probe: moves after moveQuiet of no moves (an RCU grace
// period is a few milliseconds; 200 ms is the sparse calls' spacing).
const (
	moveSamples = 5
	moveQuiet   = 200 * time.Millisecond
)

func (r doctorReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keep "criu >= 4.1" readable
	return enc.Encode(r)
}

func (r doctorReport) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel %s\n\n", r.Kernel)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		status := "ok"
		if !c.OK {
			status = "MISSING"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, status, c.Detail)
	}
	tw.Flush()

	var missing []probe.Check
	for _, c := range r.Checks {
		if !c.OK {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		b.WriteString("\nmissing:\n")
		for _, c := range missing {
			fmt.Fprintf(&b, "  %s\n", c.Name)
			if c.Affects != "" {
				fmt.Fprintf(&b, "    affects: %s\n", c.Affects)
			}
			if c.Fix != "" {
				fmt.Fprintf(&b, "    fix:     %s\n", c.Fix)
			}
		}
	}

	b.WriteString("\n")
	if r.Cgroup.Version == "none" {
		fmt.Fprintf(&b, "cgroup: none usable, limits are not enforced (%s)\n", r.Cgroup.Why)
	} else {
		fmt.Fprintf(&b, "cgroup: tine drives %s; enforceable: %s\n", r.Cgroup.Version, strings.Join(r.Cgroup.Enforceable, " "))
	}
	if mc := r.CgroupMove; mc != nil {
		fmt.Fprintf(&b, "cgroup move: %.2f ms after %.0f ms without one, %.2f ms right after another (%s)\n",
			mc.QuietMs, mc.QuietGapMs, mc.BusyMs, favorState(mc))
		if mc.ThreadHierarchy != "" {
			fmt.Fprintf(&b, "cgroup thread move (how tine's processes join on v1): %.2f ms after %.0f ms without a move\n", mc.ThreadQuietMs, mc.QuietGapMs)
		}
		if !mc.FavorDynmods && mc.Cgroup2Mount != "" && mc.QuietMs > 4*mc.BusyMs+0.5 {
			if r.Cgroup.Version == "v1" {
				b.WriteString("    affects: other programs' moves; not tine's on v1 (its processes move their only thread)\n")
			} else {
				b.WriteString("    affects: runs handed to the daemon (their command joins a tracking group)\n")
				b.WriteString("    fix:     tine doctor --fix (favordynmods, with its cost measured)\n")
			}
		}
	} else if r.CgroupMoveError != "" {
		fmt.Fprintf(&b, "cgroup move: not measured (%s)\n", r.CgroupMoveError)
	}
	if r.Ready {
		b.WriteString("tine run: ready\n")
	} else {
		fmt.Fprintf(&b, "tine run: NOT ready: needs %s\n", strings.Join(r.Blockers, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func favorState(mc *probe.MoveCost) string {
	switch {
	case mc.Cgroup2Mount == "":
		return "no cgroup2 mount for favordynmods"
	case mc.FavorDynmods:
		return "favordynmods on " + mc.Cgroup2Mount
	default:
		return "favordynmods off on " + mc.Cgroup2Mount
	}
}

// fixFavorDynmods measures the move and fork+exec, says what favordynmods
// would change, asks (unless yes), remounts, and measures both again.
func fixFavorDynmods(in io.Reader, out io.Writer, yes bool) error {
	before, err := probe.MeasureCgroupMove(moveSamples, moveQuiet)
	if err != nil {
		return fmt.Errorf("measure a cgroup move: %w", err)
	}
	if before.Cgroup2Mount == "" {
		return fmt.Errorf("favordynmods is an option of the cgroup2 file system, and none is mounted here (mount one, e.g. mount -t cgroup2 none /sys/fs/cgroup/unified, then run tine doctor --fix again)")
	}
	if before.FavorDynmods {
		fmt.Fprintf(out, "favordynmods is already on for %s: cgroup move %.2f ms after %.0f ms without one, %.2f ms right after another\n",
			before.Cgroup2Mount, before.QuietMs, before.QuietGapMs, before.BusyMs)
		return nil
	}
	forkBefore, err := probe.ForkExecCost(forkSamples)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, `now: cgroup move %.2f ms after %.0f ms without one, %.2f ms right after another; fork+exec+wait of /bin/true %.3f ms (p50 of %d)
favordynmods on %s keeps the kernel's cgroup lock ready for writers: a move no longer waits for an RCU
grace period, but every fork and exit on this host takes the lock's shared counter instead of a per-CPU one.
`, before.QuietMs, before.QuietGapMs, before.BusyMs, forkBefore, forkSamples, before.Cgroup2Mount)
	if !yes {
		fmt.Fprintf(out, "remount %s with favordynmods now? [y/N] ", before.Cgroup2Mount)
		answer, _ := bufio.NewReader(in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(out, "left as it is")
			return nil
		}
	}
	if err := probe.SetFavorDynmods(true); err != nil {
		return err
	}
	after, err := probe.MeasureCgroupMove(moveSamples, moveQuiet)
	if err != nil {
		return fmt.Errorf("favordynmods is on; measuring the move again failed: %w", err)
	}
	forkAfter, err := probe.ForkExecCost(forkSamples)
	if err != nil {
		return fmt.Errorf("favordynmods is on; measuring fork+exec again failed: %w", err)
	}
	fmt.Fprintf(out, `favordynmods is on for %s until the next boot (keep it: add favordynmods to that mount's options in
/etc/fstab; undo now: mount -o remount %s).
  cgroup move after %.0f ms without one: %.2f → %.2f ms
  fork+exec+wait of /bin/true:          %.3f → %.3f ms (%+.1f%%; on a busy host this moves by more than the setting does)
`, before.Cgroup2Mount, before.Cgroup2Mount, before.QuietGapMs, before.QuietMs, after.QuietMs, forkBefore, forkAfter, (forkAfter/forkBefore-1)*100)
	return nil
}

// forkSamples: fork+exec+wait runs per measurement of --fix.
const forkSamples = 300
