// Package xvfb starts Xvfb the way desktops and their tests need it: on a
// display number it picks itself (-displayfd), no TCP, and its screen in
// System V shared memory (-shmem), so a capture can copy the pixels
// straight out of the framebuffer instead of asking the server to copy
// them into a segment first (x11.Display.UseFramebuffer).
package xvfb

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config says how to start Xvfb.
type Config struct {
	Width, Height int
	// GLX keeps the GLX extension (software OpenGL); off, Xvfb starts
	// faster and smaller.
	GLX bool
	// Wrap is a command prefix Xvfb runs under (tests: "unshare", "--ipc").
	Wrap []string
	// NoSHM keeps the screen out of System V shared memory, which criu
	// cannot carry out of a sandbox (the memory tier of snapshots, ADR
	// 0016): in a file of FBDir, mapped by Xvfb (-fbdir), which criu
	// carries like any file in the sandbox's tmpfs; without FBDir, in
	// Xvfb's own memory (captures then go through the X server).
	NoSHM bool
	FBDir string
}

// Server is a running Xvfb. The caller owns Cmd (kill its process group
// and Wait when done).
type Server struct {
	Cmd     *exec.Cmd
	Display string // ":N"
	// Framebuffer is the System V shared memory id of screen 0, or -1 when
	// Xvfb did not say it (then captures go through the X protocol).
	Framebuffer int
	// FramebufferFile is screen 0's file, with Config.FBDir.
	FramebufferFile string
	log             *stderrLog
}

// Stderr is what Xvfb has written to its standard error so far.
func (s *Server) Stderr() string { return s.log.String() }

// Start runs Xvfb and returns once it accepts connections; ctx bounds the
// wait (Xvfb is killed when it runs out).
func Start(ctx context.Context, c Config) (*Server, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	argv := append(append([]string(nil), c.Wrap...), "Xvfb", "-displayfd", "3", "-nolisten", "tcp", "-noreset")
	switch {
	case !c.NoSHM:
		argv = append(argv, "-shmem")
	case c.FBDir != "":
		argv = append(argv, "-fbdir", c.FBDir)
	}
	argv = append(argv, "-screen", "0", fmt.Sprintf("%dx%dx24", c.Width, c.Height))
	if !c.GLX {
		argv = append(argv, "-extension", "GLX")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{w}
	log := &stderrLog{}
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start Xvfb: %w", err)
	}
	w.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case n := <-line:
		if n == "" {
			cmd.Wait()
			return nil, fmt.Errorf("Xvfb exited before it was ready: %s", log.String())
		}
		s := &Server{Cmd: cmd, Display: ":" + n, log: log}
		s.Framebuffer = -1
		if !c.NoSHM {
			s.Framebuffer = log.framebuffer(ctx)
		} else if c.FBDir != "" {
			s.FramebufferFile = filepath.Join(c.FBDir, "Xvfb_screen0")
		}
		return s, nil
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return nil, fmt.Errorf("Xvfb not ready: %w: %s", ctx.Err(), log.String())
	}
}

// stderrLog keeps Xvfb's standard error (for error messages) and picks
// the framebuffer's segment id out of it ("screen 0 shmid N").
type stderrLog struct {
	mu    sync.Mutex
	text  strings.Builder
	shmid int
	found bool
}

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.Write(p)
	if !l.found {
		for line := range strings.Lines(l.text.String()) {
			if rest, ok := strings.CutPrefix(line, "screen 0 shmid "); ok && strings.HasSuffix(rest, "\n") {
				if id, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
					l.shmid, l.found = id, true
				}
			}
		}
	}
	return len(p), nil
}

func (l *stderrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// framebuffer waits briefly for the segment id: Xvfb prints it while it
// sets the screen up, before it is ready, but the copy of its stderr into
// the log runs on its own and may lag a little.
func (l *stderrLog) framebuffer(ctx context.Context) int {
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		l.mu.Lock()
		id, found := l.shmid, l.found
		l.mu.Unlock()
		if found {
			return id
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1
		}
		time.Sleep(time.Millisecond)
	}
}
