package probe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// nobody is the unprivileged uid (and gid) root tries user namespaces as.
const nobody = 65534

func checkRoot() Check {
	euid := os.Geteuid()
	if euid != 0 {
		return Check{Detail: fmt.Sprintf("euid %d", euid), Fix: "run tine as root (sudo tine ...), or rely on rootless mode if userns is ok"}
	}
	return Check{OK: true, Detail: "euid 0"}
}

// truePath finds a program that exits 0 at once: the child every namespace
// try execs, so that a failure can only come from creating the namespace.
var truePath = sync.OnceValue(func() string {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("true"); err == nil {
		return p
	}
	return "/bin/true"
})

// runTrue starts truePath with attr and waits for it.
func runTrue(attr *syscall.SysProcAttr) error {
	cmd := exec.Command(truePath())
	cmd.SysProcAttr = attr
	return cmd.Run()
}

// ownUserNamespace adds a user namespace mapping the caller's ids to root,
// which is how an unprivileged process may create the other namespaces.
func ownUserNamespace(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= unix.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
}

// errnoText reduces an exec error to its errno text when it has one
// ("operation not permitted"), which is what a user can act on.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// namespaceKinds maps a kind to its clone flag and kernel option.
var namespaceKinds = map[string]struct {
	flag   uintptr
	config string
}{
	"pid":    {unix.CLONE_NEWPID, "CONFIG_PID_NS"},
	"mount":  {unix.CLONE_NEWNS, ""},
	"ipc":    {unix.CLONE_NEWIPC, "CONFIG_IPC_NS"},
	"uts":    {unix.CLONE_NEWUTS, "CONFIG_UTS_NS"},
	"net":    {unix.CLONE_NEWNET, "CONFIG_NET_NS"},
	"cgroup": {unix.CLONE_NEWCGROUP, "CONFIG_CGROUPS"},
}

// namespaceCheck returns a check that starts a child in a new namespace of
// the given kind (inside a user namespace of its own when not root, as
// rootless tine would).
func namespaceCheck(kind string) func() Check {
	return func() Check {
		ns := namespaceKinds[kind]
		attr := &syscall.SysProcAttr{Cloneflags: ns.flag}
		how := "as root"
		if os.Geteuid() != 0 {
			ownUserNamespace(attr)
			how = "inside a user namespace"
		}
		if err := runTrue(attr); err != nil {
			fix := "if tine runs inside a container, let it create namespaces (e.g. docker run --privileged)"
			if ns.config != "" {
				fix = fmt.Sprintf("a kernel built with %s; %s", ns.config, fix)
			}
			return Check{Detail: fmt.Sprintf("cannot create a new %s namespace %s: %s", kind, how, errnoText(err)), Fix: fix}
		}
		return Check{OK: true, Detail: fmt.Sprintf("created a new %s namespace %s", kind, how)}
	}
}

// checkUserns finds out whether an unprivileged user can create a user
// namespace. Root always can (it has CAP_SYS_ADMIN), so as root the try is
// made as nobody through unshare(1): a Go process cannot drop privileges
// before clone, and unshare(CLONE_NEWUSER) refuses a threaded caller.
func checkUserns() Check {
	if os.Geteuid() != 0 {
		attr := &syscall.SysProcAttr{}
		ownUserNamespace(attr)
		if err := runTrue(attr); err != nil {
			return Check{Detail: "cannot create a user namespace: " + errnoText(err), Fix: usernsFix()}
		}
		return Check{OK: true, Detail: fmt.Sprintf("created a user namespace as uid %d", os.Geteuid())}
	}

	attr := &syscall.SysProcAttr{}
	ownUserNamespace(attr)
	if err := runTrue(attr); err != nil {
		return Check{Detail: "the kernel refuses user namespaces even to root: " + errnoText(err), Fix: usernsFix()}
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		// Nothing to try with: judge by the known switches.
		if blocked := usernsBlockers(); len(blocked) > 0 {
			return Check{Detail: "unprivileged user namespaces are off: " + strings.Join(blocked, ", "), Fix: usernsFix()}
		}
		return Check{OK: true, Detail: "root can create user namespaces and no sysctl forbids unprivileged ones (not tried: unshare not found)"}
	}
	cmd := exec.Command(unshare, "--user", truePath())
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		why := strings.TrimSpace(string(out))
		if why == "" {
			why = err.Error()
		}
		return Check{Detail: fmt.Sprintf("uid %d cannot create a user namespace: %s", nobody, why), Fix: usernsFix()}
	}
	return Check{OK: true, Detail: fmt.Sprintf("uid %d created a user namespace (max_user_namespaces %s)", nobody, readSysctl("user/max_user_namespaces"))}
}

// usernsBlockers names the sysctls that forbid unprivileged user namespaces.
func usernsBlockers() []string {
	var blocked []string
	if readSysctl("user/max_user_namespaces") == "0" {
		blocked = append(blocked, "user.max_user_namespaces = 0")
	}
	if readSysctl("kernel/unprivileged_userns_clone") == "0" {
		blocked = append(blocked, "kernel.unprivileged_userns_clone = 0")
	}
	if readSysctl("kernel/apparmor_restrict_unprivileged_userns") == "1" {
		blocked = append(blocked, "kernel.apparmor_restrict_unprivileged_userns = 1")
	}
	return blocked
}

// usernsFix says how to allow unprivileged user namespaces on this host.
func usernsFix() string {
	var fixes []string
	if readSysctl("user/max_user_namespaces") == "0" {
		fixes = append(fixes, "sysctl -w user.max_user_namespaces=15000")
	}
	if readSysctl("kernel/unprivileged_userns_clone") == "0" {
		fixes = append(fixes, "sysctl -w kernel.unprivileged_userns_clone=1")
	}
	if readSysctl("kernel/apparmor_restrict_unprivileged_userns") == "1" {
		fixes = append(fixes, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or give tine an AppArmor profile with userns)")
	}
	if len(fixes) == 0 {
		return "no sysctl forbids it: if tine runs inside a container, its seccomp or AppArmor profile blocks user namespaces; or run tine as root"
	}
	return strings.Join(fixes, "; ")
}

// readSysctl returns the trimmed value under /proc/sys, "" if absent.
func readSysctl(path string) string {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
