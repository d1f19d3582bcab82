package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

func hostSHA256(t *testing.T, b []byte) string {
	t.Helper()
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return hostSHA256(t, b)
}

func TestFiles(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	// A top-level directory of the test's own making: the sandbox's root
	// is the host's, so a name the host uses would archive its files too.
	top := "/tine-files-" + marker()
	if _, err := d.c.Stat(ctx, id, top); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("stat %s before the test made it: %v, want not found", top, err)
	}
	if _, err := d.c.Mkdir(ctx, id, api.MkdirRequest{Path: top + "/src", Parents: true, Mode: 0o750, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("tine"), 256<<10) // 1 MiB
	info, err := d.c.WriteFile(ctx, id, top+"/src/data.bin", bytes.NewReader(body), &client.WriteOptions{Mode: 0o640, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(body)) || info.Mode != 0o640 || info.UID != 1000 || info.GID != 1000 {
		t.Fatalf("written: %+v", info)
	}
	// The sandbox sees the file as written, with its mode and owner.
	res, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("stat -c '%%a %%u %%g %%s' %[1]s/src/data.bin %[1]s/src; sha256sum < %[1]s/src/data.bin", top)}})
	if err != nil {
		t.Fatal(err)
	}
	want := "640 1000 1000 1048576\n750 1000 1000 "
	if !strings.HasPrefix(string(res.Stdout), want) || !strings.Contains(string(res.Stdout), hostSHA256(t, body)) {
		t.Fatalf("seen inside: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	// And what the sandbox writes, the API reads.
	d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo from inside > %[1]s/src/out.txt; ln -s out.txt %[1]s/src/link", top)}})
	rc, err := d.c.ReadFile(ctx, id, top+"/src/out.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "from inside\n" {
		t.Fatalf("read: %q", got)
	}
	st, err := d.c.Stat(ctx, id, top+"/src/link")
	if err != nil || st.Type != api.FileTypeSymlink || st.Link != "out.txt" {
		t.Fatalf("stat symlink: %v %+v", err, st)
	}
	entries, err := d.c.ReadDir(ctx, id, top+"/src")
	if err != nil || len(entries) != 3 {
		t.Fatalf("list: %v %+v", err, entries)
	}

	// Directory round trip as tar.
	ar, err := d.c.ReadArchive(ctx, id, top)
	if err != nil {
		t.Fatal(err)
	}
	tarball, _ := io.ReadAll(ar)
	ar.Close()
	names := tarNames(t, tarball)
	var kept []string
	for _, n := range names {
		if n = strings.TrimPrefix(n, "./"); n != "" {
			kept = append(kept, n)
		}
	}
	slices.Sort(kept)
	if want := []string{"src/", "src/data.bin", "src/link", "src/out.txt"}; !slices.Equal(kept, want) {
		t.Fatalf("archive holds %v, want %v", names, want)
	}
	if _, err := d.c.Mkdir(ctx, id, api.MkdirRequest{Path: top + "-copy"}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.WriteArchive(ctx, id, top+"-copy", bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	res, _ = d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("cat %[1]s/src/link; sha256sum < %[1]s/src/data.bin", top+"-copy")}})
	if !strings.HasPrefix(string(res.Stdout), "from inside\n"+hostSHA256(t, body)) {
		t.Fatalf("extracted copy: %q %q", res.Stdout, res.Stderr)
	}

	if err := d.c.Remove(ctx, id, top, false); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("remove a full directory without recursive: got %v, want conflict", err)
	}
	if err := d.c.Remove(ctx, id, top, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Stat(ctx, id, top); client.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("stat after remove: %v", err)
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		names = append(names, h.Name)
	}
}

// TestFileEscapes: every way out of the sandbox's root fails, and the host
// is left as it was.
func TestFileEscapes(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	// A host file the sandbox cannot see: /tmp inside is its own tmpfs.
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	os.WriteFile(secret, []byte("host only"), 0o600)
	passwdBefore := fileSum(t, "/etc/passwd")
	probe := "tine-escape-" + marker()

	// Links made inside the sandbox, pointing out of it as seen from the host.
	setup := strings.Join([]string{
		"ln -s /etc /tmp/etc-link",
		"ln -s " + hostDir + " /tmp/host-link",
		"ln -s /proc/1/root /tmp/root-link",
		"ln -s ../../../../../../.. /tmp/up-link",
	}, "; ")
	if res, err := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"sh", "-c", setup}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("make links inside: %v %+v", err, res)
	}

	reads := []string{
		"../../etc/passwd/../../" + hostDir[1:] + "/secret",
		"../../../" + hostDir + "/secret",
		"/tmp/host-link/secret",
		"/tmp/up-link" + hostDir + "/secret",
		"/proc/1/root" + hostDir + "/secret",
		"/proc/self/root" + hostDir + "/secret",
		"/tmp/root-link" + hostDir + "/secret",
		"/proc/" + strconv.Itoa(d.pid()) + "/root" + hostDir + "/secret",
	}
	for _, p := range reads {
		rc, err := d.c.ReadFile(ctx, id, p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			t.Errorf("read %q succeeded: %q", p, b)
		}
	}

	writes := []string{
		"../../etc/" + probe,
		"/tmp/etc-link/" + probe,
		"/tmp/up-link/etc/" + probe,
		"/tmp/host-link/" + probe,
		"/tmp/root-link/etc/" + probe,
		"/proc/1/root/etc/" + probe,
		"/proc/self/root/etc/" + probe,
		"/tmp/host-link/secret",
	}
	for _, p := range writes {
		d.c.WriteFile(ctx, id, p, strings.NewReader("escaped"), nil)
		d.c.Mkdir(ctx, id, api.MkdirRequest{Path: p + ".d", Parents: true})
	}
	// An archive whose entries climb out, and one through the symlink.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, name := range []string{"../../etc/" + probe, "/etc/" + probe + ".abs"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 7, Typeflag: tar.TypeReg})
		tw.Write([]byte("escaped"))
	}
	tw.Close()
	d.c.WriteArchive(ctx, id, "/tmp", bytes.NewReader(tb.Bytes()))
	d.c.WriteArchive(ctx, id, "/tmp/etc-link", bytes.NewReader(tb.Bytes()))
	d.c.Remove(ctx, id, "/tmp/host-link/secret", false)
	d.c.Remove(ctx, id, "/proc/1/root"+hostDir, true)

	// The negative check ran: a write through the /etc link landed in the
	// sandbox's own /etc (the link resolves inside the root).
	if _, err := d.c.WriteFile(ctx, id, "/tmp/etc-link/"+probe+".inside", strings.NewReader("inside"), nil); err != nil {
		t.Fatalf("write through a link inside the root: %v", err)
	}
	if res, _ := d.c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"cat", "/etc/" + probe + ".inside"}}); string(res.Stdout) != "inside" {
		t.Fatalf("the sandbox does not see the file written through its /etc link: %+v", res)
	}

	// The host is untouched.
	if b, _ := os.ReadFile(secret); string(b) != "host only" {
		t.Errorf("host secret changed: %q", b)
	}
	if fileSum(t, "/etc/passwd") != passwdBefore {
		t.Error("host /etc/passwd changed")
	}
	leaked, _ := filepath.Glob("/etc/" + probe + "*")
	more, _ := filepath.Glob(filepath.Join(hostDir, probe+"*"))
	if all := append(leaked, more...); len(all) > 0 {
		t.Errorf("files escaped onto the host: %v", all)
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 1 {
		t.Errorf("host dir %s holds %d entries, want just the secret", hostDir, len(entries))
	}
}
