package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ipcSysctls are the IPC namespace's sysctls (fs.mqueue.* too).
var ipcSysctls = []string{"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni", "kernel.sem", "kernel.shmall", "kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced"}

var validSysctl = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_-]+)+$`)

// sysctlNamespace is the namespace a sysctl belongs to, as runc allows
// them: only a namespaced one can be set for a container.
func sysctlNamespace(key string) (specs.LinuxNamespaceType, bool) {
	switch {
	case !validSysctl.MatchString(key):
		return "", false
	case strings.HasPrefix(key, "net."):
		return specs.NetworkNamespace, true
	case strings.HasPrefix(key, "fs.mqueue."), slices.Contains(ipcSysctls, key):
		return specs.IPCNamespace, true
	case key == "kernel.hostname" || key == "kernel.domainname":
		return specs.UTSNamespace, true
	}
	return "", false
}

// checkSysctls accepts sysctls of the container's own namespaces: one
// of a namespace the container shares with the host would set it for
// the host.
func checkSysctls(sysctl map[string]string, c *Container, unsupported unsupportedFunc) error {
	for key := range sysctl {
		ns, ok := sysctlNamespace(key)
		if !ok {
			return unsupported("linux.sysctl %s: not a namespaced sysctl (only net.*, the IPC ones and kernel.hostname/domainname are)", key)
		}
		if strings.HasPrefix(c.JoinNS[ns], "/proc/self/") {
			return unsupported("linux.sysctl %s in the host's %s namespace: it would change the host", key, ns)
		}
	}
	return nil
}

// setSysctls writes the sysctls from a thread that has entered the
// container's network, IPC and UTS namespaces (through its PID 1), where
// /proc/sys shows theirs. The thread ends with its goroutine, namespaces
// and all.
func setSysctls(pid int, sysctl map[string]string) error {
	if len(sysctl) == 0 {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		for _, ns := range []struct {
			name string
			typ  int
		}{{"net", unix.CLONE_NEWNET}, {"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}} {
			f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, ns.name))
			if err != nil {
				done <- fmt.Errorf("linux.sysctl: open the container's %s namespace: %w", ns.name, err)
				return
			}
			err = unix.Setns(int(f.Fd()), ns.typ)
			f.Close()
			if err != nil {
				done <- fmt.Errorf("linux.sysctl: enter the container's %s namespace: %w", ns.name, err)
				return
			}
		}
		keys := make([]string, 0, len(sysctl))
		for k := range sysctl {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			path := filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/"))
			if err := os.WriteFile(path, []byte(sysctl[k]), 0); err != nil {
				done <- fmt.Errorf("linux.sysctl %s=%s: %w", k, sysctl[k], err)
				return
			}
		}
		done <- nil
	}()
	return <-done
}
