"""The synchronous client: :class:`Client`, over the daemon's unix socket
(HTTP/1.1 through :mod:`http.client` with an ``AF_UNIX`` connect) or TCP,
reusing kept-alive connections from a small pool (safe across threads)."""

from __future__ import annotations

import builtins
import http.client
import socket
import ssl
import threading
import time
from collections import deque
from typing import IO, Any, Iterator, Mapping, Sequence, TypeVar

from . import _aci, screencast
from . import frames as _frames
from . import _ops as ops
from . import _stream
from . import _ws as ws
from . import session as _session
from . import models as m
from .errors import TransportError, error_from_response

T = TypeVar("T")

_CHUNK = 64 << 10


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket: only :meth:`connect` differs."""

    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("tine", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class _Pool:
    """Idle kept-alive connections to one endpoint; a request takes one
    (or makes one) and gives it back when its answer was read to the end."""

    def __init__(self, ep: ops.Endpoint, timeout: float | None, max_idle: int = 8) -> None:
        self._ep, self._timeout, self._max_idle = ep, timeout, max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def get(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        ep = self._ep
        if ep.socket:
            return _UnixHTTPConnection(ep.socket, self._timeout), False
        if ep.tls:
            return http.client.HTTPSConnection(ep.host or "", ep.port, timeout=self._timeout,
                                               context=ssl.create_default_context()), False
        return http.client.HTTPConnection(ep.host or "", ep.port, timeout=self._timeout), False

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


# A reused connection the daemon closed while it was idle fails like this
# before any answer arrives; the request is sent again on a new one.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class ExecStream:
    """A command running in a sandbox with its stdio on a WebSocket: the
    sync twin of :class:`tine.aio.ExecStream` (same protocol, in
    :mod:`tine._stream`). Iterate it for ``(fd, data)`` output chunks (1
    stdout, 2 stderr) until the command ended; then :attr:`exit` says how.
    :meth:`communicate` feeds stdin from a thread while it collects output.
    Leaving ``with`` (or :meth:`close`) early makes the daemon kill the command.
    Writes may come from another thread than the one iterating."""

    def __init__(self, sock: socket.socket, early: bytes) -> None:
        self._sock = sock
        self._p = _stream.Protocol()
        self._pending: deque[tuple[int, bytes]] = deque()
        self._wlock = threading.Lock()
        self._closed = False
        self._stdin_closed = False
        self._early = early  # stream bytes that came with the handshake's answer

    @property
    def exit(self) -> m.ExecExit | None:
        """How the command ended, once iteration finished."""
        return self._p.exit

    def _send(self, frames: bytes) -> None:
        with self._wlock:
            self._sock.sendall(frames)

    def write(self, data: bytes | str) -> None:
        """Send bytes to the command's stdin."""
        self._send(_stream.stdin_frames(data))

    def close_stdin(self) -> None:
        """End of file on the command's stdin (on a terminal: ^D); once."""
        if not self._stdin_closed:
            self._stdin_closed = True
            self._send(_stream.close_stdin())

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (``tty`` streams only)."""
        self._send(_stream.resize(cols, rows))

    def signal(self, signum: int) -> None:
        """Send a signal (a number, e.g. ``signal.SIGINT``) to the command."""
        self._send(_stream.signal(signum))

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return self

    def __next__(self) -> tuple[int, bytes]:
        while not self._pending:
            if self._p.done:
                self._close_sock()
                if self._p.error is not None:
                    err, self._p.error = self._p.error, None  # raised once
                    raise err
                raise StopIteration
            if self._early:
                data, self._early = self._early, b""
            else:
                try:
                    data = self._sock.recv(_CHUNK)
                except OSError:
                    data = b""
            out, reply = self._p.receive(data)
            self._pending.extend(out)
            if reply and not self._closed:
                try:
                    self._send(reply)
                except OSError:
                    pass
        return self._pending.popleft()

    def _close_sock(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close()

    def wait(self) -> m.ExecExit:
        """Wait for the command to end (discarding output not yet read)."""
        for _ in self:
            pass
        return self._p.result(b"", b"")

    def communicate(self, stdin: bytes | str | None = None) -> m.ExecResult:
        """Send ``stdin`` (then end of file), collect all output, wait for the end."""
        out, err = bytearray(), bytearray()

        def feed() -> None:
            try:
                if stdin:
                    self.write(stdin)
                self.close_stdin()
            except OSError:
                pass  # the command ended without reading all of it

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        for fd, data in self:
            (out if fd == _stream.STDOUT else err).extend(data)
        feeder.join(5)
        return self._p.result(bytes(out), bytes(err))

    def close(self) -> None:
        """End the stream; a command still running is killed by the daemon."""
        if not self._closed:
            if not self._p.done:
                try:
                    self._send(ws.encode_close(1000))
                except OSError:
                    pass
            self._close_sock()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DesktopSession:
    """An ACI session on a desktop (docs/aci.md), from :meth:`Client.aci`:
    the sync twin of :class:`tine.aio.DesktopSession` (same verbs, same
    protocol, in :mod:`tine._aci`). Requests go one at a time (a lock
    makes it safe across threads; the asyncio session pipelines). A
    request the desktop refuses raises :class:`~tine.errors.ACIError` and
    the session goes on; a broken session raises
    :class:`~tine.errors.TransportError`. :attr:`welcome` has the protocol
    version, capabilities and screen size. With the client's ``timeout``,
    a request whose reply takes longer raises
    :class:`~tine.errors.TransportError` and the session goes on (its late
    reply is dropped)."""

    def __init__(self, sock: socket.socket, early: bytes, timeout: float | None = None) -> None:
        self._sock = sock
        self._p = _aci.Protocol()
        self._lock = threading.Lock()
        self._early = early
        self._closed = False
        self._timeout = timeout
        self._compositor = screencast.Compositor()
        self.frames: _frames.FrameCache | None = None
        """The fleet's shared frame cache (:meth:`share_frames`), or None."""

    @classmethod
    def _open(cls, sock: socket.socket, early: bytes, timeout: float | None = None) -> "DesktopSession":
        s = cls(sock, early, timeout)
        try:
            deadline = s._deadline()
            while s._p.welcome is None:
                s._pump(deadline, "the welcome")
                if s._p.done:
                    raise s._p.ended()
        except BaseException:
            s.close()
            raise
        return s

    @property
    def welcome(self) -> m.Welcome:
        """The guest's welcome: ``version``, ``capabilities``, ``width``, ``height``."""
        assert self._p.welcome is not None
        return self._p.welcome

    def _deadline(self) -> float | None:
        return None if self._timeout is None else time.monotonic() + self._timeout

    def _pump(self, deadline: float | None, waiting_for: str) -> builtins.list[tuple[int, _aci.Reply, _aci.Image]]:
        if self._early:
            data, self._early = self._early, b""
        else:
            try:
                if deadline is not None:
                    self._sock.settimeout(max(0.0, deadline - time.monotonic()))
                data = self._sock.recv(_CHUNK)
            except socket.timeout:
                raise TransportError(f"aci: no reply to {waiting_for} within {self._timeout} s (the session goes on)") from None
            except OSError:
                data = b""
        out, back = self._p.receive(data)
        if back and not self._closed:
            try:
                self._sock.sendall(back)
            except OSError:
                pass
        return out

    def _run(self, op: _aci.Op[T]) -> T:
        with self._lock:
            if self._p.done:
                raise self._p.ended()
            rid, frame = self._p.encode(op.request, op.content)
            deadline = self._deadline()
            try:
                if deadline is not None:
                    self._sock.settimeout(self._timeout)
                self._sock.sendall(frame)
            except OSError as e:
                raise TransportError(f"aci: send: {e}") from e
            while True:
                for got, rep, img in self._pump(deadline, f"{op.request.get('op')} request {rid}"):
                    if got in (rid, 0):  # others: answers to requests interrupted earlier
                        return _aci.finish(op, rep, img)
                if self._p.done:
                    raise self._p.ended()

    # Each verb is built and parsed in tine._aci; docs/aci.md has the fields.

    def do(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        """Send any request (``{"op": ..., ...}``; the id is added); its
        reply and image (``None`` without one)."""
        return self._run(_aci.do(request))

    def move(self, x: int, y: int) -> None:
        """Move the pointer."""
        self._run(_aci.move(x, y))

    def click(self, x: int, y: int, *, button: str | None = None, count: int | None = None) -> None:
        """Click (``button``: left, middle, right, back, forward; ``count`` 1-3)."""
        self._run(_aci.click(x, y, button, count))

    def mouse_down(self, button: str | None = None, *, x: int | None = None, y: int | None = None) -> None:
        """Press a button (where the pointer is, or at x, y)."""
        self._run(_aci.mouse_down(button, x, y))

    def mouse_up(self, button: str | None = None, *, x: int | None = None, y: int | None = None) -> None:
        """Release a button."""
        self._run(_aci.mouse_up(button, x, y))

    def drag(self, path: Sequence[Sequence[int]], *, button: str | None = None) -> None:
        """Press at the first point, move through the others, release at the last."""
        self._run(_aci.drag(path, button))

    def scroll(self, dx: int = 0, dy: int = 0, *, x: int | None = None, y: int | None = None) -> None:
        """Scroll by steps (positive: right, down), at x, y if given."""
        self._run(_aci.scroll(dx, dy, x, y))

    def key(self, keys: str) -> None:
        """Press a combination: ``"ctrl+shift+t"``, ``"Return"``, ``"U+20AC"``."""
        self._run(_aci.key(keys))

    def key_down(self, keys: str) -> None:
        """Hold keys down."""
        self._run(_aci.key_down(keys))

    def key_up(self, keys: str) -> None:
        """Release keys."""
        self._run(_aci.key_up(keys))

    def type(self, text: str, *, delay_ms: int | None = None) -> None:
        """Type text (any Unicode), ``delay_ms`` after each key."""
        self._run(_aci.type_(text, delay_ms))

    def windows(self) -> builtins.list[m.Window]:
        """The top-level windows."""
        return self._run(_aci.windows())

    def focus_window(self, window: int | m.Window) -> None:
        """Focus a window (a :class:`~tine.models.Window` or its id)."""
        self._run(_aci.focus_window(window))

    def close_window(self, window: int | m.Window) -> None:
        """Ask a window to close."""
        self._run(_aci.close_window(window))

    def launch(self, argv: Sequence[str]) -> int:
        """Start a command on the display, inside the sandbox; its pid."""
        return self._run(_aci.launch(argv))

    def exec(self, argv: Sequence[str], *, stdin: bytes | str | None = None,
             timeout: float | None = None) -> m.ExecResult:
        """Run a command on the desktop (``DISPLAY`` set) and wait for it
        (``timeout`` in seconds; the guest's default is 30). How it ended
        is the result (exit code 124 on timeout, 127 not found), not an
        error."""
        return self._run(_aci.exec_(argv, stdin, timeout))

    def read_file(self, path: str) -> bytes:
        """A file of the desktop (at most 32 MiB)."""
        return self._run(_aci.read_file(path))

    def write_file(self, path: str, data: bytes | str, *, mode: int | None = None) -> None:
        """Create or replace a file of the desktop (``mode`` default
        0o644); its directory must exist."""
        self._run(_aci.write_file(path, data, mode))

    def cursor(self) -> tuple[int, int]:
        """The pointer's position."""
        return self._run(_aci.cursor())

    def screen(self) -> tuple[int, int]:
        """The screen's width and height."""
        return self._run(_aci.screen())

    def wait(self, ms: int) -> None:
        """Sleep on the desktop's side (up to 60000 ms), in order with the other requests."""
        self._run(_aci.wait(ms))

    def screenshot(self, *, format: str | None = None, quality: int | None = None,
                   max_long_edge: int | None = None, region: Sequence[int] | None = None,
                   cursor: bool = False, if_none_match: str | None = None) -> m.Screenshot:
        """The screen (or ``region`` [x, y, w, h]) as PNG (lossless, the
        default) or JPEG (``quality``), downscaled so its longer edge is at
        most ``max_long_edge``, with the pointer if ``cursor``; with
        ``if_none_match`` equal to its frame hash, ``not_modified`` and no data."""
        opts = _aci.screenshot_options(format=format, quality=quality, max_long_edge=max_long_edge,
                                       region=region, cursor=cursor, if_none_match=if_none_match)
        if self.frames is None:
            return self._run(_aci.screenshot_with(opts))
        return self._shared(opts, self._run(_aci.screenshot_with(_frames.probe_options(opts))))

    def step(self, actions: Sequence[Mapping[str, Any]],
             observe: Mapping[str, Any] | None = None) -> m.StepResult:
        """Run actions (request dicts) in order, each one's failure recorded
        in its result, then observe once (``{"screenshot": {...},
        "windows": True, "cursor": True, "settle_ms": 50}``): one round trip
        (two when a shared frame cache has to fetch the image)."""
        if self.frames is None or not observe or observe.get("screenshot") is None:
            return self._run(_aci.step(actions, observe))
        opts = dict(observe["screenshot"])
        res = self._run(_aci.step(actions, {**observe, "screenshot": _frames.probe_options(opts)}))
        if res.screenshot is not None:
            res.screenshot = self._shared(opts, res.screenshot)
        return res

    def share_frames(self, cache: "_frames.FrameCache | None") -> None:
        """Answer screenshots and step observations through ``cache``,
        shared with a fleet's other sessions (:mod:`tine.frames`); None: no more."""
        self.frames = cache

    @property
    def received(self) -> int:
        """Bytes of the messages the guest sent on this session."""
        return self._p.received

    def _shared(self, opts: Mapping[str, Any], probe: m.Screenshot) -> m.Screenshot:
        """The screenshot a probe's answer stands for, through the cache."""
        assert self.frames is not None
        while True:
            got = self.frames.answer(self.welcome, opts, probe)
            if isinstance(got, m.Screenshot):
                return got
            if isinstance(got, _frames.Flight):
                got.wait(self._timeout)
                continue
            try:
                shot = self._run(_aci.screenshot_with(_frames.fetch_options(opts)))
            except BaseException:
                got.abandon()
                raise
            return got.land(shot)

    def screencast_start(self, *, fps: int | None = None, format: str | None = None,
                         quality: int | None = None, max_long_edge: int | None = None,
                         delta: bool = False, keyframe_interval_ms: int | None = None,
                         cursor: bool = False, poll: bool = False) -> "screencast.Compositor":
        """Stream the screen (docs/aci.md, "Screencast"); read it with
        :meth:`next_frame`. The compositor returned is the one
        :meth:`next_frame` draws into."""
        self._run(_aci.screencast_start(fps, format, quality, max_long_edge, delta,
                                        keyframe_interval_ms, cursor, poll))
        self._compositor = screencast.Compositor()
        return self._compositor

    def next_frame(self, timeout: float | None = None) -> tuple[dict[str, Any], "screencast.Compositor"]:
        """The next screencast message (its header) drawn onto the
        compositor; :class:`~tine.errors.TransportError` when none came
        within ``timeout`` seconds. Messages nobody read are dropped past
        64: the next delta then raises :class:`tine.screencast.SequenceGap`
        (ask for a keyframe with :meth:`screencast_keyframe`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._p.frames:
                if self._p.done:
                    raise self._p.ended()
                if deadline is not None and deadline <= time.monotonic():
                    raise TransportError(f"aci: no screencast frame within {timeout} s")
                try:
                    self._pump(deadline, "a screencast frame")
                except TransportError:
                    if self._p.done:
                        raise
            header, payload = self._p.frames.popleft()
        self._compositor.apply(header, payload)
        return header, self._compositor

    def screencast_keyframe(self) -> None:
        """Ask the stream for a keyframe now."""
        self._run(_aci.screencast_keyframe())

    def screencast_stop(self) -> None:
        """End the stream; no message follows (unread ones are dropped)."""
        self._run(_aci.screencast_stop())
        self._p.frames.clear()
    def anthropic(self, tool_input: Mapping[str, Any], scale: Sequence[int] | None = None,
                  screenshot: Mapping[str, Any] | None = None) -> _aci.ToolAnswer:
        """Run one Anthropic computer tool_use ``input`` as the model emitted
        it (coordinates in a ``scale`` [w, h] screen); the answer's
        ``anthropic_tool_result(tool_use_id)`` is the tool result."""
        return self._run(_aci.anthropic(tool_input, scale, screenshot))

    def openai(self, action: Any, scale: Sequence[int] | None = None,
               screenshot: Mapping[str, Any] | None = None) -> _aci.ToolAnswer:
        """Run an OpenAI computer_call's action (or actions, or the whole
        call); the answer's ``openai_call_output(call_id)`` is the reply item."""
        return self._run(_aci.openai(action, scale, screenshot))

    def record_start(self, fps: int | None = None, cursor: bool = False) -> None:
        """Start filming the screen into an H.264 mp4."""
        self._run(_aci.record_start(fps, cursor))

    def record_stop(self) -> bytes:
        """Stop the recording; the mp4's bytes."""
        return self._run(_aci.record_stop())

    def accessibility(self, filter: str | None = None, format: str | None = None) -> Any:
        """The accessibility tree (a desktop made with ``a11y`` or
        ``osworld``): compact nodes, filtered "visible" or "interactive",
        or OSWorld's XML with format="xml"."""
        return self._run(_aci.accessibility(filter, format))

    def close(self) -> None:
        """End the session (the desktop stays as it is)."""
        if not self._closed:
            back = self._p.close()
            try:
                if back:
                    self._sock.sendall(back)
            except OSError:
                pass
            self._closed = True
            self._sock.close()

    def __enter__(self) -> "DesktopSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A client of one daemon (``tine serve``); safe for use from many threads.

    ``Client()`` finds the daemon as the environment says (``TINE_HOST`` with
    ``TINE_TOKEN`` / ``TINE_TOKEN_FILE``, else ``TINE_SOCKET``, else
    /run/tine/tine.sock); ``Client(socket=path)`` or
    ``Client(host="127.0.0.1:7070", token=...)`` choose explicitly.
    ``timeout`` (seconds) bounds each socket operation (default: none, as an
    exec may run long). Every failure is a :class:`~tine.errors.TineError`.
    """

    def __init__(self, socket: str | None = None, *, host: str | None = None,
                 token: str | None = None, timeout: float | None = None) -> None:
        self.endpoint = ops.resolve_endpoint(socket, host, token)
        self._pool = _Pool(self.endpoint, timeout)

    def close(self) -> None:
        """Close the idle connections."""
        self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ep = self.endpoint
        return f"Client(socket={ep.socket!r})" if ep.socket else f"Client(host='{ep.host}:{ep.port}')"

    # --- transport ---

    def _do(self, call: ops.Call[T]) -> T:
        """Send ``call``; parse a 2xx answer, raise the daemon's error otherwise."""
        rewindable = not hasattr(call.body, "read")
        for attempt in range(2):
            conn, reused = self._pool.get()
            try:
                conn.request(call.method, call.target, body=call.body, headers=call.headers(self.endpoint))
                resp = conn.getresponse()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0 and rewindable:
                    continue
                raise TransportError(f"the daemon at {self._where()} closed the connection: {e}") from e
            except OSError as e:
                conn.close()
                raise TransportError(f"cannot reach the daemon at {self._where()}: {e}") from e
            try:
                ok = 200 <= resp.status < 300
                if ok and call.sink is not None:
                    while chunk := resp.read(_CHUNK):
                        call.sink.write(chunk)
                    body = b""
                else:
                    body = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"reading the daemon's answer: {e}") from e
            except BaseException:
                conn.close()
                raise
            if resp.will_close:
                conn.close()
            else:
                self._pool.put(conn)
            if not ok:
                raise error_from_response(resp.status, resp.reason, dict(resp.getheaders()), body)
            return call.parse(body)
        raise AssertionError("unreachable")

    def _websocket(self, path: str, what: str = "exec stream") -> tuple[socket.socket, bytes]:
        """A socket upgraded to a WebSocket at ``path``, and the stream bytes
        that arrived with the answer; an answer other than 101 raises the
        daemon's error."""
        ep = self.endpoint
        try:
            if ep.socket:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self._pool._timeout)
                sock.connect(ep.socket)
            else:
                sock = socket.create_connection((ep.host or "", ep.port), timeout=self._pool._timeout)
                if ep.tls:
                    sock = ssl.create_default_context().wrap_socket(sock, server_hostname=ep.host)
        except OSError as e:
            raise TransportError(f"cannot reach the daemon at {self._where()}: {e}") from e
        try:
            key, up = ws.handshake_headers()
            sock.sendall(_stream.encode_head("GET", path, {**ops.Call("GET", path, bytes).headers(ep), **up}))
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(_CHUNK)
                if not chunk or len(buf) > 1 << 20:
                    raise TransportError("the daemon did not answer the WebSocket upgrade")
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            status, reason, headers = _stream.parse_head(head)
            if status != 101:
                n = int(headers.get("content-length", "0"))
                while len(rest) < n and (chunk := sock.recv(_CHUNK)):
                    rest += chunk
                raise error_from_response(status, reason, headers, rest)
            ws.check_accept(key, headers)
            sock.settimeout(None)  # the handshake is bounded; a stream's reads are not
        except (OSError, ws.ProtocolError) as e:
            sock.close()
            raise TransportError(f"{what} at {self._where()}: {e}") from e
        except BaseException:
            sock.close()
            raise
        return sock, rest

    def _where(self) -> str:
        ep = self.endpoint
        return ep.socket or f"{ep.host}:{ep.port}"

    # --- daemon ---

    def health(self) -> dict[str, Any]:
        """Whether the daemon serves: ``{"status": "ok", "version": ..., "pid": ...}``."""
        return self._do(ops.health())

    def features(self) -> list[dict[str, Any]]:
        """The daemon host's feature checks (as ``tine doctor``)."""
        return self._do(ops.features())

    # --- sandboxes ---

    def create(self, spec: ops.SpecLike = None) -> m.Sandbox:
        """Start a live sandbox (``spec``: a :class:`~tine.models.SandboxSpec`
        or a dict; ``None`` for the defaults). A full host budget raises
        :class:`~tine.errors.Capacity` with ``retry_after``."""
        return self._do(ops.create(spec))

    def list(self) -> list[m.Sandbox]:
        """Every sandbox the daemon knows, oldest first."""
        return self._do(ops.list_sandboxes())

    def get(self, sandbox_id: str) -> m.Sandbox:
        """One sandbox, with its usage now."""
        return self._do(ops.get(sandbox_id))

    def set_network(self, sandbox_id: str, policy: m.NetworkPolicy | dict) -> m.Network:
        """Replace a live egress sandbox's policy; in force (open connections
        included) when this returns."""
        return self._do(ops.set_network(sandbox_id, policy))

    def delete(self, sandbox_id: str) -> None:
        """Destroy a sandbox: every process in it is killed."""
        self._do(ops.delete(sandbox_id))

    def exec(self, sandbox_id: str, argv: Sequence[str], *, stdin: bytes | str | None = None,
             env: Mapping[str, str] | Sequence[str] | None = None, workdir: str | None = None,
             timeout: float | None = None, max_output_bytes: int | None = None) -> m.ExecResult:
        """Run a command and wait for it, its output captured. A command that
        fails is no error: see ``exit_code`` and ``reason`` of the result.
        ``timeout`` is in seconds (exit code 124, reason ``timeout``)."""
        req = ops.exec_request(argv, stdin=stdin, env=env, workdir=workdir, timeout=timeout,
                               max_output_bytes=max_output_bytes)
        return self._do(ops.exec_(sandbox_id, req))

    def exec_stream(self, sandbox_id: str, argv: Sequence[str], *,
                    env: Mapping[str, str] | Sequence[str] | None = None,
                    workdir: str | None = None, timeout: float | None = None,
                    tty: bool = False, cols: int | None = None,
                    rows: int | None = None) -> ExecStream:
        """Start a command with its stdio streamed over a WebSocket (see
        :class:`ExecStream`); ``tty`` gives it a terminal of ``cols`` x
        ``rows`` (everything then comes as stdout). An unknown sandbox
        raises :class:`~tine.errors.NotFound` here."""
        req = ops.exec_request(argv, env=env, workdir=workdir, timeout=timeout, tty=tty,
                               cols=cols, rows=rows)
        sock, early = self._websocket(ops.exec_ws_path(sandbox_id))
        stream = ExecStream(sock, early)
        try:
            stream._send(_stream.request_frame(req))
        except OSError as e:
            stream.close()
            raise TransportError(f"send the exec request: {e}") from e
        return stream

    # --- code-interpreter sessions ---

    def session(self, sandbox: str | m.Sandbox, *, env: Mapping[str, str] | Sequence[str] | None = None,
                workdir: str | None = None, forkable: bool = False) -> "_session.Session":
        """Start a stateful Python session in a sandbox (see :mod:`tine.session`);
        ``forkable`` lets :meth:`Session.fork` fork it live."""
        sid = _session.sandbox_id_of(sandbox)
        return _session.Session(self, self._do(ops.create_session(sid, ops.session_spec(env, workdir, forkable=forkable))))

    def sessions(self, sandbox: str | m.Sandbox) -> builtins.list[m.SessionInfo]:
        """A sandbox's sessions, oldest first."""
        return self._do(ops.list_sessions(_session.sandbox_id_of(sandbox)))

    # --- files ---

    def read_file(self, sandbox_id: str, path: str, *, out: IO[bytes] | None = None) -> bytes:
        """A file's content; with ``out``, streamed into it (and ``b""`` returned)."""
        return self._do(ops.read_file(sandbox_id, path, out))

    def write_file(self, sandbox_id: str, path: str, data: bytes | str | IO[bytes], *,
                   mode: int | None = None, uid: int | None = None,
                   gid: int | None = None) -> m.FileInfo:
        """Create or replace a file atomically (``data``: bytes, text, or a
        binary file object streamed); its parent directory must exist."""
        return self._do(ops.write_file(sandbox_id, path, data, mode=mode, uid=uid, gid=gid))

    def stat(self, sandbox_id: str, path: str) -> m.FileInfo:
        """Describe a file, not following a final symlink."""
        return self._do(ops.stat(sandbox_id, path))

    def list_dir(self, sandbox_id: str, path: str) -> builtins.list[m.FileInfo]:
        """A directory's entries."""
        return self._do(ops.list_dir(sandbox_id, path))

    def mkdir(self, sandbox_id: str, path: str, *, mode: int | None = None, parents: bool = False,
              uid: int | None = None, gid: int | None = None) -> m.FileInfo:
        """Make a directory (``parents``: and missing parents; an existing one is fine)."""
        return self._do(ops.mkdir(sandbox_id, path, mode=mode, parents=parents, uid=uid, gid=gid))

    def remove(self, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        """Remove a file, symlink or empty directory (``recursive``: any directory)."""
        self._do(ops.remove(sandbox_id, path, recursive=recursive))

    def download_archive(self, sandbox_id: str, path: str, *, out: IO[bytes] | None = None) -> bytes:
        """A file or directory tree as a tar archive; with ``out``, streamed into it."""
        return self._do(ops.download_archive(sandbox_id, path, out))

    def upload_archive(self, sandbox_id: str, path: str, tar: bytes | IO[bytes]) -> None:
        """Extract a tar archive into an existing directory."""
        self._do(ops.upload_archive(sandbox_id, path, tar))

    # --- functions and scripts ---

    def put_function(self, spec: ops.FunctionSpecLike) -> m.Function:
        """Register (or replace) a warm function and wait until it is warm. A
        bad spec or an entry that fails to import raises
        :class:`~tine.errors.InvalidArgument` with the traceback."""
        return self._do(ops.put_function(spec))

    def functions(self) -> builtins.list[m.Function]:
        """The registered functions."""
        return self._do(ops.functions())

    def function(self, name: str) -> m.Function:
        """One function."""
        return self._do(ops.function(name))

    def delete_function(self, name: str) -> None:
        """Unregister a function and free its sandbox."""
        self._do(ops.delete_function(name))

    def invoke(self, name: str, payload: Any = None) -> m.Invocation:
        """Call a function with a JSON payload. The handler's exception, a
        timeout or an OOM is not raised: see the result's ``status``."""
        return self._do(ops.invoke(name, payload))

    def invoke_raw(self, name: str, data: bytes) -> m.Invocation:
        """Call a function with raw bytes (the handler gets bytes)."""
        return self._do(ops.invoke_raw(name, data))

    def put_script(self, src: str | bytes) -> str:
        """Register a Python script for the runtime pool; its sha256 digest."""
        return self._do(ops.put_script(src))

    def invoke_script(self, digest: str, payload: Any = None) -> m.Invocation:
        """Call a registered script's ``handler`` through the pool."""
        return self._do(ops.invoke_script(digest, payload))

    # --- desktops ---

    def create_desktop(self, spec: ops.DesktopSpecLike = None, *, width: int | None = None,
                       height: int | None = None, apps: Sequence[Sequence[str]] | None = None,
                       limits: m.Limits | Mapping[str, Any] | None = None,
                       ttl_seconds: int | None = None,
                       idle_timeout_seconds: int | None = None) -> m.Desktop:
        """Start a desktop (Xvfb, a window manager, ``apps`` and tine's
        guest, in a sandbox of its own) and return once it is ready: every
        app mapped a window, the last holds the focus. ``apps`` are argvs
        (``[["xterm"]]``); the keywords are laid over ``spec`` (a
        :class:`~tine.models.DesktopSpec` or a dict). Its ``id`` works with
        the sandbox verbs too (exec, files); drive it with :meth:`aci`."""
        return self._do(ops.create_desktop(ops.desktop_spec(
            spec, width=width, height=height, apps=apps, limits=limits, ttl_seconds=ttl_seconds,
            idle_timeout_seconds=idle_timeout_seconds)))

    def desktops(self) -> builtins.list[m.Desktop]:
        """The live desktops, oldest first."""
        return self._do(ops.list_desktops())

    def desktop(self, desktop_id: str) -> m.Desktop:
        """One desktop."""
        return self._do(ops.get_desktop(desktop_id))

    def delete_desktop(self, desktop_id: str) -> None:
        """Destroy a desktop and its sandbox."""
        self._do(ops.delete_desktop(desktop_id))

    # --- snapshots ---

    def snapshot(self, sandbox_id: str, *, tier: str | None = None, name: str | None = None) -> m.Snapshot:
        """Snapshot a live sandbox or desktop (``tier`` "fs", the default, or
        "memory"); it runs on after a short freeze (docs/snapshots.md)."""
        return self._do(ops.snapshot(sandbox_id, tier=tier, name=name))

    def snapshots(self) -> list[m.Snapshot]:
        """Every snapshot, oldest first."""
        return self._do(ops.list_snapshots())

    def get_snapshot(self, snapshot_id: str) -> m.Snapshot:
        """One snapshot."""
        return self._do(ops.get_snapshot(snapshot_id))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; one with live forks raises
        :class:`~tine.errors.Conflict`."""
        self._do(ops.delete_snapshot(snapshot_id))

    def fork(self, snapshot_id: str, count: int = 1, **opts: Any) -> m.ForkResult:
        """Make ``count`` replicas of a snapshot, all or none (a full budget
        raises :class:`~tine.errors.Capacity` and makes nothing); ``opts``:
        limits, ttl_seconds, idle_timeout_seconds, env."""
        return self._do(ops.fork(snapshot_id, ops.fork_body(count, **opts)))

    def fork_sandbox(self, sandbox_id: str, count: int = 1, **opts: Any) -> m.ForkResult:
        """Snapshot a live sandbox (``tier=`` in ``opts``) and fork it."""
        return self._do(ops.fork_sandbox(sandbox_id, ops.fork_body(count, **opts)))

    def aci(self, desktop_id: str) -> "DesktopSession":
        """Open an ACI session on a desktop (see :class:`DesktopSession`); an
        unknown desktop raises :class:`~tine.errors.NotFound` here."""
        sock, early = self._websocket(ops.aci_ws_path(desktop_id), "aci session")
        return DesktopSession._open(sock, early, self._pool._timeout)
