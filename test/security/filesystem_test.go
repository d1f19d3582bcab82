package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestChrootEscapes makes the two classic chroot breakouts (CAP_SYS_CHROOT
// is in the default set, so chroot itself works): chroot into a
// subdirectory keeping a descriptor of the old root, fchdir to it, climb
// and chroot "."; and chroot without changing directory, then climb. Both
// land on the sandbox's own root — pivot_root left nothing above it. The
// control: each chroot call succeeds, the climb reaches a file the sandbox
// made at its root, and the host file exists on the host.
func TestChrootEscapes(t *testing.T) {
	gate(t)
	t.Parallel()
	dir, secret := hostDirWithSecret(t)
	r := py(t, fmt.Sprintf(`import os
open("/sandbox-root-mark", "w").write("mine")
def attempt(name, keep_fd):
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0); return
    os.makedirs("/tmp/jail/" + name, exist_ok=True)
    fd = os.open("/", os.O_RDONLY)
    os.chroot("/tmp/jail/" + name); print(name, "chroot ok")
    if keep_fd:
        os.fchdir(fd)
    for _ in range(64):
        os.chdir("..")
    os.chroot("."); print(name, "chroot-dot ok")
    print(name, "at", "sandbox-root" if os.path.exists("/sandbox-root-mark") else "elsewhere")
    try:
        print(name, "HOST", open(%[1]q).read())
    except OSError as e:
        print(name, "host", e.strerror)
    os._exit(0)
attempt("fchdir", True)
attempt("cwd", False)
`, filepath.Join(dir, "secret")))
	for _, name := range []string{"fchdir", "cwd"} {
		for _, want := range []string{name + " chroot ok", name + " chroot-dot ok", name + " at sandbox-root"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("control: %q missing, the %s breakout did not run as intended:\n%s", want, name, r)
			}
		}
	}
	if strings.Contains(r.Stdout, secret) || strings.Contains(r.Stdout, "HOST") {
		t.Errorf("a chroot breakout reached the host file:\n%s", r)
	}
}

// TestOverlayXattrs sets the overlay's own extended attributes from inside:
// trusted.overlay.opaque on /etc (which would hide the lower layer),
// trusted.overlay.redirect and trusted.overlay.metacopy on files of the
// upper layer. The kernel keeps trusted.* for CAP_SYS_ADMIN, which the
// sandbox lacks. The control: the same call from the host sets a trusted.*
// attribute on a host file; a user.* attribute on /etc works inside (the
// call does reach the overlay); /etc still holds passwd after.
func TestOverlayXattrs(t *testing.T) {
	gate(t)
	t.Parallel()
	f := filepath.Join(t.TempDir(), "x")
	os.WriteFile(f, nil, 0o644)
	if err := unix.Setxattr(f, "trusted.tine-security", []byte("y"), 0); err != nil {
		t.Skipf("the host's temporary file system takes no trusted.* attributes: %v", err)
	}
	r := py(t, `import os
os.makedirs("/srv/upper", exist_ok=True); open("/srv/upper/f", "w").write("x")
for path, name, value in (("/etc", "user.tine", b"y"), ("/etc", "trusted.overlay.opaque", b"y"),
                          ("/srv/upper", "trusted.overlay.redirect", b"/root"),
                          ("/srv/upper/f", "trusted.overlay.metacopy", b""),
                          ("/srv/upper/f", "trusted.overlay.origin", b"\0")):
    try:
        os.setxattr(path, name, value); print(name, "set")
    except OSError as e:
        print(name, e.strerror)
print("passwd", os.path.exists("/etc/passwd"))`)
	if !strings.Contains(r.Stdout, "user.tine set") && !strings.Contains(r.Stdout, "user.tine Operation not supported") {
		t.Fatalf("control: the xattr probe did not run:\n%s", r)
	}
	for _, name := range []string{"opaque", "redirect", "metacopy", "origin"} {
		if strings.Contains(r.Stdout, "trusted.overlay."+name+" set") {
			t.Errorf("trusted.overlay.%s was set from inside:\n%s", name, r)
		}
	}
	if !strings.Contains(r.Stdout, "passwd True") {
		t.Errorf("/etc lost its lower layer inside:\n%s", r)
	}
}

// TestFileCapabilitiesGrantNothing gives a copy of python the file
// capability CAP_SYS_ADMIN (CAP_SETFCAP is in the default set, so the
// attribute is written) and runs it: no_new_privs and the nosuid mounts
// mean exec grants nothing. The control: the attribute reads back, the copy
// runs; the effect: its effective set lacks CAP_SYS_ADMIN.
func TestFileCapabilitiesGrantNothing(t *testing.T) {
	gate(t)
	t.Parallel()
	r := py(t, `import os, shutil, struct, subprocess
CAP_SYS_ADMIN = 21
for d in ("/usr/local/bin", "/tmp"):
    p = d + "/py-caps"
    shutil.copy("/usr/bin/python3", p)
    # vfs_cap_data revision 2, effective: permitted = CAP_SYS_ADMIN.
    os.setxattr(p, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << CAP_SYS_ADMIN, 0, 0, 0))
    print(d, "xattr", len(os.getxattr(p, "security.capability")))
    out = subprocess.run([p, "-c", "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])"],
                         capture_output=True, text=True).stdout.strip()
    print(d, "capeff", out, "sys_admin", bool(int(out, 16) & (1 << CAP_SYS_ADMIN)) if out else "none")`)
	for _, d := range []string{"/usr/local/bin", "/tmp"} {
		if !strings.Contains(r.Stdout, d+" xattr 20") || !strings.Contains(r.Stdout, d+" capeff ") {
			t.Fatalf("control: the file capability was not written or the copy did not run in %s:\n%s", d, r)
		}
		if !strings.Contains(r.Stdout, d+" capeff") || strings.Contains(r.Stdout, "sys_admin True") {
			t.Errorf("exec of a file with CAP_SYS_ADMIN in %s granted it:\n%s", d, r)
		}
	}
}
