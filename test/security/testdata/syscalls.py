# Attempts privileged system calls, one per forked child so that one that
# succeeds (a namespace joined, a persona set) cannot change the next, and
# prints one "name ret errno-name" line each.
#
# argv: "host" or "inside", a hex file handle of the host's / (for
# open_by_handle_at), a scratch directory that exists where the probe runs,
# then the names of the attempts to make. Each attempt has a host form and
# an inside form: the host form is made by the test on the host as its
# negative control and is chosen to stop harmlessly past the kernel's
# permission check (EINVAL, ENOENT, EBADF, or a harmless success); the
# inside form is the real attempt.
import ctypes, errno, os, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

where, handle_hex, scratch = sys.argv[1], sys.argv[2], sys.argv[3].encode()
names = sys.argv[4:]
host = where == "host"


def arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return a


def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    return r, (ctypes.get_errno() if r < 0 else 0)


def buf(n):
    return ctypes.create_string_buffer(n)


CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP = 0x80, 0x20000, 0x02000000
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER = 0x04000000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET, SIGCHLD = 0x20000000, 0x40000000, 17
MS_BIND, MS_REMOUNT, MS_REC, MNT_DETACH = 0x1000, 0x20, 0x4000, 2
AT_FDCWD = -100
NOFS = b"tine-no-such-fs"
MISSING = b"/tine-no-such-path/x"


def open_by_handle():
    raw = bytes.fromhex(handle_hex)
    mount_fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    return sc(304, mount_fd, ctypes.create_string_buffer(raw, len(raw)), os.O_RDONLY)


def setns(path, nstype):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:  # the namespace file itself is refused
        return -1, e.errno
    return sc(308, fd, nstype)


