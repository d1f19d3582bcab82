"""The exec stream's protocol without I/O (docs/api.md, "Exec, streaming
over WebSocket"), shared by :class:`tine.client.ExecStream` (sync) and
:class:`tine.aio.ExecStream` (asyncio): what to send for stdin and control
messages, and what the daemon's bytes mean."""

from __future__ import annotations

import json
from typing import Any

from . import _ws as ws
from . import models as m
from .errors import TineError, TransportError, error_for

STDIN, STDOUT, STDERR = 0, 1, 2
_STDIN_CHUNK = 32 << 10  # the Go client's frame size


def encode_head(method: str, target: str, headers: dict[str, str]) -> bytes:
    """An HTTP/1.1 request's head."""
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n"


def parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """An HTTP/1.x answer's status, reason and headers (names lower-cased)
    from its head (up to the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise TransportError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


def request_frame(req: dict[str, Any]) -> bytes:
    """The first message: the exec request."""
    return ws.encode(ws.TEXT, json.dumps(req).encode())


def stdin_frames(data: bytes | str) -> bytes:
    """Frames carrying bytes for the command's stdin."""
    b = data.encode() if isinstance(data, str) else bytes(data)
    return b"".join(ws.encode(ws.BINARY, bytes([STDIN]) + b[i:i + _STDIN_CHUNK])
                    for i in range(0, len(b), _STDIN_CHUNK))


def control_frame(msg: dict[str, Any]) -> bytes:
    """A control message: close_stdin, resize or signal."""
    return ws.encode(ws.TEXT, json.dumps(msg).encode())


def close_stdin() -> bytes:
    return control_frame({"type": "close_stdin"})


def resize(cols: int, rows: int) -> bytes:
    return control_frame({"type": "resize", "cols": cols, "rows": rows})


def signal(signum: int) -> bytes:
    return control_frame({"type": "signal", "signal": int(signum)})


class Protocol:
    """The receiving side. Feed it what the daemon sends; it returns output
    chunks ``(fd, data)`` and bytes to send back (pongs, the close). Once
    :attr:`done`, :attr:`exit` says how the command ended, or :attr:`error`
    why the stream failed."""

    def __init__(self) -> None:
        self._dec = ws.Decoder()
        self.done = False
        self.exit: m.ExecExit | None = None
        self.error: TineError | None = None

    def receive(self, data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
        out: list[tuple[int, bytes]] = []
        reply = b""
        if self.done:
            return out, reply
        if not data:
            return out, self._fail(TransportError("exec stream ended before the command did"))
        try:
            msgs = self._dec.feed(data)
        except ws.ProtocolError as e:
            return out, self._fail(TransportError(f"exec stream: {e}"))
        for op, payload in msgs:
            if self.done:
                break
            if op == ws.BINARY and payload[:1] in (b"\x01", b"\x02"):
                out.append((payload[0], payload[1:]))
            elif op == ws.PING:
                reply += ws.encode(ws.PONG, payload)
            elif op == ws.CLOSE:
                reply += self._fail(TransportError("exec stream closed by the daemon before the command ended"))
            elif op == ws.TEXT:
                msg = json.loads(payload)
                if msg.get("type") == "exit":
                    self.exit = m.from_json(m.ExecExit, msg.get("exit"))
                    self.done = True
                    reply += ws.encode_close(1000)
                elif msg.get("type") == "error":
                    err = msg.get("error") or {}
                    reply += self._fail(error_for(err.get("code", "internal"),
                                                  err.get("message", "exec stream failed")))
        return out, reply

    def _fail(self, err: TineError) -> bytes:
        self.error, self.done = err, True
        return ws.encode_close(1000)

    def result(self, stdout: bytes, stderr: bytes) -> m.ExecResult:
        """The exit with collected output, as a JSON exec's result."""
        if self.exit is None:
            raise self.error or TransportError("exec stream not finished")
        e = self.exit
        return m.ExecResult(exit_code=e.exit_code, reason=e.reason, signal=e.signal,
                            timings_ms=e.timings_ms, stdout=stdout, stderr=stderr)
