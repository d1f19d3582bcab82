package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The os host view looks like the host, but for what it empties: every
// directory and file of /etc, every top-level entry and every entry of
// /var has, inside the sandbox, the host's mode (set-id and sticky bits
// included) and owner, whether the overlay shows it from the host or from
// the view's own layer (the empty directories and files that hide data,
// and the directories on the way to them, which PID 1 makes each run).
func TestHostViewKeepsModesAndOwners(t *testing.T) {
	h := setup(t)
	want := map[string]string{}
	describe := func(p string, info fs.FileInfo) {
		st := info.Sys().(*syscall.Stat_t)
		want[p] = fmt.Sprintf("%o %d %d", st.Mode&0o7777, st.Uid, st.Gid)
	}
	// tine's own mounts, and its stage, are not the host's.
	own := map[string]bool{"/proc": true, "/sys": true, "/dev": true, "/tmp": true, "/run": true}
	for _, dir := range []string{"/", "/var"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if info, err := os.Lstat(p); err == nil && !own[p] && (info.IsDir() || info.Mode().IsRegular()) {
				describe(p, info)
			}
		}
	}
	filepath.WalkDir("/etc", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err == nil && (d.IsDir() || (info.Mode().IsRegular() && info.Mode().Perm()&0o004 == 0)) {
			describe(p, info)
		}
		return nil
	})
	setIDs := 0
	for _, w := range want {
		var mode uint32
		fmt.Sscanf(w, "%o", &mode)
		if mode&0o7000 != 0 {
			setIDs++
		}
	}
	if len(want) < 50 {
		t.Fatalf("only %d host paths to compare", len(want))
	}
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	r := h.run(append([]string{"run", "--in-process", "--", "stat", "-c", "%n %a %u %g"}, paths...)...)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if f := strings.Fields(line); len(f) == 4 {
			// stat's %a leaves out a leading 0; the host's is printed the same way.
			var mode uint32
			fmt.Sscanf(f[1], "%o", &mode)
			got[f[0]] = fmt.Sprintf("%o %s %s", mode, f[2], f[3])
		}
	}
	if len(got) == 0 {
		t.Fatalf("stat printed nothing inside the sandbox\n%s", r)
	}
	for _, p := range paths {
		if got[p] == "" && hiddenBeneath(p) {
			continue // the view empties a directory others cannot enter
		}
		if got[p] != want[p] {
			t.Errorf("%s: %q inside the sandbox, %q on the host", p, got[p], want[p])
		}
	}
	t.Logf("%d paths compared (%d with set-id or sticky bits)", len(paths), setIDs)
}

// hiddenBeneath reports whether p is beneath a directory of /etc that
// others cannot enter (the view shows it empty).
func hiddenBeneath(p string) bool {
	for dir := filepath.Dir(p); strings.HasPrefix(dir, "/etc/"); dir = filepath.Dir(dir) {
		if info, err := os.Stat(dir); err == nil && info.Mode().Perm()&0o001 == 0 {
			return true
		}
	}
	return false
}
