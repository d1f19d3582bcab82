"""The asyncio client: :class:`AsyncClient`, with the same verbs as
:class:`tine.Client` (awaitable), plus :meth:`AsyncClient.exec_stream`, a
command's stdio streamed over the daemon's WebSocket route.

HTTP/1.1 is spoken directly on :func:`asyncio.open_unix_connection` (or
:func:`asyncio.open_connection` for TCP): bodies with Content-Length or
chunked, answers with Content-Length, chunked or read to end of file, and
kept-alive connections reused. See README.md for why there is no aiohttp.
"""

from __future__ import annotations

import asyncio
import builtins
import ssl
from collections import deque
from typing import IO, Any, AsyncIterator, Mapping, Sequence, TypeVar

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


class _Conn:
    """One HTTP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class _Answer:
    """An answer's status line and headers (names lower-cased)."""

    def __init__(self, status: int, reason: str, headers: dict[str, str]) -> None:
        self.status, self.reason, self.headers = status, reason, headers


class _Transport:
    """Minimal HTTP/1.1 over asyncio streams, with a pool of idle connections."""

    def __init__(self, ep: ops.Endpoint, max_idle: int = 16) -> None:
        self.ep, self._max_idle = ep, max_idle
        self._idle: list[_Conn] = []

    def where(self) -> str:
        return self.ep.socket or f"{self.ep.host}:{self.ep.port}"

    async def _connect(self) -> _Conn:
        ep = self.ep
        try:
            if ep.socket:
                r, w = await asyncio.open_unix_connection(ep.socket, limit=1 << 20)
            else:
                ctx = ssl.create_default_context() if ep.tls else None
                r, w = await asyncio.open_connection(ep.host, ep.port, ssl=ctx, limit=1 << 20)
        except OSError as e:
            raise TransportError(f"cannot reach the daemon at {self.where()}: {e}") from e
        return _Conn(r, w)

    async def _get(self) -> tuple[_Conn, bool]:
        while self._idle:
            c = self._idle.pop()
            if not c.reader.at_eof():
                return c, True
            c.close()
        return await self._connect(), False

    def _put(self, c: _Conn) -> None:
        if len(self._idle) < self._max_idle:
            self._idle.append(c)
        else:
            c.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    @staticmethod
    async def _send(c: _Conn, method: str, target: str, headers: dict[str, str],
                    body: ops.Body) -> None:
        w = c.writer
        if isinstance(body, (bytes, bytearray, memoryview)):
            headers = {**headers, "Content-Length": str(len(body))}
        elif body is not None:
            headers = {**headers, "Transfer-Encoding": "chunked"}
        elif method in ("POST", "PUT"):
            headers = {**headers, "Content-Length": "0"}
        w.write(_stream.encode_head(method, target, headers))
        if isinstance(body, (bytes, bytearray, memoryview)):
            w.write(body)
        elif body is not None:
            while chunk := body.read(_CHUNK):
                w.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await w.drain()
            w.write(b"0\r\n\r\n")
        await w.drain()

    @staticmethod
    async def _head(c: _Conn) -> _Answer:
        try:
            head = await c.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise ConnectionResetError("connection closed before an answer") from e
            raise
        except asyncio.LimitOverrunError as e:
            raise TransportError("the answer's head is too large") from e
        return _Answer(*_stream.parse_head(head))

    @staticmethod
    async def _body(c: _Conn, a: _Answer, method: str, sink: IO[bytes] | None) -> tuple[bytes, bool]:
        """Read the body (into ``sink`` when given); whether the connection
        may be reused."""
        r = c.reader
        buf = bytearray()

        def take(b: bytes) -> None:
            if sink is not None:
                sink.write(b)
            else:
                buf.extend(b)

        reusable = a.headers.get("connection", "").lower() != "close"
        if method == "HEAD" or a.status in (204, 304) or 100 <= a.status < 200:
            return b"", reusable
        if "chunked" in a.headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await r.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                while size > 0:
                    chunk = await r.readexactly(min(size, _CHUNK))
                    size -= len(chunk)
                    take(chunk)
                await r.readexactly(2)
        elif "content-length" in a.headers:
            n = int(a.headers["content-length"])
            while n > 0:
                chunk = await r.readexactly(min(n, _CHUNK))
                n -= len(chunk)
                take(chunk)
        else:
            while chunk := await r.read(_CHUNK):
                take(chunk)
            reusable = False
        return bytes(buf), reusable

    async def do(self, call: ops.Call[T]) -> T:
        """Send ``call``; parse a 2xx answer, raise the daemon's error otherwise."""
        rewindable = not hasattr(call.body, "read")
        for attempt in range(2):
            c, reused = await self._get()
            try:
                try:
                    await self._send(c, call.method, call.target, call.headers(self.ep), call.body)
                    a = await self._head(c)
                except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError) as e:
                    c.close()
                    if reused and attempt == 0 and rewindable:
                        continue
                    raise TransportError(f"the daemon at {self.where()} closed the connection: {e}") from e
                ok = 200 <= a.status < 300
                body, reusable = await self._body(c, a, call.method, call.sink if ok else None)
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                c.close()
                raise TransportError(f"talking to the daemon at {self.where()}: {e}") from e
            except BaseException:
                c.close()  # cancelled mid-answer: the connection is spoilt
                raise
            if reusable:
                self._put(c)
            else:
                c.close()
            if not ok:
                raise error_from_response(a.status, a.reason, a.headers, body)
            return call.parse(body)
        raise AssertionError("unreachable")

    async def websocket(self, path: str, what: str = "exec stream") -> _Conn:
        """Open a connection and upgrade it to a WebSocket at ``path``; an
        answer other than 101 raises the daemon's error."""
        c = await self._connect()
        try:
            key, up = ws.handshake_headers()
            headers = {**ops.Call("GET", path, bytes).headers(self.ep), **up}
            await self._send(c, "GET", path, headers, None)
            a = await self._head(c)
            if a.status != 101:
                body, _ = await self._body(c, a, "GET", None)
                raise error_from_response(a.status, a.reason, a.headers, body)
            ws.check_accept(key, a.headers)
        except (OSError, asyncio.IncompleteReadError, ws.ProtocolError) as e:
            c.close()
            raise TransportError(f"{what} at {self.where()}: {e}") from e
        except BaseException:
            c.close()
            raise
        return c


