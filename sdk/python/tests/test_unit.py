"""Parts that need no daemon: endpoints, errors, models, WebSocket framing,
the ACI protocol."""

from __future__ import annotations

import json
import os
import struct
import unittest
from unittest import mock

import _daemon  # noqa: F401  (puts the SDK's tree on sys.path)

import tine
from tine import _aci, _ops, _ws
from tine.errors import error_from_response
from tine.models import Invocation, Limits, SandboxSpec, from_json, to_json


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


def server_frame(op: int, p: bytes) -> bytes:
    """An unmasked frame, as a server sends."""
    if len(p) < 126:
        return bytes([0x80 | op, len(p)]) + p
    return bytes([0x80 | op, 126]) + struct.pack("!H", len(p)) + p


class ACIProtocolTest(unittest.TestCase):
    def test_requests(self) -> None:
        self.assertEqual(_aci.click(0, 5).request, {"op": "click", "x": 0, "y": 5})
        self.assertEqual(_aci.scroll(dy=3).request, {"op": "scroll", "dy": 3})
        self.assertEqual(_aci.screenshot(format="jpeg", region=(1, 2, 3, 4), cursor=False).request,
                         {"op": "screenshot", "screenshot": {"format": "jpeg", "region": [1, 2, 3, 4]}})
        st = _aci.step([{"op": "key", "keys": "a", "id": 9}, _aci.move(1, 2)], {"cursor": True})
        self.assertEqual(st.request, {"op": "step", "actions": [{"op": "key", "keys": "a"},
                                                                {"op": "move", "x": 1, "y": 2}],
                                      "observe": {"cursor": True}})
        with self.assertRaises(TypeError):
            _aci.launch("xterm")
        body = _ops.desktop_spec({"width": 800, "apps": [["a"]]}, height=600, limits=Limits(pids=9))
        self.assertEqual(body, {"width": 800, "height": 600, "apps": [["a"]], "limits": {"pids": 9}})
        self.assertEqual(_ops.desktop_spec(tine.DesktopSpec(ttl_seconds=5)), {"ttl_seconds": 5})

    def test_replies(self) -> None:
        p = _aci.Protocol()
        rid, frame = p.encode({"op": "screen"})
        self.assertEqual(rid, 1)
        dec = _ws.Decoder()
        dec._buf += frame  # a masked client frame decodes as well
        self.assertEqual(json.loads(dec.feed(b"")[0][1]), {"op": "screen", "id": 1})
        welcome = b'{"type":"welcome","version":1,"capabilities":["step"],"width":8,"height":6}'
        head = b'{"id":2,"ok":true,"frame_hash":"h","format":"png","width":8,"height":6}'
        data = (server_frame(_ws.TEXT, welcome) + server_frame(_ws.TEXT, b'{"id":1,"ok":true,"width":8,"height":6}')
                + server_frame(_ws.PING, b"x")
                + server_frame(_ws.BINARY, struct.pack("!I", len(head)) + head + b"IMG"))
        out, back = [], b""
        for k in range(0, len(data), 5):  # arrives in pieces
            o, b = p.receive(data[k:k + 5])
            out += o
            back += b
        assert p.welcome is not None
        self.assertEqual((p.welcome.version, p.welcome.capabilities, p.welcome.width), (1, ["step"], 8))
        self.assertEqual([(i, img) for i, _, img in out], [(1, None), (2, b"IMG")])
        self.assertEqual(_aci.finish(_aci.screen(), out[0][1], None), (8, 6))
        shot = _aci.finish(_aci.screenshot(), out[1][1], out[1][2])
        self.assertEqual((shot.frame_hash, shot.width, shot.data), ("h", 8, b"IMG"))
        self.assertEqual(back[0] & 0x0F, _ws.PONG)
        err = {"id": 3, "ok": False, "error": {"code": "unknown_key", "message": "no key"}}
        with self.assertRaises(tine.ACIError) as cm:
            _aci.finish(_aci.key("x"), err, None)
        self.assertEqual((cm.exception.code, cm.exception.reply), ("unknown_key", err))
        _, back = p.receive(server_frame(_ws.CLOSE, struct.pack("!H", 1001) + b"bye"))
        self.assertTrue(p.done)
        self.assertIn("1001: bye", str(p.ended()))
        self.assertEqual(back[0] & 0x0F, _ws.CLOSE)

    def test_not_a_welcome(self) -> None:
        p = _aci.Protocol()
        p.receive(server_frame(_ws.TEXT, b'{"id":1,"ok":true}'))
        self.assertTrue(p.done)
        self.assertIsInstance(p.ended(), tine.TransportError)

    def test_pending_in_order(self) -> None:
        q: _aci.Pending[str] = _aci.Pending()
        for i in (1, 2, 3):
            q.add(i, f"r{i}")
        self.assertEqual(q.pop(2), "r2")
        self.assertEqual(q.pop(0), "r1")  # id 0: the oldest waiting
        self.assertIsNone(q.pop(7))
        q.discard(3)
        self.assertEqual(len(q), 0)

    def test_models(self) -> None:
        w = tine.Window.from_wire({"id": 5, "class": "XTerm", "title": "t", "new": 1})
        self.assertEqual((w.id, w.class_, w.title), (5, "XTerm", "t"))
        d = from_json(tine.Desktop, {"id": "x", "state": "running", "width": 3, "ready_ms": 1.5})
        self.assertEqual((d.id, d.width, d.ready_ms), ("x", 3, 1.5))


