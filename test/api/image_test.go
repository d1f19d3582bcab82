package api_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/image/imagetest"
	"golang.org/x/sys/unix"
)

func TestImagesThroughTheDaemon(t *testing.T) {
	d := startDaemon(t)
	// The images' layer store may be a loop mount the daemon leaves (its
	// persistent state); lazily unmounted before the directory goes.
	t.Cleanup(func() { unix.Unmount(filepath.Join(d.dir, "state", "store"), unix.MNT_DETACH) })
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin", "APP=from-config"}, WorkingDir: "/home/app", User: "app"},
		imagetest.BusyboxLayer(t), imagetest.Layer(t, imagetest.File{Name: "app/marker", Body: "image layer\n"}))
	ref := reg.Push(t, "api/app:1", img)

	if _, err := d.c.PullImage(ctx, "UPPER/Case:bad", nil); client.ErrorCode(err) != api.CodeInvalidArgument {
		t.Fatalf("pull of an invalid reference: %v", err)
	}
	if _, err := d.c.PullImage(ctx, reg.Host+"/api/none:1", nil); client.ErrorCode(err) != api.CodeUnavailable {
		t.Fatalf("pull of a missing image: %v", err)
	}
	var events []api.ImagePullEvent
	pulled, err := d.c.PullImage(ctx, ref, func(ev api.ImagePullEvent) { events = append(events, ev) })
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]int{}
	for _, ev := range events {
		statuses[ev.Status]++
	}
	if statuses["resolved"] != 1 || statuses["unpacked"] != 2 || !strings.HasPrefix(pulled.Digest, "sha256:") {
		t.Errorf("pull progress %v, image %+v", statuses, pulled)
	}
	list, err := d.c.Images(ctx)
	if err != nil || len(list) != 1 || list[0].Digest != pulled.Digest {
		t.Fatalf("Images = %+v, %v", list, err)
	}

	sb, err := d.c.Create(ctx, &api.SandboxSpec{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat /app/marker; echo $APP; pwd; id -u; id -G"}})
	if err != nil {
		t.Fatal(err)
	}
	// The image's USER (app, 1000, in group extra 2000 too) runs every exec.
	if got := string(res.Stdout); res.ExitCode != 0 || got != "image layer\nfrom-config\n/home/app\n1000\n1000 2000\n" {
		t.Fatalf("exec in a sandbox from the image: %q (exit %d, stderr %q)", got, res.ExitCode, res.Stderr)
	}
	if _, err := d.c.RemoveImage(ctx, ref); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("removing an image a sandbox runs from: %v", err)
	}
	// The file API works on an image root: a file of the image reads, a
	// written one lands in the sandbox (not in the shared layer).
	rc, err := d.c.ReadFile(ctx, sb.ID, "/app/marker")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "image layer\n" {
		t.Fatalf("read an image file through the file API: %q", b)
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/app/marker", strings.NewReader("overwritten\n"), nil); err != nil {
		t.Fatal(err)
	}
	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/cat", "/app/marker"}}); err != nil || string(res.Stdout) != "overwritten\n" {
		t.Fatalf("a file written through the file API: %v %q", err, res.Stdout)
	}
	if layers, _ := filepath.Glob(filepath.Join(d.dir, "state", "store", "layers", "*", "app", "marker")); len(layers) != 1 {
		t.Fatalf("layers holding app/marker: %v", layers)
	} else if b, _ := os.ReadFile(layers[0]); string(b) != "image layer\n" {
		t.Fatalf("the shared layer changed: %q", b)
	}

	// A snapshot of it forks over the same image, and holds it.
	if res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo captured > /home/app/extra"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write in the golden sandbox: %v %+v", err, res)
	}
	sn, err := d.c.Snapshot(ctx, sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	forks, err := d.c.Fork(ctx, sn.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	fork := forks.Sandboxes[0]
	res, err = d.c.Exec(ctx, fork.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat /home/app/extra; echo $APP; id -u"}})
	if err != nil || string(res.Stdout) != "captured\nfrom-config\n1000\n" {
		t.Fatalf("exec in a fork of an image sandbox: %v %q %q", err, res.Stdout, res.Stderr)
	}
	if err := d.c.Delete(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.RemoveImage(ctx, ref); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("removing an image a snapshot holds: %v", err)
	}
	if err := d.c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if removed, err := d.c.RemoveImage(ctx, ref); err != nil || !removed {
		t.Fatalf("RemoveImage = %v, %v", removed, err)
	}
	// Missing: pulled on first use.
	sb, err = d.c.Create(ctx, &api.SandboxSpec{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	res, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"/bin/cat", "/app/marker"}})
	if err != nil || string(res.Stdout) != "image layer\n" {
		t.Fatalf("exec after a pull on first use: %v %q", err, res.Stdout)
	}
}

// TestFunctionFromImage: a warm function over an image runs the image's
// Python (its sys.executable and prefix are the image's, and a module only
// the image has imports), and the image cannot be removed while the
// function lives.
func TestFunctionFromImage(t *testing.T) {
	d := startDaemon(t)
	t.Cleanup(func() { unix.Unmount(filepath.Join(d.dir, "state", "store"), unix.MNT_DETACH) })
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}}, imagetest.BusyboxLayer(t), imagetest.PythonLayer(t, true),
		imagetest.Layer(t, imagetest.File{Name: "usr/lib/python3.11/only_in_image.py", Body: "WHERE = 'image'\n"}))
	ref := reg.Push(t, "fn/python:1", img)
	putFunction(t, d, api.FunctionSpec{Name: "imgfn", Image: ref, Entry: writeHandler(t,
		"import sys, only_in_image\ndef handler(event):\n    return {'exe': sys.executable, 'where': only_in_image.WHERE, 'echo': event}\n")})
	got := resultOf[struct {
		Exe, Where string
		Echo       int
	}](t, invoke(t, d, "imgfn", 7))
	if got.Exe != "/usr/bin/python3" || got.Where != "image" || got.Echo != 7 {
		t.Fatalf("function from an image: %+v", got)
	}
	if _, err := d.c.RemoveImage(ctx, ref); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("removing the image of a live function: %v", err)
	}
	// With requirements: the environment is built with the image's pip
	// and is the zygote's.
	wheels := t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 'from a wheel'\n")
	req := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(req, []byte("tinedemo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	putFunction(t, d, api.FunctionSpec{Name: "venvfn", Image: ref, Requirements: req, FindLinks: wheels, Entry: writeHandler(t,
		"import sys, tinedemo\ndef handler(event):\n    return {'exe': sys.prefix, 'where': tinedemo.VALUE}\n")})
	venv := resultOf[struct{ Exe, Where string }](t, invoke(t, d, "venvfn", 1))
	if venv.Exe != "/opt/tine/venv" || venv.Where != "from a wheel" {
		t.Fatalf("function with requirements: %+v", venv)
	}
	// Negative control: the host's own Python has no such module.
	putFunction(t, d, api.FunctionSpec{Name: "hostfn", Entry: writeHandler(t, "def handler(event):\n    import only_in_image\n")})
	if inv, err := d.c.Invoke(ctx, "hostfn", []byte("1")); err != nil || inv.Status == api.StatusOK {
		t.Fatalf("the host's python imported the image's module: %+v %v", inv, err)
	}
}

