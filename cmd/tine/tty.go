package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// ttySession is a pseudo-terminal for `tine run -t`: the command gets the
// slave as its controlling terminal; tine copies between its own stdio and
// the master, with the host terminal in raw mode.
type ttySession struct {
	master, slave *os.File
	restore       *term.State
	copied        sync.WaitGroup
}

func openTTY() (*ttySession, error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("allocate a pseudo-terminal: %w", err)
	}
	master := os.NewFile(uintptr(mfd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("pseudo-terminal number: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	t := &ttySession{master: master, slave: os.NewFile(uintptr(sfd), name)}
	t.ResizeFromHost()
	return t, nil
}

// Attach puts the host terminal in raw mode and starts copying.
func (t *ttySession) Attach() {
	t.slave.Close() // the sandbox holds its copy
	if term.IsTerminal(int(os.Stdin.Fd())) {
		t.restore, _ = term.MakeRaw(int(os.Stdin.Fd()))
	}
	go io.Copy(t.master, os.Stdin)
	t.copied.Add(1)
	go func() {
		defer t.copied.Done()
		io.Copy(os.Stdout, t.master)
	}()
}

// Drain waits until the command's output has been copied (the master reads
// EIO once the last slave descriptor is closed).
func (t *ttySession) Drain() { t.copied.Wait() }

// ResizeFromHost copies the host terminal's size to the pseudo-terminal.
func (t *ttySession) ResizeFromHost() {
	ws, err := unix.IoctlGetWinsize(int(os.Stdin.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
}

func (t *ttySession) Close() {
	if t.restore != nil {
		term.Restore(int(os.Stdin.Fd()), t.restore)
	}
	t.master.Close()
	t.slave.Close()
}