if __name__ == "__main__":
    unittest.main()


class ScreencastUnitTest(unittest.TestCase):
    """The PNG reader against PNGs written with every filter type, and the
    compositor's sequence check."""

    @staticmethod
    def png(w: int, h: int, rgb: bytes, filters: list[int]) -> bytes:
        import zlib

        def paeth(a: int, b: int, c: int) -> int:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            return a if pa <= pb and pa <= pc else (b if pb <= pc else c)

        stride, raw, prev = w * 3, bytearray(), bytes(w * 3)
        for y in range(h):
            row, f = rgb[y * stride:(y + 1) * stride], filters[y % len(filters)]
            out = bytearray()
            for i, v in enumerate(row):
                a = row[i - 3] if i >= 3 else 0
                b, c = prev[i], prev[i - 3] if i >= 3 else 0
                pred = [0, a, b, (a + b) >> 1, paeth(a, b, c)][f]
                out.append((v - pred) & 0xFF)
            raw += bytes([f]) + out
            prev = row

        def chunk(kind: bytes, body: bytes) -> bytes:
            return struct.pack("!I", len(body)) + kind + body + struct.pack("!I", zlib.crc32(kind + body))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack("!IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))

    def test_decode_png_every_filter(self) -> None:
        from tine.screencast import decode_png
        import random
        rnd = random.Random(7)
        w, h = 13, 10
        rgb = bytes(rnd.randrange(256) for _ in range(w * h * 3))
        for filters in ([0], [1], [2], [3], [4], [0, 1, 2, 3, 4]):
            self.assertEqual(decode_png(self.png(w, h, rgb, filters)), (w, h, rgb), filters)

    def test_compositor(self) -> None:
        from tine.screencast import Compositor, SequenceGap
        key = self.png(4, 2, bytes(range(24)), [2])
        tile = self.png(1, 1, b"\xff\x00\x01", [0])
        c = Compositor()
        with self.assertRaises(SequenceGap):  # a delta before any keyframe
            c.apply({"seq": 1, "kind": "delta", "width": 4, "height": 2, "format": "png", "rects": []}, b"")
        c.apply({"seq": 1, "kind": "key", "width": 4, "height": 2, "format": "png", "frame_hash": "k",
                 "rects": [{"x": 0, "y": 0, "w": 4, "h": 2, "bytes": len(key)}]}, key)
        self.assertEqual(bytes(c.rgb or b""), bytes(range(24)))
        c.apply({"seq": 2, "kind": "delta", "width": 4, "height": 2, "format": "png",
                 "rects": [{"x": 2, "y": 1, "w": 1, "h": 1, "bytes": len(tile)}]}, tile)
        want = bytearray(range(24))
        want[18:21] = b"\xff\x00\x01"
        self.assertEqual(bytes(c.rgb or b""), bytes(want))
        with self.assertRaises(SequenceGap):  # 3 is missing
            c.apply({"seq": 4, "kind": "delta", "width": 4, "height": 2, "format": "png", "rects": []}, b"")
        self.assertEqual(c.seq, 2)


class NetworkModelTest(unittest.TestCase):
    def test_spec_and_policy_bodies(self):
        spec = SandboxSpec(network="egress", allow=["pypi.org"], publish=[tine.Port(port=80, host_port=8080)],
                           inject=[tine.Injection(host="api.test", headers={"X-Key": "k"}, tls=True)])
        body = to_json(spec)
        self.assertEqual(body["publish"], [{"port": 80, "host_port": 8080}])
        self.assertEqual(body["inject"], [{"host": "api.test", "headers": {"X-Key": "k"}, "tls": True}])
        call = _ops.set_network("a/b", tine.NetworkPolicy(allow=["*.github.com:443"]))
        self.assertEqual((call.method, call.path), ("PUT", "/v1/sandboxes/a%2Fb/network"))
        self.assertEqual(json.loads(call.body), {"allow": ["*.github.com:443"]})

    def test_sandbox_network_decoded(self):
        s = from_json(tine.Sandbox, {"id": "x", "state": "running", "network": {
            "mode": "egress", "address": "10.201.0.2", "ports": [{"port": 80, "host_port": 8080, "protocol": "tcp"}]}})
        self.assertEqual(s.network.mode, "egress")
        self.assertEqual(s.network.ports[0].host_port, 8080)


class FrameCacheTest(unittest.TestCase):
    """The frame cache's bookkeeping, driven as the sessions drive it."""

    def test_one_fetch_for_many_and_waiters_woken(self) -> None:
        import asyncio

        from tine import frames
        from tine.models import Screenshot, Welcome

        c = tine.FrameCache()
        w = Welcome()
        probe = Screenshot(frame_hash="h", width=4, height=4, format="png", not_modified=True)
        lead = c.answer(w, {}, probe)
        self.assertIsInstance(lead, frames.Lead)
        flight = c.answer(w, {}, probe)
        self.assertIsInstance(flight, frames.Flight)

        async def waiter() -> Screenshot:
            await flight.wait_async()
            got = c.answer(w, {}, probe)
            assert isinstance(got, Screenshot)
            return got

        async def run() -> Screenshot:
            t = asyncio.ensure_future(waiter())
            await asyncio.sleep(0)
            lead.land(Screenshot(frame_hash="h", width=4, height=4, format="png", data=b"PNG"))
            return await t

        shared = asyncio.run(run())
        self.assertEqual((shared.data, shared.not_modified), (b"PNG", False))
        self.assertEqual((c.stats.fetched, c.stats.shared, c.stats.saved_bytes), (1, 1, 3))
        # The caller's own if_none_match stays not_modified; another
        # encoding of the same pixels is another image.
        self.assertTrue(c.answer(w, {"if_none_match": "h"}, probe).not_modified)  # type: ignore[union-attr]
        jpeg = Screenshot(frame_hash="h", width=4, height=4, format="jpeg", not_modified=True)
        self.assertIsInstance(c.answer(w, {"quality": 50}, jpeg), frames.Lead)

    def test_bounded_and_abandoned(self) -> None:
        from tine import frames
        from tine.models import Screenshot, Welcome

        c = tine.FrameCache(max_bytes=5)
        w = Welcome()
        for h in ("a", "b"):
            lead = c.answer(w, {}, Screenshot(frame_hash=h, format="png", not_modified=True))
            assert isinstance(lead, frames.Lead)
            lead.land(Screenshot(frame_hash=h, format="png", data=b"123"))
        self.assertEqual((c.stats.frames, c.stats.bytes), (1, 3))  # "a" went
        lead = c.answer(w, {}, Screenshot(frame_hash="x", format="png", not_modified=True))
        assert isinstance(lead, frames.Lead)
        lead.abandon()  # a failed fetch: the next asker fetches
        self.assertIsInstance(c.answer(w, {}, Screenshot(frame_hash="x", format="png", not_modified=True)), frames.Lead)
