package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// framebufferPrefix starts the name of every directory a guest makes for
// Xvfb's screen file; the guest's pid follows, so a later guest can tell
// whose it was.
const framebufferPrefix = "tine-xvfb-"

// framebufferDir makes a directory for Xvfb's screen file: in /run (in a
// sandbox its own tmpfs, sized by its disk limit, where a desktop's guest
// keeps its socket too; /dev/shm holds only 64 MiB, less than a big
// screen), else in the temporary directory (a guest run by a user).
func framebufferDir() (string, error) {
	dir, err := makeFramebufferDir("/run")
	if err == nil {
		return dir, nil
	}
	return makeFramebufferDir(os.TempDir())
}

// makeFramebufferDir makes parent/tine-xvfb-PID-RANDOM, first removing
// the directories of guests that are gone. A guest removes its own when it
// ends, but one killed with SIGKILL cannot, and its screen file is as large
// as the screen. The file cannot be unlinked once Xvfb maps it instead:
// criu carries a deleted file only up to its ghost limit (1 MiB), less than
// a screen.
func makeFramebufferDir(parent string) (string, error) {
	removeStaleFramebufferDirs(parent)
	return os.MkdirTemp(parent, framebufferPrefix+strconv.Itoa(os.Getpid())+"-")
}

// removeStaleFramebufferDirs removes parent's framebuffer directories whose
// guest no longer runs. A pid reused by another process keeps its
// directory until that one ends too: a leak postponed, never a screen file
// taken from a running guest.
func removeStaleFramebufferDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := framebufferOwner(e.Name())
		if !ok || !e.IsDir() || processExists(pid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
			fmt.Fprintf(os.Stderr, "tine guest: remove a dead guest's screen file: %v\n", err)
		}
	}
}

// framebufferOwner is the pid in a framebuffer directory's name.
func framebufferOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, framebufferPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// processExists says whether pid names a process; one the caller may not
// signal exists too.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
