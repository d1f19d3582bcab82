package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"golang.org/x/sys/unix"
)

// entry is one tar member of a crafted layer.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
	dev              int64
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)),
			ModTime: time.Unix(1700000000, 0), Devmajor: e.dev, Devminor: e.dev}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			w.Write([]byte(e.body))
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandboxDir returns a fresh layer directory with a sibling "outside" the
// crafted layers aim at.
func sandboxDir(t *testing.T) (layer, outside string) {
	t.Helper()
	top := t.TempDir()
	layer, outside = filepath.Join(top, "layer"), filepath.Join(top, "outside")
	for _, d := range []string{layer, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Negative control: the target is writable, so an unpacker that
	// followed the crafted path would have left a file there.
	if err := os.WriteFile(filepath.Join(outside, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(outside, "control"))
	return layer, outside
}

func unpackBytes(t *testing.T, b []byte, dir string) (Unpacked, error) {
	t.Helper()
	return Unpack(bytes.NewReader(b), dir)
}

func TestUnpackAppliesTheLayerFormat(t *testing.T) {
	require.Root(t)
	layer, _ := sandboxDir(t)
	b := layerTar(t,
		entry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "etc/motd", typ: tar.TypeReg, body: "hello\n"},
		entry{name: "/abs/file", typ: tar.TypeReg, body: "absolute names are the layer's\n"},
		entry{name: "etc/motd.hard", typ: tar.TypeLink, link: "etc/motd"},
		entry{name: "bin/sh", typ: tar.TypeSymlink, link: "/bin/busybox"},
		entry{name: "usr/.wh.gone", typ: tar.TypeReg},
		entry{name: "opt/app/.wh..wh..opq", typ: tar.TypeReg},
		entry{name: "opt/app/new", typ: tar.TypeReg, body: "x"},
		entry{name: "suid", typ: tar.TypeReg, mode: 0o4755, body: "#!"},
		entry{name: "fifo", typ: tar.TypeFifo},
	)
	u, err := unpackBytes(t, b, layer)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(layer + "/etc/motd"); string(got) != "hello\n" {
		t.Errorf("etc/motd = %q", got)
	}
	if _, err := os.Stat(layer + "/abs/file"); err != nil {
		t.Errorf("absolute name not unpacked in the layer: %v", err)
	}
	var a, h unix.Stat_t
	unix.Stat(layer+"/etc/motd", &a)
	unix.Stat(layer+"/etc/motd.hard", &h)
	if a.Ino != h.Ino {
		t.Error("hard link is not a link")
	}
	if l, _ := os.Readlink(layer + "/bin/sh"); l != "/bin/busybox" {
		t.Errorf("symlink = %q", l)
	}
	var w unix.Stat_t
	if err := unix.Lstat(layer+"/usr/gone", &w); err != nil || w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("whiteout not a 0:0 device: %v %o", err, w.Mode)
	}
	if _, err := os.Lstat(layer + "/usr/.wh.gone"); !os.IsNotExist(err) {
		t.Error("the .wh. file itself was kept")
	}
	val := make([]byte, 1)
	if n, err := unix.Lgetxattr(layer+"/opt/app", "trusted.overlay.opaque", val); err != nil || n != 1 || val[0] != 'y' {
		t.Errorf("opaque marker not applied: %v", err)
	}
	if st, _ := os.Stat(layer + "/suid"); st.Mode()&os.ModeSetuid == 0 {
		t.Error("setuid bit lost")
	}
	if st, _ := os.Stat(layer + "/etc/motd"); !st.ModTime().Equal(time.Unix(1700000000, 0)) {
		t.Errorf("mtime %v", st.ModTime())
	}
	if u.DiffID == "" || u.Bytes != int64(len("hello\n")+len("absolute names are the layer's\n")+1+2) {
		t.Errorf("stats %+v", u)
	}
}