class ExecStream:
    """A command running in a sandbox with its stdio on a WebSocket.

    Iterate it (``async for fd, data in stream``) for output chunks, ``fd``
    1 (stdout) or 2 (stderr); iteration ends when the command ended and all
    its output was delivered, and :attr:`exit` then says how. Read as you
    write: a command whose output is not read blocks, as with pipes.
    :meth:`wait` discards unread output; :meth:`communicate` feeds stdin and
    collects everything. Leaving ``async with`` (or :meth:`close`) before
    the end makes the daemon kill the command. A failure to start (e.g. a
    bad request) raises :class:`~tine.errors.TineError` while iterating.
    The protocol is :mod:`tine._stream`'s, shared with the sync stream.
    """

    def __init__(self, conn: _Conn) -> None:
        self._c = conn
        self._p = _stream.Protocol()
        self._pending: deque[tuple[int, bytes]] = deque()
        self._wlock = asyncio.Lock()
        self._closed = False
        self._stdin_closed = False

    @property
    def exit(self) -> m.ExecExit | None:
        """How the command ended, once iteration finished."""
        return self._p.exit

    async def _send(self, frames: bytes) -> None:
        async with self._wlock:
            self._c.writer.write(frames)
            await self._c.writer.drain()

    async def write(self, data: bytes | str) -> None:
        """Send bytes to the command's stdin."""
        await self._send(_stream.stdin_frames(data))

    async def close_stdin(self) -> None:
        """End of file on the command's stdin (on a terminal: ^D); once."""
        if not self._stdin_closed:
            self._stdin_closed = True
            await self._send(_stream.close_stdin())

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (``tty`` streams only)."""
        await self._send(_stream.resize(cols, rows))

    async def signal(self, signum: int) -> None:
        """Send a signal (a number, e.g. ``signal.SIGINT``) to the command."""
        await self._send(_stream.signal(signum))

    def __aiter__(self) -> AsyncIterator[tuple[int, bytes]]:
        return self

    async def __anext__(self) -> tuple[int, bytes]:
        while not self._pending:
            if self._p.done:
                self._close_conn()
                if self._p.error is not None:
                    err, self._p.error = self._p.error, None  # raised once
                    raise err
                raise StopAsyncIteration
            try:
                data = await self._c.reader.read(_CHUNK)
            except OSError:
                data = b""
            out, reply = self._p.receive(data)
            self._pending.extend(out)
            if reply and not self._closed:
                try:
                    await self._send(reply)
                except OSError:
                    pass
        return self._pending.popleft()

    def _close_conn(self) -> None:
        if not self._closed:
            self._closed = True
            self._c.close()

    async def wait(self) -> m.ExecExit:
        """Wait for the command to end (discarding output not yet read)."""
        async for _ in self:
            pass
        return self._p.result(b"", b"")

    async def communicate(self, stdin: bytes | str | None = None) -> m.ExecResult:
        """Send ``stdin`` (then end of file), collect all output, wait for the
        end: the JSON exec's result, without its output cap."""
        out, err = bytearray(), bytearray()

        async def feed() -> None:
            if stdin:
                await self.write(stdin)
            await self.close_stdin()

        feeder = asyncio.ensure_future(feed())
        try:
            async for fd, data in self:
                (out if fd == _stream.STDOUT else err).extend(data)
        finally:
            if not feeder.done():
                feeder.cancel()
            try:
                await feeder
            except (asyncio.CancelledError, OSError):
                pass  # the command ended without reading all of it
        return self._p.result(bytes(out), bytes(err))

    async def close(self) -> None:
        """End the stream; a command still running is killed by the daemon."""
        if not self._closed:
            if not self._p.done:
                try:
                    await self._send(ws.encode_close(1000))
                except OSError:
                    pass
            self._close_conn()

    async def __aenter__(self) -> "ExecStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class DesktopSession:
    """An ACI session on a desktop (docs/aci.md), from
    :meth:`AsyncClient.aci`: the verbs of :class:`tine.client.DesktopSession`,
    awaited, with the protocol in :mod:`tine._aci`. Requests are pipelined:
    many tasks may await verbs at once, each request is sent as soon as it
    is made, the desktop runs them in the order sent, and a reader task
    hands each reply to its request by id. A refused request raises
    :class:`~tine.errors.ACIError` (the session goes on); a broken session
    fails every waiting request with :class:`~tine.errors.TransportError`.
    Cancelling a verb stops the wait, not the request."""

    def __init__(self, conn: _Conn) -> None:
        self._c = conn
        self._p = _aci.Protocol()
        self._pending: _aci.Pending[asyncio.Future[tuple[_aci.Reply, _aci.Image]]] = _aci.Pending()
        self._reader: asyncio.Task[None] | None = None
        self._closed = False
        self._frame_ready = asyncio.Event()
        self._compositor = screencast.Compositor()
        self.frames: _frames.FrameCache | None = None
        """The fleet's shared frame cache (:meth:`share_frames`), or None."""

    @classmethod
    async def _open(cls, conn: _Conn) -> "DesktopSession":
        s = cls(conn)
        try:
            while s._p.welcome is None:
                await s._pump()
                if s._p.done:
                    raise s._p.ended()
        except BaseException:
            s._close_conn()
            raise
        s._reader = asyncio.ensure_future(s._read())
        return s

    @property
    def welcome(self) -> m.Welcome:
        """The guest's welcome: ``version``, ``capabilities``, ``width``, ``height``."""
        assert self._p.welcome is not None
        return self._p.welcome

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def _pump(self) -> builtins.list[tuple[int, _aci.Reply, _aci.Image]]:
        try:
            data = await self._c.reader.read(_CHUNK)
        except OSError:
            data = b""
        out, back = self._p.receive(data)
        if back and not self._closed:
            try:
                self._c.writer.write(back)
            except OSError:
                pass
        return out

    async def _read(self) -> None:
        """Hand each reply to its request until the session ends."""
        try:
            while not self._p.done:
                for rid, rep, img in await self._pump():
                    fut = self._pending.pop(rid)
                    if fut is not None and not fut.done():
                        fut.set_result((rep, img))
                if self._p.frames:
                    self._frame_ready.set()
        finally:
            self._frame_ready.set()  # a waiting next_frame sees the end
            if not self._p.done:  # the reader itself failed: no later request may wait forever
                self._p.abort("the ACI session's reader stopped")
            err = self._p.ended()
            for fut in self._pending.drain():
                if not fut.done():
                    fut.set_exception(err)
            self._close_conn()

    async def _run(self, op: _aci.Op[T]) -> T:
        if self._p.done:
            raise self._p.ended()
        rid, frame = self._p.encode(op.request, op.content)
        fut: asyncio.Future[tuple[_aci.Reply, _aci.Image]] = asyncio.get_running_loop().create_future()
        self._pending.add(rid, fut)
        try:
            self._c.writer.write(frame)
            await self._c.writer.drain()
            rep, img = await fut
        except OSError as e:
            raise TransportError(f"aci: send: {e}") from e
        finally:
            self._pending.discard(rid)  # cancelled: its reply, when it comes, is dropped
        return _aci.finish(op, rep, img)

    # Each verb is built and parsed in tine._aci; see tine.client.DesktopSession
    # for the docstrings.

    async def screencast_start(self, *, fps: int | None = None, format: str | None = None,
                               quality: int | None = None, max_long_edge: int | None = None,
                               delta: bool = False, keyframe_interval_ms: int | None = None,
                               cursor: bool = False, poll: bool = False) -> "screencast.Compositor":
        """Stream the screen; read it with :meth:`next_frame`."""
        await self._run(_aci.screencast_start(fps, format, quality, max_long_edge, delta,
                                              keyframe_interval_ms, cursor, poll))
        self._compositor = screencast.Compositor()
        return self._compositor

    async def next_frame(self) -> tuple[dict[str, Any], "screencast.Compositor"]:
        """The next screencast message drawn onto the compositor (wrap in
        ``asyncio.wait_for`` for a timeout)."""
        while not self._p.frames:
            if self._p.done:
                raise self._p.ended()
            self._frame_ready.clear()
            await self._frame_ready.wait()
        header, payload = self._p.frames.popleft()
        self._compositor.apply(header, payload)
        return header, self._compositor

    async def screencast_keyframe(self) -> None:
        await self._run(_aci.screencast_keyframe())

    async def screencast_stop(self) -> None:
        await self._run(_aci.screencast_stop())
        self._p.frames.clear()

    async def do(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        """Send any request; its reply and image."""
        return await self._run(_aci.do(request))

    async def move(self, x: int, y: int) -> None:
        await self._run(_aci.move(x, y))

    async def click(self, x: int, y: int, *, button: str | None = None, count: int | None = None) -> None:
        await self._run(_aci.click(x, y, button, count))

    async def mouse_down(self, button: str | None = None, *, x: int | None = None,
                         y: int | None = None) -> None:
        await self._run(_aci.mouse_down(button, x, y))

    async def mouse_up(self, button: str | None = None, *, x: int | None = None,
                       y: int | None = None) -> None:
        await self._run(_aci.mouse_up(button, x, y))

    async def drag(self, path: Sequence[Sequence[int]], *, button: str | None = None) -> None:
        await self._run(_aci.drag(path, button))

    async def scroll(self, dx: int = 0, dy: int = 0, *, x: int | None = None, y: int | None = None) -> None:
        await self._run(_aci.scroll(dx, dy, x, y))

    async def key(self, keys: str) -> None:
        await self._run(_aci.key(keys))

    async def key_down(self, keys: str) -> None:
        await self._run(_aci.key_down(keys))

    async def key_up(self, keys: str) -> None:
        await self._run(_aci.key_up(keys))

    async def type(self, text: str, *, delay_ms: int | None = None) -> None:
        await self._run(_aci.type_(text, delay_ms))

    async def windows(self) -> builtins.list[m.Window]:
        return await self._run(_aci.windows())

    async def focus_window(self, window: int | m.Window) -> None:
        await self._run(_aci.focus_window(window))

    async def close_window(self, window: int | m.Window) -> None:
        await self._run(_aci.close_window(window))

    async def launch(self, argv: Sequence[str]) -> int:
        return await self._run(_aci.launch(argv))

    async def exec(self, argv: Sequence[str], *, stdin: bytes | str | None = None,
                   timeout: float | None = None) -> m.ExecResult:
        return await self._run(_aci.exec_(argv, stdin, timeout))

    async def read_file(self, path: str) -> bytes:
        return await self._run(_aci.read_file(path))

    async def write_file(self, path: str, data: bytes | str, *, mode: int | None = None) -> None:
        await self._run(_aci.write_file(path, data, mode))

    async def cursor(self) -> tuple[int, int]:
        return await self._run(_aci.cursor())

    async def screen(self) -> tuple[int, int]:
        return await self._run(_aci.screen())

    async def wait(self, ms: int) -> None:
        await self._run(_aci.wait(ms))

    async def screenshot(self, *, format: str | None = None, quality: int | None = None,
                         max_long_edge: int | None = None, region: Sequence[int] | None = None,
                         cursor: bool = False, if_none_match: str | None = None) -> m.Screenshot:
        opts = _aci.screenshot_options(format=format, quality=quality, max_long_edge=max_long_edge,
                                       region=region, cursor=cursor, if_none_match=if_none_match)
        if self.frames is None:
            return await self._run(_aci.screenshot_with(opts))
        return await self._shared(opts, await self._run(_aci.screenshot_with(_frames.probe_options(opts))))

    async def step(self, actions: Sequence[Mapping[str, Any]],
                   observe: Mapping[str, Any] | None = None) -> m.StepResult:
        if self.frames is None or not observe or observe.get("screenshot") is None:
            return await self._run(_aci.step(actions, observe))
        opts = dict(observe["screenshot"])
        res = await self._run(_aci.step(actions, {**observe, "screenshot": _frames.probe_options(opts)}))
        if res.screenshot is not None:
            res.screenshot = await self._shared(opts, res.screenshot)
        return res

    def share_frames(self, cache: "_frames.FrameCache | None") -> None:
        """See :meth:`tine.client.DesktopSession.share_frames`."""
        self.frames = cache

    @property
    def received(self) -> int:
        """Bytes of the messages the guest sent on this session."""
        return self._p.received

    async def _shared(self, opts: Mapping[str, Any], probe: m.Screenshot) -> m.Screenshot:
        assert self.frames is not None
        while True:
            got = self.frames.answer(self.welcome, opts, probe)
            if isinstance(got, m.Screenshot):
                return got
            if isinstance(got, _frames.Flight):
                await got.wait_async()
                continue
            try:
                shot = await self._run(_aci.screenshot_with(_frames.fetch_options(opts)))
            except BaseException:
                got.abandon()
                raise
            return got.land(shot)

    async def anthropic(self, tool_input: Mapping[str, Any], scale: Sequence[int] | None = None,
                        screenshot: Mapping[str, Any] | None = None) -> _aci.ToolAnswer:
        return await self._run(_aci.anthropic(tool_input, scale, screenshot))

    async def openai(self, action: Any, scale: Sequence[int] | None = None,
                     screenshot: Mapping[str, Any] | None = None) -> _aci.ToolAnswer:
        return await self._run(_aci.openai(action, scale, screenshot))

    async def record_start(self, fps: int | None = None, cursor: bool = False) -> None:
        await self._run(_aci.record_start(fps, cursor))

    async def record_stop(self) -> bytes:
        return await self._run(_aci.record_stop())

    async def accessibility(self, filter: str | None = None, format: str | None = None) -> Any:
        return await self._run(_aci.accessibility(filter, format))

    def _close_conn(self) -> None:
        if not self._closed:
            self._closed = True
            self._c.close()

    async def close(self) -> None:
        """End the session (the desktop stays as it is); waiting requests
        fail with :class:`~tine.errors.TransportError`."""
        back = self._p.close()
        if back and not self._closed:
            try:
                self._c.writer.write(back)
                await asyncio.wait_for(self._c.writer.drain(), 1)
            except (OSError, asyncio.TimeoutError):
                pass
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
        self._close_conn()

    async def __aenter__(self) -> "DesktopSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncClient:
    """The asyncio twin of :class:`tine.Client` (same constructor, same
    verbs, awaited), plus :meth:`exec_stream`. Use one per event loop;
    concurrent calls each get a connection of their own. Bound a call's
    time with :func:`asyncio.timeout`."""

    def __init__(self, socket: str | None = None, *, host: str | None = None,
                 token: str | None = None) -> None:
        self.endpoint = ops.resolve_endpoint(socket, host, token)
        self._t = _Transport(self.endpoint)

    async def close(self) -> None:
        """Close the idle connections."""
        await self._t.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Every verb below is the sync Client's (see its docstrings): the
    # request and the parsing are shared in tine._ops.

    async def health(self) -> dict[str, Any]:
        """See :meth:`tine.Client.health`."""
        return await self._t.do(ops.health())

    async def features(self) -> list[dict[str, Any]]:
        """See :meth:`tine.Client.features`."""
        return await self._t.do(ops.features())

    async def create(self, spec: ops.SpecLike = None) -> m.Sandbox:
        """See :meth:`tine.Client.create`."""
        return await self._t.do(ops.create(spec))

    async def list(self) -> list[m.Sandbox]:
        """See :meth:`tine.Client.list`."""
        return await self._t.do(ops.list_sandboxes())

    async def get(self, sandbox_id: str) -> m.Sandbox:
        """See :meth:`tine.Client.get`."""
        return await self._t.do(ops.get(sandbox_id))

    async def set_network(self, sandbox_id: str, policy: m.NetworkPolicy | dict) -> m.Network:
        """See :meth:`tine.Client.set_network`."""
        return await self._t.do(ops.set_network(sandbox_id, policy))

    async def delete(self, sandbox_id: str) -> None:
        """See :meth:`tine.Client.delete`."""
        await self._t.do(ops.delete(sandbox_id))

    async def session(self, sandbox: str | m.Sandbox, *, env: Mapping[str, str] | Sequence[str] | None = None,
                      workdir: str | None = None, forkable: bool = False) -> "_session.AsyncSession":
        """See :meth:`tine.Client.session`."""
        sid = _session.sandbox_id_of(sandbox)
        return _session.AsyncSession(self, await self._t.do(ops.create_session(sid, ops.session_spec(env, workdir, forkable=forkable))))

    async def sessions(self, sandbox: str | m.Sandbox) -> builtins.list[m.SessionInfo]:
        """See :meth:`tine.Client.sessions`."""
        return await self._t.do(ops.list_sessions(_session.sandbox_id_of(sandbox)))

    async def exec(self, sandbox_id: str, argv: Sequence[str], *, stdin: bytes | str | None = None,
                   env: Mapping[str, str] | Sequence[str] | None = None, workdir: str | None = None,
                   timeout: float | None = None, max_output_bytes: int | None = None) -> m.ExecResult:
        """See :meth:`tine.Client.exec`."""
        req = ops.exec_request(argv, stdin=stdin, env=env, workdir=workdir, timeout=timeout,
                               max_output_bytes=max_output_bytes)
        return await self._t.do(ops.exec_(sandbox_id, req))

    async def exec_stream(self, sandbox_id: str, argv: Sequence[str], *,
                          env: Mapping[str, str] | Sequence[str] | None = None,
                          workdir: str | None = None, timeout: float | None = None,
                          tty: bool = False, cols: int | None = None,
                          rows: int | None = None) -> ExecStream:
        """Start a command with its stdio streamed (see :class:`ExecStream`);
        ``tty`` gives it a terminal of ``cols`` x ``rows`` (everything then
        comes as stdout). An unknown sandbox raises
        :class:`~tine.errors.NotFound` here."""
        req = ops.exec_request(argv, env=env, workdir=workdir, timeout=timeout, tty=tty,
                               cols=cols, rows=rows)
        conn = await self._t.websocket(ops.exec_ws_path(sandbox_id))
        stream = ExecStream(conn)
        try:
            await stream._send(_stream.request_frame(req))
        except OSError as e:
            await stream.close()
            raise TransportError(f"send the exec request: {e}") from e
        return stream

    async def read_file(self, sandbox_id: str, path: str, *, out: IO[bytes] | None = None) -> bytes:
        """See :meth:`tine.Client.read_file`."""
        return await self._t.do(ops.read_file(sandbox_id, path, out))

    async def write_file(self, sandbox_id: str, path: str, data: bytes | str | IO[bytes], *,
                         mode: int | None = None, uid: int | None = None,
                         gid: int | None = None) -> m.FileInfo:
        """See :meth:`tine.Client.write_file` (a file object is read in the loop's thread)."""
        return await self._t.do(ops.write_file(sandbox_id, path, data, mode=mode, uid=uid, gid=gid))

    async def stat(self, sandbox_id: str, path: str) -> m.FileInfo:
        """See :meth:`tine.Client.stat`."""
        return await self._t.do(ops.stat(sandbox_id, path))

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[m.FileInfo]:
        """See :meth:`tine.Client.list_dir`."""
        return await self._t.do(ops.list_dir(sandbox_id, path))

    async def mkdir(self, sandbox_id: str, path: str, *, mode: int | None = None,
                    parents: bool = False, uid: int | None = None,
                    gid: int | None = None) -> m.FileInfo:
        """See :meth:`tine.Client.mkdir`."""
        return await self._t.do(ops.mkdir(sandbox_id, path, mode=mode, parents=parents, uid=uid, gid=gid))

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        """See :meth:`tine.Client.remove`."""
        await self._t.do(ops.remove(sandbox_id, path, recursive=recursive))

    async def download_archive(self, sandbox_id: str, path: str, *,
                               out: IO[bytes] | None = None) -> bytes:
        """See :meth:`tine.Client.download_archive`."""
        return await self._t.do(ops.download_archive(sandbox_id, path, out))

    async def upload_archive(self, sandbox_id: str, path: str, tar: bytes | IO[bytes]) -> None:
        """See :meth:`tine.Client.upload_archive`."""
        await self._t.do(ops.upload_archive(sandbox_id, path, tar))

    async def put_function(self, spec: ops.FunctionSpecLike) -> m.Function:
        """See :meth:`tine.Client.put_function`."""
        return await self._t.do(ops.put_function(spec))

    async def functions(self) -> builtins.list[m.Function]:
        """See :meth:`tine.Client.functions`."""
        return await self._t.do(ops.functions())

    async def function(self, name: str) -> m.Function:
        """See :meth:`tine.Client.function`."""
        return await self._t.do(ops.function(name))

    async def delete_function(self, name: str) -> None:
        """See :meth:`tine.Client.delete_function`."""
        await self._t.do(ops.delete_function(name))

    async def invoke(self, name: str, payload: Any = None) -> m.Invocation:
        """See :meth:`tine.Client.invoke`."""
        return await self._t.do(ops.invoke(name, payload))

    async def invoke_raw(self, name: str, data: bytes) -> m.Invocation:
        """See :meth:`tine.Client.invoke_raw`."""
        return await self._t.do(ops.invoke_raw(name, data))

    async def put_script(self, src: str | bytes) -> str:
        """See :meth:`tine.Client.put_script`."""
        return await self._t.do(ops.put_script(src))

    async def invoke_script(self, digest: str, payload: Any = None) -> m.Invocation:
        """See :meth:`tine.Client.invoke_script`."""
        return await self._t.do(ops.invoke_script(digest, payload))

    async def create_desktop(self, spec: ops.DesktopSpecLike = None, *, width: int | None = None,
                             height: int | None = None,
                             apps: Sequence[Sequence[str]] | None = None,
                             limits: m.Limits | Mapping[str, Any] | None = None,
                             ttl_seconds: int | None = None,
                             idle_timeout_seconds: int | None = None) -> m.Desktop:
        """See :meth:`tine.Client.create_desktop`."""
        return await self._t.do(ops.create_desktop(ops.desktop_spec(
            spec, width=width, height=height, apps=apps, limits=limits, ttl_seconds=ttl_seconds,
            idle_timeout_seconds=idle_timeout_seconds)))

    async def desktops(self) -> builtins.list[m.Desktop]:
        """See :meth:`tine.Client.desktops`."""
        return await self._t.do(ops.list_desktops())

    async def desktop(self, desktop_id: str) -> m.Desktop:
        """See :meth:`tine.Client.desktop`."""
        return await self._t.do(ops.get_desktop(desktop_id))

    async def delete_desktop(self, desktop_id: str) -> None:
        """See :meth:`tine.Client.delete_desktop`."""
        await self._t.do(ops.delete_desktop(desktop_id))

    # --- snapshots ---

    async def snapshot(self, sandbox_id: str, *, tier: str | None = None, name: str | None = None) -> m.Snapshot:
        """See :meth:`tine.Client.snapshot`."""
        return await self._t.do(ops.snapshot(sandbox_id, tier=tier, name=name))

    async def snapshots(self) -> builtins.list[m.Snapshot]:
        """See :meth:`tine.Client.snapshots`."""
        return await self._t.do(ops.list_snapshots())

    async def get_snapshot(self, snapshot_id: str) -> m.Snapshot:
        """See :meth:`tine.Client.get_snapshot`."""
        return await self._t.do(ops.get_snapshot(snapshot_id))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """See :meth:`tine.Client.delete_snapshot`."""
        await self._t.do(ops.delete_snapshot(snapshot_id))

    async def fork(self, snapshot_id: str, count: int = 1, **opts: Any) -> m.ForkResult:
        """See :meth:`tine.Client.fork`."""
        return await self._t.do(ops.fork(snapshot_id, ops.fork_body(count, **opts)))

    async def fork_sandbox(self, sandbox_id: str, count: int = 1, **opts: Any) -> m.ForkResult:
        """See :meth:`tine.Client.fork_sandbox`."""
        return await self._t.do(ops.fork_sandbox(sandbox_id, ops.fork_body(count, **opts)))

    async def aci(self, desktop_id: str) -> "DesktopSession":
        """Open an ACI session on a desktop (see :class:`DesktopSession`); an
        unknown desktop raises :class:`~tine.errors.NotFound` here."""
        conn = await self._t.websocket(ops.aci_ws_path(desktop_id), "aci session")
        return await DesktopSession._open(conn)
