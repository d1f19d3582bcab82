package probe

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel returns the running kernel's release, e.g. "6.18.44".
func Kernel() string { return uname().release }

type unameInfo struct{ release, machine string }

var uname = sync.OnceValue(func() unameInfo {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return unameInfo{release: "unknown", machine: "unknown"}
	}
	return unameInfo{release: unix.ByteSliceToString(u.Release[:]), machine: unix.ByteSliceToString(u.Machine[:])}
})

func checkKernel() Check {
	u := uname()
	return Check{OK: true, Detail: fmt.Sprintf("Linux %s %s", u.release, u.machine)}
}

// checkSeccomp asks the seccomp() syscall whether it can return an errno
// from a filter — the action Docker's default policy uses — which proves
// filters work without installing one.
func checkSeccomp() Check {
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return Check{Detail: "prctl(PR_GET_SECCOMP): " + err.Error(), Fix: "a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER"}
	}
	status := procStatus("Seccomp", "Seccomp_filters")
	if status["Seccomp"] == "" {
		return Check{Detail: "/proc/self/status has no Seccomp line", Fix: "a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER"}
	}
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if errno != 0 {
		return Check{Detail: "seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO): " + errno.Error(), Fix: "a kernel built with CONFIG_SECCOMP_FILTER"}
	}
	filters := status["Seccomp_filters"]
	if filters == "" {
		filters = "unknown"
	}
	return Check{OK: true, Detail: fmt.Sprintf("filters available; this process: mode %d, Seccomp_filters %s", mode, filters)}
}

// procStatus returns the named fields of /proc/self/status.
func procStatus(fields ...string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			for _, f := range fields {
				if k == f {
					out[k] = strings.TrimSpace(v)
				}
			}
		}
	}
	return out
}

// checkLandlock asks the kernel for its Landlock ABI version.
func checkLandlock() Check {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == unix.EOPNOTSUPP:
		c := Check{Detail: "Landlock is built in but disabled at boot", Fix: "add landlock to the lsm= kernel boot parameter"}
		if b, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil {
			lsms := strings.TrimSpace(string(b))
			c.Detail += " (active LSMs: " + lsms + ")"
			c.Fix += ", e.g. lsm=landlock," + lsms
		}
		return c
	case errno == unix.ENOSYS:
		return Check{Detail: "the kernel has no Landlock", Fix: "a kernel >= 5.13 built with CONFIG_SECURITY_LANDLOCK"}
	case errno != 0:
		return Check{Detail: "landlock_create_ruleset: " + errno.Error(), Fix: "if tine runs inside a container, its seccomp profile blocks Landlock"}
	}
	return Check{OK: true, Detail: fmt.Sprintf("Landlock ABI %d", abi), Value: int(abi)}
}

// checkClone3 calls clone3 with no arguments: a kernel that has it answers
// EINVAL (arguments too small) without creating anything.
func checkClone3() Check {
	_, _, errno := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	switch errno {
	case unix.EINVAL:
		return Check{OK: true, Detail: "clone3 is available"}
	case unix.ENOSYS:
		return Check{Detail: "clone3: function not implemented (kernel < 5.3, or a seccomp profile hides it)", Fix: "a kernel >= 5.7 (CLONE_INTO_CGROUP); inside a container, a seccomp profile that allows clone3"}
	}
	return Check{Detail: "clone3: " + errno.Error(), Fix: "inside a container, a seccomp profile that allows clone3"}
}

// checkPidfd opens a pidfd on this process and closes it.
func checkPidfd() Check {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		fix := "a kernel >= 5.3"
		if !errors.Is(err, unix.ENOSYS) {
			fix = "inside a container, a seccomp profile that allows pidfd_open"
		}
		return Check{Detail: "pidfd_open: " + err.Error(), Fix: fix}
	}
	unix.Close(fd)
	return Check{OK: true, Detail: "pidfd_open works"}
}
