package probe_test

import (
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/probe"
	"github.com/tine-run/tine/internal/require"
)

// TestCRIUWorks runs where criu is required (CI installs it with
// scripts/install-criu): the criu tine picks must be new enough and pass
// `criu check` on this kernel.
func TestCRIUWorks(t *testing.T) {
	require.Root(t)
	require.CRIU(t, probe.MinCRIU)
	c := probe.Get("criu")
	if !strings.Contains(c.Detail, "check` passed") {
		t.Errorf("criu check = %+v", c)
	}
}
