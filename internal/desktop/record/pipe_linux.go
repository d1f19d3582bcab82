package record

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe makes the pipe as large as an unprivileged process may
// (fs.pipe-max-size, 1 MiB by default); failing only costs speed.
func growPipe(f *os.File) {
	unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, 1<<20)
}