def clone_newuser():
    r, e = sc(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        r = 0
    return r, e


def tv_bad():
    return struct.pack("qq", 0, -1)  # tv_nsec/usec -1: EINVAL once permitted


def mknod_null():
    # A character device (1,3, /dev/null's) made outside /dev: refused, or
    # made where nodev keeps it from opening.
    path = scratch + b"/tine-null"
    r = sc(133, path, 0o20600, os.makedev(1, 3))
    if r[0] == 0:
        try:
            fd = os.open(path, os.O_RDONLY)
            os.close(fd)
            r = (0, 0)
        except OSError as e:
            r = (-1, e.errno)
        os.unlink(path)
    return r


# name -> (host form, inside form); each returns (ret, errno).
ATTEMPTS = {
    "umount": (lambda: sc(166, scratch, 0), lambda: sc(166, b"/proc/sys", MNT_DETACH)),
    "remount_proc_sys_rw": (
        lambda: sc(165, b"none", scratch, NOFS, 0, 0),
        lambda: sc(165, 0, b"/proc/sys", 0, MS_REMOUNT | MS_BIND, 0)),
    "mount_bind_root": (
        lambda: sc(165, b"none", scratch, NOFS, 0, 0),
        lambda: sc(165, b"/", scratch, 0, MS_BIND | MS_REC, 0)),
    "fsopen": (lambda: sc(430, NOFS, 0), lambda: sc(430, b"tmpfs", 0)),
    "open_tree": (lambda: sc(428, AT_FDCWD, b"/", 0x80000000), lambda: sc(428, AT_FDCWD, b"/", 1)),
    "pivot_root": (lambda: sc(155, MISSING, MISSING), lambda: sc(155, b".", b".")),
    "unshare_cgroupns": (lambda: sc(272, CLONE_NEWCGROUP), lambda: sc(272, CLONE_NEWCGROUP)),
    "unshare_pidns": (lambda: sc(272, CLONE_NEWPID), lambda: sc(272, CLONE_NEWPID)),
    "unshare_timens": (lambda: sc(272, CLONE_NEWTIME), lambda: sc(272, CLONE_NEWTIME)),
    "unshare_userns_mountns": (lambda: sc(272, CLONE_NEWUSER | CLONE_NEWNS), lambda: sc(272, CLONE_NEWUSER | CLONE_NEWNS)),
    "clone_newuser": (clone_newuser, clone_newuser),
    "setns_user": (lambda: setns("/proc/self/ns/user", CLONE_NEWUSER), lambda: setns("/proc/self/ns/user", CLONE_NEWUSER)),
    "setns_pid1_mnt": (lambda: setns("/proc/%d/ns/mnt" % os.getppid(), CLONE_NEWNS), lambda: setns("/proc/1/ns/mnt", CLONE_NEWNS)),
    "setns_pid1_net": (lambda: setns("/proc/%d/ns/net" % os.getppid(), CLONE_NEWNET), lambda: setns("/proc/1/ns/net", CLONE_NEWNET)),
    "keyctl_session": (lambda: sc(250, 0, -3, 0), lambda: sc(250, 0, -3, 0)),
    "add_key": (lambda: sc(248, b"user", b"tine", b"x", 1, -2), lambda: sc(248, b"user", b"tine", b"x", 1, -2)),
    "request_key": (lambda: sc(249, b"user", b"tine-none", 0, 0), lambda: sc(249, b"user", b"tine-none", 0, 0)),
    "bpf_map_create": (lambda: sc(321, 0, buf(128), 128), lambda: sc(321, 0, buf(128), 128)),
    "perf_event_open": (lambda: sc(298, buf(128), 0, -1, -1, 1 << 31), lambda: sc(298, buf(128), 0, -1, -1, 0)),
    "userfaultfd": (lambda: sc(323, 0xffff), lambda: sc(323, 0)),
    "io_uring_setup": (lambda: sc(425, 0, 0), lambda: sc(425, 1, buf(120))),
    "kexec_file_load": (lambda: sc(320, -1, -1, 0, 0, 0xdead0000), lambda: sc(320, -1, -1, 0, 0, 0)),
    "init_module": (lambda: sc(175, 0, 0, b""), lambda: sc(175, 0, 0, b"")),
    "finit_module": (lambda: sc(313, -1, b"", 0), lambda: sc(313, -1, b"", 0)),
    "delete_module": (lambda: sc(176, b"tine_no_such_module", 0), lambda: sc(176, b"tine_no_such_module", 0)),
    "open_by_handle_at": (open_by_handle, open_by_handle),
    "clock_settime": (lambda: sc(227, 0, tv_bad()), lambda: sc(227, 0, tv_bad())),
    "settimeofday": (lambda: sc(164, tv_bad(), 0), lambda: sc(164, tv_bad(), 0)),
    "swapon": (lambda: sc(167, MISSING, 0), lambda: sc(167, MISSING, 0)),
    "swapoff": (lambda: sc(168, MISSING), lambda: sc(168, MISSING)),
    # Inside: the real magic numbers with LINUX_REBOOT_CMD_CAD_OFF, which
    # changes nothing that matters should a broken wall let it through.
    "reboot": (lambda: sc(169, 0, 0, 0, 0), lambda: sc(169, 0xfee1dead, 672274793, 0, 0)),
    "personality_no_aslr": (lambda: sc(135, 0x0040000), lambda: sc(135, 0x0040000)),
    "acct": (lambda: sc(163, MISSING), lambda: sc(163, MISSING)),
    "syslog_read": (lambda: sc(103, 3, buf(64), 64), lambda: sc(103, 3, buf(64), 64)),
    "iopl": (lambda: sc(172, 3), lambda: sc(172, 3)),
    "ioperm": (lambda: sc(173, 0x80, 1, 1), lambda: sc(173, 0x80, 1, 1)),
    "mknod_char_dev": (mknod_null, mknod_null),
}

print("probe-start", os.getpid(), flush=True)
for name in names:
    host_form, inside_form = ATTEMPTS[name]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ret, err = (host_form if host else inside_form)()
            line = "%s %d %s" % (name, ret, errno.errorcode.get(err, "ok") if err else "ok")
        except Exception as ex:  # a probe bug must show, not pass as a refusal
            line = "%s -1 EXCEPTION:%s" % (name, type(ex).__name__)
        os.write(w, line.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    print(out.decode() or "%s -1 NO-ANSWER" % name, flush=True)
print("probe-done", flush=True)
