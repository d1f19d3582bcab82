# tine's code-interpreter agent, embedded in the tine binary and launched
# by the daemon inside a sandbox (behind all of its walls) for each session.
# It runs cells one at a time in one namespace, so state persists between
# them, and reports them the way a Jupyter kernel does: the value of the
# last expression and display() calls as MIME bundles, open matplotlib
# figures as image/png, errors as {name, value, traceback}.
#
# Protocol, fd 0 (a stream socket to the daemon), frames of a 4-byte
# big-endian length and a JSON object:
#   daemon -> agent: {"op": "run", "code": ..., "env": {...}?} | {"op": "check_fork"} |
#                    {"op": "fork_target", "nfds": N} (sent with N
#                    descriptors, SCM_RIGHTS) ... then {"op": "fork", ...} |
#                    {"op": "fork_ahead", "nfds": 3} (with 3 descriptors);
#                    to a copy: {"op": "join", ...} or {"op": "join_early"}
#                    then {"op": "join"} (see become_copy)
#   agent -> daemon: {"type": "ready", "pid": N} once; per cell
#                    {"type": "result", ...} and {"type": "error", ...}
#                    as they happen, then {"type": "end", "count": N};
#                    {"type": "held", ...}; {"type": "forked", "count": N};
#                    {"type": "ahead", "pid": N, "value": why-not}.
# A copy forked ahead says {"type": "parked"} on its own socket, with a
# pidfd of itself, and waits there for its fork (see fork_ahead).
# A live fork (a forkable session only, see fork below): each fork_target
# is one child sandbox's descriptors; fork forks a copy per target, which
# joins that sandbox, walls itself in and says ready on its own socket.
# Cell output is not framed: fd 1 and 2 are pipes the daemon reads. Every
# frame carries how many bytes sys.stdout and sys.stderr had written when
# it was sent ("out", "err"), so the daemon, which reads pipes and socket
# in bulk, puts each frame back where it happened in the output. (What
# bypasses sys.stdout, a subprocess or os.write, is not counted: it may
# come after a frame that followed it.)
# SIGINT raises KeyboardInterrupt in a running cell and is ignored between
# cells. Standard library only: this runs on whatever Python the root has.
import ast
import builtins
import io
import json
import linecache
import os
import signal
import socket
import struct
import sys
import traceback
import types

MAX_FRAME = 64 << 20

# The methods an object may offer for a rich representation, by MIME type
# (IPython's display protocol). Looked up on the type, not the instance: an
# object whose __getattr__ answers everything offers nothing.
REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
BINARY = ("image/png", "image/jpeg")


class CountingWriter(io.RawIOBase):
    # fd 1 or 2, counting the bytes written (whole writes: TextIOWrapper
    # does not retry a short one).
    def __init__(self, fd):
        self.fd = fd
        self.n = 0

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def write(self, b):
        view = memoryview(b)
        total = len(view)
        while view:
            view = view[os.write(self.fd, view):]
        self.n += total
        return total


def counted_stream(fd, old):
    raw = CountingWriter(fd)
    return raw, io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)


def agent_frame(f):
    # This file runs as `python -c`, so its frames are "<string>".
    return f.filename == "<string>"


def error_of(exc):
    # The traceback starts at the user's code: the agent's frames are not
    # the user's business.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not agent_frame(f)]
    tb = ""
    if frames:
        tb = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
    return {
        "name": type(exc).__name__,
        "value": str(exc),
        "traceback": tb + "".join(traceback.format_exception_only(type(exc), exc)),
    }


