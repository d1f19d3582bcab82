package security

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestKernelKnobsReadOnly writes the /proc and /sys files that reconfigure
// the host's kernel (a crash-dump helper run as host root, panics, the
// poweroff helper, ASLR, caches, overcommit, hugepages; this kernel has no
// /proc/sysrq-trigger). The control: each file exists inside (so a
// failing write is a refusal, not a missing path); the effect: the write
// fails inside and the host's value is unchanged.
func TestKernelKnobsReadOnly(t *testing.T) {
	gate(t)
	t.Parallel()
	knobs := []struct{ path, value string }{
		{"/proc/sys/kernel/core_pattern", "|/tmp/tine-core-helper"},
		{"/proc/sys/kernel/panic_on_oops", "1"},
		{"/proc/sys/kernel/poweroff_cmd", "/tmp/tine-poweroff"},
		{"/proc/sys/vm/overcommit_memory", "1"},
		{"/proc/sys/kernel/randomize_va_space", "0"},
		{"/proc/sys/vm/drop_caches", "3"},
		{"/proc/sys/fs/suid_dumpable", "2"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", "always"},
	}
	before := map[string]string{}
	var script strings.Builder
	var made []string
	for _, k := range knobs {
		if _, err := os.Stat(k.path); err != nil {
			t.Logf("this kernel has no %s: that attempt is not made", k.path)
			continue
		}
		made = append(made, k.path)
		b, _ := os.ReadFile(k.path) // sysrq-trigger is write-only: stays ""
		before[k.path] = string(b)
		fmt.Fprintf(&script, "test -e %[1]s && echo exists:%[1]s\n(echo %[2]s > %[1]s) 2>/dev/null && echo wrote:%[1]s\n", k.path, k.value)
	}
	r := sh(t, script.String()+"echo done")
	if !strings.Contains(r.Stdout, "done") {
		t.Fatalf("the probe did not run:\n%s", r)
	}
	if len(made) < len(knobs)/2 {
		t.Fatalf("control: only %v of the knobs exist on this host", made)
	}
	for _, k := range knobs {
		if _, ok := before[k.path]; !ok {
			continue
		}
		if !strings.Contains(r.Stdout, "exists:"+k.path+"\n") {
			t.Errorf("control: %s does not exist inside, its write proves nothing:\n%s", k.path, r)
		}
		if strings.Contains(r.Stdout, "wrote:"+k.path+"\n") {
			t.Errorf("writing %q to %s succeeded inside", k.value, k.path)
		}
		if b, _ := os.ReadFile(k.path); string(b) != before[k.path] {
			t.Errorf("the host's %s changed: %q -> %q", k.path, before[k.path], b)
		}
	}
}

// TestKernelInfoMasked reads what leaks kernel memory or other tenants'
// secrets: /proc/keys, /proc/timer_list, the kernel's symbol
// addresses, /sys/firmware. The control: on the host (as root) each shows
// something; inside it is absent, empty or zeroed. (/proc/kcore is
// masked too, but this kernel has none to show.)
func TestKernelInfoMasked(t *testing.T) {
	gate(t)
	t.Parallel()
	hostHas := func(what, script string) {
		out, err := hostSh(script)
		if err != nil || strings.TrimSpace(out) == "" || strings.TrimSpace(out) == "0" {
			t.Errorf("control: on the host %s shows nothing (%q, %v): its absence inside proves nothing", what, out, err)
		}
	}
	probes := []struct{ name, script string }{
		{"keys", "cat /proc/keys 2>/dev/null | wc -l"},
		{"timer_list", "cat /proc/timer_list 2>/dev/null | wc -l"},
		{"kallsyms", "grep -v '^0000000000000000 ' /proc/kallsyms 2>/dev/null | wc -l"},
		{"firmware", "ls -A /sys/firmware 2>/dev/null | wc -l"},
	}
	var script strings.Builder
	for _, p := range probes {
		control := p.script
		if p.name == "keys" { // a key of the probe's own, for the host to list
			control = `python3 -c 'import ctypes; ctypes.CDLL(None).syscall(248, b"user", b"tine", b"x", 1, -2); print(len(open("/proc/keys").read().splitlines()))'`
		}
		hostHas(p.name, control)
		fmt.Fprintf(&script, "echo %s $(%s)\n", p.name, p.script)
	}
	r := sh(t, script.String()+"echo done")
	got := lines(r.Stdout)
	if _, ok := got["done"]; !ok && !strings.Contains(r.Stdout, "done") {
		t.Fatalf("the probe did not run:\n%s", r)
	}
	for _, p := range probes {
		if got[p.name] != "0" {
			t.Errorf("%s inside: %q, want nothing (absent, empty or zeroed)", p.name, got[p.name])
		}
	}
}

// TestProcMagicLinks follows /proc's magic links out of the root: every
// pid's root and cwd (PID 1 among them) towards a host file that only
// exists outside, and PID 1's descriptors. The control: the host file
// exists, and the same link of the command's own process reaches a file
// the command made (so the links do work inside, within the sandbox).
func TestProcMagicLinks(t *testing.T) {
	gate(t)
	t.Parallel()
	dir, secret := hostDirWithSecret(t)
	r := sh(t, fmt.Sprintf(`echo inside > /tmp/own
cat /proc/self/root/tmp/own && echo self-root-works
cd /tmp && cat /proc/self/cwd/own && echo self-cwd-works
for p in /proc/[0-9]*; do
  for l in root cwd; do cat $p/$l%[1]s/secret 2>/dev/null; done
  for f in $p/fd/*; do cat $f/secret $f/%[1]s/secret $f/../../../../../..%[1]s/secret 2>/dev/null; done
done
readlink /proc/1/fd/* /proc/1/root /proc/1/cwd 2>/dev/null | sed 's/^/pid1-link: /' 
echo done`, dir))
	if !strings.Contains(r.Stdout, "self-root-works") || !strings.Contains(r.Stdout, "self-cwd-works") || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("control: /proc/self/root and cwd do not work inside, their refusal would prove nothing:\n%s", r)
	}
	if strings.Contains(r.Stdout, secret) {
		t.Errorf("a /proc magic link reached the host file %s/secret:\n%s", dir, r)
	}
	if strings.Contains(r.Stdout, "pid1-link:") {
		t.Errorf("the command can read the links of PID 1 (tine's supervisor), descriptors included:\n%s", r)
	}
}

