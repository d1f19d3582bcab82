package integration

import (
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/network/nettest"
	"github.com/tine-run/tine/internal/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// imageState is a state directory for a test's images. Its layer store
// (a loop-mounted image when /tmp shares the root's filesystem) must be
// unmounted by the last tine that used it; the test fails when it is not.
func imageState(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		store := filepath.Join(dir, "store")
		var st, parent unix.Stat_t
		if unix.Stat(store, &st) != nil || unix.Stat(dir, &parent) != nil || st.Dev == parent.Dev {
			return
		}
		t.Errorf("%s is still mounted after every tine using it ended", store)
		unix.Unmount(store, unix.MNT_DETACH)
	})
	return dir
}

// appImage is busybox with a second layer that deletes a file of the
// first (whiteout), hides a directory's old contents (opaque) and adds
// its own, under a config that sets every field tine honours.
func appImage(t *testing.T, cfg v1.Config) v1.Image {
	base := imagetest.BusyboxLayer(t)
	extra := imagetest.Layer(t,
		imagetest.File{Name: "etc/deleteme", Body: "base"},
		imagetest.File{Name: "opt/data/old", Body: "old"},
		imagetest.File{Name: "app/marker", Body: "from the image\n"},
	)
	top := imagetest.Layer(t,
		imagetest.File{Name: "etc/.wh.deleteme"},
		imagetest.File{Name: "opt/data/.wh..wh..opq"},
		imagetest.File{Name: "opt/data/new", Body: "new"},
	)
	return imagetest.Image(t, cfg, base, extra, top)
}

var appConfig = v1.Config{
	Env:        []string{"PATH=/bin", "APP=configured"},
	Cmd:        []string{"/bin/sh", "-c", "echo cmd-ran $APP"},
	WorkingDir: "/home/app",
	User:       "app",
}

func TestRunFromImageHonoursConfig(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "app:1", appImage(t, appConfig))
	state := imageState(t)

	// No command: the image's Cmd, with its Env; pulled on first use.
	r := h.run("run", "--state-dir", state, "--image", ref)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "cmd-ran configured" {
		t.Fatalf("run from image with its Cmd:\n%s", r)
	}
	r = h.run("run", "--state-dir", state, "--image", ref, "--pull", "never", "-e", "APP=overridden", "--",
		"/bin/sh", "-c", "echo $APP; id -u; id -g; id -G; pwd; echo $HOME; ls /opt/data; test -e /etc/deleteme && echo present || echo deleted; touch /home/app/ok && echo wrote-home; touch /etc/x 2>/dev/null || echo etc-refused; echo "+h.marker)
	want := []string{"overridden", "1000", "1000", "1000 2000", "/home/app", "/home/app", "new", "deleted", "wrote-home", "etc-refused", h.marker}
	if got := strings.Fields(strings.ReplaceAll(r.Stdout, "1000 2000", "1000_2000")); r.Code != 0 || strings.Join(got, "|") != strings.ReplaceAll(strings.Join(want, "|"), "1000 2000", "1000_2000") {
		t.Fatalf("run from image: got %q, want %q\n%s", got, want, r)
	}
}

func TestRunFromImageStaysInside(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	cfg := appConfig
	cfg.User = "" // root in the sandbox
	ref := reg.Push(t, "root:1", appImage(t, cfg))
	state := imageState(t)
	r := h.run("run", "--state-dir", state, "--image", ref, "--", "/bin/sh", "-c", "id -u; echo changed > /app/marker; cat /app/marker; rm /bin/busybox && echo removed")
	if r.Code != 0 || strings.Fields(r.Stdout)[0] != "0" || !strings.Contains(r.Stdout, "changed") || !strings.Contains(r.Stdout, "removed") {
		t.Fatalf("writes inside the sandbox:\n%s", r)
	}
	// The layers on the host are untouched, and the next run sees them.
	r = h.run("run", "--state-dir", state, "--image", ref, "--pull", "never", "--", "/bin/cat", "/app/marker")
	if r.Code != 0 || r.Stdout != "from the image\n" {
		t.Fatalf("a second run saw the first one's writes:\n%s", r)
	}
}