class Agent:
    def __init__(self, ctl):
        self.ctl = ctl
        self.count = 0
        self.in_cell = False
        self.inbuf = b""
        self.fds_in = []  # descriptors received and not yet taken by a frame
        self.targets = []  # fork_target descriptor lists, until fork
        self.copies = []  # pids of the last fork's first copies, until reaped
        self.ahead = None  # pid of the copy forked ahead, parked (fork_ahead)
        self.out, sys.stdout = counted_stream(1, sys.stdout)
        self.err, sys.stderr = counted_stream(2, sys.stderr)
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        main.display = self.display
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        self.install_matplotlib_backend()

    # --- frames ---

    def send(self, obj):
        sys.stdout.flush()
        sys.stderr.flush()
        obj["out"], obj["err"] = self.out.n, self.err.n
        b = json.dumps(obj, default=repr).encode()
        self.ctl.sendall(struct.pack(">I", len(b)) + b)

    def recv(self):
        while len(self.inbuf) < 4 or len(self.inbuf) < 4 + struct.unpack_from(">I", self.inbuf)[0]:
            try:
                chunk, fds, _, _ = socket.recv_fds(self.ctl, 1 << 20, 64)
            except InterruptedError:
                continue
            self.fds_in += fds
            if not chunk:
                return None
            self.inbuf += chunk
            if len(self.inbuf) >= 4 and struct.unpack_from(">I", self.inbuf)[0] > MAX_FRAME:
                raise ValueError("frame too large")
        n = struct.unpack_from(">I", self.inbuf)[0]
        msg, self.inbuf = self.inbuf[4:4 + n], self.inbuf[4 + n:]
        return json.loads(msg)

    # --- display ---

    def bundle(self, obj):
        data = {"text/plain": repr(obj)}
        t = type(obj)
        mb = getattr(t, "_repr_mimebundle_", None)
        if mb is not None:
            got = mb(obj)
            if isinstance(got, tuple):
                got = got[0]
            if isinstance(got, dict):
                data.update(got)
        for mime, name in REPR_METHODS:
            m = getattr(t, name, None)
            if m is None or mime in data:
                continue
            try:
                v = m(obj)
            except Exception:
                continue  # a broken formatter costs its type, not the cell (as in IPython)
            if isinstance(v, tuple):  # (data, metadata)
                v = v[0]
            if v is not None:
                data[mime] = v
        if t.__module__ == "matplotlib.figure" and "image/png" not in data:
            data["image/png"] = self.figure_png(obj)
        for mime in BINARY:
            v = data.get(mime)
            if isinstance(v, (bytes, bytearray, memoryview)):
                data[mime] = __import__("base64").b64encode(bytes(v)).decode()
        for mime, v in list(data.items()):
            if isinstance(v, (bytes, bytearray)) and mime != "application/json":
                data[mime] = bytes(v).decode("utf-8", "replace")
        return data

    def display(self, *objs):
        """display(obj, ...) shows each object as a result of the cell."""
        for obj in objs:
            self.send({"type": "result", "data": self.bundle(obj), "main": False})

    def figure_png(self, fig):
        import io
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()

    def show_figures(self):
        # Figures shown (plt.show()) or left open at the end of a cell are
        # results, as in a notebook; shown ones are closed.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in plt.get_fignums():
            fig = plt.figure(num)
            self.send({"type": "result", "data": self.bundle(fig), "main": False})
        plt.close("all")

    def install_matplotlib_backend(self):
        # matplotlib's default here would be Agg, whose show() only warns.
        # This backend is Agg whose show() sends the open figures. It is
        # chosen when matplotlib is imported (an import hook sets its
        # rcParams), not through MPLBACKEND, which every process a cell
        # starts would inherit without the module; a user's MPLBACKEND wins.
        agent = self
        mod = types.ModuleType("tine_inline")

        def show(*args, **kwargs):
            agent.show_figures()

        def __getattr__(name):
            if name in ("FigureCanvas", "FigureManager"):
                from matplotlib.backends import backend_agg
                mod.FigureCanvas = backend_agg.FigureCanvasAgg
                mod.FigureManager = backend_agg.FigureManagerBase
                return getattr(mod, name)
            raise AttributeError(name)
        mod.show = show
        mod.__getattr__ = __getattr__
        sys.modules["tine_inline"] = mod

        class Hook:
            def find_spec(self, name, path, target=None):
                if name != "matplotlib":
                    return None
                sys.meta_path.remove(self)
                import importlib.util
                spec = importlib.util.find_spec(name)
                if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return spec
                load = spec.loader.exec_module

                def exec_module(module):
                    load(module)
                    if "MPLBACKEND" not in os.environ:
                        module.rcParams["backend"] = "module://tine_inline"
                spec.loader.exec_module = exec_module
                return spec
        sys.meta_path.insert(0, Hook())

    # --- cells ---

    def run(self, code):
        self.count += 1
        name = "<cell %d>" % self.count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            try:
                self.in_cell = True
                tree = ast.parse(code, name)
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, name, "exec"), self.ns)
                value = eval(compile(last, name, "eval"), self.ns) if last is not None else None
            finally:
                self.in_cell = False
            if value is not None:
                self.ns["_"] = value
                self.send({"type": "result", "data": self.bundle(value), "main": True})
            self.show_figures()
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: the cell ends, not the session
            self.in_cell = False
            try:
                self.show_figures()
            except Exception:
                pass
            self.send(dict(error_of(e), type="error"))
        self.send({"type": "end", "count": self.count})

    def set_env(self, env):
        # A cell's own variables, on top of the session's for that cell
        # only; the returned function puts back what was there.
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return restore

    # --- fork ---

    def fork(self, msg):
        # One copy per target (its control socket and pipes). The copies are
        # forked at once, and each waits on its own socket for the child
        # sandbox the daemon makes meanwhile ("join": its namespaces, its
        # cgroup, its walls); then it joins them, hops into the child's pid
        # namespace (the first copy exits; the child's PID 1 adopts the one
        # that goes on) and becomes the child's session. The parent walls
        # itself off from them, answers, and reaps the first copies at its
        # next request.
        targets, self.targets = self.targets, []
        ahead, self.ahead = self.ahead, None
        if not msg.get("ahead"):
            self.ahead = ahead
            self.drop_ahead()
            ahead = None
        files = reopenable()
        cwd = os.getcwd()
        hop = clone_vm_stub()
        walls_lib()
        sys.stdout.flush()
        sys.stderr.flush()
        pids, why = [], ""
        if msg.get("ahead") and ahead is None:
            why = "no copy was forked ahead"
            targets = []
        try:
            for i, fds in enumerate(targets):
                pid = os.fork()
                if pid == 0:
                    self.become_copy(fds, [f for t in targets for f in t if f not in fds], msg, files, cwd, hop)  # never returns
                pids.append(pid)
        except OSError as e:  # the pids limit, memory: the copies not made fail
            why = "fork copy %d of %d: %s" % (len(pids) + 1, len(targets), e)
        for fds in targets:
            for fd in fds:
                os.close(fd)
        # A Landlock layer the copies, forked already, are outside of: from
        # now on this interpreter cannot signal, ptrace or open the /proc
        # files of theirs (ADR 0013). A failure fails the fork (the daemon
        # then ends the copies).
        scope = msg.get("parent_scope")
        if scope and not why:
            try:
                restrict_to_scope(scope, msg.get("syscalls") or {})
            except OSError as e:
                why = "wall this session off from its copies: %s" % e
        # The copy forked ahead, if claimed, is one of them (its first
        # process exits once it has hopped, as theirs do).
        self.copies = pids + ([ahead] if ahead else [])
        self.send({"type": "forked", "count": len(self.copies), "value": why})

    def fork_ahead(self, fds, msg):
        # A copy of this interpreter forked while the session idles, for
        # the next live fork: the state cannot change without a cell, and
        # the daemon SIGKILLs the copy (and this process reaps it) before
        # the next cell, restart or interrupt, so the cell's writes copy
        # no pages for it. It parks on its own socket (fds: its control
        # socket and pipes) until a fork claims it with its join frame;
        # what a fork does per child (the scope layer of this process, the
        # reseed) happens then, not here.
        held = self.held()
        held["sockets"] = [fd for fd in held["sockets"] if fd not in fds]  # the copy's own
        if held["threads"] or held["sockets"] or held["children"] or held["shared"] or held["written"]:
            for fd in fds:
                os.close(fd)
            self.send({"type": "ahead", "pid": 0, "value": "it holds %r" % (held,)})
            return
        files = reopenable()
        cwd = os.getcwd()
        hop = clone_vm_stub()
        walls_lib()
        prctl = libc_prctl()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            self.send({"type": "ahead", "pid": 0, "value": "fork: %s" % e})
            return
        if pid == 0:
            self.become_parked(fds, msg, parent, prctl, files, cwd, hop)  # never returns
        for fd in fds:
            os.close(fd)
        self.ahead = pid
        self.send({"type": "ahead", "pid": pid, "value": ""})

    def drop_ahead(self):
        # The copy forked ahead, killed (again: the daemon does first) and
        # reaped: gone before the request that dropped it goes on.
        pid, self.ahead = self.ahead, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    def reap_copies(self):
        # The first copies exit once they have hopped into their children
        # (or at the end of their sockets): reaped at the next request, so
        # the fork does not wait for it. A cell's os.wait() may have been
        # first. The wait is bounded: a copy still there after
        # REAP_GRACE seconds is stuck (the daemon kills a failed fork's
        # copies), is sent SIGKILL, and is left if even that does not end
        # it, rather than hold the request that reaps it for ever.
        deadline = None
        for pid in self.copies:
            killed = False
            while True:
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    break
                import time
                now = time.monotonic()
                if deadline is None:
                    deadline = now + REAP_GRACE
                if now >= deadline:
                    if killed:
                        break
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                    killed, deadline = True, now + 1.0
                time.sleep(0.001)
        self.copies = []

    def become_parked(self, fds, msg, parent, prctl, files, cwd, hop):
        # A copy forked ahead: undumpable first (a process of the parent
        # could otherwise ptrace it before it is walled off), dead with
        # its parent, then it says parked, with a pidfd of itself the
        # daemon kills it through, and waits for its fork's join frame
        # (become_copy; the end of its socket: it was dropped).
        ctl = fds[0]
        try:
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(0)
            self.ctl = socket.socket(fileno=ctl)
            self.ctl.set_inheritable(False)
            self.inbuf, self.fds_in = b"", []
            self.ahead = None
            pfd = os.pidfd_open(os.getpid())
            b = json.dumps({"type": "parked", "pid": os.getpid()}).encode()
            socket.send_fds(self.ctl, [struct.pack(">I", len(b)) + b], [pfd])
            os.close(pfd)
        except BaseException as e:
            try:
                b = json.dumps({"type": "error", "name": type(e).__name__, "value": "park: %s" % e, "traceback": ""}).encode()
                os.write(ctl, struct.pack(">I", len(b)) + b)
            finally:
                os._exit(70)
        self.become_copy(fds, [], msg, files, cwd, hop, parked=True)

    def become_copy(self, fds, others, msg, files, cwd, hop, parked=False):
        ctl, out, err = fds
        readied = None  # the walls, when readied at an early join
        tidied = False  # the parent's descriptors closed, random reseeded
        try:
            for fd in others:
                os.close(fd)
            if not parked:
                self.ctl = socket.socket(fileno=ctl)
                self.ctl.set_inheritable(False)
                self.inbuf, self.fds_in = b"", []
            else:
                # Parked, it has time: what needs neither the child nor
                # its walls is done before a fork claims it.
                close_others(ctl, out, err, files)
                reseed()
                tidied = True
                self.rehearse()
            join = self.recv()
            if join is not None and join.get("op") == "join_early":
                # A spare's namespaces that are its for good, while it
                # completes: join them, hop, join the group; the mount and
                # cgroup namespaces and the walls come with the join.
                got, self.fds_in = self.fds_in, []
                types_ = join.get("types") or []
                ns, procs = got[:len(types_)], got[len(types_):]
                given = join.get("walls")
                early = ForkWalls(given or {"syscalls": join.get("syscalls")}, hop)
                for fd, (name, nstype) in zip(ns, types_):
                    early.setns(fd, nstype, name)
                early.hop()
                for fd in procs:
                    os.write(fd, b"0")
                for fd in ns + procs:
                    os.close(fd)
                if given:
                    # The child's walls came early: what of them and of
                    # the copy needs nothing of its root is done while
                    # it completes.
                    if not tidied:
                        close_others(ctl, out, err, files)
                        reseed()
                        tidied = True
                    early.ready()  # (after the close: its ruleset's descriptor stays)
                    readied = early
                join = self.recv()
                if join is None or join.get("op") != "join":
                    os._exit(0)  # the fork was given up
                got, self.fds_in = self.fds_in, []
                walls = readied or ForkWalls(join.get("walls") or {}, hop)
                for fd, (name, nstype) in zip(got, join.get("types") or []):
                    walls.setns(fd, nstype, name)
                for fd in got:
                    os.close(fd)
            else:
                if join is None or join.get("op") != "join":
                    os._exit(0)  # the fork was given up
                got, self.fds_in = self.fds_in, []
                nns = int(msg.get("nns", 7))
                types_ = msg.get("types") or []
                ns, procs = got[:nns], got[nns:]
                walls = ForkWalls(join.get("walls") or {}, hop)
                for fd, (name, nstype) in zip(ns, types_):
                    walls.setns(fd, nstype, name)
                walls.hop()
                # The grandchild: a process of the child sandbox's pid namespace.
                for fd in procs:
                    os.write(fd, b"0")
                for fd in ns + procs:
                    os.close(fd)
            walls.put_up()
            try:
                os.chdir(cwd)
            except OSError:
                os.chdir("/")
            os.dup2(out, 1)
            os.dup2(err, 2)
            lost = []
            for fd, path, flags, cloexec, pos in files:
                try:
                    nfd = os.open(path, flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC))
                except OSError:
                    lost.append(fd)
                    continue
                os.dup2(nfd, fd, inheritable=not cloexec)
                os.close(nfd)
                if pos is not None:
                    try:
                        os.lseek(fd, pos, os.SEEK_SET)
                    except OSError:
                        pass
            for fd in lost:
                try:
                    os.close(fd)  # the parent's, which the child cannot have
                except OSError:
                    pass
            if not tidied:
                close_others(ctl, out, err, files)
            os.close(out)
            os.close(err)
            self.out.n = self.err.n = 0
            self.copies = []
            if not tidied:
                reseed()
            self.forked_lost = lost
        except BaseException as e:
            try:
                b = json.dumps({"type": "error", "name": type(e).__name__, "value": "fork: %s" % e, "traceback": ""}).encode()
                os.write(ctl, struct.pack(">I", len(b)) + b)
            finally:
                os._exit(70)
        try:
            self.serve()
        finally:
            os._exit(0)

    def rehearse(self):
        # A parked copy goes once through a cell's path, on nothing of the
        # user's and sending nothing: the pages that path writes (reference
        # counts of the compiler's, the encoder's and the protocol's
        # objects) are copied now rather than at the child's first cell.
        try:
            json.loads(json.dumps({"op": "run", "code": "1 + 1"}))
            name = "<rehearsal>"
            tree = ast.parse("1 + 1", name)
            value = eval(compile(ast.Expression(tree.body.pop().value), name, "eval"), {})
            b = json.dumps({"type": "result", "data": self.bundle(value), "main": True}).encode()
            struct.pack(">I", len(b))
            json.dumps({"type": "end", "count": self.count})
        except Exception:
            pass

    def held(self):
        # What a forked copy of this process cannot carry: threads (only
        # the forking one survives), sockets (the connection stays the
        # parent's), child processes (they stay the parent's).
        threads = len(os.listdir("/proc/self/task")) - 1
        sockets = []
        for fd in os.listdir("/proc/self/fd"):
            fd = int(fd)
            if fd == self.ctl.fileno():
                continue
            try:
                if os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                    sockets.append(fd)
            except OSError:
                pass
        me = str(os.getpid())
        children = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % p, "rb") as f:
                    st = f.read()
            except OSError:
                continue
            if st[st.rindex(b")") + 2:].split()[1].decode() == me and int(p) != self.ahead:
                children.append(int(p))  # (the copy forked ahead is the fork's own)
        shared, written = mappings()
        return {"threads": threads, "sockets": sockets, "children": children, "shared": shared, "written": written}

    def serve(self):
        self.send({"type": "ready", "pid": os.getpid(), "lost": getattr(self, "forked_lost", [])})
        while True:
            try:
                msg = self.recv()
            except KeyboardInterrupt:
                continue  # an interrupt that came too late for its cell
            if msg is None:
                return
            if self.copies:
                self.reap_copies()
            op = msg.get("op")
            if op in ("run", "fork_ahead"):
                self.drop_ahead()  # (the daemon killed it already)
            if op == "run":
                restore = self.set_env(msg.get("env") or {})
                try:
                    self.run(msg.get("code", ""))
                finally:
                    restore()
            elif op == "check_fork":
                self.send(dict(self.held(), type="held"))
            elif op == "fork_target":
                n = int(msg.get("nfds", 0))
                self.targets.append(self.fds_in[:n])
                self.fds_in = self.fds_in[n:]
            elif op == "fork":
                self.fork(msg)
            elif op == "fork_ahead":
                n = int(msg.get("nfds", 0))
                fds, self.fds_in = self.fds_in[:n], self.fds_in[n:]
                self.fork_ahead(fds, msg)
            else:
                self.send({"type": "error", "name": "ProtocolError", "value": "unknown op %r" % (op,), "traceback": ""})


