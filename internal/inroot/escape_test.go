package inroot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/internal/require"
)

// sentinelText is the content of the file outside the root that no
// operation may read or change.
const sentinelText = "untouched sentinel"

// escapeSuite tries every known way out of a root whose host path is dir.
// The "outside" is a sibling temporary directory, never the real /etc.
// Each attempt must fail, and afterwards nothing outside the root (the
// outside directory and everything else beside the root) may have changed;
// a positive control first proves the same operations work on legitimate
// paths.
func escapeSuite(t *testing.T, r *Root, dir string) {
	outside := t.TempDir()
	base := filepath.Base(outside)
	mustWriteFile(t, filepath.Join(outside, "sentinel"), sentinelText, 0o644)
	mustWriteFile(t, filepath.Join(outside, "hosts"), sentinelText, 0o644)
	mustWriteFile(t, filepath.Join(outside, "sub/file"), sentinelText, 0o644)
	climb := strings.Repeat("../", 16) + strings.TrimPrefix(outside, "/")

	mustWriteFile(t, filepath.Join(dir, "inside.txt"), "inside", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, outside, filepath.Join(dir, "evil"))                        // absolute, to the outside
	mustSymlink(t, climb, filepath.Join(dir, "evil2"))                         // relative, climbing with ..
	mustSymlink(t, "..", filepath.Join(dir, "up"))                             // up/<base> is the outside on the host
	mustSymlink(t, "/proc/self/root", filepath.Join(dir, "proc"))              // the host's / on the host
	mustSymlink(t, outside+"/sentinel", filepath.Join(dir, "evilfile"))        // a final symlink to an outside file
	mustSymlink(t, climb+"/sentinel", filepath.Join(dir, "evilfile2"))         // the same, relative
	mustSymlink(t, "../"+base+"/sentinel", filepath.Join(dir, "d", "evilrel")) // the same, one level up

	parent := filepath.Dir(outside)
	before := snapshot(t, parent, dir)
	untouched := func(what string) {
		t.Helper()
		sameSnapshot(t, what, before, snapshot(t, parent, dir))
	}

	// Positive control: the operations work on legitimate paths.
	var out bytes.Buffer
	if _, err := r.Read("inside.txt", &out, 100); err != nil || out.String() != "inside" {
		t.Fatalf("control read: %q, %v", out.String(), err)
	}
	if _, err := r.Write("d/ok", body("ok"), 0o644, 100, -1, -1); err != nil {
		t.Fatalf("control write: %v", err)
	}
	if err := r.Mkdir("d/okdir", 0o755, false, -1, -1); err != nil {
		t.Fatalf("control mkdir: %v", err)
	}
	if err := r.Remove("d/okdir", false); err != nil {
		t.Fatalf("control remove: %v", err)
	}
	if err := r.ExtractTar("d", tarOf(t, entry{name: "x/ok", body: "ok"}), 100, -1, -1); err != nil {
		t.Fatalf("control extract: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "d/x/ok")); got != "ok" {
		t.Fatalf("control extract wrote %q", got)
	}

	read := func(p string) func() error {
		return func() error {
			var out bytes.Buffer
			_, err := r.Read(p, &out, 1<<20)
			if strings.Contains(out.String(), sentinelText) {
				t.Errorf("Read(%q) streamed the outside file", p)
			}
			return err
		}
	}
	write := func(p string) func() error {
		return func() error { _, err := r.Write(p, body("pwned"), 0o644, 100, -1, -1); return err }
	}
	mkdir := func(p string, parents bool) func() error {
		return func() error { return r.Mkdir(p, 0o755, parents, -1, -1) }
	}
	remove := func(p string, recursive bool) func() error {
		return func() error { return r.Remove(p, recursive) }
	}
	extract := func(into string, entries ...entry) func() error {
		return func() error { return r.ExtractTar(into, tarOf(t, entries...), 1<<20, -1, -1) }
	}
	pwned := entry{name: "l/pwned", body: "pwned"}
	attempts := []struct {
		name string
		try  func() error
	}{
		{"Read evil/sentinel", read("evil/sentinel")},
		{"Read evil2/sentinel", read("evil2/sentinel")},
		{"Read up/<outside>/sentinel", read("up/" + base + "/sentinel")},
		{"Read proc/<outside>/sentinel", read("proc" + outside + "/sentinel")},
		{"Read evilfile", read("evilfile")},
		{"Read evilfile2", read("evilfile2")},
		{"Read d/evilrel", read("d/evilrel")},
		{"Read ../<outside>/sentinel", read("../" + base + "/sentinel")},
		{"Read /../../<outside>/sentinel", read("/../../" + base + "/sentinel")},
		{"Stat evil/sentinel", func() error { _, err := r.Stat("evil/sentinel"); return err }},
		{"List evil", func() error { _, err := r.List("evil"); return err }},
		{"List evil2/sub", func() error { _, err := r.List("evil2/sub"); return err }},
		{"WriteTar evil/sub", func() error { return r.WriteTar("evil/sub", &bytes.Buffer{}) }},
		{"Write evil/x", write("evil/x")},
		{"Write evil2/x", write("evil2/x")},
		{"Write evil/sentinel", write("evil/sentinel")},
		{"Write up/<outside>/x", write("up/" + base + "/x")},
		{"Write proc/<outside>/x", write("proc" + outside + "/x")},
		{"Write ../x", write("../x")},
		{"Write /../../x", write("/../../x")},
		{"Write evilfile (final symlink)", write("evilfile")},
		{"Write evilfile2 (final symlink)", write("evilfile2")},
		{"Write d/evilrel (final symlink)", write("d/evilrel")},
		{"Mkdir evil/newdir", mkdir("evil/newdir", false)},
		{"Mkdir -p evil/newdir", mkdir("evil/newdir", true)},
		{"Mkdir -p evil2/newdir", mkdir("evil2/newdir", true)},
		{"Mkdir -p proc/<outside>/newdir", mkdir("proc"+outside+"/newdir", true)},
		{"Mkdir ../newdir", mkdir("../newdir", true)},
		{"Remove evil/hosts", remove("evil/hosts", false)},
		{"Remove evil2/sentinel", remove("evil2/sentinel", false)},
		{"Remove -r evil/sub", remove("evil/sub", true)},
		{"Remove up/<outside>/sentinel", remove("up/"+base+"/sentinel", false)},
		{"Remove ../<outside>/sentinel", remove("../"+base+"/sentinel", true)},
		{"ExtractTar ../x", extract("d", entry{name: "../x", body: "pwned"})},
		{"ExtractTar a/../../x", extract("d", entry{name: "a/../../x", body: "pwned"})},
		{"ExtractTar /../x", extract("d", entry{name: "/../x", body: "pwned"})},
		{"ExtractTar symlink l -> outside, then l/pwned", extract("d", entry{name: "l", typ: '2', link: outside}, pwned)},
		{"ExtractTar symlink l -> ../../..outside, then l/pwned", extract("d", entry{name: "l", typ: '2', link: climb}, pwned)},
		{"ExtractTar symlink l -> /proc/self/root, then l/<outside>/pwned", extract("d", entry{name: "l", typ: '2', link: "/proc/self/root"}, entry{name: "l" + outside + "/pwned", body: "pwned"})},
		{"ExtractTar evil/pwned through an existing symlink", extract("/", entry{name: "evil/pwned", body: "pwned"})},
		{"ExtractTar hard link to outside/sentinel", extract("d", entry{name: "h", typ: '1', link: outside + "/sentinel"})},
		{"ExtractTar hard link to ../<outside>/sentinel", extract("d", entry{name: "h", typ: '1', link: "../../" + base + "/sentinel"})},
		{"ExtractTar hard link through an existing symlink", extract("/", entry{name: "h", typ: '1', link: "evil/sentinel"})},
		{"ExtractTar hard link through an archive symlink", extract("d", entry{name: "l", typ: '2', link: outside}, entry{name: "h", typ: '1', link: "l/sentinel"})},
		{"ExtractTar character device", extract("d", entry{name: "null", typ: '3'})},
		{"ExtractTar FIFO", extract("d", entry{name: "fifo", typ: '6'})},
	}
	for _, a := range attempts {
		err := a.try()
		if err == nil {
			t.Errorf("%s: succeeded, want an error", a.name)
		} else {
			t.Logf("%s: %v", a.name, err)
		}
		untouched(a.name)
	}

	// These succeed, but only ever inside the root.
	allowed := []struct {
		name string
		do   func() error
	}{
		{"ExtractTar symlink l2 -> outside file, then file l2 (replaces the link)", extract("d", entry{name: "l2", typ: '2', link: outside + "/sentinel"}, entry{name: "l2", body: "pwned"})},
		{"ExtractTar up/<outside>/pwned (lands in the root)", extract("/", entry{name: "up/" + base + "/pwned", body: "pwned"})},
		{"Mkdir -p up/<outside>/newdir (lands in the root)", mkdir("up/"+base+"/newdir", true)},
		{"WriteTar / (links archived, not followed)", func() error {
			var buf bytes.Buffer
			if err := r.WriteTar("/", &buf); err != nil {
				return err
			}
			if bytes.Contains(buf.Bytes(), []byte(sentinelText)) {
				return errors.New("archive holds the outside file's content")
			}
			return nil
		}},
		{"WriteTar evil (the link only)", func() error {
			var buf bytes.Buffer
			if err := r.WriteTar("evil", &buf); err != nil {
				return err
			}
			if bytes.Contains(buf.Bytes(), []byte(sentinelText)) {
				return errors.New("archive holds the outside file's content")
			}
			return nil
		}},
		{"Remove -r evil (the link only)", remove("evil", true)},
		{"Remove evilfile (the link only)", remove("evilfile", false)},
	}
	for _, a := range allowed {
		if err := a.do(); err != nil {
			t.Errorf("%s: %v", a.name, err)
		}
		untouched(a.name)
	}
	if got := readFile(t, filepath.Join(dir, "d/l2")); got != "pwned" {
		t.Errorf("d/l2 = %q, want the archive's file in place of the link", got)
	}
	if got := readFile(t, filepath.Join(dir, base, "pwned")); got != "pwned" {
		t.Errorf("<root>/%s/pwned = %q, want it written inside the root", base, got)
	}
}

func TestEscapes(t *testing.T) {
	r, dir := newRoot(t)
	escapeSuite(t, r, dir)
}

// TestMagicLinksRefused uses this process's /proc/<pid> as the root: its
// root, cwd and exe entries are magic links to the host.
func TestMagicLinksRefused(t *testing.T) {
	outside := t.TempDir()
	mustWriteFile(t, filepath.Join(outside, "sentinel"), sentinelText, 0o644)
	r := openRoot(t, fmt.Sprintf("/proc/%d", os.Getpid()))

	if info, err := r.Stat("status"); err != nil || info.Type != TypeFile {
		t.Fatalf("control: Stat(status) = %+v, %v", info, err)
	}
	var out bytes.Buffer
	if info, err := r.Stat("root"); err != nil || info.Type != TypeSymlink {
		t.Errorf("Stat(root) = %+v, %v; want the magic link itself", info, err)
	}
	for _, p := range []string{"root" + outside + "/sentinel", "cwd/escape_test.go", "exe", "fd/0"} {
		out.Reset()
		if _, err := r.Read(p, &out, 1<<20); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Read(%q): err = %v, want ErrInvalidPath", p, err)
		}
		if out.Len() != 0 {
			t.Errorf("Read(%q) streamed %d bytes", p, out.Len())
		}
	}
	if _, err := r.Write("root"+outside+"/x", body("pwned"), 0o644, 100, -1, -1); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Write through root: err = %v, want ErrInvalidPath", err)
	}
	if err := r.Mkdir("cwd/newdir", 0o755, true, -1, -1); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Mkdir through cwd: err = %v, want ErrInvalidPath", err)
	}
	if _, err := r.List("root" + outside); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("List through root: err = %v, want ErrInvalidPath", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside now holds %v", entries)
	}
}

// holdEnv names a directory: the test binary, started with it by
// TestEscapesThroughProcRoot, chroots into it, says "ready" and waits for
// its stdin to close — standing in for a sandbox's PID 1.
const holdEnv = "TINE_INROOT_TEST_CHROOT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if err := syscall.Chroot(dir); err != nil {
			fmt.Fprintln(os.Stderr, "chroot:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		var b [1]byte
		os.Stdin.Read(b[:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestEscapesThroughProcRoot runs the escape suite the way the daemon
// reaches a sandbox: through /proc/<pid>/root of a process chrooted into
// the root.
func TestEscapesThroughProcRoot(t *testing.T) {
	require.Root(t)
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = []string{holdEnv + "=" + dir}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	ready := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(stdout, ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("chrooted child: %q, %v", ready, err)
	}
	r := openRoot(t, fmt.Sprintf("/proc/%d/root", cmd.Process.Pid))
	// Negative check: the descriptor reaches the temporary directory, not /.
	mustWriteFile(t, filepath.Join(dir, "marker"), "here", 0o644)
	if _, err := r.Stat("marker"); err != nil {
		t.Fatalf("/proc/<pid>/root is not the chroot: %v", err)
	}
	escapeSuite(t, r, dir)
}
