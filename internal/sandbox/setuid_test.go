package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
)

// With Setuid a set-user-ID program run by an unprivileged user becomes
// the sandbox's root, and only that: the sandbox's capabilities, seccomp
// still on. The same program in a default sandbox (no_new_privs, nosuid)
// stays the user — the control that the bit is what made the difference —
// and a set-user-ID copy in /tmp (nosuid) stays the user in both. A file
// capability outside the sandbox's bounding set grants nothing in either.
func TestSetuidProgramsBecomeTheSandboxsRoot(t *testing.T) {
	require.Root(t)
	require.Binary(t, "setpriv")
	const script = `set -e
cp /bin/cat /usr/local/bin/tine-scat && chmod 4755 /usr/local/bin/tine-scat
cp /bin/cat /tmp/tine-scat && chmod 4755 /tmp/tine-scat
nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
nobody /usr/local/bin/tine-scat /proc/self/status | grep -E '^(Uid|CapEff|Seccomp|NoNewPrivs):'
echo tmp; nobody /tmp/tine-scat /proc/self/status | grep -E '^Uid:'
python3 -c 'import os, shutil, struct
p = "/usr/local/bin/tine-pycap"
shutil.copy("/usr/bin/python3", p)
os.setxattr(p, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 21, 0, 0, 0))'
echo fcap; nobody /usr/local/bin/tine-pycap -c 'print("CapEff:", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])' || echo "CapEff: refused"
`
	run := func(setuid bool) map[string]string {
		sb, err := Create(&Spec{Seccomp: seccomp.Default, Setuid: setuid})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy()
		parse := func(out string) map[string]string {
			m := map[string]string{}
			prefix := ""
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if l == "tmp" || l == "fcap" {
					prefix = l + " "
					continue
				}
				k, v, _ := strings.Cut(l, ":")
				m[prefix+k] = strings.Join(strings.Fields(v), " ")
			}
			return m
		}
		// Through PID 1 (Launch) and through a process that joins the
		// sandbox and walls itself (Exec): the same walls either way.
		out, o, err := launchOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", script}})
		if err != nil || o.ExitCode != 0 {
			t.Fatalf("setuid %v: %+v %v: %s", setuid, o, err, out)
		}
		out2, o2 := execOutput(t, sb, &ExecSpec{Args: []string{"/bin/sh", "-c", script}})
		if o2.ExitCode != 0 {
			t.Fatalf("setuid %v, exec: %+v: %s", setuid, o2, out2)
		}
		m, m2 := parse(out), parse(out2)
		if fmt.Sprint(m) != fmt.Sprint(m2) {
			t.Errorf("setuid %v: launched %v, exec'd %v", setuid, m, m2)
		}
		return m
	}
	on, off := run(true), run(false)
	// Uid: real, effective, saved, filesystem.
	if on["Uid"] != "65534 0 0 0" || on["CapEff"] != "00000000a80425fb" || on["Seccomp"] != "2" || on["NoNewPrivs"] != "0" {
		t.Errorf("setuid sandbox: %v, want effective uid 0 with the sandbox's capabilities and seccomp", on)
	}
	if on["tmp Uid"] != "65534 65534 65534 65534" {
		t.Errorf("setuid sandbox, /tmp: %v, want nosuid to hold there", on)
	}
	// A file capability beyond the bounding set (CAP_SYS_ADMIN) grants
	// nothing either way (the kernel refuses the exec, or drops it).
	for name, m := range map[string]map[string]string{"setuid": on, "default": off} {
		if c, err := strconv.ParseUint(m["fcap CapEff"], 16, 64); m["fcap CapEff"] != "refused" && (err != nil || c&(1<<21) != 0) {
			t.Errorf("%s sandbox: a file with CAP_SYS_ADMIN ran with CapEff %q", name, m["fcap CapEff"])
		}
	}
	t.Logf("setuid sandbox %v; default %v", on, off)
	if off["Uid"] != "65534 65534 65534 65534" || off["CapEff"] != "0000000000000000" || off["NoNewPrivs"] != "1" {
		t.Errorf("default sandbox: %v, want the set-user-ID bit ignored", off)
	}
}

// /dev's nodes are usable by a user other than root: mknod applies the
// umask, so their 0666 must be set after it (else /dev/null is 0644, and
// dbus-daemon, run as a desktop's session user, cannot open it).
func TestDeviceNodesForUnprivilegedUsers(t *testing.T) {
	require.Root(t)
	require.Binary(t, "setpriv")
	sb, err := Create(&Spec{Seccomp: seccomp.Default})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	out, o, err := launchOutput(t, sb, &ExecSpec{Args: []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
		"/bin/sh", "-c", "id -u; echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c"}})
	if err != nil || o.ExitCode != 0 || out != "65534\n4\n4\n" {
		t.Fatalf("as uid 65534: %+v %v: %q", o, err, out)
	}
}
