package security

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/testbin"
)

// tarOf builds an archive of headers; regular files get body as content.
func tarOf(t *testing.T, body string, hdrs ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		h.Mode = 0o644
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func nlink(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Nlink)
}

// TestArchiveLinksConfined uploads archives whose links point out: a hard
// link to /etc/shadow, to ../../etc/shadow and to a host file by its host
// path; a symlink to a host directory, to /etc and to /proc/1/root and then
// a file written through each. Hard links must name an entry inside the
// target and symlinks resolve inside the root, so none of them touches the
// host. The control: the same shapes pointing inside the target extract
// and work (extraction never writes through a symlink, even one pointing
// inside); the host file exists with one link.
func TestArchiveLinksConfined(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, secret := hostDirWithSecret(t)
	hostFile := filepath.Join(dir, "secret")
	probe := "tine-slip-" + marker()
	shadow, _ := os.ReadFile("/etc/shadow")
	mkdir := func(p string) {
		if _, err := d.c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: p, Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Control: links inside the target work.
	mkdir("/ok")
	good := tarOf(t, "inside",
		tar.Header{Name: "a", Typeflag: tar.TypeReg},
		tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"},
		tar.Header{Name: "sub", Typeflag: tar.TypeSymlink, Linkname: "/ok/a"})
	if err := d.c.WriteArchive(ctx, sb.ID, "/ok", bytes.NewReader(good)); err != nil {
		t.Fatalf("control: an archive with links inside its target: %v", err)
	}
	res, _ := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "stat -c %h /ok/a; cat /ok/b /ok/sub"}})
	if got := string(res.Stdout); got != "2\ninsideinside" {
		t.Fatalf("control: the archive's links did not come out as links: %q %q", got, res.Stderr)
	}

	hostlinksBefore := nlink(t, hostFile)
	attempts := map[string][]byte{
		"hard link to /etc/shadow":       tarOf(t, "", tar.Header{Name: "shadow", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}),
		"hard link to ../../etc/shadow":  tarOf(t, "", tar.Header{Name: "shadow2", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}),
		"hard link to a host file":       tarOf(t, "", tar.Header{Name: "host", Typeflag: tar.TypeLink, Linkname: "../../../../.." + hostFile}),
		"symlink to a host dir, then in": tarOf(t, "escaped", tar.Header{Name: "hd", Typeflag: tar.TypeSymlink, Linkname: dir}, tar.Header{Name: "hd/" + probe, Typeflag: tar.TypeReg}),
		"symlink to /etc, then in":       tarOf(t, "escaped", tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, tar.Header{Name: "etc/" + probe, Typeflag: tar.TypeReg}),
		"symlink to /proc/1/root":        tarOf(t, "escaped", tar.Header{Name: "pr", Typeflag: tar.TypeSymlink, Linkname: "/proc/1/root/etc"}, tar.Header{Name: "pr/" + probe, Typeflag: tar.TypeReg}),
		"symlink up, then in":            tarOf(t, "escaped", tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../etc"}, tar.Header{Name: "up/" + probe, Typeflag: tar.TypeReg}),
	}
	for name, archive := range attempts {
		target := "/slip/" + slug(name)
		mkdir(target)
		err := d.c.WriteArchive(ctx, sb.ID, target, bytes.NewReader(archive))
		t.Logf("%s: %v", name, err)
		if err != nil && client.ErrorCode(err) == "" {
			t.Errorf("%s: an untyped error: %v", name, err)
		}
	}
	// Whatever landed inside must be the sandbox's, never the host's.
	res, _ = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "cat /slip/*/shadow* /slip/*/host 2>/dev/null; echo end"}})
	if out := string(res.Stdout); strings.Contains(out, secret) || (len(shadow) > 0 && strings.Contains(out, strings.SplitN(string(shadow), "\n", 2)[0])) {
		t.Errorf("a hard link in an archive reached a host file:\n%s", out)
	}
	for _, p := range []string{"/etc/shadow", "../../etc/shadow", "a host file"} {
		if rc, err := d.c.ReadFile(ctx, sb.ID, "/slip/"+slug("hard link to "+p)); err == nil {
			if b := readAll(rc); strings.Contains(string(b), secret) {
				t.Errorf("the file API reads the host file through an archive's hard link %s", p)
			}
		}
	}
	if n := nlink(t, hostFile); n != hostlinksBefore {
		t.Errorf("the host file %s has %d links now, %d before: an archive linked it", hostFile, n, hostlinksBefore)
	}
	leaked, _ := filepath.Glob("/etc/" + probe)
	more, _ := filepath.Glob(filepath.Join(dir, probe))
	if all := append(leaked, more...); len(all) > 0 {
		t.Errorf("an archive wrote through a symlink onto the host: %v", all)
	}
	d.healthy("archives with links out")
}

