// Package caps names Linux capabilities and computes the sets a sandbox
// keeps: Docker's default set, as a bit mask for capset(2) and the list of
// capabilities to drop from the bounding set.
package caps

import "fmt"

// names maps each capability to its number (include/uapi/linux/capability.h).
var names = map[string]int{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
	"CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
	"CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11,
	"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
	"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19,
	"CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23,
	"CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27,
	"CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
	"CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
	"CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39,
	"CAP_CHECKPOINT_RESTORE": 40,
}

// Default is Docker's default capability set, which tine's sandboxes keep.
var Default = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Mask returns the bit mask of the named capabilities.
func Mask(list []string) (uint64, error) {
	var m uint64
	for _, n := range list {
		v, ok := names[n]
		if !ok {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
		m |= 1 << v
	}
	return m, nil
}

// maxCap bounds the capabilities dropped from the bounding set. Numbers the
// running kernel does not know are refused with EINVAL, which the dropper
// ignores, so no need to read /proc/sys/kernel/cap_last_cap on the start path.
const maxCap = 63

// ToDrop lists the capability numbers up to 63 that are not in keep.
func ToDrop(keep uint64) []int {
	var out []int
	for c := 0; c <= maxCap; c++ {
		if keep&(1<<c) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// Names lists the names of the capabilities in mask, by number.
func Names(mask uint64) []string {
	var out []string
	for c := 0; c <= maxCap; c++ {
		if mask&(1<<c) != 0 {
			name := fmt.Sprintf("capability %d", c)
			for n, v := range names {
				if v == c {
					name = n
				}
			}
			out = append(out, name)
		}
	}
	return out
}