// TestPid1Protected attacks the sandbox's PID 1, the tine process that
// reports the command's status to the host: its memory, its environment,
// its binary, its root, SIGKILL and SIGSTOP (other signals are forwarded to
// the command, by design). The control: PID 1 exists and answers kill -0, and
// the command's own /proc/self/mem opens for writing. The effect: every
// attempt fails, PID 1 survives, and the run ends with the command's code.
func TestPid1Protected(t *testing.T) {
	gate(t)
	t.Parallel()
	r := py(t, `import os, signal
print("alive", os.kill(1, 0) is None)
os.close(os.open("/proc/self/mem", os.O_RDWR)); print("self-mem ok")
for name, path, flags in (("mem", "/proc/1/mem", os.O_RDWR), ("environ", "/proc/1/environ", os.O_RDONLY),
                          ("exe", "/proc/1/exe", os.O_WRONLY), ("root", "/proc/1/root", os.O_RDONLY)):
    try:
        os.close(os.open(path, flags)); print(name, "opened")
    except OSError as e:
        print(name, e.strerror)
for sig in (signal.SIGSTOP, signal.SIGKILL):
    os.kill(1, sig)
os.kill(1, 0)
print("survived")
raise SystemExit(7)`)
	if !strings.Contains(r.Stdout, "alive True") || !strings.Contains(r.Stdout, "self-mem ok") {
		t.Fatalf("control: PID 1 is not there or /proc/self/mem does not open:\n%s", r)
	}
	if strings.Contains(r.Stdout, "opened") {
		t.Errorf("the command opened one of PID 1's /proc files:\n%s", r)
	}
	if !strings.Contains(r.Stdout, "survived") || r.Code != 7 {
		t.Errorf("after SIGSTOP and SIGKILL to PID 1, want the run to end with the command's exit 7:\n%s", r)
	}
}

// hostSh runs a shell script on the host and returns its stdout.
func hostSh(script string) (string, error) {
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	return string(out), err
}
