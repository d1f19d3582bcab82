package imagetest

import (
	"testing"

	"github.com/tine-run/tine/internal/image/hostimage"
)

// Wheel writes a pure-Python wheel of package name (one module,
// name/__init__.py holding src) into dir, for pip to install offline.
func Wheel(t testing.TB, dir, name, version, src string) string {
	t.Helper()
	p, err := hostimage.Wheel(dir, name, version, src)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
