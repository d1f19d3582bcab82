"""Code-interpreter sessions: a stateful Python interpreter in a sandbox
(docs/api.md, "Code-interpreter sessions"), for the sync and the asyncio
client::

    s = client.session(sandbox)          # or: await aclient.session(sandbox)
    s.run("x = 41")
    assert s.run("x + 1").text == "42"

``run`` answers with the whole :class:`~tine.models.Execution`; given any
of ``on_stdout``, ``on_stderr``, ``on_result``, ``on_error`` it streams the
cell over a WebSocket instead and calls them as things happen. One cell
runs at a time per session; others queue behind it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from . import _ops as ops
from . import _ws as ws
from . import models as m
from .errors import TineError, TransportError, error_for

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

OnText = Callable[[str], Any]
OnResult = Callable[[m.Result], Any]
OnError = Callable[[m.CellError], Any]


class _CellStream:
    """The receiving side of a streamed cell, without I/O: feed it what the
    daemon sends; it calls the callbacks and returns bytes to send back
    (pongs, the close). Once :attr:`done`, :attr:`execution` or
    :attr:`error` is set."""

    def __init__(self, on_stdout: OnText | None, on_stderr: OnText | None,
                 on_result: OnResult | None, on_error: OnError | None) -> None:
        self._dec = ws.Decoder(max_message=128 << 20)
        self._cb = {"stdout": on_stdout, "stderr": on_stderr}
        self._on_result, self._on_error = on_result, on_error
        self.done = False
        self.execution: m.Execution | None = None
        self.error: TineError | None = None
        self._out: list[str] = []
        self._err: list[str] = []

    def receive(self, data: bytes) -> bytes:
        if self.done:
            return b""
        if not data:
            return self._fail(TransportError("session stream ended before the cell did"))
        try:
            msgs = self._dec.feed(data)
        except ws.ProtocolError as e:
            return self._fail(TransportError(f"session stream: {e}"))
        reply = b""
        for op, payload in msgs:
            if self.done:
                break
            if op == ws.PING:
                reply += ws.encode(ws.PONG, payload)
            elif op == ws.CLOSE:
                reply += self._fail(TransportError("session stream closed by the daemon before the cell ended"))
            elif op == ws.TEXT:
                reply += self._event(json.loads(payload))
        return reply

    def _event(self, e: dict[str, Any]) -> bytes:
        t = e.get("type")
        if e.get("failure"):
            f = e["failure"]
            return self._fail(error_for(f.get("code", "internal"), f.get("message", "the cell could not run")))
        if t in ("stdout", "stderr"):
            (self._out if t == "stdout" else self._err).append(e.get("text", ""))
            cb = self._cb[t]
            if cb:
                cb(e.get("text", ""))
        elif t == "result" and self._on_result:
            self._on_result(m.from_json(m.Result, e.get("result")))
        elif t == "error" and self._on_error:
            self._on_error(m.from_json(m.CellError, e.get("error")))
        elif t == "end":
            ex = m.from_json(m.Execution, e.get("execution"))
            ex.stdout, ex.stderr = "".join(self._out), "".join(self._err)
            self.execution, self.done = ex, True
            return ws.encode_close(1000)
        return b""

    def _fail(self, err: TineError) -> bytes:
        self.error, self.done = err, True
        return ws.encode_close(1000)

    def result(self) -> m.Execution:
        if self.execution is None:
            raise self.error or TransportError("session stream not finished")
        return self.execution


def _streaming(*callbacks: object) -> bool:
    return any(cb is not None for cb in callbacks)


class Session:
    """A session of the sync :class:`~tine.Client` (see the module)."""

    def __init__(self, client: "Client", info: m.SessionInfo) -> None:
        self._c = client
        self.id = info.id
        self.sandbox_id = info.sandbox_id

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, sandbox_id={self.sandbox_id!r})"

    def info(self) -> m.SessionInfo:
        """The session now: state, execution count, cells queued."""
        return self._c._do(ops.get_session(self.sandbox_id, self.id))

    def run(self, code: str, *, timeout: float | None = None, on_stdout: OnText | None = None,
            on_stderr: OnText | None = None, on_result: OnResult | None = None,
            on_error: OnError | None = None) -> m.Execution:
        """Run one cell (after those queued before it) and return its whole
        result; what the cell raised is in ``error``, not raised here.
        ``timeout`` (seconds) interrupts it. With a callback, the cell is
        streamed and the callbacks see its events as they happen."""
        req = ops.cell_request(code, timeout)
        if not _streaming(on_stdout, on_stderr, on_result, on_error):
            return self._c._do(ops.run_cell(self.sandbox_id, self.id, req))
        sock, early = self._c._websocket(ops.run_cell_ws_path(self.sandbox_id, self.id), "session stream")
        p = _CellStream(on_stdout, on_stderr, on_result, on_error)
        try:
            sock.sendall(ws.encode(ws.TEXT, json.dumps(req).encode()))
            data = early
            while not p.done:
                if not data:
                    data = sock.recv(64 << 10)
                reply, data = p.receive(data), b""
                if reply:
                    try:
                        sock.sendall(reply)
                    except OSError:
                        pass
        except OSError as e:
            raise TransportError(f"session stream: {e}") from e
        finally:
            sock.close()
        return p.result()

    def interrupt(self) -> None:
        """Raise KeyboardInterrupt in the running cell; the session survives."""
        self._c._do(ops.interrupt_session(self.sandbox_id, self.id))

    def restart(self) -> None:
        """A fresh interpreter (a dead session comes back); state is lost."""
        self._c._do(ops.restart_session(self.sandbox_id, self.id))

    def fork(self, n: int = 1) -> list["Session"]:
        """Fork this session (created with ``forkable=True``) live, between
        cells, into ``n`` new sandboxes; each returned session holds a copy
        of this one's state now, in a sandbox of its own, and this one goes
        on. Refused (Conflict) while a cell runs or while the
        interpreter holds threads, sockets or child processes."""
        res = self._c._do(ops.fork_session(self.sandbox_id, self.id, n))
        return [Session(self._c, info) for info in res.sessions]

    def delete(self) -> None:
        """End the session."""
        self._c._do(ops.delete_session(self.sandbox_id, self.id))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


class AsyncSession:
    """A session of :class:`~tine.AsyncClient`: :class:`Session`'s verbs,
    awaited."""

    def __init__(self, client: "AsyncClient", info: m.SessionInfo) -> None:
        self._c = client
        self.id = info.id
        self.sandbox_id = info.sandbox_id

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, sandbox_id={self.sandbox_id!r})"

    async def info(self) -> m.SessionInfo:
        return await self._c._t.do(ops.get_session(self.sandbox_id, self.id))

    async def run(self, code: str, *, timeout: float | None = None, on_stdout: OnText | None = None,
                  on_stderr: OnText | None = None, on_result: OnResult | None = None,
                  on_error: OnError | None = None) -> m.Execution:
        """See :meth:`Session.run`."""
        req = ops.cell_request(code, timeout)
        if not _streaming(on_stdout, on_stderr, on_result, on_error):
            return await self._c._t.do(ops.run_cell(self.sandbox_id, self.id, req))
        conn = await self._c._t.websocket(ops.run_cell_ws_path(self.sandbox_id, self.id), "session stream")
        p = _CellStream(on_stdout, on_stderr, on_result, on_error)
        try:
            conn.writer.write(ws.encode(ws.TEXT, json.dumps(req).encode()))
            await conn.writer.drain()
            while not p.done:
                reply = p.receive(await conn.reader.read(64 << 10))
                if reply:
                    try:
                        conn.writer.write(reply)
                        await conn.writer.drain()
                    except OSError:
                        pass
        except OSError as e:
            raise TransportError(f"session stream: {e}") from e
        finally:
            conn.close()
        return p.result()

    async def interrupt(self) -> None:
        await self._c._t.do(ops.interrupt_session(self.sandbox_id, self.id))

    async def restart(self) -> None:
        await self._c._t.do(ops.restart_session(self.sandbox_id, self.id))

    async def fork(self, n: int = 1) -> list["AsyncSession"]:
        """See :meth:`Session.fork`."""
        res = await self._c._t.do(ops.fork_session(self.sandbox_id, self.id, n))
        return [AsyncSession(self._c, info) for info in res.sessions]

    async def delete(self) -> None:
        await self._c._t.do(ops.delete_session(self.sandbox_id, self.id))

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()


def sandbox_id_of(sandbox: "str | m.Sandbox") -> str:
    """A sandbox's id, from the id or the :class:`~tine.models.Sandbox`."""
    return sandbox if isinstance(sandbox, str) else sandbox.id

