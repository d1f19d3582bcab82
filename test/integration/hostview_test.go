package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/require"
)

// plant is a secret the test leaves on the host: a file holding token.
type plant struct {
	where, file, token string
}

// plantSecrets writes a secret into each place the os host view hides
// (and removes them at the end): a home directory, /srv, a database-like
// directory under /var/lib, a key in /etc/ssl/private and one directly in
// /etc (mode 0600: the cache must notice a file added after it was
// built), a new top-level directory, /var/log and /mnt.
func plantSecrets(t *testing.T, tag string) []plant {
	t.Helper()
	dirs := map[string]string{
		"home":     "/home/" + tag,
		"srv":      "/srv/" + tag,
		"var/lib":  "/var/lib/" + tag + "-db",
		"toplevel": "/tine-secret-" + tag,
		"var/log":  "/var/log/" + tag,
		"mnt":      "/mnt/" + tag,
	}
	var plants []plant
	for where, dir := range dirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		plants = append(plants, plant{where: where, file: dir + "/secret", token: "token-" + where + "-" + tag})
	}
	for where, file := range map[string]string{
		"etc/ssl/private": "/etc/ssl/private/" + tag + ".key",
		"etc":             "/etc/" + tag + ".key",
	} {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(file) })
		plants = append(plants, plant{where: where, file: file, token: "token-" + where + "-" + tag})
	}
	for _, p := range plants {
		if err := os.WriteFile(p.file, []byte(p.token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return plants
}

// By default a sandbox over the host's root sees the operating system,
// not the host's data: every planted secret is unreadable inside, while
// (negative control) the same command with --host-view full reads them
// all, and the operating system still works.
func TestHostDataHidden(t *testing.T) {
	h := setup(t)
	// A run before the plants caches the view: the plants must make it stale.
	if r := h.run("run", "--", "true"); r.Code != 0 {
		t.Fatalf("tine run -- true: %s", r)
	}
	plants := plantSecrets(t, "tinehv"+randHex(4))
	var script strings.Builder
	script.WriteString("echo started; ")
	for _, p := range plants {
		script.WriteString("cat " + p.file + " 2>/dev/null; ")
	}
	script.WriteString("true")

	full := h.run("run", "--host-view", "full", "--", "sh", "-c", script.String())
	if !strings.HasPrefix(full.Stdout, "started\n") {
		t.Fatalf("the command did not run: %s", full)
	}
	for _, p := range plants {
		if !strings.Contains(full.Stdout, p.token) {
			t.Errorf("negative control: --host-view full does not read the secret in %s (%s): %s", p.where, p.file, full)
		}
	}
	for _, args := range [][]string{{"run"}, {"run", "--host-view", "os"}} {
		r := h.run(append(args, "--", "sh", "-c", script.String())...)
		if !strings.HasPrefix(r.Stdout, "started\n") {
			t.Fatalf("%v: the command did not run: %s", args, r)
		}
		for _, p := range plants {
			if strings.Contains(r.Stdout, p.token) {
				t.Errorf("%v: the host's secret in %s (%s) is readable inside", args, p.where, p.file)
			}
		}
	}
	// The top-level secret directory is there but empty; /home is empty.
	r := h.run("run", "--", "sh", "-c", "ls -A /home; echo ---; ls -A "+filepath.Dir(plants[0].file))
	if strings.Contains(r.Stdout, "secret") {
		t.Errorf("a hidden directory is not empty inside: %s", r)
	}
}

// The os view keeps what programs need: the package database, CA
// certificates, Python with its modules, world-readable /etc.
func TestHostViewKeepsTheOperatingSystem(t *testing.T) {
	h := setup(t)
	for _, f := range []string{"/var/lib/dpkg/status", "/etc/ssl/certs/ca-certificates.crt", python} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs %s on the host: %v", f, err)
		}
	}
	r := h.run("run", "--", "sh", "-c", `grep -c '^Package:' /var/lib/dpkg/status >/dev/null && echo dpkg-ok
test -s /etc/ssl/certs/ca-certificates.crt && echo certs-ok
grep -q '^root:' /etc/passwd && echo passwd-ok
python3 -c 'import ssl, json, sqlite3; ssl.create_default_context(); print("python-ok")'
dpkg -l coreutils >/dev/null && echo dpkg-query-ok`)
	for _, want := range []string{"dpkg-ok", "certs-ok", "passwd-ok", "python-ok", "dpkg-query-ok"} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("the os view broke the operating system: no %s\n%s", want, r)
		}
	}
}