// TestFileAPIRaces races the file API against the sandbox: while the API
// writes, reads, lists and extracts archives under /race/d, a process
// inside swaps /race/d between a directory and a symlink to a host
// directory (by its host path, and through /proc/1/root) with
// renameat2(RENAME_EXCHANGE), as fast as it can. The daemon resolves every path in the root at each step, so no
// interleaving reaches the host. The control: the swapper ran (it counts
// its swaps) and some API writes landed in the directory form.
func TestFileAPIRaces(t *testing.T) {
	gate(t)
	t.Parallel()
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, secret := hostDirWithSecret(t)
	probe := "tine-race-" + marker()
	if _, err := d.c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/race/d", Parents: true}); err != nil {
		t.Fatal(err)
	}
	// renameat2(RENAME_EXCHANGE) swaps the directory and a symlink
	// atomically, thousands of times a second.
	swapper := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.chdir("/race")
os.symlink("` + dir + `", "l1"); os.symlink("/proc/1/root` + dir + `", "l2")
n = 0
while n % 64 or not os.path.exists("/race/stop"):
    for l in (b"l1", b"l2"):
        if libc.syscall(316, -100, b"d", -100, l, 2) == 0:  # d <-> l
            libc.syscall(316, -100, b"d", -100, l, 2)  # and back
            n += 1
print("swaps", n)`
	swapped := make(chan *api.ExecResult, 1)
	go func() {
		res, _ := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{python, "-c", swapper}})
		swapped <- res
	}()
	if !testbin.Eventually(patience, func() bool {
		_, err := d.c.Stat(ctx, sb.ID, "/race/l2")
		return err == nil
	}) {
		t.Fatal("the swapper never started")
	}
	archive := tarOf(t, "escaped", tar.Header{Name: probe + ".tar", Typeflag: tar.TypeReg}, tar.Header{Name: "sub/", Typeflag: tar.TypeDir}, tar.Header{Name: "sub/" + probe, Typeflag: tar.TypeReg})
	landed := 0
	for i := 0; i < 300; i++ {
		if _, err := d.c.WriteFile(ctx, sb.ID, "/race/d/"+probe, strings.NewReader("escaped"), nil); err == nil {
			landed++
		}
		if rc, err := d.c.ReadFile(ctx, sb.ID, "/race/d/secret"); err == nil {
			if b := readAll(rc); strings.Contains(string(b), secret) {
				t.Fatalf("round %d: the file API read the host file through the swapped link", i)
			}
		}
		if infos, err := d.c.ReadDir(ctx, sb.ID, "/race/d"); err == nil {
			for _, fi := range infos {
				if fi.Name == "secret" {
					t.Fatalf("round %d: the file API listed the host directory through the swapped link", i)
				}
			}
		}
		d.c.WriteArchive(ctx, sb.ID, "/race/d", bytes.NewReader(archive))
		d.c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/race/d/" + probe + ".dir"})
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/race/stop", strings.NewReader(""), nil); err != nil {
		t.Fatal(err)
	}
	res := <-swapped
	if res == nil || !strings.HasPrefix(string(res.Stdout), "swaps ") || strings.TrimSpace(string(res.Stdout)) == "swaps 0" {
		t.Fatalf("control: the swapper did not run: %+v", res)
	}
	t.Logf("%s; %d of 300 writes landed inside", strings.TrimSpace(string(res.Stdout)), landed)
	if landed == 0 {
		t.Errorf("control: no write landed while the swapper ran; the race was never run against a directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the host directory %s holds %v, want only the secret: a raced API call wrote into it", dir, names)
	}
	d.healthy("the file API races")
}

// slug makes s a single path element.
func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, s)
}
