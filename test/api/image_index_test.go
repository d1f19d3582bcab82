package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image/imagetest"
	"golang.org/x/sys/unix"
)

// TestFunctionRequirementsFromAnIndex: a function's index_url builds its
// environment over the daemon's egress network from an index on a test
// host.
func TestFunctionRequirementsFromAnIndex(t *testing.T) {
	nd := startNetDaemon(t)
	t.Cleanup(func() { unix.Unmount(filepath.Join(nd.dir, "state", "store"), unix.MNT_DETACH) })
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 'from the index'\n")
	ln, err := nd.a.Listen("tcp4", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	index := imagetest.ServeIndex(t, ln, wheels)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "fn/python:index", imagetest.PythonImage(t, true))
	req := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(req, []byte("tinedemo==1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	putFunction(t, nd.daemon, api.FunctionSpec{Name: "indexfn", Image: ref, Requirements: req, IndexURL: "http://" + nd.a.Addr.String() + ":8080/simple",
		Entry: writeHandler(t, "import tinedemo\ndef handler(event):\n    return tinedemo.VALUE\n")})
	if got := resultOf[string](t, invoke(t, nd.daemon, "indexfn", 1)); got != "from the index" || index.Requests.Load() == 0 {
		t.Fatalf("a function with requirements from an index: %q (%d requests to it)", got, index.Requests.Load())
	}
}
