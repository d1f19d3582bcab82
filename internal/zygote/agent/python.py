# tine's Python zygote agent, embedded in the tine binary and launched by
# the daemon inside a zygote sandbox. It imports the function's modules
# once, then forks one child per request. Each child walls itself in
# (its own mount, IPC and network namespaces with a private /tmp, /dev/shm
# and /dev/pts, Landlock, capabilities, seccomp), admits itself into its
# request's cgroup, runs the handler (a pool script; or spawns a
# runtime-exec command and waits for it), replies and exits. The fork, the
# walls and even the cgroup do not depend on the request, so the daemon
# arms spares: it hands the zygote a request cgroup ahead, and the zygote
# forks a child that walls itself in and joins that cgroup, and hands the
# daemon that child's socket: the daemon sends a request for that cgroup
# straight to its spare (the zygote is not woken), and to the zygote for a
# fresh fork (which joins the cgroup itself) when there is none.
# Protocol (fd 0, a SOCK_SEQPACKET socket to the daemon):
#   daemon -> agent: one config message (JSON, with the spares socket as
#     its descriptor), then requests and arms. A request: a JSON header
#     with descriptors [reply, payload, stdout, stderr, (a pool script's
#     source, then its compiled code or a pipe for it), cgroup...]. An
#     arm: "arm ID" with descriptors [cgroup...].
#   agent -> daemon: one ready message (JSON), then nothing; on the spares
#     socket, "armed ID" with the spare's socket (sent by the spare itself,
#     before it drops the spares socket), or "unarmed ID" when no spare
#     could be forked. Each child writes its reply (8-byte length,
#     JSON) to its reply pipe; a spare gets its request as an 8-byte send
#     time and the request's header and descriptors.
# Standard library only: this runs on whatever Python the root has.
import ctypes
import importlib.util
import json
import marshal
import os
import select
import _signal
import _socket
import signal
import socket
import struct
import sys
import time
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
CAP_SYS_ADMIN = 21
MAX_HEADER = 1 << 16
MAX_FDS = 16

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))
    return r


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def fds_of(anc):
    # The descriptors an SCM_RIGHTS message carried.
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack("%di" % (len(data) // 4), data[:len(data) - len(data) % 4])
    return fds


def error_of(exc):
    # The agent's own frames (its source is "<string>") are not the
    # user's business: the traceback starts at the user's code.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != "<string>"]
    tb = "".join(traceback.format_list(frames))
    if tb:
        tb = "Traceback (most recent call last):\n" + tb
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else (frames[-1].lineno if frames else None)
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": tb + "".join(traceback.format_exception_only(type(exc), exc)),
        "line": line,
    }


class Agent:
    def __init__(self, cfg):
        self.cfg = cfg
        self.handler = None
        walls = cfg.get("walls") or {}
        self.walls = walls
        # Prepared once, so a request only makes system calls.
        filt = bytes(__import__("base64").b64decode(walls.get("seccomp") or ""))
        self.filter_buf = ctypes.create_string_buffer(filt, len(filt)) if filt else None
        self.filter_len = len(filt) // 8
        ll = walls.get("landlock")
        self.ll_attr = None
        if ll:
            a = __import__("base64").b64decode(ll["attr"])
            self.ll_attr = ctypes.create_string_buffer(a, len(a))
            self.ll_rules = [(r["path"], r["rights"]) for r in ll.get("rules") or []]
        self.keep = walls.get("keep_caps", 0)
        # This architecture's numbers, from the daemon.
        nr = walls.get("syscalls") or {}
        self.sys_capset = nr.get("capset")
        self.sys_seccomp = nr.get("seccomp")
        self.sys_ll_create = nr.get("landlock_create_ruleset")
        self.sys_ll_add = nr.get("landlock_add_rule")
        self.sys_ll_restrict = nr.get("landlock_restrict_self")
        self.drop = walls.get("drop_caps") or []
        self.tmp_opts = ("mode=1777,size=%d" % cfg.get("tmp_bytes", 64 << 20)).encode()
        self.cap_hdr = CapHeader(0x20080522, 0)
        self.cap_data = (CapData * 2)()
        for i in range(2):
            v = (self.keep >> (32 * i)) & 0xFFFFFFFF
            self.cap_data[i].effective = self.cap_data[i].permitted = self.cap_data[i].inheritable = v
        if self.filter_buf is not None:
            self.fprog = SockFprog(self.filter_len, ctypes.cast(self.filter_buf, ctypes.c_void_p))
        # Every C function a request calls is looked up here: a lookup in
        # the child would build its function object there, on pages the
        # child then copies.
        self.c_unshare, self.c_mount, self.c_syscall, self.c_prctl = libc.unshare, libc.mount, libc.syscall, libc.prctl
        self.c_socket, self.c_ioctl, self.c_close = libc.socket, libc.ioctl, libc.close
        # A spare's own socket pair, made with libc's call into this array:
        # _socket.socketpair and the two socket objects it makes cost ≈ 13
        # more copied pages per spare (minor faults counted in a child).
        self.c_socketpair, self.pair = libc.socketpair, (ctypes.c_int * 2)()
        self.unix, self.seqpacket = int(socket.AF_UNIX), int(socket.SOCK_SEQPACKET)
        self.pair_type = self.seqpacket | int(socket.SOCK_CLOEXEC)
        self.has_shm = os.path.isdir("/dev/shm")
        self.has_pts = os.path.isdir("/dev/pts")
        # A request's own namespaces: mounts (its /tmp, /dev/shm, /dev/pts),
        # SysV IPC and POSIX message queues (gone with its last process,
        # segments and all), and the network (a loopback of its own, so
        # concurrent requests cannot reach each other's listeners).
        self.unshare_flags = CLONE_NEWNS | CLONE_NEWIPC
        if cfg.get("network", "isolated") == "isolated":
            self.unshare_flags |= CLONE_NEWNET
        # Its loopback is brought up with libc's calls on this prepared
        # request: a Python socket object and fcntl.ioctl cost ≈ 33 more
        # copied pages per request (minor faults counted in the child).
        # (A struct ifreq is 40 bytes, all of which the kernel reads.)
        self.lo_up = ctypes.create_string_buffer(struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING), 40)
        self.inet, self.dgram, self.siocsifflags = int(socket.AF_INET), int(socket.SOCK_DGRAM | socket.SOCK_CLOEXEC), SIOCSIFFLAGS
        self.pts_opts = b"newinstance,ptmxmode=0666,mode=0620"
        self.flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV)
        self.noexec = ctypes.c_ulong(MS_NOSUID | MS_NOEXEC)
        self.ll_size = ctypes.c_size_t(len(self.ll_attr)) if self.ll_attr is not None else None
        self.cap_ref = ctypes.byref(self.cap_hdr)
        self.fprog_ref = ctypes.byref(self.fprog) if self.filter_buf is not None else None
        # A runtime-exec command's environment: the zygote's, which is the
        # sandbox's default, without the LC_CTYPE Python set when it coerced
        # the C locale at start (PEP 538; nothing else sets it here).
        self.command_env = dict(os.environ)
        if self.command_env.get("LC_CTYPE") in ("C.UTF-8", "C.utf8", "UTF-8"):
            del self.command_env["LC_CTYPE"]
        self.arms = []  # (group ID, cgroup descriptors) to fork spares for, oldest first
        self.armed = None  # the spares socket to the daemon
        self.armed_fd = -1  # its descriptor, which a child closes by number
        self.strict = json.JSONEncoder()  # a result JSON cannot encode is the handler's error
        self.lenient = json.JSONEncoder(default=repr)

    def warm(self, ctl_fd, armed_fd):
        self.enter_userns()
        for m in self.cfg.get("preload") or []:
            __import__(m)
        entry = self.cfg.get("entry")
        if entry:
            d = os.path.dirname(entry)
            if d not in sys.path:
                sys.path.insert(0, d)
            spec = importlib.util.spec_from_file_location("__tine_entry__", entry)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["__tine_entry__"] = mod
            spec.loader.exec_module(mod)
            name = self.cfg.get("handler") or "handler"
            h = getattr(mod, name, None)
            if h is None:
                raise LookupError("%s has no function %r (the spec's handler)" % (entry, name))
            if not callable(h):
                raise TypeError("%s: %r is not callable" % (entry, name))
            self.handler = h
        # Fork only a single-threaded process with no sockets of its own:
        # a copied thread or connection breaks in the child.
        # Counted by the kernel: a C library's threads (BLAS pools) too.
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError("the entry or a preloaded module started %d threads; a zygote forks only single-threaded (start threads inside the handler)" % (threads - 1))
        for fd in os.listdir("/proc/self/fd"):
            fd = int(fd)
            if fd > 2 and fd != ctl_fd and fd != armed_fd and fd not in [f for f, _ in self.ll_open]:
                try:
                    if os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                        raise RuntimeError("the entry or a preloaded module left a socket open (fd %d); open connections inside the handler" % fd)
                except FileNotFoundError:
                    pass

    def rehearse(self):
        # What every request runs in Python, run here first: the
        # interpreter specialises code as it runs it (writing to the code
        # objects) and caches lookups; done in the zygote, that happens on
        # pages the requests then share instead of copying.
        for _ in range(64):
            hdr = json.loads(b'{"script":"","raw":false}')
            hdr.get("cache"), hdr.get("exec"), hdr.get("script"), hdr.get("raw")
            json.loads(b'{"n": 1}')
            json.loads(b"null")
            self.strict.encode({"n": [1, "x", 1.5, None, True]})
            self.lenient.encode({"type": "E", "message": "", "traceback": "", "line": None})
            '"t":{"fork":%d,"start":%d,"admitted":%d,"isolated":%d,"ran":%d}}' % (1, 2, 3, 4, 5)
            struct.pack("=Q", 1)
            struct.pack("i", 1)
            struct.unpack_from("=q", b"\0" * 8)
        # struct caches a compiled format per string; a format first seen
        # in a request is compiled and added to that cache there, on
        # copied pages: every descriptor count a message can carry.
        for n in range(1, MAX_FDS + 1):
            fds_of([(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"\0" * (4 * n))])
        # The interpreter caches attribute lookups on types (the methods
        # and descriptors of an instance's or a module's type) in one
        # table; a lookup the zygote never made is a miss in every request,
        # which writes its entry: a copied page of that table each. The
        # names the request's own path looks up, on the objects it looks
        # them up on, are looked up here once.
        for fn in (Agent.spare, Agent.isolate, Agent.wall_in, Agent.child, Agent.join):
            for name in fn.__code__.co_names:
                for obj in (self, os, sys, time, json, struct, _signal, socket):
                    getattr(obj, name, None)

    # --- the child ---

    def enter_userns(self):
        # Not dumpable (inherited by every request): no process of the
        # sandbox without CAP_SYS_PTRACE can ptrace the zygote or a
        # request, or read their memory through /proc.
        check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "make the zygote undumpable")
        # The zygote's own user namespace, made once: a request then needs
        # only a mount namespace of its own (CAP_SYS_ADMIN here covers that
        # and nothing owned by the host), and every mount it inherits is
        # locked. Uid and gid 0 map to the sandbox's own 0.
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare user and mount namespace")
        for name, data in (("uid_map", b"0 0 1"), ("setgroups", b"deny"), ("gid_map", b"0 0 1")):
            fd = os.open("/proc/self/" + name, os.O_WRONLY)
            os.write(fd, data)
            os.close(fd)
        # Landlock rules are on inodes: open their paths once, except those
        # under /tmp, which each request replaces.
        self.ll_open = []
        self.ll_late = []
        for path, rights in getattr(self, "ll_rules", []):
            if path in ("/tmp", "/dev/shm") or path.startswith("/tmp/"):
                self.ll_late.append((path, rights))
                continue
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            self.ll_open.append((fd, struct.pack("=Qi", rights, fd)))
        # Capabilities: the bounding set loses now what no request keeps,
        # so a request drops only CAP_SYS_ADMIN (its /tmp mount's) itself.
        for c in self.drop:
            if c != CAP_SYS_ADMIN:
                libc.prctl(PR_CAPBSET_DROP, c, 0, 0, 0)  # EINVAL: unknown to this kernel

    def isolate(self):
        # A session of its own: the zygote's group kill and a sibling's
        # kill(0) are not for it, nor its for them.
        os.setsid()
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        self.wall_in()

    def wall_in(self):
        # Only calls of functions and objects prepared in the zygote: what
        # a request touches of the zygote's memory, it copies.
        sysc = self.c_syscall
        check(self.c_unshare(self.unshare_flags), "unshare mount, ipc and network namespaces")
        if self.unshare_flags & CLONE_NEWNET:
            s = check(self.c_socket(self.inet, self.dgram, 0), "socket to bring the loopback up")
            try:
                check(self.c_ioctl(s, self.siocsifflags, self.lo_up), "bring the loopback up")
            finally:
                self.c_close(s)
        check(self.c_mount(b"tmpfs", b"/tmp", b"tmpfs", self.flags, self.tmp_opts), "mount private /tmp")
        if self.has_shm:
            check(self.c_mount(b"tmpfs", b"/dev/shm", b"tmpfs", self.flags, self.tmp_opts), "mount private /dev/shm")
        if self.has_pts:
            # Its own pseudo-terminals: in the sandbox's devpts, any request
            # could open another's /dev/pts/N and read what it wrote there.
            check(self.c_mount(b"devpts", b"/dev/pts", b"devpts", self.noexec, self.pts_opts), "mount private /dev/pts")
        if self.ll_attr is not None:
            rs = check(sysc(self.sys_ll_create, self.ll_attr, self.ll_size, 0), "landlock ruleset")
            for _, attr in self.ll_open:
                check(sysc(self.sys_ll_add, rs, 1, attr, 0), "landlock rule")
            for path, rights in self.ll_late:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                check(sysc(self.sys_ll_add, rs, 1, struct.pack("=Qi", rights, fd), 0), "landlock rule " + path)
            check(sysc(self.sys_ll_restrict, rs, 0), "landlock restrict")
        if CAP_SYS_ADMIN in self.drop:
            check(self.c_prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0), "drop CAP_SYS_ADMIN")
        check(sysc(self.sys_capset, self.cap_ref, self.cap_data), "set capabilities")
        if self.fprog_ref is not None:
            check(sysc(self.sys_seccomp, 1, 0, self.fprog_ref), "load seccomp filter")

    def child(self, msg, fds, t_fork, walled, admitted=False):
        # walled: None when this child walls itself in here; True when a
        # spare did it ahead; the exception when that failed. admitted: a
        # spare already in the request's cgroup.
        t_start = time.monotonic_ns()
        reply, payload, out, err, cgroups = fds[0], fds[1], fds[2], fds[3], fds[4:]
        try:
            hdr = json.loads(msg)
        except ValueError:
            os._exit(72)  # not from the daemon: nothing to answer
        src = cache = None
        if hdr.get("script"):  # its source, then its code or a pipe for it
            src, cgroups = cgroups[0], cgroups[1:]
            if hdr.get("pyc") or hdr.get("cache"):
                cache, cgroups = cgroups[0], cgroups[1:]
        if not admitted:
            self.join(cgroups)
        t_admit = time.monotonic_ns()
        t = [t_fork, t_start, t_admit, 0, 0]
        result = error = b64 = ended = None
        try:
            if walled is None:
                self.isolate()
            elif walled is not True:
                raise walled
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.dup2(reply, 3)
            os.dup2(payload, 4, inheritable=False)
            keep = 5
            if src is not None:
                os.dup2(src, keep, inheritable=False)
                src, keep = keep, keep + 1
            if cache is not None:
                os.dup2(cache, keep, inheritable=False)
                cache, keep = keep, keep + 1
            os.closerange(keep, 1 << 20)
            reply, payload = 3, 4
            if hdr.get("exec"):
                # A pre-started worker of another runtime (node): walled in
                # like a request, it becomes the program, which reads its
                # payload from stdin when the request comes.
                os.dup2(payload, 0)
                os.set_inheritable(3, True)
                os.close(payload)
                argv = hdr["exec"]
                os.execvp(argv[0], argv)
            os.set_inheritable(reply, False)
            if hdr.get("spawn"):
                os.dup2(payload, 0)
                os.close(payload)
                t[3] = time.monotonic_ns()
                ended = self.spawn(hdr["spawn"])
            else:
                # random's own fork hook has reseeded its global generator in
                # this process (os.fork runs it); numpy's has no such hook.
                np = sys.modules.get("numpy")
                if np is not None:
                    np.random.seed()
                body = b""
                while True:
                    chunk = os.read(payload, 1 << 20)
                    if not chunk:
                        break
                    body += chunk
                os.close(payload)
                t[3] = time.monotonic_ns()
                handler = self.handler
                if hdr.get("script"):
                    handler = self.load_script(hdr["script"], src, cache, hdr.get("pyc"))
                event = body if hdr.get("raw") else json.loads(body or b"null")
                value = handler(event)
                if hasattr(value, "__await__"):
                    import asyncio

                    async def wait():
                        return await value
                    value = asyncio.run(wait())
                if isinstance(value, (bytes, bytearray, memoryview)):
                    b64 = __import__("base64").b64encode(bytes(value)).decode()
                else:
                    result = self.strict.encode(value)  # a TypeError here is the handler's error
        except BaseException as e:  # SystemExit too: the handler may not end the child
            error = e
        t[4] = time.monotonic_ns()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        # Its output ends here, not when the process has finished exiting:
        # the daemon has it all as soon as the reply arrives.
        null = os.open("/dev/null", os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        times = '"t":{"fork":%d,"start":%d,"admitted":%d,"isolated":%d,"ran":%d}}' % tuple(t)
        if ended is not None:
            b = ended + times
        elif error is None and result is not None:
            b = '{"status":"ok","result":' + result + "," + times
        elif error is None:
            b = '{"status":"ok","result_base64":"' + b64 + '",' + times
        else:
            try:
                b = '{"status":"error","error":' + self.lenient.encode(error_of(error)) + "," + times
            except Exception as e:
                b = '{"status":"error","error":' + self.lenient.encode(error_of(e)) + "," + times
        b = b.encode()
        view = memoryview(struct.pack("=Q", len(b)) + b)
        while view:
            view = view[os.write(reply, view):]
        os._exit(0)

    def join(self, cgroups):
        # Moves this process into its request's cgroup (one per v1
        # hierarchy): a process may always move itself, with the files the
        # daemon opened (v1: `tasks`, which moves the writing thread; a
        # forked child has only the one).
        try:
            for fd in cgroups:
                os.write(fd, b"0")
        except OSError:
            os._exit(70)  # the request was cancelled and its cgroup removed

    def spawn(self, argv):
        # A runtime-exec request: its command runs as a process of its own
        # inside this child's walls and cgroup (stdin the payload, stdout
        # the result); the answer is how it ended. Python ignores SIGPIPE
        # and SIGXFSZ, which the command must not inherit.
        try:
            pid = os.posix_spawnp(argv[0], argv, self.command_env, setsigmask=(),
                                  setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD))
        except OSError as e:
            os.write(2, ("%s: %s\n" % (argv[0], e.strerror)).encode())
            code = 127 if isinstance(e, FileNotFoundError) else 126
            return self.exited(argv[0], code, 0)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        if os.WIFSIGNALED(status):
            return self.exited(argv[0], 128 + os.WTERMSIG(status), os.WTERMSIG(status))
        return self.exited(argv[0], os.WEXITSTATUS(status), 0)

    def exited(self, name, code, sig):
        if sig:
            e = {"type": "Crashed", "message": "%s was killed by signal %d" % (name, sig)}
            return '{"status":"crashed","exit_code":%d,"signal":%d,"error":%s,' % (code, sig, self.lenient.encode(e))
        if code:
            e = {"type": "ExitStatus", "message": "%s exited with code %d" % (name, code)}
            return '{"status":"error","exit_code":%d,"error":%s,' % (code, self.lenient.encode(e))
        return '{"status":"ok","exit_code":0,'

    def load_script(self, digest, src, cache, pyc):
        # The daemon hands this child its script's descriptors, and nothing
        # of the other scripts: src, the source, and cache, either the
        # stored compiled code (pyc) or a pipe for it. A child that had to
        # compile hands the code over *before* any of the script runs, so
        # no script can forge another's cached code.
        code = None
        if pyc:
            with os.fdopen(cache, "rb") as f:
                data = f.read()
            cache = None
            try:
                if data[:len(importlib.util.MAGIC_NUMBER)] == importlib.util.MAGIC_NUMBER:
                    code = marshal.loads(data[len(importlib.util.MAGIC_NUMBER):])
            except (ValueError, EOFError, TypeError):
                code = None
        with os.fdopen(src, "rb") as f:
            text = f.read() if code is None else None
        if code is None:
            code = compile(text, "script " + digest[:12], "exec")
            if cache is not None:
                try:
                    view = memoryview(importlib.util.MAGIC_NUMBER + marshal.dumps(code))
                    while view:
                        view = view[os.write(cache, view):]
                except OSError:
                    pass
        if cache is not None:
            os.close(cache)
        ns = {"__name__": "__tine_script__"}
        exec(code, ns)
        name = self.cfg.get("handler") or "handler"
        h = ns.get(name)
        if not callable(h):
            raise LookupError("script %s defines no function %r" % (digest[:12], name))
        return h

    def serve(self, ctl):
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
        # The loop between two forks runs in the zygote, whose every page a
        # fork write-protects: the less it touches, the fewer faults. The
        # child parses its own header.
        self.ctl_fd = ctl_fd = ctl.fileno()
        recvmsg = ctl.recvmsg
        space = socket.CMSG_SPACE(MAX_FDS * 4)
        fork = os.fork
        close = os.close
        now = time.monotonic_ns
        self.pid = os.getpid()
        out, err = sys.stdout, sys.stderr
        # Flushed once here, and after the loop's own error messages, so
        # no fork copies buffered output into a child (no user code runs
        # in the zygote from here on).
        out.flush()
        err.flush()
        arms = self.arms
        # A request that waits goes first: spares are forked only while
        # none does (a fork is a millisecond of the zygote's time here).
        waiting = select.poll()
        waiting.register(ctl_fd, select.POLLIN)
        while True:
            while arms and not waiting.poll(0):
                self.add_spare(*arms.pop(0))
            try:
                msg, anc, _, _ = recvmsg(MAX_HEADER, space)
            except InterruptedError:
                continue
            if not msg:
                os._exit(0)  # the daemon closed the socket
            t_recv = now()
            fds = fds_of(anc)
            if msg[:4] == b"arm ":
                arms.append((msg[4:], fds))
                continue
            try:
                pid = fork()
            except Exception as e:
                # One request lost (pids.max reached, a bad message), not
                # the zygote: the daemon sees the request's pipes close.
                err.write("tine zygote: request not started: %r\n" % (e,))
                err.flush()
                pid = -1
            if pid == 0:
                try:
                    close(ctl_fd)  # ctl is never used (nor finalized) here again
                    self.drop_others()
                    self.child(msg, fds, t_recv, None)
                finally:
                    os._exit(71)
            for fd in fds:
                close(fd)

    def drop_others(self):
        # In a child: the spares socket (a request holding it could offer
        # the daemon a socket of its own as a spare, and be handed the next
        # request) and the cgroups armed for other spares are not its
        # business.
        # (By number: the socket object's close is Python code, ≈ 12 copied
        # pages; the object, left behind, is never used or finalized here.)
        if self.armed_fd >= 0:
            self.c_close(self.armed_fd)
        for _, gfds in self.arms:
            for fd in gfds:
                os.close(fd)

    def add_spare(self, group, cgroups):
        # The zygote only forks: the spare makes its own socket and offers
        # it to the daemon itself. Each fork write-protects every page of
        # the zygote again, and each page its loop writes before the next
        # fork is a copy (the spares share them): a socket pair, its
        # Python objects and the offer's message, made here, were ≈ 30 of
        # the zygote's ≈ 80 copied pages per request.
        try:
            pid = os.fork()
        except Exception as e:
            pid, err = -1, e
        if pid == 0:
            try:
                self.spare(group, cgroups)
            finally:
                os._exit(71)
        for fd in cgroups:
            os.close(fd)
        if pid < 0:
            # The daemon gives the group back; its next request is forked.
            sys.stderr.write("tine zygote: no spare child: %r\n" % (err,))
            sys.stderr.flush()
            try:
                self.armed.send(b"unarmed " + group)
            except OSError:
                pass

    def spare(self, group, cgroups):
        # Dies with the zygote while it waits (nothing of a request runs
        # yet); the zygote's death is not a request's once it has one. Its
        # request comes from the daemon.
        self.c_prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL
        if os.getppid() != self.pid:
            os._exit(0)
        # The daemon's control socket: only the zygote takes requests there.
        os.close(self.ctl_fd)
        # Its own socket, one end offered to the daemon on the spares
        # socket, and that end closed here: its only peer is the daemon.
        # Then the spares socket goes too, before anything of a request
        # runs (a request holding it could offer a socket of its own as a
        # spare, and be handed the next request).
        pair = self.pair
        if self.c_socketpair(self.unix, self.pair_type, 0, pair) < 0:
            sys.stderr.write("tine zygote: no spare socket: %s\n" % os.strerror(ctypes.get_errno()))
            try:
                self.armed.send(b"unarmed " + group)  # the daemon gives the group back
            except OSError:
                pass
            os._exit(0)
        mine, theirs = pair[0], pair[1]
        try:
            self.armed.sendmsg([b"armed " + group], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", theirs))])
        except OSError:
            os._exit(0)  # the daemon is gone
        self.c_close(theirs)
        self.drop_others()
        walled = True
        try:
            self.isolate()
        except BaseException as e:
            walled = e  # reported as the request's error, once there is one
        # Into the request's cgroup now, while nothing waits for it (on v1
        # a move of this, the only, thread through `tasks`, which does not
        # wait for the kernel's lock; a cgroup.procs move after a quiet
        # spell would wait for an RCU grace period). What the spare charged
        # while walling in stays the function's.
        self.join(cgroups)
        for fd in cgroups:
            os.close(fd)
        try:
            sock = _socket.socket(self.unix, self.seqpacket, 0, mine)
            msg, anc, _, _ = sock.recvmsg(MAX_HEADER + 8, socket.CMSG_SPACE(MAX_FDS * 4))
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the zygote is gone
        self.c_prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
        sock.close()
        self.child(msg[8:], fds_of(anc), struct.unpack_from("=q", msg)[0], walled, admitted=True)


# threading's at-fork hook, for the zygote's own children: Python runs
# threading._after_fork in every child os.fork makes, to reset the state of
# the threads the fork did not copy. The zygote has only one thread (warm
# checks), and between two forks runs none of threading's code, so in its
# children that state is already right, and the hook's work (a WeakSet
# walked, locks and sets made: ≈ 115 pages of the zygote copied, counted in
# a python3 with the same imports, 239-248 → 128-129 faults per bare
# child) is for nothing. The registered function keeps its place and gets
# a code that returns at once in a child of the zygote (the flag is set in
# the zygote and cleared in the child, so a request's own forks run the
# original in full), and runs the original otherwise. Python 3.11 only,
# whose _after_fork this was read against.
LEAN_AFTER_FORK = """
def _after_fork():
    global _tine_lean_fork
    if _tine_lean_fork and len(_active) == 1 and not _limbo and get_ident() in _active:
        _tine_lean_fork = False
        return
    _tine_lean_fork = False
    _tine_full_after_fork()
"""


def lean_thread_fork_hook():
    threading = sys.modules.get("threading")
    if sys.version_info[:2] != (3, 11) or threading is None:
        return
    full = getattr(threading, "_after_fork", None)
    if full is None or full.__closure__ is not None or full.__code__.co_argcount:
        return
    g = threading.__dict__
    g["_tine_full_after_fork"] = type(full)(full.__code__, g, "_after_fork")
    g["_tine_lean_fork"] = True
    ns = {}
    exec(compile(LEAN_AFTER_FORK, "<tine agent>", "exec"), g, ns)
    full.__code__ = ns["_after_fork"].__code__


# random's at-fork hook, fast: every child os.fork makes runs
# random._inst.seed() (fresh random state per request, which it needs).
# Random.seed is Python code that checks its argument's type and calls
# super().seed; with no argument (version 2) on a plain Random that is the
# C generator's seed from the OS's entropy and gauss_next reset, which the
# code below does directly: ≈ 18 fewer copied pages per child (counted in
# a python3 with the benchmark's 16 imports, 131 → 113 faults per bare
# child), the same state for every caller. Anything else (an argument, a
# subclass, whose super() may not be the C generator) runs the original.
# Python 3.11 only, whose Random.seed this was read against.
LEAN_SEED = """
def _tine_make():
    __class__ = None
    def seed(self, a=None, version=2):
        if a is None and version == 2 and type(self) is Random:
            _tine_c_seed(self, None)
            self.gauss_next = None
            return
        return _tine_full_seed(self, a, version)
        __class__  # the original's one free variable (super()'s), kept
    return seed
"""


def lean_random_seed():
    random = sys.modules.get("random")
    if sys.version_info[:2] != (3, 11) or random is None:
        return
    full = getattr(getattr(random, "Random", None), "seed", None)
    c_seed = getattr(getattr(random, "_random", None), "Random", None)
    if full is None or c_seed is None or full.__code__.co_freevars != ("__class__",) or full.__defaults__ != (None, 2):
        return
    g = random.__dict__
    g["_tine_full_seed"] = type(full)(full.__code__, g, "seed", full.__defaults__, full.__closure__)
    g["_tine_c_seed"] = c_seed.seed
    ns = {}
    exec(compile(LEAN_SEED, "<tine agent>", "exec"), g, ns)
    full.__code__ = ns["_tine_make"]().__code__
    for _ in range(8):  # specialised here, on a generator of its own
        random.Random().seed()


def main():
    # The socket arrives as stdin; stdin becomes /dev/null.
    ctl = socket.socket(fileno=os.dup(0))
    ctl.set_inheritable(False)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    msg, anc, _, _ = ctl.recvmsg(MAX_HEADER, socket.CMSG_SPACE(4))
    cfg = json.loads(msg)
    t0 = time.monotonic()
    # The daemon's, for the dynamic linker of this process only (it bound
    # the zygote's functions at start); nothing the function starts gets it.
    os.environ.pop("LD_BIND_NOW", None)
    try:
        agent = Agent(cfg)
        armed = fds_of(anc)
        if armed:
            agent.armed = socket.socket(fileno=armed[0])
            agent.armed.set_inheritable(False)
            agent.armed_fd = armed[0]
        agent.warm(ctl.fileno(), agent.armed.fileno() if agent.armed else -1)
    except BaseException as e:
        ctl.send(json.dumps({"ok": False, "error": error_of(e)}).encode())
        os._exit(1)
    lean_thread_fork_hook()
    lean_random_seed()
    # Everything imported so far is moved out of the collector's sight: a
    # child's collections then do not touch (and copy) the zygote's pages.
    agent.rehearse()
    import gc
    gc.collect()
    gc.freeze()
    ctl.send(json.dumps({"ok": True, "pid": os.getpid(), "warm_ms": (time.monotonic() - t0) * 1e3}).encode())
    agent.serve(ctl)


main()
