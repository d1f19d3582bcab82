package runcli

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// ttySession connects tine's own terminal to the pseudo-terminal the
// sandbox allocated for `tine run -t`: the host terminal goes raw, bytes
// are copied both ways, and the window size follows the host's.
type ttySession struct {
	master  *os.File
	restore *term.State
	copied  sync.WaitGroup
}

func attachTTY(master *os.File) *ttySession {
	t := &ttySession{master: master}
	t.ResizeFromHost()
	if term.IsTerminal(int(os.Stdin.Fd())) {
		t.restore, _ = term.MakeRaw(int(os.Stdin.Fd()))
	}
	go io.Copy(master, os.Stdin)
	t.copied.Add(1)
	go func() {
		defer t.copied.Done()
		io.Copy(os.Stdout, master) // ends with EIO once the command's side is closed
	}()
	return t
}

// ResizeFromHost copies the host terminal's size to the pseudo-terminal.
func (t *ttySession) ResizeFromHost() {
	ws, err := unix.IoctlGetWinsize(int(os.Stdin.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
}

// Close waits for the command's output to be copied and restores the host
// terminal.
func (t *ttySession) Close() {
	t.copied.Wait()
	if t.restore != nil {
		term.Restore(int(os.Stdin.Fd()), t.restore)
	}
	t.master.Close()
}
