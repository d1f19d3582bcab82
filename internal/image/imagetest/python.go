package imagetest

import (
	"bytes"
	"io"
	"os"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
	"github.com/tine-run/tine/internal/image/hostimage"
	"github.com/tine-run/tine/internal/require"
)

// HostPython is the interpreter PythonLayer copies.
const HostPython = hostimage.HostPython

var pythonLayers sync.Map // bool (with bytecode) → []byte, built once per test binary

// PythonLayer is a minimal Python from the host (hostimage.PythonTar).
// Stack it on BusyboxLayer.
func PythonLayer(t testing.TB, bytecode bool) v1.Layer {
	t.Helper()
	require.Binary(t, "python3.11") // Debian's, HostPython (CI: strict)
	if _, err := os.Stat(HostPython); err != nil {
		t.Skipf("needs %s (apt python3): %v", HostPython, err)
	}
	b, ok := pythonLayers.Load(bytecode)
	if !ok {
		built, err := hostimage.PythonTar(bytecode)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = pythonLayers.LoadOrStore(bytecode, built)
	}
	return tarLayer(t, b.([]byte))
}

func tarLayer(t testing.TB, data []byte) v1.Layer {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// HostLayer is a layer of host paths and the libraries they need
// (hostimage.HostTar); it skips the test when one is missing.
func HostLayer(t testing.TB, paths ...string) v1.Layer {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s on the host: %v", p, err)
		}
	}
	b, err := hostimage.HostTar(nil, nil, paths...)
	if err != nil {
		t.Fatal(err)
	}
	return tarLayer(t, b)
}

// PythonImage is busybox and the host's Python under a config that puts
// them on PATH.
func PythonImage(t testing.TB, bytecode bool) v1.Image {
	return Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}}, BusyboxLayer(t), PythonLayer(t, bytecode))
}