func TestImageCommands(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "cmds:1", appImage(t, appConfig))
	state := imageState(t)

	if r := h.run("run", "--state-dir", state, "--image", ref, "--pull", "never", "--", "/bin/true"); r.Code == 0 || !strings.Contains(r.Stderr, "--pull is never") {
		t.Fatalf("--pull never with the image missing:\n%s", r)
	}
	if r := h.run("pull", "--state-dir", state, ref); r.Code != 0 || !strings.Contains(r.Stdout, "sha256:") {
		t.Fatalf("pull:\n%s", r)
	}
	if r := h.run("images", "--state-dir", state); r.Code != 0 || !strings.Contains(r.Stdout, "/cmds:1") {
		t.Fatalf("images:\n%s", r)
	}
	// In use: a run holds it, so rmi and prune leave it.
	p := h.start(runConfig{}, "run", "--state-dir", state, "--image", ref, "--pull", "never", "--", "/bin/sh", "-c", "echo up; sleep 60; : "+h.marker)
	p.waitStdout("up", runLimit)
	if r := h.run("rmi", "--state-dir", state, ref); r.Code == 0 || !strings.Contains(r.Stderr, "in use") {
		t.Fatalf("rmi of an image in use:\n%s", r)
	}
	if r := h.run("image", "prune", "--state-dir", state); r.Code != 0 || strings.Contains(r.Stdout, "removed") {
		t.Fatalf("prune removed an image in use:\n%s", r)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	if r := h.run("rmi", "--state-dir", state, ref); r.Code != 0 || !strings.Contains(r.Stdout, "removed") {
		t.Fatalf("rmi:\n%s", r)
	}
	if layers, _ := os.ReadDir(filepath.Join(state, "store/layers")); len(layers) != 0 {
		t.Errorf("rmi of the only image left %d layers", len(layers))
	}

	// Offline: a docker save tarball.
	tag, _ := name.NewTag("example.com/saved:1")
	file := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.WriteToFile(file, tag, appImage(t, appConfig)); err != nil {
		t.Fatal(err)
	}
	if r := h.run("load", "--state-dir", state, "-i", file); r.Code != 0 || !strings.Contains(r.Stdout, "loaded example.com/saved:1") {
		t.Fatalf("load:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", "example.com/saved:1", "--pull", "never"); r.Code != 0 || !strings.Contains(r.Stdout, "cmd-ran") {
		t.Fatalf("run from a loaded image:\n%s", r)
	}
}

func TestRunPythonFromImage(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "python:min", imagetest.PythonImage(t, true))
	state := imageState(t)
	r := h.run("run", "--state-dir", state, "--image", ref, "--", "python3", "-c", "import sys, json, ctypes, socket; print(sys.prefix, json.dumps([1]))")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "/usr [1]" {
		t.Fatalf("python3 from the image:\n%s", r)
	}
}

// TestBytecodeLayer: an image whose standard library has no compiled
// files gets them once, in a layer of its own (unchecked-hash .pyc), used
// by every later run; --no-bytecode runs without (the negative control:
// the compiled file is then absent).
func TestBytecodeLayer(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "python:nobytecode", imagetest.PythonImage(t, false))
	state := imageState(t)
	// The flags word of json's compiled file: 1 is an unchecked hash-based .pyc.
	probe := "import importlib.util, json, os; p = importlib.util.cache_from_source(json.__file__); print(int.from_bytes(open(p, 'rb').read()[4:8], 'little') if os.path.exists(p) else 'absent')"
	r := h.run("run", "--state-dir", state, "--image", ref, "--no-bytecode", "--", "python3", "-B", "-c", probe)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "absent" {
		t.Fatalf("without the bytecode layer:\n%s", r)
	}
	r = h.run("run", "--state-dir", state, "--image", ref, "--", "python3", "-B", "-c", probe)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "1" || !strings.Contains(r.Stderr, "compiled the Python standard library") {
		t.Fatalf("first run with the bytecode layer:\n%s", r)
	}
	r = h.run("run", "--state-dir", state, "--image", ref, "--", "python3", "-B", "-c", probe)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "1" || strings.Contains(r.Stderr, "compiled") {
		t.Fatalf("second run (the layer reused, not compiled again):\n%s", r)
	}
	// An image with compiled files gets no layer.
	ref2 := reg.Push(t, "python:bytecode", imagetest.PythonImage(t, true))
	if r := h.run("run", "--state-dir", state, "--image", ref2, "--", "python3", "-c", "pass"); r.Code != 0 || strings.Contains(r.Stderr, "compiled") {
		t.Fatalf("an image with bytecode:\n%s", r)
	}
}

