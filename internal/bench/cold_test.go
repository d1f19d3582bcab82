package bench

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestColdGroups(t *testing.T) {
	groups := ColdGroups("/opt/tine", "/tmp/x/tine.sock", "")
	if len(groups) != len(ColdPayloads) {
		t.Fatalf("%d groups for %d payloads", len(groups), len(ColdPayloads))
	}
	for i, g := range groups {
		payload := ColdPayloads[i]
		if g.Reference != "bwrap" || g.Subject != "tine" {
			t.Errorf("%s: reference %q subject %q, want bwrap and tine", g.Name, g.Reference, g.Subject)
		}
		var names []string
		for _, v := range g.Variants {
			names = append(names, v.Name)
			if !slices.Equal(v.Argv[len(v.Argv)-len(payload):], payload) {
				t.Errorf("%s/%s: argv %q does not end with the payload", g.Name, v.Name, v.Argv)
			}
			if (v.Verify == nil) != (v.Name == "bare") {
				t.Errorf("%s/%s: only the bare payload goes unverified", g.Name, v.Name)
			}
		}
		if !slices.Equal(names, []string{"bare", "tine", "tine via daemon", "tine-run", "tine-run via daemon", "tine --userns", "bwrap", "unshare"}) {
			t.Errorf("%s: variants %v", g.Name, names)
		}
		tine := g.Variants[1].Argv
		if want := []string{"/opt/tine", "run", "--in-process", "--memory", "512m", "--pids", "256", "--cpus", "1", "--"}; !slices.Equal(tine[:len(want)], want) {
			t.Errorf("tine variant %q, want it to start %q", tine, want)
		}
		viaDaemon := g.Variants[2].Argv
		if want := []string{"/opt/tine", "run", "--socket", "/tmp/x/tine.sock", "--memory"}; !slices.Equal(viaDaemon[:len(want)], want) {
			t.Errorf("daemon variant %q, want it to start %q", viaDaemon, want)
		}
	}
	if !slices.Equal(groups[0].Targets, ColdTargets) || len(groups[1].Targets) != 0 {
		t.Errorf("the 0.6x targets belong to /bin/true only")
	}
	for _, v := range ColdGroups("/opt/tine", "", "not available: no daemon")[0].Variants {
		if (v.Name == "tine via daemon" || v.Name == "tine-run via daemon") && v.Unavailable == "" {
			t.Errorf("without a daemon the daemon variants must be unavailable")
		}
		if v.Name == "tine-run" && v.Unavailable == "" {
			t.Errorf("without /opt/tine-run the tine-run variant must be unavailable")
		}
	}
	// tine-run next to tine: its variants run it, in-process and handed over.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tine-run"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range ColdGroups(filepath.Join(dir, "tine"), "/tmp/x/tine.sock", "")[0].Variants {
		switch v.Name {
		case "tine-run":
			if want := []string{filepath.Join(dir, "tine-run"), "--in-process", "--memory"}; v.Unavailable != "" || !slices.Equal(v.Argv[:len(want)], want) {
				t.Errorf("tine-run variant %q (%s), want it to start %q", v.Argv, v.Unavailable, want)
			}
		case "tine-run via daemon":
			if want := []string{filepath.Join(dir, "tine-run"), "--socket", "/tmp/x/tine.sock"}; v.Unavailable != "" || !slices.Equal(v.Argv[:len(want)], want) {
				t.Errorf("tine-run daemon variant %q (%s), want it to start %q", v.Argv, v.Unavailable, want)
			}
		}
	}
}
