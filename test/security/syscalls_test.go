package security

import (
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

//go:embed testdata/syscalls.py
var syscallsProbe string

// kernelAttempts are the rows of TestKernelSurfaceRefused: each names an
// attempt of testdata/syscalls.py, which makes its host form as the control
// and its inside form in the sandbox.
var kernelAttempts = []string{
	"umount", "remount_proc_sys_rw", "mount_bind_root", "fsopen", "open_tree", "pivot_root",
	"unshare_cgroupns", "unshare_pidns", "unshare_timens", "unshare_userns_mountns", "clone_newuser",
	"setns_user", "setns_pid1_mnt", "setns_pid1_net",
	"keyctl_session", "add_key", "request_key",
	"bpf_map_create", "perf_event_open", "userfaultfd", "io_uring_setup",
	"kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at",
	"clock_settime", "settimeofday", "swapon", "swapoff", "reboot",
	"personality_no_aslr", "acct", "syslog_read", "iopl", "ioperm",
	"mknod_char_dev",
}

// refusedInside is what the sandbox must answer: EPERM (seccomp, or a
// missing capability), EACCES (Landlock, or ptrace access to /proc/1/ns).
var refusedInside = map[string]bool{"EPERM": true, "EACCES": true}

// TestKernelSurfaceRefused attempts the privileged system calls a container
// escape starts with — mounts, namespaces, keys, bpf, perf, userfaultfd,
// io_uring, kexec, modules, the shocker attack (open_by_handle_at with a
// handle of the host's /), the clock, swap, reboot, ASLR off, process
// accounting, the kernel log, I/O ports, a device node — under each seccomp
// policy that confines. The control: the same probe on the host, as root,
// gets past the permission check (a harmless EINVAL, ENOENT, a success, or
// ENOSYS where this kernel lacks the call), so a refusal inside is the
// sandbox's doing, not a broken probe.
func TestKernelSurfaceRefused(t *testing.T) {
	gate(t)
	t.Parallel()
	handle := hostRootHandle(t)
	scratch := t.TempDir()
	args := append([]string{handle, scratch}, kernelAttempts...)
	out, err := exec.Command(python, append([]string{"-c", syscallsProbe, "host"}, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "probe-done") {
		t.Fatalf("the probe fails on the host: %v\n%s", err, out)
	}
	onHost := probeResults(string(out))
	for _, name := range kernelAttempts {
		if e := onHost[name]; e == "" || refusedInside[e] || strings.HasPrefix(e, "EXCEPTION") {
			t.Errorf("control: %s on the host as root: %q, want it past the permission check (the inside refusal would prove nothing)", name, e)
		}
	}
	if onHost["open_by_handle_at"] != "ok" {
		t.Errorf("control: open_by_handle_at with the host's / handle fails on the host: %q", onHost["open_by_handle_at"])
	}
	for _, policy := range []string{"default", "strict"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			r := tineRun(t, append([]string{"--seccomp", policy, "--", python, "-c", syscallsProbe, "inside", handle, "/tmp"}, kernelAttempts[2:]...)...)
			got := probeResults(r.Stdout)
			if !strings.Contains(r.Stdout, "probe-start 2\n") || !strings.Contains(r.Stdout, "probe-done") {
				t.Fatalf("the probe did not run to its end as the sandbox's PID 2:\n%s", r)
			}
			for _, name := range kernelAttempts[2:] {
				if !refusedInside[got[name]] {
					t.Errorf("%s inside (--seccomp %s): %q, want EPERM or EACCES (on the host: %s)", name, policy, got[name], onHost[name])
				}
			}
		})
	}
	// umount and remount need the sandbox's own mounts as targets; they run
	// apart so that a success cannot disturb the other attempts.
	r := tineRun(t, "--", python, "-c", syscallsProbe, "inside", handle, "/tmp", "umount", "remount_proc_sys_rw")
	got := probeResults(r.Stdout)
	for _, name := range kernelAttempts[:2] {
		if !refusedInside[got[name]] {
			t.Errorf("%s inside: %q, want EPERM (on the host: %s)\n%s", name, got[name], onHost[name], r)
		}
	}
}

// hostRootHandle returns, hex-encoded as struct file_handle, the handle of
// the host's / that the shocker attack would hand open_by_handle_at.
func hostRootHandle(t *testing.T) string {
	t.Helper()
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	if err != nil {
		t.Fatalf("name_to_handle_at(/) on the host: %v", err)
	}
	raw := binary.LittleEndian.AppendUint32(nil, uint32(h.Size()))
	raw = binary.LittleEndian.AppendUint32(raw, uint32(h.Type()))
	return hex.EncodeToString(append(raw, h.Bytes()...))
}

// probeResults maps the probe's "name ret errno" lines to the errno name.
func probeResults(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			m[f[0]] = f[2]
		}
	}
	return m
}
