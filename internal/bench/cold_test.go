package bench

import (
	"slices"
	"testing"
)

func TestColdGroups(t *testing.T) {
	groups := ColdGroups("/opt/tine")
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
		if !slices.Equal(names, []string{"bare", "tine", "bwrap", "unshare"}) {
			t.Errorf("%s: variants %v", g.Name, names)
		}
		tine := g.Variants[1].Argv
		if want := []string{"/opt/tine", "run", "--memory", "512m", "--pids", "256", "--cpus", "1", "--"}; !slices.Equal(tine[:len(want)], want) {
			t.Errorf("tine variant %q, want it to start %q", tine, want)
		}
	}
	if len(groups[0].Targets) != 1 || groups[0].Targets[0] != ColdTarget || len(groups[1].Targets) != 0 {
		t.Errorf("the 0.6x target belongs to /bin/true only")
	}
}
