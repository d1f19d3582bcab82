package oci_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCRIEscapes makes a subset of test/security's escape attempts from
// inside a container a kubelet would start (CRI, the `tine` handler), as
// the container's root with Docker's default capabilities (CAP_MKNOD,
// CAP_SYS_CHROOT, CAP_KILL among them): each attempt prints that it ran
// (its tool exists and its negative control works) before it tries, and
// the host checks the effect.
func TestCRIEscapes(t *testing.T) {
	p := startCRIPod(t)
	// A host process to kill, and a host file to read.
	victim := exec.Command("sleep", "3600")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host-secret\n"), 0o644)

	script := fmt.Sprintf(`cg=/sys/fs/cgroup
for f in memory/memory.limit_in_bytes memory.max; do test -e $cg/$f && lim=$cg/$f; done
echo "ran cgroup-limit $(cat $lim)"
test -e $cg/memory/memory.memsw.limit_in_bytes && echo 2000000000 > $cg/memory/memory.memsw.limit_in_bytes
echo 2000000000 > $lim && echo ESCAPED raised its own memory limit
for f in pids/pids.max pids.max; do test -e $cg/$f && echo max > $cg/$f && echo ESCAPED lifted its pids limit; done
mount -o remount,rw $cg && echo ESCAPED remounted /sys/fs/cgroup writable
echo /tmp/agent > $cg/memory/release_agent && echo ESCAPED wrote a release_agent
mkdir -p /tmp/cg && echo ran cgroup-mount
mount -t cgroup -o memory cgroup /tmp/cg && echo ESCAPED mounted a cgroup hierarchy
unshare -U -r -m sh -c 'mount -t cgroup -o memory cgroup /tmp/cg && echo ESCAPED mounted a cgroup hierarchy in a user namespace'
echo "ran unshare: $(unshare -U -r id -u 2>&1)"
mkfifo /tmp/fifo && echo ran mknod-control
mknod /tmp/sda b 8 0 && echo ESCAPED made a block device
echo "mknod-error $(mknod /tmp/sdb b 8 16 2>&1)"
echo "ran knob $(cat /proc/sys/kernel/printk)"
v=$(cat /proc/sys/kernel/printk); echo "$v" > /proc/sys/kernel/printk && echo ESCAPED wrote a kernel knob
mount -t proc proc /tmp && echo ESCAPED mounted a proc
kill -0 $$ && echo ran kill-control
kill -9 %d && echo ESCAPED killed a host process
test -r /proc/self/root/bin/busybox && echo ran host-file
cat %s /proc/1/root%s && echo ESCAPED read a host file
nsenter -t 1 -m -n true && echo ran nsenter-own
nsenter --mount=/proc/1/ns/mnt --net=/proc/1/ns/net sh -c 'cat %s' && echo ESCAPED read a host file through nsenter
chroot /tmp true 2>/dev/null; echo ran chroot
echo escapes-done
exec sleep 3600`, victim.Process.Pid, secret, secret, secret)
	id := p.container("escapes", script, map[string]any{
		"resources":        map[string]any{"memory_limit_in_bytes": 64 << 20},
		"security_context": map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 1, "ipc": 0}},
	})
	out := p.logsUntil(id, "escapes-done")
	for _, ran := range []string{"ran cgroup-limit 67108864", "ran cgroup-mount", "ran unshare: ", "ran mknod-control", "ran knob ",
		"ran kill-control", "ran host-file", "ran chroot"} {
		if !strings.Contains(out, ran) {
			t.Errorf("the attempt did not run (%q missing), so its refusal proves nothing", ran)
		}
	}
	if strings.Contains(out, "ESCAPED") || strings.Contains(out, "host-secret") {
		t.Errorf("an escape attempt worked:\n%s", out)
	}
	// mknod of a block device, which CAP_MKNOD would allow, is refused
	// by Landlock (EACCES), not by a missing capability (EPERM).
	if m := lines(out)["mknod-error"]; !strings.Contains(m, "Permission denied") {
		t.Errorf("mknod of a block device: %q, want Landlock's EACCES", m)
	}
	if victim.Process.Signal(syscall.Signal(0)) != nil {
		t.Errorf("the host process %d was killed from the container", victim.Process.Pid)
	}
	if cg := memoryCgroup(p.cgRoot + "/" + id); cg != "" {
		for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
			if b, err := os.ReadFile(filepath.Join(cg, f)); err == nil && strings.TrimSpace(string(b)) != "67108864" {
				t.Errorf("the container's memory limit on the host is %s", b)
			}
		}
	} else {
		t.Errorf("no host cgroup for the container at %s", p.cgRoot+"/"+id)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("container output:\n%s", out)
	}
}