// TestDesktopFromImage: a desktop whose root is an image holding Xvfb,
// openbox and an app (copied from the host with their libraries) boots,
// maps the app's window, and its files are the image's.
func TestDesktopFromImage(t *testing.T) {
	d := startDaemon(t)
	t.Cleanup(func() { unix.Unmount(filepath.Join(d.dir, "state", "store"), unix.MNT_DETACH) })
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}}, imagetest.BusyboxLayer(t),
		imagetest.HostLayer(t, "/usr/bin/Xvfb", "/usr/bin/xkbcomp", "/usr/share/X11/xkb", "/usr/bin/openbox", "/etc/xdg/openbox",
			"/usr/bin/xmessage", "/etc/fonts", "/usr/share/fonts/X11/misc", "/usr/share/fonts/truetype/dejavu", "/etc/X11/app-defaults", "/usr/share/themes/Clearlooks", "/usr/share/X11/locale"),
		imagetest.Layer(t, imagetest.File{Name: "app/marker", Body: "desktop image\n"}))
	ref := reg.Push(t, "desktop:1", img)
	dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Image: ref, Width: 640, Height: 480, Apps: [][]string{{"xmessage", "from the image"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, dt.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat /app/marker; ls /usr/bin | wc -l"}})
	if err != nil || !strings.HasPrefix(string(res.Stdout), "desktop image\n") {
		t.Fatalf("exec in a desktop from an image: %v %q %q", err, res.Stdout, res.Stderr)
	}
	if n := strings.TrimSpace(strings.TrimPrefix(string(res.Stdout), "desktop image\n")); n != "4" {
		t.Errorf("the desktop's /usr/bin has %s entries, want the image's 4 (Xvfb, xkbcomp, openbox, xmessage)", n)
	}
	if _, err := d.c.RemoveImage(ctx, ref); client.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("removing the image of a live desktop: %v", err)
	}
}

// TestRunFromImageHandedToTheDaemon: `tine run --image` resolves the image
// itself (pulling it into its --state-dir), hands the run over with the
// image's layers, config and user, and holds the image while it runs.
func TestRunFromImageHandedToTheDaemon(t *testing.T) {
	d := startDaemon(t)
	state := t.TempDir()
	t.Cleanup(func() { unix.Unmount(filepath.Join(state, "store"), unix.MNT_DETACH) })
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "handed:1", imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin", "APP=handed"}, WorkingDir: "/home/app", User: "app"},
		imagetest.BusyboxLayer(t), imagetest.Layer(t, imagetest.File{Name: "app/marker", Body: "handed layer\n"})))
	cmd := exec.Command(tineBin, "run", "--socket", d.sock, "--verbose", "--state-dir", state, "--image", ref, "--",
		"/bin/sh", "-c", "cat /app/marker; echo $APP; pwd; id -u")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("tine run --image through the daemon: %v\n%s", err, e.String())
	}
	if o.String() != "handed layer\nhanded\n/home/app\n1000\n" || !strings.Contains(e.String(), "handed to the daemon") {
		t.Fatalf("stdout %q, stderr %q", o.String(), e.String())
	}
}
