// Package a11y gives a desktop an accessibility tree: a session D-Bus
// (which activates Debian's AT-SPI bus launcher and registry when an
// application asks for them), the environment that makes toolkits export
// their widgets, and a reader of the tree (dump.py, through Debian's
// python3-pyatspi) rendered as OSWorld's XML exactly (its guest's
// /accessibility) or as tine's compact JSON.
package a11y

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed dump.py
var dumpScript string

// Python is the interpreter that reads the tree: Debian's, which has
// python3-pyatspi.
var Python = "/usr/bin/python3"

// dumpTimeout bounds one read of the tree (an application that hangs
// must not hang the guest).
const dumpTimeout = 30 * time.Second

// Bus is a desktop's session bus.
type Bus struct {
	// Env is what the desktop's processes need to reach it and to export
	// their accessibility trees.
	Env  []string
	dir  string
	cmd  *exec.Cmd
	cred *syscall.Credential
}

// Start starts a session bus in a fresh runtime directory and waits until
// it listens. With cred the bus, its runtime directory and what it
// activates belong to that user (a bus lets only its own user connect):
// the desktop's session account. What it activates runs on display.
func Start(ctx context.Context, cred *syscall.Credential, display string) (*Bus, error) {
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("the accessibility tree needs a session bus: dbus-daemon is not installed (Debian packages dbus and at-spi2-core)")
	}
	dir, err := os.MkdirTemp("", "tine-a11y-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("the session bus's directory: %w", err)
		}
	}
	addr := "unix:path=" + filepath.Join(dir, "bus")
	cmd := exec.Command(daemon, "--session", "--nofork", "--nopidfile", "--address="+addr, "--print-address=1")
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+dir, "DISPLAY="+display)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the session bus: %w", err)
	}
	b := &Bus{dir: dir, cmd: cmd, cred: cred}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) == "" {
			b.Close()
			return nil, fmt.Errorf("the session bus did not start: %s", strings.TrimSpace(stderr.String()))
		}
	case <-ctx.Done():
		b.Close()
		return nil, fmt.Errorf("the session bus did not start: %w", ctx.Err())
	}
	b.Env = []string{
		"DBUS_SESSION_BUS_ADDRESS=" + addr,
		"XDG_RUNTIME_DIR=" + dir,
		// GTK exports its widgets whenever the bus is there; Qt and
		// Chromium need asking.
		"QT_ACCESSIBILITY=1", "QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1", "ACCESSIBILITY_ENABLED=1",
	}
	return b, nil
}

// Close stops the bus and everything it activated (its process group's
// children are in their own sessions, so they go as the bus goes: the
// launcher and registry exit when their bus closes).
func (b *Bus) Close() error {
	if b.cmd.Process != nil {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		b.cmd.Process.Kill()
		b.cmd.Wait()
	}
	return os.RemoveAll(b.dir)
}

// Node is one accessible object, as dump.py reads it.
type Node struct {
	Role       string      `json:"role"`
	Name       string      `json:"name"`
	States     []string    `json:"states"`
	Attributes [][2]string `json:"attributes"`
	Bounds     []int       `json:"bounds,omitempty"` // x, y, width, height; only when visible and showing
	Text       *string     `json:"text,omitempty"`
	Image      bool        `json:"image,omitempty"`
	Selection  bool        `json:"selection,omitempty"`
	Value      [][2]string `json:"value,omitempty"`
	Actions    [][3]string `json:"actions,omitempty"` // name, description, key binding
	Children   []*Node     `json:"children"`
}

// Dump reads the tree of every application on the bus (display: the X
// display's name), as the bus's user.
func (b *Bus) Dump(ctx context.Context, display string) ([]*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, dumpTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Python, "-c", dumpScript)
	cmd.Env = append(append(os.Environ(), b.Env...), "DISPLAY="+display)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("reading the accessibility tree took over %s", dumpTimeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "No module named 'pyatspi'") {
			msg = "python3-pyatspi is not installed"
		}
		return nil, fmt.Errorf("read the accessibility tree: %v: %s", err, msg)
	}
	var apps []*Node
	if err := json.Unmarshal(out.Bytes(), &apps); err != nil {
		return nil, fmt.Errorf("read the accessibility tree: %w", err)
	}
	return apps, nil
}
