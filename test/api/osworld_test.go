package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/testbin"
)

// A desktop made with osworld serves OSWorld's guest API as plain HTTP on
// the loopback port the daemon prints: a fresh TCP connection per request,
// as OSWorld's client makes them. A pyautogui action moves the pointer; a
// program only python3 can run types into the desktop's xterm, with tine's
// pyautogui module inside the sandbox. The port closes with the desktop.
func TestDesktopOSWorld(t *testing.T) {
	d := startDaemon(t)
	require.Binary(t, "Xvfb")
	require.Binary(t, "openbox")
	require.Binary(t, "xterm")
	require.Binary(t, "python3")
	ctx := context.Background()
	dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1024, Height: 768, OSWorld: true,
		Apps: [][]string{{"xterm", "-geometry", "80x24+0+0"}}})
	if err != nil {
		t.Fatalf("create desktop: %v", err)
	}
	host, port, err := net.SplitHostPort(dt.OSWorld)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("desktop's osworld address %q: want 127.0.0.1:PORT", dt.OSWorld)
	}
	if got, _ := d.c.Desktop(ctx, dt.ID); got == nil || got.OSWorld != dt.OSWorld {
		t.Fatalf("GET desktop: osworld %+v, want %s", got, dt.OSWorld)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://"+dt.OSWorld+path, r)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := call("GET", "/platform", nil); code != 200 || string(b) != "Linux" {
		t.Fatalf("platform: %d %q", code, b)
	}
	// The daemon passes each connection into the guest (internal/connpass):
	// the guest, inside the sandbox, holds the host's end of a kept-alive
	// connection, and the daemon holds nothing of it.
	kept, err := net.Dial("tcp", dt.OSWorld)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	io.WriteString(kept, "GET /platform HTTP/1.1\r\nHost: guest\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("platform on a kept-alive connection: %v %v", resp, err)
	}
	resp.Body.Close()
	holder := socketHolder(t, port, kept.LocalAddr().(*net.TCPAddr).Port)
	if holder == d.pid() || sameNamespace(holder, os.Getpid(), "pid") {
		t.Fatalf("the published port's connection is held by pid %d (the daemon is %d): want the guest, inside the desktop's sandbox", holder, d.pid())
	}
	// A command the guest starts meanwhile inherits neither that
	// connection nor the one its own request came on.
	if code, b := call("POST", "/execute", map[string]any{"command": []string{"ls", "-l", "/proc/self/fd/"}}); code != 200 || !bytes.Contains(b, []byte("pipe:")) || bytes.Contains(b, []byte("socket:")) {
		t.Fatalf("a command's descriptors (want its pipes and no socket): %d %s", code, b)
	}
	kept.Close()
	const prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
	if code, b := call("POST", "/execute", map[string]any{"command": []string{"python", "-c", prefix + "pyautogui.click(321, 123)"}, "shell": false}); code != 200 || !bytes.Contains(b, []byte(`"returncode":0`)) {
		t.Fatalf("execute click: %d %s", code, b)
	}
	if code, b := call("GET", "/cursor_position", nil); code != 200 || string(bytes.TrimSpace(b)) != "[321,123]" {
		t.Fatalf("cursor_position: %d %s", code, b)
	}
	// tine's pyautogui reads the screen too: the backdrop's colour.
	code, b := call("POST", "/execute", map[string]any{"command": []string{"python", "-c", prefix + "print(pyautogui.pixel(1000, 700))"}})
	if code != 200 || !bytes.Contains(b, []byte(`"output":"(46, 52, 64)\n"`)) {
		t.Fatalf("execute pixel: %d %s", code, b)
	}
	// Only python3 runs this (a loop); the file appears in the sandbox.
	code, b = call("POST", "/execute", map[string]any{"command": []string{"python", "-c", prefix + "\nfor w in ['echo', 'osworld-typed', '>', '/tmp/ow']:\n    pyautogui.write(w + ' ')\npyautogui.press('enter')"}})
	if code != 200 || !bytes.Contains(b, []byte(`"returncode":0`)) {
		t.Fatalf("execute loop: %d %s", code, b)
	}
	if !testbin.Eventually(patience, func() bool { return readSandboxFile(d, dt.ID, "/tmp/ow") == "osworld-typed\n" }) {
		t.Fatalf("the typed command did not run: /tmp/ow is %q", readSandboxFile(d, dt.ID, "/tmp/ow"))
	}
	// The port has no credentials (OSWorld's client sends none): only the
	// daemon's own user may connect. The same request as root is answered
	// (the control), as nobody the connection is closed unanswered.
	get := func(cred *syscall.Credential) string {
		t.Helper()
		cmd := exec.Command("/usr/bin/python3", "-c", `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"GET /platform HTTP/1.0\r\n\r\n")
out = b""
try:
    while True:
        b = s.recv(4096)
        if not b:
            break
        out += b
except ConnectionResetError:
    pass
print(out.decode())`, port)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("connect as %+v: %v: %s", cred, err, out)
		}
		return string(out)
	}
	if got := get(nil); !strings.HasPrefix(got, "HTTP/1.0 200") || !strings.HasSuffix(strings.TrimSpace(got), "Linux") {
		t.Fatalf("as root: %q", got)
	}
	if got := get(&syscall.Credential{Uid: 65534, Gid: 65534}); strings.TrimSpace(got) != "" {
		t.Fatalf("uid 65534 reached the desktop's OSWorld API: %q", got)
	}
	if err := d.c.DeleteDesktop(ctx, dt.ID); err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(patience, func() bool {
		c, err := net.Dial("tcp", dt.OSWorld)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("%s still accepts connections after the desktop was deleted", dt.OSWorld)
	}
}

// socketHolder returns the pid of the process holding the server's end of
// the loopback TCP connection between localPort and remotePort (found in
// /proc/net/tcp by its inode, then among every process's descriptors).
func socketHolder(t *testing.T, localPort string, remotePort int) int {
	t.Helper()
	lp, _ := strconv.Atoi(localPort)
	want := fmt.Sprintf(":%04X", lp)
	wantRemote := fmt.Sprintf(":%04X", remotePort)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	inode := ""
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], want) && strings.HasSuffix(f[2], wantRemote) {
			inode = f[9]
		}
	}
	if inode == "" || inode == "0" {
		t.Fatalf("no socket for port %s from port %d in /proc/net/tcp", localPort, remotePort)
	}
	link := "socket:[" + inode + "]"
	pids, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range pids {
		if l, err := os.Readlink(fd); err == nil && l == link {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	t.Fatalf("no process holds %s", link)
	return 0
}

// sameNamespace says whether processes a and b share their namespace of
// the kind given ("pid", "mnt", ...).
func sameNamespace(a, b int, kind string) bool {
	la, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", a, kind))
	lb, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", b, kind))
	return err1 == nil && err2 == nil && la == lb
}
