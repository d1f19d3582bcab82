"""Parts that need no daemon: endpoints, errors, models, WebSocket framing,
the desktop placeholder."""

from __future__ import annotations

import os
import struct
import unittest
from unittest import mock

import _daemon  # noqa: F401  (puts the SDK's tree on sys.path)

import tine
from tine import _ops, _ws, desktop
from tine.errors import error_from_response
from tine.models import Invocation, SandboxSpec, Limits, to_json


class EndpointTest(unittest.TestCase):
    def test_env(self) -> None:
        with mock.patch.dict(os.environ, {"TINE_HOST": "", "TINE_SOCKET": "/x.sock"}):
            self.assertEqual(_ops.resolve_endpoint().socket, "/x.sock")
        with mock.patch.dict(os.environ, {"TINE_HOST": "https://h:8443", "TINE_TOKEN": "t"}):
            ep = _ops.resolve_endpoint()
            self.assertEqual((ep.host, ep.port, ep.tls, ep.token), ("h", 8443, True, "t"))
            self.assertEqual(_ops.resolve_endpoint("/s").socket, "/s")  # explicit wins
        with mock.patch.dict(os.environ, {"TINE_HOST": "", "TINE_SOCKET": ""}):
            self.assertEqual(_ops.resolve_endpoint().socket, tine.DEFAULT_SOCKET)
        self.assertEqual(_ops.resolve_endpoint(host="10.0.0.1:7070", token="k").host_header, "10.0.0.1:7070")
        with self.assertRaises(ValueError):
            _ops.resolve_endpoint(host="ftp://x")

    def test_bearer(self) -> None:
        ep = _ops.resolve_endpoint(host="h:1", token="secret")
        self.assertEqual(_ops.health().headers(ep)["Authorization"], "Bearer secret")
        self.assertNotIn("Authorization", _ops.health().headers(_ops.resolve_endpoint("/s")))


class ErrorsTest(unittest.TestCase):
    def test_codes(self) -> None:
        e = error_from_response(429, "Too Many Requests", {"Retry-After": "3"},
                                b'{"code":"capacity","message":"full"}')
        self.assertIsInstance(e, tine.Capacity)
        self.assertEqual((e.code, e.message, e.status, e.retry_after), ("capacity", "full", 429, 3.0))
        e = error_from_response(502, "Bad Gateway", {}, b"<html>proxy</html>")
        self.assertIsInstance(e, tine.Internal)
        self.assertIn("proxy", e.message)
        e = error_from_response(418, "?", {}, b'{"code":"new_code","message":"m"}')
        self.assertEqual((type(e), e.code), (tine.TineError, "new_code"))


class ModelsTest(unittest.TestCase):
    def test_spec_encoding_drops_none(self) -> None:
        self.assertEqual(to_json(SandboxSpec(hostname="h", limits=Limits(pids=5))),
                         {"hostname": "h", "limits": {"pids": 5}})

    def test_exec_request(self) -> None:
        r = _ops.exec_request(["cat"], stdin=b"hi", env={"A": "1"}, timeout=1.5)
        self.assertEqual(r, {"argv": ["cat"], "env": ["A=1"], "stdin": "aGk=", "timeout_ms": 1500})
        with self.assertRaises(TypeError):
            _ops.exec_request("echo hi")

    def test_invocation(self) -> None:
        inv = Invocation.from_wire({"status": "ok", "result_base64": "AAE=", "future_field": 1,
                                    "timings": {"cold": True, "total": 2.5}})
        self.assertEqual((inv.result_bytes, inv.timings.cold, inv.timings.total), (b"\x00\x01", True, 2.5))


class WebSocketTest(unittest.TestCase):
    def test_round_trip_sizes(self) -> None:
        for n in (0, 5, 125, 126, 65535, 65536, 200_000):
            payload = os.urandom(n)
            frame = _ws.encode(_ws.BINARY, payload)
            self.assertTrue(frame[1] & 0x80, "client frames are masked")
            dec = _ws.Decoder()
            got = []
            for i in range(0, len(frame), 7000):  # arrives in pieces
                got += dec.feed(frame[i:i + 7000])
            self.assertEqual(got, [(_ws.BINARY, payload)])

    def test_fragments_and_control(self) -> None:
        def unmasked(fin: bool, op: int, p: bytes) -> bytes:  # as a server sends
            return bytes([(0x80 if fin else 0) | op, len(p)]) + p

        data = (unmasked(False, _ws.TEXT, b'{"a"') + unmasked(True, _ws.PING, b"p")
                + unmasked(True, _ws.CONT, b":1}") + unmasked(True, _ws.CLOSE, struct.pack("!H", 1000)))
        self.assertEqual(_ws.Decoder().feed(data),
                         [(_ws.PING, b"p"), (_ws.TEXT, b'{"a":1}'), (_ws.CLOSE, b"\x03\xe8")])

    def test_accept(self) -> None:
        # RFC 6455's example key and answer.
        _ws.check_accept("dGhlIHNhbXBsZSBub25jZQ==", {"Upgrade": "websocket",
                         "Sec-WebSocket-Accept": "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="})
        with self.assertRaises(_ws.ProtocolError):
            _ws.check_accept("dGhlIHNhbXBsZSBub25jZQ==", {"Upgrade": "websocket"})


class DesktopPlaceholderTest(unittest.TestCase):
    def test_not_implemented(self) -> None:
        with self.assertRaisesRegex(NotImplementedError, "desktop"):
            tine.Client("/nonexistent.sock").create_desktop()
        with self.assertRaises(NotImplementedError):
            desktop.Desktop()


if __name__ == "__main__":
    unittest.main()