// TestUnpackRefusesEscapes feeds crafted layers that aim outside the
// layer's directory; each must be refused and leave nothing outside.
func TestUnpackRefusesEscapes(t *testing.T) {
	require.Root(t)
	cases := []struct {
		name    string
		entries func(outside string) []entry
	}{
		{"dotdot", func(string) []entry {
			return []entry{{name: "../outside/pwned", typ: tar.TypeReg, body: "x"}}
		}},
		{"dotdot-inside", func(string) []entry {
			return []entry{{name: "a/b/../../../outside/pwned", typ: tar.TypeReg, body: "x"}}
		}},
		{"symlink-then-beneath", func(outside string) []entry {
			return []entry{{name: "link", typ: tar.TypeSymlink, link: outside}, {name: "link/pwned", typ: tar.TypeReg, body: "x"}}
		}},
		{"relative-symlink-then-beneath", func(string) []entry {
			return []entry{{name: "d/link", typ: tar.TypeSymlink, link: "../../outside"}, {name: "d/link/pwned", typ: tar.TypeReg, body: "x"}}
		}},
		{"symlink-then-hardlink-beneath", func(outside string) []entry {
			return []entry{{name: "f", typ: tar.TypeReg}, {name: "link", typ: tar.TypeSymlink, link: outside}, {name: "link/pwned", typ: tar.TypeLink, link: "f"}}
		}},
		{"symlink-then-whiteout-beneath", func(outside string) []entry {
			return []entry{{name: "link", typ: tar.TypeSymlink, link: outside}, {name: "link/.wh.pwned", typ: tar.TypeReg}}
		}},
		{"symlink-then-opaque-beneath", func(outside string) []entry {
			return []entry{{name: "link", typ: tar.TypeSymlink, link: outside}, {name: "link/.wh..wh..opq", typ: tar.TypeReg}}
		}},
		{"hardlink-to-host-absolute", func(outside string) []entry {
			return []entry{{name: "pwned", typ: tar.TypeLink, link: outside + "/secret"}}
		}},
		{"hardlink-to-host-dotdot", func(string) []entry {
			return []entry{{name: "pwned", typ: tar.TypeLink, link: "../outside/secret"}}
		}},
		{"hardlink-through-symlink", func(outside string) []entry {
			return []entry{{name: "link", typ: tar.TypeSymlink, link: outside}, {name: "pwned", typ: tar.TypeLink, link: "link/secret"}}
		}},
		{"whiteout-of-dotdot", func(string) []entry {
			return []entry{{name: "a/.wh..", typ: tar.TypeReg}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			layer, outside := sandboxDir(t)
			secret := filepath.Join(outside, "secret")
			if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := unpackBytes(t, layerTar(t, c.entries(outside)...), layer)
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Fatalf("crafted layer: err = %v, want ErrUnsafeLayer", err)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 || entries[0].Name() != "secret" {
				t.Errorf("outside the layer now holds %v", entries)
			}
			var st unix.Stat_t
			if unix.Stat(secret, &st) == nil && st.Nlink != 1 {
				t.Errorf("the host file got %d links", st.Nlink)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(layer), "pwned")); err == nil {
				t.Error("a file landed beside the layer")
			}
		})
	}
}

// TestUnpackLeavesDevicesOut: a layer's device nodes are dropped (a
// sandbox could otherwise open the host's disks), the rest unpacked.
func TestUnpackLeavesDevicesOut(t *testing.T) {
	require.Root(t)
	layer, _ := sandboxDir(t)
	u, err := unpackBytes(t, layerTar(t,
		entry{name: "dev/sda", typ: tar.TypeBlock, dev: 8},
		entry{name: "dev/mem", typ: tar.TypeChar, dev: 1},
		entry{name: "ok", typ: tar.TypeReg, body: "x"},
	), layer)
	if err != nil {
		t.Fatal(err)
	}
	if u.Devices != 2 {
		t.Errorf("Devices = %d, want 2", u.Devices)
	}
	for _, n := range []string{"dev/sda", "dev/mem"} {
		if _, err := os.Lstat(filepath.Join(layer, n)); !os.IsNotExist(err) {
			t.Errorf("%s was made: %v", n, err)
		}
	}
	if _, err := os.Stat(layer + "/ok"); err != nil {
		t.Error(err)
	}
}

// TestUnpackLaterEntryWins: a name listed twice takes the later entry,
// whatever kinds the two are.
func TestUnpackLaterEntryWins(t *testing.T) {
	require.Root(t)
	layer, _ := sandboxDir(t)
	_, err := unpackBytes(t, layerTar(t,
		entry{name: "x/inner", typ: tar.TypeReg, body: "old"},
		entry{name: "x", typ: tar.TypeReg, body: "file now"},
		entry{name: "y", typ: tar.TypeSymlink, link: "/etc"},
		entry{name: "y/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "y/z", typ: tar.TypeReg, body: "in a real dir"},
	), layer)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(layer + "/x"); string(b) != "file now" {
		t.Errorf("x = %q", b)
	}
	if st, err := os.Lstat(layer + "/y"); err != nil || !st.IsDir() {
		t.Errorf("y is not a directory: %v", err)
	}
}
