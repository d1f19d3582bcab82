"""Desktops against a real daemon: create/list/get/delete, the sync ACI
session (typing runs a command, PNG screenshots, not_modified, typed
errors, step), the asyncio session with pipelined requests, fleet.desktops."""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
import unittest
from typing import Any, Awaitable

from _daemon import Daemon, daemon

import tine
from tine import fleet

W, H = 640, 400
XTERM = {"width": W, "height": H, "apps": [["xterm"]], "ttl_seconds": 300}


def desktop_daemon() -> Daemon:
    """The shared daemon, or a skip when desktops cannot run here."""
    missing = [b for b in ("Xvfb", "openbox", "xterm") if shutil.which(b) is None]
    if missing:
        raise unittest.SkipTest("desktops need " + ", ".join(missing) + " on the host")
    d = daemon()
    with tine.Client(d.socket) as c:
        try:
            c.desktops()
        except tine.NotFound as e:
            raise unittest.SkipTest(f"this bin/tine has no desktops (rebuild it): {e.message}")
    return d


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height, from its signature and IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise AssertionError(f"not a PNG: {data[:16]!r}")
    w, h = struct.unpack("!II", data[16:24])
    return w, h


class DesktopTest(unittest.TestCase):
    d: Daemon
    c: tine.Client
    desk: tine.Desktop
    s: tine.DesktopSession

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = desktop_daemon()
        cls.c = tine.Client(cls.d.socket)
        cls.desk = cls.c.create_desktop(**XTERM)  # type: ignore[arg-type]
        cls.s = cls.c.aci(cls.desk.id)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.s.close()
            cls.c.delete_desktop(cls.desk.id)
        finally:
            cls.c.close()

    def test_lifecycle(self) -> None:
        d = self.desk
        self.assertEqual((d.width, d.height, d.state), (W, H, "running"))
        self.assertGreater(d.ready_ms, 0)
        self.assertIn(d.id, [x.id for x in self.c.desktops()])
        self.assertEqual(self.c.desktop(d.id).width, W)
        self.assertEqual(self.c.get(d.id).id, d.id)  # a desktop is a sandbox too
        w = self.s.welcome
        self.assertEqual((w.version, w.width, w.height), (1, W, H))
        self.assertIn("step", w.capabilities)
        with self.assertRaises(tine.NotFound):
            self.c.desktop("no-such-desktop")
        with self.assertRaises(tine.NotFound):
            self.c.aci("no-such-desktop")
        with self.assertRaises(tine.InvalidArgument):
            self.c.create_desktop(width=10, height=10)
        with self.assertRaises(TypeError):
            self.c.create_desktop(apps=["xterm"])

    def test_typing_runs_a_command(self) -> None:
        wins = self.s.windows()
        self.assertTrue(any(x.class_ == "XTerm" and x.focused for x in wins), wins)
        self.s.type("echo hi > /tmp/from-python\n")
        deadline = time.monotonic() + 10
        while True:
            try:
                self.assertEqual(self.c.read_file(self.desk.id, "/tmp/from-python"), b"hi\n")
                break
            except (tine.NotFound, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def test_screenshots(self) -> None:
        for _ in range(20):  # an app may still be redrawing after another test
            shot = self.s.screenshot()
            self.assertEqual((shot.format, shot.width, shot.height, shot.not_modified), ("png", W, H, False))
            self.assertEqual(png_size(shot.data), (W, H))
            self.assertTrue(shot.frame_hash)
            # Nothing moves on the screen: the same hash, and no image.
            same = self.s.screenshot(if_none_match=shot.frame_hash)
            if same.not_modified:
                break
            time.sleep(0.1)
        self.assertTrue(same.not_modified)
        self.assertEqual((same.frame_hash, same.data), (shot.frame_hash, b""))
        small = self.s.screenshot(format="jpeg", quality=50, max_long_edge=320)
        self.assertEqual((small.format, small.width, small.height), ("jpeg", 320, 200))
        self.assertEqual(small.data[:2], b"\xff\xd8")
        part = self.s.screenshot(region=[10, 20, 100, 50])
        self.assertEqual(png_size(part.data), (100, 50))

    def test_screencast_composites_to_the_screenshot(self) -> None:
        from tine.screencast import decode_png
        comp = self.s.screencast_start(fps=30, delta=True)
        head, _ = self.s.next_frame(timeout=10)
        self.assertEqual((head["seq"], head["kind"], comp.width, comp.height), (1, "key", W, H))
        self.s.type("echo streamed from python\n", delay_ms=80)  # ~12 keys a second, while streaming
        shot = self.s.step([], {"screenshot": {}, "settle_ms": 300}).screenshot
        assert shot is not None
        seq, deltas = 1, 0
        while comp.frame_hash != shot.frame_hash:
            head, _ = self.s.next_frame(timeout=10)
            self.assertEqual(head["seq"], seq + 1, "a sequence gap")
            seq, deltas = head["seq"], deltas + (head["kind"] == "delta")
        self.assertGreater(deltas, 0)
        self.assertEqual(decode_png(shot.data), (W, H, bytes(comp.rgb or b"")))
        self.s.screencast_stop()
        with self.assertRaises(tine.TransportError):
            self.s.next_frame(timeout=0.3)  # stopped: nothing more
        self.s.screen()  # and the session goes on

    def test_timeout_then_the_session_goes_on(self) -> None:
        with tine.Client(self.d.socket, timeout=0.3) as c, c.aci(self.desk.id) as s:
            s.wait(10)  # well within the timeout: the session works
            with self.assertRaises(tine.TransportError) as cm:
                s.wait(1500)
            self.assertIn("within 0.3 s", str(cm.exception))
            # The late reply to the wait is dropped; the next request gets its own.
            time.sleep(1.3)
            s.move(11, 12)
            self.assertEqual(s.cursor(), (11, 12))

    def test_exec_and_files(self) -> None:
        r = self.s.exec(["sh", "-c", "cat; echo \"on $DISPLAY\" >&2; exit 4"], stdin="piped")
        self.assertEqual((r.exit_code, r.reason, r.stdout), (4, "exit", b"piped"))
        self.assertTrue(r.stderr.startswith(b"on :"), r.stderr)
        self.assertEqual(self.s.exec(["/no/such"]).exit_code, 127)
        self.assertEqual(self.s.exec(["sleep", "5"], timeout=0.2).reason, "timeout")
        blob = bytes(range(256)) * 1000
        self.s.write_file("/tmp/blob", blob, mode=0o600)
        self.assertEqual(self.s.read_file("/tmp/blob"), blob)
        # The file is the sandbox's: the daemon's files API sees the same bytes.
        self.assertEqual(self.c.read_file(self.desk.id, "/tmp/blob"), blob)
        self.s.write_file("/tmp/empty", b"")
        self.assertEqual(self.s.read_file("/tmp/empty"), b"")
        with self.assertRaises(tine.ACIError) as cm:
            self.s.read_file("/tmp/none")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(self.s.screen(), (W, H))

    def test_typed_error_then_the_session_goes_on(self) -> None:
        with self.assertRaises(tine.ACIError) as cm:
            self.s.key("ctrl+nosuchkey")
        self.assertEqual(cm.exception.code, "unknown_key")
        self.assertIn("nosuchkey", cm.exception.message)
        self.assertNotIsInstance(cm.exception, tine.TineError)
        with self.assertRaises(tine.ACIError) as cm:
            self.s.click(W + 5, 1)
        self.assertEqual(cm.exception.code, "off_screen")
        with self.assertRaises(tine.ACIError) as cm:
            self.s.do({"op": "fly"})
        self.assertEqual(cm.exception.code, "bad_request")
        with self.assertRaises(tine.ACIError) as cm:
            self.s.focus_window(1)
        self.assertEqual(cm.exception.code, "no_window")
        # Still alive.
        self.assertEqual(self.s.screen(), (W, H))
        self.s.move(30, 40)
        self.assertEqual(self.s.cursor(), (30, 40))
        rep, img = self.s.do({"op": "cursor"})
        self.assertEqual((rep["cursor"], img), ([30, 40], None))
        self.assertGreater(self.s.launch(["sleep", "1"]), 0)

    def test_step(self) -> None:
        r = self.s.step([{"op": "move", "x": 5, "y": 6},
                         {"op": "key", "keys": "nosuchkey"},
                         {"op": "move", "x": 7, "y": 8}],
                        {"screenshot": {"format": "png"}, "windows": True, "cursor": True})
        self.assertEqual([x.status for x in r.results], ["ok", "error", "ok"])
        assert r.results[1].error is not None
        self.assertEqual(r.results[1].error.code, "unknown_key")
        self.assertFalse(r.ok)
        self.assertEqual(r.cursor, (7, 8))
        self.assertTrue(r.windows)
        assert r.image is not None and r.screenshot is not None
        self.assertEqual(png_size(r.image), (W, H))
        self.assertTrue(r.screenshot.frame_hash)
        # Without an observation: results only.
        r = self.s.step([{"op": "wait", "ms": 1}])
        self.assertEqual((r.ok, r.image, r.windows), (True, None, None))


class AsyncDesktopTest(unittest.IsolatedAsyncioTestCase):
    d: Daemon

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = desktop_daemon()

    async def test_screencast(self) -> None:
        async with tine.AsyncClient(self.d.socket) as c:
            d = await c.create_desktop(tine.DesktopSpec(width=W, height=H, apps=[["xterm"]]))
            try:
                async with await c.aci(d.id) as s:
                    comp = await s.screencast_start(fps=30, delta=True)
                    head, _ = await asyncio.wait_for(s.next_frame(), 10)
                    self.assertEqual((head["kind"], comp.width), ("key", W))
                    await s.type("echo async\n")
                    shot = (await s.step([], {"screenshot": {}, "settle_ms": 300})).screenshot
                    assert shot is not None
                    while comp.frame_hash != shot.frame_hash:
                        head, _ = await asyncio.wait_for(s.next_frame(), 10)
                        self.assertEqual(head["seq"], comp.seq)
                    from tine.screencast import decode_png
                    self.assertEqual(decode_png(shot.data), (W, H, bytes(comp.rgb or b"")))
                    await s.screencast_stop()
            finally:
                await c.delete_desktop(d.id)

    async def test_pipelined_requests(self) -> None:
        # Over TCP with the token, as the other routes.
        async with tine.AsyncClient(host=self.d.tcp, token=self.d.token) as c:
            d = await c.create_desktop(tine.DesktopSpec(width=W, height=H))
            try:
                async with await c.aci(d.id) as s:
                    self.assertEqual((s.welcome.width, s.welcome.height), (W, H))
                    # A wait first holds the guest, so all 20 are in flight at once.
                    reqs: list[Awaitable[Any]] = [s.wait(200)]
                    for i in range(1, 9):
                        reqs += [s.move(i * 10, i * 5), s.cursor()]
                    reqs += [s.key("nosuchkey"), s.screenshot(max_long_edge=64), s.screen()]
                    self.assertEqual(len(reqs), 20)
                    tasks = [asyncio.ensure_future(r) for r in reqs]
                    await asyncio.sleep(0.05)
                    self.assertEqual(s.in_flight, 20)
                    res = await asyncio.gather(*tasks, return_exceptions=True)
                    self.assertEqual(res[0], None)
                    for i in range(1, 9):  # replies reach their requests, in order
                        self.assertEqual(res[2 * i - 1:2 * i + 1], [None, (i * 10, i * 5)])
                    self.assertIsInstance(res[17], tine.ACIError)
                    shot = res[18]
                    assert isinstance(shot, tine.Screenshot)
                    self.assertEqual(png_size(shot.data), (64, 40))
                    self.assertEqual(res[19], (W, H))
                    self.assertEqual(s.in_flight, 0)
                    await s.write_file("/tmp/a", "async")
                    self.assertEqual(await s.read_file("/tmp/a"), b"async")
                    self.assertEqual((await s.exec(["cat", "/tmp/a"])).stdout, b"async")
                    r = await s.step([{"op": "click", "x": 1, "y": 1}], {"cursor": True})
                    self.assertEqual((r.ok, r.cursor), (True, (1, 1)))
                    # A cancelled wait: its late reply is dropped, the next request gets its own.
                    with self.assertRaises(asyncio.TimeoutError):
                        await asyncio.wait_for(s.wait(300), 0.05)
                    self.assertEqual(await s.cursor(), (1, 1))
                    self.assertEqual(s.in_flight, 0)
                with self.assertRaises(tine.TransportError):
                    await s.screen()  # closed
            finally:
                await c.delete_desktop(d.id)

    async def test_fleet_desktops(self) -> None:
        async with tine.AsyncClient(self.d.socket) as c:
            before = {x.id for x in await c.desktops()}
            seen: list[str] = []

            async def job(s: tine.AsyncDesktopSession, d: tine.Desktop) -> tuple[int, int]:
                seen.append(d.id)
                if len(seen) == 2:
                    raise ValueError("one job fails")
                await s.type(f"echo {d.id} > /tmp/id\n")
                return await s.screen()

            res = await fleet.desktops(c, 3, job, spec={"width": W, "height": H, "apps": [["xterm"]]},
                                       limit=3)
            self.assertEqual(len(res), 3)
            self.assertEqual(sorted(o.value for o in res if o.ok), [(W, H), (W, H)])
            self.assertEqual(len(res.errors), 1)
            self.assertIsInstance(res.errors[0], ValueError)
            self.assertEqual(len(set(seen)), 3)
            # Every desktop was deleted, the failed one's too.
            self.assertEqual({x.id for x in await c.desktops()}, before)


if __name__ == "__main__":
    unittest.main()