// A bind into a hidden directory lands on its empty stand-in: the bind is
// there, the host's entries are not.
func TestBindIntoHiddenDirectory(t *testing.T) {
	h := setup(t)
	tag := "tinehv" + randHex(4)
	secret := "/home/" + tag + "-other"
	if err := os.MkdirAll(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secret) })
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/mine", []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run("run", "-v", dir+":/home/me", "--", "sh", "-c", "ls -A /home; cat /home/me/mine")
	if r.Code != 0 || !strings.Contains(r.Stdout, "me\n") || !strings.Contains(r.Stdout, "mine\n") {
		t.Errorf("a bind onto /home/me did not land: %s", r)
	}
	if strings.Contains(r.Stdout, tag) {
		t.Errorf("with a bind into /home, the host's /home shows: %s", r)
	}
}

// --host-view is checked: an unknown view, and full with --rootfs, are
// usage errors (exit 2) naming the flag.
func TestHostViewFlagChecked(t *testing.T) {
	h := setup(t)
	r := h.run("run", "--host-view", "some", "--", "true")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--host-view") {
		t.Errorf("--host-view some: want exit 2 naming the flag: %s", r)
	}
	r = h.run("run", "--host-view", "full", "--rootfs", t.TempDir(), "--", "true")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--rootfs") {
		t.Errorf("--host-view full --rootfs: want exit 2 naming both: %s", r)
	}
}

// With --userns the sandbox's root is an unprivileged host uid: even in
// the full host view, files only the host's root may read stay unread
// (EACCES), while (negative control) the same run without --userns reads
// them; the operating system still works, and cgroup limits apply.
func TestUserNSRootHasNoDACOverride(t *testing.T) {
	h := setup(t)
	require.Feature(t, "userns")
	plants := plantSecrets(t, "tinehv"+randHex(4))
	var script strings.Builder
	script.WriteString("echo started; id -u; ")
	for _, p := range plants {
		script.WriteString("cat " + p.file + "; ")
	}
	script.WriteString("python3 -c 'print(\"python-ok\")'")

	control := h.run("run", "--host-view", "full", "--", "sh", "-c", script.String())
	r := h.run("run", "--host-view", "full", "--userns", "--", "sh", "-c", script.String())
	if !strings.HasPrefix(r.Stdout, "started\n0\n") || !strings.Contains(r.Stdout, "python-ok\n") {
		t.Fatalf("--userns: the command did not run as the namespace's root with a working OS: %s", r)
	}
	for _, p := range plants {
		if !strings.Contains(control.Stdout, p.token) {
			t.Errorf("negative control: without --userns the full view does not read %s: %s", p.file, control)
		}
		if strings.Contains(r.Stdout, p.token) {
			t.Errorf("--userns: the root-only secret %s is readable inside", p.file)
		}
		if !strings.Contains(r.Stderr, p.file+": Permission denied") && !strings.Contains(r.Stderr, "Permission denied") {
			t.Errorf("--userns: reading %s did not fail with EACCES: %s", p.file, r)
		}
	}
	// In the os view --userns needs no masks in /etc (it does not walk
	// it): the host's permissions refuse /etc/shadow.
	r = h.run("run", "--userns", "--", "sh", "-c", "head -c1 /etc/shadow || echo refused")
	if !strings.Contains(r.Stdout, "refused") {
		t.Errorf("--userns: /etc/shadow opened: %s", r)
	}
}