# --- live fork (a forkable session's interpreter only) ---

# How long the next request waits for a fork's first copies to end.
REAP_GRACE = 5.0

# Where the sandbox keeps files in memory of its own: a file there can
# change under a read-only shared mapping of it.
WRITABLE_TMPFS = ("/tmp/", "/dev/shm/", "/run/")


def mappings():
    # The mappings a forked copy would keep sharing with the parent (and
    # its siblings), channels between sandboxes. Shared: every writable
    # one (mmap.mmap(-1, n), /dev/shm, memfd) and the read-only ones of
    # files the sandbox can write in place. Written: private mappings of
    # such files, whose pages not yet written show the file as the parent
    # goes on writing it. Mappings of the base are harmless (glibc maps
    # its gconv cache shared), and a file of the base written is copied
    # up, a new inode the mapping does not see.
    shared, written = [], []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 5:
                continue
            path = parts[5].strip() if len(parts) > 5 else ""
            where = "%s %s" % (parts[0], path or "[anonymous]")
            if parts[1][3] == "s":
                if "w" in parts[1] or not path.startswith("/") or path.endswith(" (deleted)") or path.startswith(WRITABLE_TMPFS):
                    shared.append(where)
            elif path.startswith(WRITABLE_TMPFS):
                written.append(where)
    return shared, written


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24

