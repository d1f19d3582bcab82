package main

import (
	"os/exec"
	"strings"
	"testing"
)

// tine-run is small because it links only tine run's own code: a package
// of tine's other commands (each initialised at every start, used by none
// of run's) must not creep in through an import.
func TestLinksOnlyTheRunPath(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), out)
	}
	heavy := []string{"github.com/spf13/cobra", "text/template", "regexp", "encoding/gob",
		"github.com/tine-run/tine/internal/image", "github.com/tine-run/tine/internal/server",
		"github.com/tine-run/tine/internal/zygote", "github.com/google/", "github.com/klauspost/",
		"github.com/opencontainers/", "github.com/checkpoint-restore/", "google.golang.org/protobuf"}
	for _, d := range deps {
		for _, h := range heavy {
			if d == h || strings.HasPrefix(d, h+"/") || (strings.HasSuffix(h, "/") && strings.HasPrefix(d, h)) {
				t.Errorf("tine-run links %s", d)
			}
		}
	}
}
