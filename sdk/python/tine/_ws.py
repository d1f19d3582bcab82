"""A minimal RFC 6455 WebSocket client, without I/O: the handshake's
headers and check, frame encoding (masked, as a client must) and an
incremental decoder. The exec stream's transports feed it bytes."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Mapping

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ProtocolError(Exception):
    """The peer broke the WebSocket protocol."""


def handshake_headers() -> tuple[str, dict[str, str]]:
    """A fresh key and the headers that ask for an upgrade."""
    key = base64.b64encode(os.urandom(16)).decode()
    return key, {"Upgrade": "websocket", "Connection": "Upgrade",
                 "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}


def check_accept(key: str, headers: Mapping[str, str]) -> None:
    """Raise :class:`ProtocolError` unless a 101 answer's headers accept ``key``."""
    want = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
    got = {k.lower(): v for k, v in headers.items()}
    if got.get("upgrade", "").lower() != "websocket" or got.get("sec-websocket-accept") != want:
        raise ProtocolError("the daemon did not accept the WebSocket upgrade")


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if n == 0:
        return data
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


def encode(opcode: int, payload: bytes = b"") -> bytes:
    """One final, masked frame."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    key = os.urandom(4)
    return head + key + _mask(payload, key)


def encode_close(code: int = 1000, reason: str = "") -> bytes:
    """A close frame with a status code."""
    return encode(CLOSE, struct.pack("!H", code) + reason.encode()[:120])


class Decoder:
    """Turns the bytes a peer sends into whole messages ``(opcode, payload)``:
    fragments are joined; control frames (close, ping, pong) come out as
    they arrive."""

    def __init__(self, max_message: int = 64 << 20) -> None:
        self._buf = bytearray()
        self._frag_op: int | None = None
        self._frags = bytearray()
        self._max = max_message

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add received bytes; return the messages now complete."""
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while (frame := self._frame()) is not None:
            fin, op, payload = frame
            if op >= CLOSE:
                out.append((op, payload))
            elif op == CONT:
                if self._frag_op is None:
                    raise ProtocolError("continuation frame without a message")
                self._frags += payload
                if fin:
                    out.append((self._frag_op, bytes(self._frags)))
                    self._frag_op, self._frags = None, bytearray()
            elif fin:
                out.append((op, payload))
            else:
                self._frag_op, self._frags = op, bytearray(payload)
            if len(self._frags) > self._max:
                raise ProtocolError("message too large")
        return out

    def _frame(self) -> tuple[bool, int, bytes] | None:
        b = self._buf
        if len(b) < 2:
            return None
        fin, op, masked, n = bool(b[0] & 0x80), b[0] & 0x0F, bool(b[1] & 0x80), b[1] & 0x7F
        pos = 2
        if n == 126:
            if len(b) < 4:
                return None
            (n,), pos = struct.unpack_from("!H", b, 2), 4
        elif n == 127:
            if len(b) < 10:
                return None
            (n,), pos = struct.unpack_from("!Q", b, 2), 10
        if n > self._max:
            raise ProtocolError("frame too large")
        key = b""
        if masked:
            key, pos = bytes(b[pos:pos + 4]), pos + 4
        if len(b) < pos + n:
            return None
        payload = bytes(b[pos:pos + n])
        del b[:pos + n]
        return fin, op, (_mask(payload, key) if masked else payload)
