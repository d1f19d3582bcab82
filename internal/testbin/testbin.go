// Package testbin builds the tine binary for black-box tests (test/...),
// from the module the tests run in.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Build compiles ./cmd/tine into dir and returns the binary's path.
func Build(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside the tine module (got %q)", gomod)
	}
	bin := filepath.Join(dir, "tine")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/tine")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tine: %w\n%s", err, out)
	}
	return bin, nil
}