_prctl = []


def libc_prctl():
    # libc's prctl, looked up once, in the parent (a copy only calls it).
    if not _prctl:
        import ctypes
        _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
    return _prctl[0]


def reopenable():
    # The descriptors a copy re-opens by path in its own sandbox (same
    # flags and offset): files, directories and devices. Pipes, sockets and
    # anonymous inodes are not carried: they would stay shared with the
    # parent.
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in (1, 2):
            continue
        try:
            path = os.readlink("/proc/self/fd/%d" % fd)
            if not path.startswith("/") or path.endswith(" (deleted)"):
                continue
            flags = fcntl_getfl(fd)
            cloexec = not os.get_inheritable(fd)
        except OSError:
            continue
        try:
            pos = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            pos = None
        out.append((fd, path, flags, cloexec, pos))
    return out


def fcntl_getfl(fd):
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_GETFL)


class ForkWalls:
    # The walls of an exec in the child sandbox (sandbox.ForkWalls), made
    # ready before the copy joins, so that it then only makes system calls.
    def __init__(self, w, clone_vm):
        import base64
        ctypes, lib = walls_lib()
        self.ctypes = ctypes
        self.syscall, self.prctl = lib.syscall, lib.prctl
        SockFprog, CapHeader, CapData = lib.SockFprog, lib.CapHeader, lib.CapData
        nr = w.get("syscalls") or {}
        self.nr = nr
        filt = base64.b64decode(w.get("seccomp") or "")
        self.filter_buf = ctypes.create_string_buffer(filt, len(filt)) if filt else None
        if self.filter_buf is not None:
            self.fprog = SockFprog(len(filt) // 8, ctypes.cast(self.filter_buf, ctypes.c_void_p))
        self.cap_hdr = CapHeader(0x20080522, 0)
        self.cap_data = (CapData * 2)()
        keep = w.get("keep_caps", 0)
        for i in range(2):
            v = (keep >> (32 * i)) & 0xFFFFFFFF
            self.cap_data[i].effective = self.cap_data[i].permitted = self.cap_data[i].inheritable = v
        self.drop = w.get("drop_caps") or []
        self.clone_vm = clone_vm
        ll = w.get("landlock")
        self.ll_attr = None
        if ll:
            a = base64.b64decode(ll["attr"])
            self.ll_attr = ctypes.create_string_buffer(a, len(a))
            self.ll_size = ctypes.c_size_t(len(a))
            self.ll_rules = [(r["path"], r["rights"]) for r in ll.get("rules") or []]

    def check(self, r, what):
        if r < 0:
            e = self.ctypes.get_errno()
            raise OSError(e, "%s: %s" % (what, os.strerror(e)))
        return r

    def setns(self, fd, nstype, what):
        self.check(self.syscall(self.nr["setns"], fd, nstype), "join the child's %s namespace" % what)

    def hop(self):
        # Into the child's pid namespace: the caller's children are born
        # there, so the process that goes on must be a new one, and this one
        # exits. A fork would copy the page tables of the whole interpreter
        # again; on x86-64 a clone with CLONE_VM shares them instead (the
        # child goes on in this address space, on this stack, which the
        # caller leaves untouched: it only makes exit_group, signals
        # blocked), so the copy owns them alone once this one is gone.
        # The one that goes on leaves the parent interpreter's session and
        # process group: the daemon kills the parent's group with it
        # (a timeout, a restart, its delete), and the copy is no longer its.
        if self.clone_vm is None:
            if os.fork() != 0:
                os._exit(0)
            os.setsid()
            return
        import signal
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        r = self.clone_vm(0x100 | 17)  # CLONE_VM, SIGCHLD to the parent
        if r < 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            raise OSError(-r, "clone into the child's pid namespace: %s" % os.strerror(-r))
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.setsid()

    def ready(self):
        # What of the walls needs nothing of the child's root, done before
        # it is joined: the bounding set's drops (this process's own
        # capabilities, which its joins need, stay as they are; Landlock
        # needs only no_new_privs, the parent's already) and the ruleset.
        self.drop_bounding()
        if self.ll_attr is not None:
            self.ruleset = self.check(self.syscall(self.nr["landlock_create_ruleset"], self.ll_attr, self.ll_size, 0), "landlock ruleset")

    def drop_bounding(self):
        for cap in self.drop:
            self.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL: unknown to this kernel
        self.drop = []

    def put_up(self):
        # In an exec's order: Landlock, the bounding set, capabilities,
        # seccomp (each later step would forbid an earlier one); no_new_privs
        # is the parent's already. ready may have done part.
        sysc, c = self.syscall, self.ctypes
        if self.ll_attr is not None:
            rs = getattr(self, "ruleset", None)
            if rs is None:
                rs = self.check(sysc(self.nr["landlock_create_ruleset"], self.ll_attr, self.ll_size, 0), "landlock ruleset")
            for path, rights in self.ll_rules:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
                except OSError:
                    continue  # gone, or a symlink: that grants less, never more
                attr = struct.pack("=Qi", rights, fd)
                self.check(sysc(self.nr["landlock_add_rule"], rs, 1, attr, 0), "landlock rule " + path)
                os.close(fd)
            self.check(sysc(self.nr["landlock_restrict_self"], rs, 0), "landlock restrict")
            os.close(rs)
        self.drop_bounding()
        self.check(sysc(self.nr["capset"], c.byref(self.cap_hdr), self.cap_data), "set capabilities")
        # Joining a user namespace gave this process capabilities, which
        # made it undumpable; an exec's command is dumpable.
        self.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        if self.filter_buf is not None:
            self.check(sysc(self.nr["seccomp"], 1, 0, c.byref(self.fprog)), "load seccomp filter")


# clone(flags, 0, 0, 0, 0) on the caller's stack; the parent (rax > 0)
# exits at once without touching memory, the child returns 0, an error
# returns -errno. x86-64 System V: flags arrive in rdi.
_CLONE_VM_X86_64 = bytes.fromhex(
    "4831f6" "4831d2" "4d31d2" "4d31c0"  # newsp, parent_tid, child_tid, tls = 0
    "b838000000" "0f05"                  # clone
    "4885c0" "7f01" "c3"                 # parent? else return
    "31ff" "b8e7000000" "0f05")          # exit_group(0)


_walls_lib = []


def walls_lib():
    # ForkWalls' C functions and structures, made once per interpreter, in
    # the parent before it forks: a copy joining its child only uses them
    # (made there, they were 0.4-3 ms of each copy's join, on the fork's
    # path).
    if not _walls_lib:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        lib = types.SimpleNamespace(syscall=libc.syscall, prctl=libc.prctl)
        lib.syscall.restype = ctypes.c_long

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        class CapHeader(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class CapData(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
        lib.SockFprog, lib.CapHeader, lib.CapData = SockFprog, CapHeader, CapData
        _walls_lib.append((ctypes, lib))
    return _walls_lib[0]


_clone_vm = []


def clone_vm_stub():
    # Made once per interpreter, in the parent, so a copy only calls it.
    if _clone_vm:
        return _clone_vm[0]
    import ctypes
    import mmap
    import platform
    _clone_vm.append(None)
    if platform.machine() != "x86_64":
        return None
    try:
        # Private: a shared page would stay shared with every copy, a
        # channel between them (and code the parent could change under
        # them).
        m = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):
        return None
    m.write(_CLONE_VM_X86_64)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    fn = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_ulong)(addr)
    fn.keep = m
    _clone_vm[0] = fn
    return fn


def restrict_to_scope(attr_b64, nr):
    # A Landlock layer that handles no access and scopes signals
    # (sandbox.ForkParentScope).
    import base64
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    a = base64.b64decode(attr_b64)
    attr = ctypes.create_string_buffer(a, len(a))
    rs = libc.syscall(nr["landlock_create_ruleset"], attr, ctypes.c_size_t(len(a)), 0)
    if rs < 0:
        e = ctypes.get_errno()
        raise OSError(e, "landlock ruleset: %s" % os.strerror(e))
    try:
        if libc.syscall(nr["landlock_restrict_self"], rs, 0) < 0:
            e = ctypes.get_errno()
            raise OSError(e, "landlock restrict: %s" % os.strerror(e))
    finally:
        os.close(rs)


def close_others(ctl, out, err, files):
    # A copy keeps its standard streams, its control socket, its new
    # output pipes and the descriptors of the parent's open files (each
    # re-opened by path in the child); the rest was the parent's.
    keep = {0, 1, 2, ctl, out, err}
    keep.update(f[0] for f in files)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor


def reseed():
    # A copy's draws must not repeat its siblings': random, numpy's global
    # generator when loaded, and the agent's own ids (none today).
    r = sys.modules.get("random")
    if r is not None:
        r.seed()
    npr = sys.modules.get("numpy.random")
    if npr is not None:
        try:
            npr.seed()
        except Exception:
            pass


def main():
    # The socket arrives as stdin; stdin becomes /dev/null (a cell reading
    # input() gets EOFError rather than the protocol).
    ctl = socket.socket(fileno=os.dup(0))
    ctl.set_inheritable(False)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    agent = Agent(ctl)

    def interrupt(sig, frame):
        if agent.in_cell:
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupt)
    agent.serve()


main()
