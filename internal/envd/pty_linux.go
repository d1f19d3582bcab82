package envd

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY opens a new terminal pair in the sandbox's devpts: the
// controlling end envd keeps and the terminal the command gets.
func openPTY() (ctl, tty *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	ctl = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	tfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return ctl, os.NewFile(uintptr(tfd), name), nil
}

func setSize(ctl *os.File, s *PTYSize) error {
	ws := &unix.Winsize{Col: uint16(s.Cols), Row: uint16(s.Rows)}
	if err := unix.IoctlSetWinsize(int(ctl.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}
