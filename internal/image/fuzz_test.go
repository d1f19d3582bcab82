package image

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// FuzzUnpack feeds arbitrary tar streams to Unpack: whatever it accepts or
// refuses, nothing appears beside the layer's directory, and the layer
// holds no device but overlay whiteouts (0:0).
func FuzzUnpack(f *testing.F) {
	seeds := [][]entry{
		{{name: "etc/motd", typ: tar.TypeReg, body: "x"}, {name: "etc/.wh.gone", typ: tar.TypeReg}, {name: "d/.wh..wh..opq", typ: tar.TypeReg}},
		{{name: "../outside/pwned", typ: tar.TypeReg, body: "x"}},
		{{name: "link", typ: tar.TypeSymlink, link: "../outside"}, {name: "link/pwned", typ: tar.TypeReg, body: "x"}},
		{{name: "f", typ: tar.TypeReg}, {name: "h", typ: tar.TypeLink, link: "../outside/secret"}},
		{{name: "dev/sda", typ: tar.TypeBlock, dev: 8}, {name: "x", typ: tar.TypeDir}, {name: "x", typ: tar.TypeReg}},
	}
	for _, s := range seeds {
		f.Add(layerTar(f, s...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		require.Root(t)
		top := t.TempDir()
		layer, outside := filepath.Join(top, "layer"), filepath.Join(top, "outside")
		if err := os.Mkdir(layer, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		Unpack(bytes.NewReader(b), layer)
		if entries, _ := os.ReadDir(top); len(entries) != 2 {
			t.Fatalf("beside the layer: %v", entries)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("outside the layer: %v", entries)
		}
		filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil && (st.Mode&unix.S_IFMT == unix.S_IFBLK || st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev != 0) {
				t.Fatalf("%s is a device node", p)
			}
			return nil
		})
	})
}
