package sandbox

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
)

// UserNSSize is how many ids a sandbox run as root with Spec.UserNS maps:
// 0 to 65535 inside, the usual span of a distribution's users.
const UserNSSize = 65536

// DefaultUserNSBase is the first host uid and gid of that range when
// /etc/subuid and /etc/subgid give root none: far above the ids that
// useradd hands out (system users, people, and their own subordinate
// ranges from 100000 on), so no host user owns a file as one of them.
const DefaultUserNSBase = 1 << 31

// UserNSRange returns the first host uid and gid that a --userns
// sandbox's root maps to: root's range in /etc/subuid and /etc/subgid
// when it has one of at least UserNSSize ids, else DefaultUserNSBase.
// Every such sandbox maps the same range; they cannot reach each other's
// files or processes (separate mount and pid namespaces).
func UserNSRange() (uid, gid uint32) { return usernsRange() }

var usernsRange = sync.OnceValues(func() (uint32, uint32) {
	return subordinate("/etc/subuid"), subordinate("/etc/subgid")
})

// subordinate returns the start of root's first range in file (lines
// "name:start:count"), or DefaultUserNSBase.
func subordinate(file string) uint32 {
	f, err := os.Open(file)
	if err != nil {
		return DefaultUserNSBase
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || (parts[0] != "root" && parts[0] != "0") {
			continue
		}
		start, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 == nil && err2 == nil && start > 0 && count >= UserNSSize && start+UserNSSize <= 1<<32-1 {
			return uint32(start)
		}
	}
	return DefaultUserNSBase
}
