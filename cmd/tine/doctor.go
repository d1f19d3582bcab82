package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/probe"
)

func newDoctorCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check which host features tine can use",
		Long: `doctor tries each host feature tine uses (namespaces, overlayfs, cgroups,
seccomp, Landlock, criu, ...) and prints what it found, and for what is
missing, what stops working and how to fix it.

It exits 0 when tine run can work on this host (root or unprivileged user
namespaces, every namespace kind, overlayfs and seccomp), 1 otherwise.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("doctor takes no arguments, got %q; usage: tine doctor [--json]", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	return r
}

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
	if r.Ready {
		b.WriteString("tine run: ready\n")
	} else {
		fmt.Fprintf(&b, "tine run: NOT ready: needs %s\n", strings.Join(r.Blockers, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
