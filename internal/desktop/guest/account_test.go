package guest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/internal/require"
)

func writeEtc(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, "etc", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readEtc(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Over a host view's /etc (uid 1000 taken, shadow and sudoers empty) the
// account gets the next uid, the sudo group, a shadow entry with the
// password and a sudoers that lets the group; a second run (a fork's
// guest) changes nothing.
func TestEnsureAccount(t *testing.T) {
	require.Root(t)
	root := t.TempDir()
	writeEtc(t, root, map[string]string{
		"passwd":  "root:x:0:0:root:/root:/bin/bash\ncloudsdk:x:1000:1000::/home/cloudsdk:/bin/bash\n",
		"group":   "root:x:0:\nshadow:x:42:\nsudo:x:27:cloudsdk\n# a comment stays\ncloudsdk:x:1000:\n",
		"shadow":  "",
		"sudoers": "",
	})
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/bin/python3"), nil, 0o755)
	a, err := EnsureAccount(root, "user")
	if err != nil {
		t.Fatal(err)
	}
	if a.UID != 1001 || a.GID != 1001 || a.Home != "/home/user" || len(a.Groups) != 1 || a.Groups[0] != 27 {
		t.Fatalf("account %+v, want uid and gid 1001, home /home/user, group 27", a)
	}
	if got := readEtc(t, root, "passwd"); !strings.HasSuffix(got, "\nuser:x:1001:1001:user:/home/user:/bin/bash\n") {
		t.Fatalf("passwd:\n%s", got)
	}
	if got := readEtc(t, root, "group"); !strings.Contains(got, "\nsudo:x:27:cloudsdk,user\n# a comment stays\n") || !strings.HasSuffix(got, "\nuser:x:1001:\n") {
		t.Fatalf("group:\n%s", got)
	}
	shadow := readEtc(t, root, "shadow")
	if !strings.HasPrefix(shadow, "root:*:") || !strings.Contains(shadow, "\nuser:"+accountPasswordHash+":") {
		t.Fatalf("shadow:\n%s", shadow)
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/sudoers")); st == nil || st.Mode().Perm() != 0o440 || !strings.Contains(readEtc(t, root, "sudoers"), "\n%sudo\tALL=(ALL:ALL) ALL\n") {
		t.Fatalf("sudoers: %v\n%s", st, readEtc(t, root, "sudoers"))
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/shadow")); st == nil || st.Mode().Perm() != 0o640 || statGID(st) != 42 {
		t.Fatalf("shadow's mode: %v", st)
	}
	for _, d := range []string{"home/user", "home/user/Desktop"} {
		var st os.FileInfo
		if st, err = os.Stat(filepath.Join(root, d)); err != nil || !st.IsDir() {
			t.Fatalf("%s: %v", d, err)
		}
		if uid := statUID(st); uid != 1001 {
			t.Fatalf("%s is owned by %d", d, uid)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "usr/local/bin/python")); err != nil || l != "/usr/bin/python3" {
		t.Errorf("python: %q %v, want a link to /usr/bin/python3", l, err)
	}
	host, _ := os.Hostname()
	if got := readEtc(t, root, "hosts"); got != "127.0.1.1\t"+host+"\n" {
		t.Fatalf("hosts: %q, want the host name at 127.0.1.1", got)
	}
	before := map[string]string{}
	for _, f := range []string{"passwd", "group", "shadow", "sudoers", "hosts"} {
		before[f] = readEtc(t, root, f)
	}
	b, err := EnsureAccount(root, "user")
	if err != nil || b.UID != a.UID || b.GID != a.GID {
		t.Fatalf("second run: %+v %v", b, err)
	}
	for f, text := range before {
		if readEtc(t, root, f) != text {
			t.Errorf("the second run changed %s", f)
		}
	}
}

// An image's own sudoers is kept: the account gets a drop-in.
func TestEnsureAccountKeepsSudoers(t *testing.T) {
	require.Root(t)
	root := t.TempDir()
	writeEtc(t, root, map[string]string{
		"passwd":  "root:x:0:0:root:/root:/bin/bash\n",
		"group":   "root:x:0:\n",
		"sudoers": "root ALL=(ALL:ALL) ALL\n@includedir /etc/sudoers.d\n",
	})
	a, err := EnsureAccount(root, "user")
	if err != nil {
		t.Fatal(err)
	}
	if a.UID != 1000 {
		t.Fatalf("uid %d, want 1000", a.UID)
	}
	if got := readEtc(t, root, "sudoers"); got != "root ALL=(ALL:ALL) ALL\n@includedir /etc/sudoers.d\n" {
		t.Fatalf("sudoers changed: %q", got)
	}
	if got := readEtc(t, root, "sudoers.d/tine-user"); got != "user ALL=(ALL:ALL) ALL\n" {
		t.Fatalf("drop-in: %q", got)
	}
	if got := readEtc(t, root, "group"); !strings.Contains(got, "\nsudo:x:27:user\n") {
		t.Fatalf("group:\n%s", got)
	}
}

func statUID(st os.FileInfo) uint32 { return st.Sys().(*syscall.Stat_t).Uid }
func statGID(st os.FileInfo) uint32 { return st.Sys().(*syscall.Stat_t).Gid }
