package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/tine-run/tine/internal/ctrd"
)

// OCITarget is the bar for tine as containerd's runtime.
var OCITarget = Target{Variant: "tine", MaxRatio: 1.0, Text: "ctr run --rm of a busybox image with tine-runc p50 at most 1.0x with Debian's runc"}

// OCIGroups is the OCI-runtime suite: a containerd of its own, a busybox
// image imported into it, and `ctr run --rm IMAGE true` with the runc
// shim's runtime binary set to Debian's runc (the reference) and to
// tine-runc (next to tinePath), interleaved.
func OCIGroups(tinePath string) ([]Group, func(), error) {
	dir, err := os.MkdirTemp("", "tine-bench-oci-")
	if err != nil {
		return nil, nil, err
	}
	c, err := ctrd.Start(dir, fmt.Sprintf("tine-bench-%d", os.Getpid()))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cleanup := func() { c.Stop(); os.RemoveAll(dir) }
	const ref = "tine.bench/busybox:latest"
	if err := c.ImportBusybox(ref); err != nil {
		cleanup()
		return nil, nil, err
	}
	link := filepath.Join(filepath.Dir(tinePath), "tine-runc")
	if _, err := os.Stat(link); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("tine-runc is not next to %s (make build makes it): %w", tinePath, err)
	}
	g := Group{Name: "ctr run --rm busybox true", Reference: "runc", Subject: "tine", Targets: []Target{OCITarget}}
	for _, rt := range []struct{ name, binary string }{{"runc", "runc"}, {"tine", link}} {
		v := Variant{Name: rt.name}
		bin, err := exec.LookPath(rt.binary)
		if err != nil {
			v.Unavailable = "not available: " + err.Error()
			g.Variants = append(g.Variants, v)
			continue
		}
		run := func(id string, cmd ...string) []string {
			return slices.Concat(c.CtrArgs(), []string{"run", "--rm", "--runc-binary", bin, ref, id}, cmd)
		}
		v.Argv = run("bench-"+rt.name, "true")
		// Only a runtime that ran the command and passed its status on
		// exits 7 here.
		v.Verify = VerifyExitCode(run("verify-"+rt.name, "sh", "-c", "exit 7"), 7)
		g.Variants = append(g.Variants, v)
	}
	return []Group{g}, cleanup, nil
}