// TestRequirementsVenv: --requirements builds a virtual environment with
// the image's pip from a local directory of wheels, once per (image, file
// bytes); the next run reuses it; a different file builds another.
func TestRequirementsVenv(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "python:venv", imagetest.PythonImage(t, true))
	state := imageState(t)
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 42\n")
	imagetest.Wheel(t, wheels, "tineother", "2.0", "VALUE = 'other'\n")
	req := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(req, []byte("tinedemo==1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := "import sys, tinedemo; print(tinedemo.VALUE, sys.prefix)"
	// Negative control: the image alone has no such package.
	if r := h.run("run", "--state-dir", state, "--image", ref, "--", "python3", "-c", probe); r.Code == 0 || !strings.Contains(r.Stderr, "No module named 'tinedemo'") {
		t.Fatalf("without requirements:\n%s", r)
	}
	args := []string{"run", "--state-dir", state, "--image", ref, "--requirements", req, "--find-links", wheels, "--", "python3", "-c", probe}
	r := h.run(args...)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "42 /opt/tine/venv" || !strings.Contains(r.Stderr, "built the environment") {
		t.Fatalf("first run with requirements:\n%s", r)
	}
	r = h.run(args...)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "42 /opt/tine/venv" || strings.Contains(r.Stderr, "built the environment") {
		t.Fatalf("second run (reused):\n%s", r)
	}
	if err := os.WriteFile(req, []byte("tinedemo==1.0\ntineother\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = h.run("run", "--state-dir", state, "--image", ref, "--requirements", req, "--find-links", wheels, "--", "python3", "-c", "import tineother; print(tineother.VALUE)")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "other" || !strings.Contains(r.Stderr, "built the environment") {
		t.Fatalf("changed requirements:\n%s", r)
	}
	// The same file over other packages (the directory changed) is another
	// environment, never the old one.
	imagetest.Wheel(t, wheels, "tineother", "2.0", "VALUE = 'replaced'\n")
	r = h.run("run", "--state-dir", state, "--image", ref, "--requirements", req, "--find-links", wheels, "--", "python3", "-c", "import tineother; print(tineother.VALUE)")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "replaced" || !strings.Contains(r.Stderr, "built the environment") {
		t.Fatalf("requirements over changed packages:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", ref, "--requirements", req, "--", "true"); r.Code != 2 || !strings.Contains(r.Stderr, "--find-links") {
		t.Fatalf("requirements without --find-links:\n%s", r)
	}
}

// TestPullCredentialsAndMirrors: credentials come from the Docker config
// (DOCKER_CONFIG, as ~/.docker/config.json), and a registry's mirror from
// the registries file is tried first.
func TestPullCredentialsAndMirrors(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "private/app:1", appImage(t, appConfig))
	reg.BasicAuth = "tine:s3cret"
	state := imageState(t)
	// Negative control: without credentials the registry refuses.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if r := h.run("pull", "--state-dir", state, "-q", ref); r.Code == 0 || !strings.Contains(r.Stderr, "401") && !strings.Contains(strings.ToLower(r.Stderr), "unauthorized") {
		t.Fatalf("pull without credentials:\n%s", r)
	}
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("tine:s3cret"))
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"`+reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	if r := h.run("pull", "--state-dir", state, "-q", ref); r.Code != 0 {
		t.Fatalf("pull with credentials from the Docker config:\n%s", r)
	}

	// A registry that does not exist, mirrored by ours.
	mirror := imagetest.NewRegistry(t)
	mirror.Push(t, "team/tool:2", appImage(t, appConfig))
	regs := filepath.Join(t.TempDir(), "registries.toml")
	if err := os.WriteFile(regs, []byte("[[registry]]\nhost = \"registry.invalid:5000\"\nmirrors = [\""+mirror.Host+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.run("pull", "--state-dir", state, "-q", "registry.invalid:5000/team/tool:2"); r.Code == 0 {
		t.Fatalf("a pull from a registry that does not exist succeeded without its mirror:\n%s", r)
	}
	if r := h.run("pull", "--state-dir", state, "-q", "--registries", regs, "registry.invalid:5000/team/tool:2"); r.Code != 0 {
		t.Fatalf("pull through the mirror:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", "registry.invalid:5000/team/tool:2", "--pull", "never"); r.Code != 0 || !strings.Contains(r.Stdout, "cmd-ran") {
		t.Fatalf("run of the mirrored image:\n%s", r)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("[[registry]]\nhost = \"x\"\nmirror = [\"y\"]\n"), 0o644)
	if r := h.run("pull", "--state-dir", state, "--registries", bad, ref); r.Code != 2 || !strings.Contains(r.Stderr, "unknown key") {
		t.Fatalf("a registries file with an unknown key:\n%s", r)
	}
}

func TestImageRefusals(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "refuse:1", appImage(t, appConfig))
	state := imageState(t)
	if r := h.run("run", "--state-dir", state, "--image", ref, "--userns", "--", "/bin/true"); r.Code != 2 || !strings.Contains(r.Stderr, "--userns") {
		t.Fatalf("--image with --userns:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", ref, "--rootfs", "/", "--", "/bin/true"); r.Code != 2 || !strings.Contains(r.Stderr, "--rootfs") {
		t.Fatalf("--image with --rootfs:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", ref, "--pull", "sometimes", "--", "/bin/true"); r.Code != 2 {
		t.Fatalf("a bad --pull:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", "UPPER:case", "--", "/bin/true"); r.Code == 0 || !strings.Contains(r.Stderr, "invalid image reference") {
		t.Fatalf("a malformed reference:\n%s", r)
	}
	if r := h.run("run", "--state-dir", state, "--image", ref, "--index-url", "http://pypi.lan/simple", "--", "/bin/true"); r.Code != 2 || !strings.Contains(r.Stderr, "is for --requirements") {
		t.Fatalf("--index-url without --requirements:\n%s", r)
	}
	req := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(req, []byte("tinedemo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"ftp://pypi.lan/simple", "http://127.0.0.1:3141/simple"} {
		if r := h.run("run", "--state-dir", state, "--image", ref, "--requirements", req, "--index-url", u, "--", "/bin/true"); r.Code != 2 || !strings.Contains(r.Stderr, "--index-url") {
			t.Fatalf("--index-url %s:\n%s", u, r)
		}
	}
}

// TestDeepImageRuns: an image of more layers than one overlay mount
// takes runs (its bottom layers flattened), all of its files there.
func TestDeepImageRuns(t *testing.T) {
	h := setup(t)
	reg := imagetest.NewRegistry(t)
	state := imageState(t)
	var layers []v1.Layer
	layers = append(layers, imagetest.BusyboxLayer(t))
	for i := range 60 {
		layers = append(layers, imagetest.Layer(t, imagetest.File{Name: "l/" + strconv.Itoa(i), Body: strconv.Itoa(i)}))
	}
	deep := reg.Push(t, "deep:1", imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, layers...))
	if r := h.run("run", "--state-dir", state, "--image", deep, "--", "/bin/sh", "-c", "ls /l | wc -l"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "60" {
		t.Fatalf("an image of 61 layers:\n%s", r)
	}
}

// TestImagesOfAnEmptyStateDir: listing, removing and pruning in a state
// directory without images make nothing there (no layer store is made and
// mounted to look in).
func TestImagesOfAnEmptyStateDir(t *testing.T) {
	h := setup(t)
	state := filepath.Join(t.TempDir(), "state")
	if r := h.run("images", "--state-dir", state); r.Code != 0 || strings.Count(r.Stdout, "\n") != 1 {
		t.Fatalf("images:\n%s", r)
	}
	if r := h.run("rmi", "--state-dir", state, "nothing:1"); r.Code == 0 || !strings.Contains(r.Stderr, "no such image") {
		t.Fatalf("rmi:\n%s", r)
	}
	if r := h.run("image", "prune", "--state-dir", state); r.Code != 0 {
		t.Fatalf("prune:\n%s", r)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the commands made %s: %v", state, err)
	}
}

// TestRequirementsFromAnIndex: tine run builds the environment from a
// package index in another network namespace, over a build network of its
// own that it removes after; the second run reuses the environment.
func TestRequirementsFromAnIndex(t *testing.T) {
	h := setup(t)
	require.Feature(t, "nftables")
	// 192.0.2.248/30: beside the /30s internal/image's index test picks.
	peer, err := nettest.NewHost("ix"+nettest.RandTag(4), netip.MustParseAddr("192.0.2.249"), netip.MustParseAddr("192.0.2.250"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Close)
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 42\n")
	ln, err := peer.Listen("tcp4", ":80")
	if err != nil {
		t.Fatal(err)
	}
	index := imagetest.ServeIndex(t, ln, wheels)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "python:index", imagetest.PythonImage(t, true))
	state := imageState(t)
	req := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(req, []byte("tinedemo==1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--state-dir", state, "--image", ref, "--requirements", req, "--index-url", "http://" + peer.Addr.String() + "/simple",
		"--", "python3", "-c", "import tinedemo; print(tinedemo.VALUE)"}
	r := h.run(args...)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "42" || !strings.Contains(r.Stderr, "built the environment") || index.Requests.Load() == 0 {
		t.Fatalf("a run with requirements from an index (%d requests to it):\n%s", index.Requests.Load(), r)
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "tineb") {
			t.Errorf("the build network's link %s outlived the run", l.Attrs().Name)
		}
	}
	n := index.Requests.Load()
	if r := h.run(args...); r.Code != 0 || strings.TrimSpace(r.Stdout) != "42" || strings.Contains(r.Stderr, "built the environment") || index.Requests.Load() != n {
		t.Fatalf("the second run (reused):\n%s", r)
	}
}
