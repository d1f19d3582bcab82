"""A fleet of forked desktops sharing one frame cache (sync and asyncio),
against a real daemon: replicas of a desktop's memory snapshot show the
golden's screen, which crosses the wire once for the fleet (the others'
guests answer not_modified); once one replica's screen changes, only its
frame comes again."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import unittest

from _daemon import Daemon
from test_desktops import desktop_daemon

import tine
from tine import fleet

N = 3
WAIT = "i=0; while [ ! -e {f} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; test -e {f}"


def settled(s: tine.DesktopSession) -> str:
    """The screen's frame hash once two captures in a row agree."""
    last = ""
    for _ in range(100):
        h = s.screenshot().frame_hash
        if h == last:
            return h
        last = h
        time.sleep(0.05)
    raise AssertionError("the screen never held still")


class FleetFramesTest(unittest.TestCase):
    d: Daemon
    c: tine.Client
    snap: tine.Snapshot
    want: str
    golden_png: bytes

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = desktop_daemon()
        cls.c = tine.Client(cls.d.socket)
        cls.addClassCleanup(cls.c.close)
        golden = cls.c.create_desktop({"width": 640, "height": 400, "apps": [["xterm"]]})
        cls.addClassCleanup(cls.c.delete_desktop, golden.id)
        with cls.c.aci(golden.id) as s:
            s.type("echo fleet-golden; touch /tmp/typed\n")
        if cls.c.exec(golden.id, ["sh", "-c", WAIT.format(f="/tmp/typed")]).exit_code != 0:
            raise AssertionError("the golden's xterm did not run what was typed")
        with cls.c.aci(golden.id) as s:
            cls.want = settled(s)
            cls.golden_png = s.screenshot().data
        try:
            cls.snap = cls.c.snapshot(golden.id, tier="memory")
        except tine.Unsupported as e:
            if "criu" in os.environ.get("TINE_STRICT", "").split(","):
                raise
            raise unittest.SkipTest(f"needs criu >= 4.1: {e}")
        cls.addClassCleanup(cls.c.delete_snapshot, cls.snap.id)

    def check(self, cache: tine.FrameCache, first: dict[int, tuple[tine.Screenshot, int]],
              mid: tine.frames.FrameCacheStats, second: dict[int, tuple[tine.Screenshot, int]]) -> None:
        # Round 1: the golden's frame, fetched once for the three.
        for i, (shot, wire) in first.items():
            self.assertEqual(shot.frame_hash, self.want, f"replica {i}'s first frame")
            self.assertFalse(shot.not_modified)
            self.assertEqual(shot.data, first[0][0].data)
        self.assertGreater(len(self.golden_png), 4096, "control: a plain screenshot is a real image")
        self.assertEqual((mid.fetched, mid.shared), (1, N - 1), f"round 1: {mid}")
        fetched = [i for i, (shot, wire) in first.items() if wire >= len(shot.data)]
        self.assertEqual(len(fetched), 1, f"round 1: replicas {fetched} brought the image over the wire")
        for i, (shot, wire) in first.items():
            if i not in fetched:
                self.assertLess(wire, 1024, f"round 1, replica {i}: a shared frame cost {wire} bytes")
        # Round 2: only the replica typed into brings its new frame.
        changed, wire = second[0]
        self.assertNotEqual(changed.frame_hash, self.want, "typing into replica 0 did not change its screen")
        self.assertGreaterEqual(wire, len(changed.data))
        for i in range(1, N):
            shot, wire = second[i]
            self.assertEqual(shot.frame_hash, self.want, f"typing into replica 0 changed replica {i}")
            self.assertEqual(shot.data, first[0][0].data)
            self.assertLess(wire, 1024, f"round 2, replica {i}: {wire} bytes for an unchanged, shared frame")
        end = cache.stats
        self.assertEqual((end.fetched, end.shared), (2, 2 * (N - 1)), f"after round 2: {end}")

    def test_sync_fleet(self) -> None:
        cache = tine.FrameCache()
        first: dict[int, tuple[tine.Screenshot, int]] = {}
        second: dict[int, tuple[tine.Screenshot, int]] = {}
        observed, typed = threading.Barrier(N), threading.Event()
        mid: list[tine.frames.FrameCacheStats] = []

        def job(s: tine.DesktopSession, r: tine.Sandbox, i: int) -> None:
            rx = s.received
            shot = s.screenshot()
            first[i] = (shot, s.received - rx)
            observed.wait(60)
            if i == 0:
                mid.append(cache.stats)
                try:
                    s.type("echo only-here; touch /tmp/here\n")
                    if self.c.exec(r.id, ["sh", "-c", WAIT.format(f="/tmp/here")]).exit_code != 0:
                        raise AssertionError("replica 0's xterm did not run what was typed")
                finally:
                    typed.set()
            typed.wait(60)
            rx = s.received
            res = s.step([], {"screenshot": {}, "settle_ms": 200})
            assert res.screenshot is not None
            second[i] = (res.screenshot, s.received - rx)

        res = fleet.fork_each_desktop(self.c, self.snap.id, N, job, batch=N, frames=cache)
        for o in res:
            if o.error:
                raise o.error
        self.check(cache, first, mid[0], second)
        self.assertEqual(len(self.c.desktops()), 1, "the fleet left replicas behind")

    def test_async_fleet(self) -> None:
        cache = tine.FrameCache()
        first: dict[int, tuple[tine.Screenshot, int]] = {}
        second: dict[int, tuple[tine.Screenshot, int]] = {}
        mid: list[tine.frames.FrameCacheStats] = []

        async def run() -> None:
            observed, typed = asyncio.Barrier(N), asyncio.Event()
            async with tine.AsyncClient(self.d.socket) as c:
                async def job(s: tine.AsyncDesktopSession, r: tine.Sandbox, i: int) -> None:
                    rx = s.received
                    shot = await s.screenshot()
                    first[i] = (shot, s.received - rx)
                    await asyncio.wait_for(observed.wait(), 60)
                    if i == 0:
                        mid.append(cache.stats)
                        try:
                            await s.type("echo only-here; touch /tmp/here\n")
                            if (await c.exec(r.id, ["sh", "-c", WAIT.format(f="/tmp/here")])).exit_code != 0:
                                raise AssertionError("replica 0's xterm did not run what was typed")
                        finally:
                            typed.set()
                    await asyncio.wait_for(typed.wait(), 60)
                    rx = s.received
                    res = await s.step([], {"screenshot": {}, "settle_ms": 200})
                    assert res.screenshot is not None
                    second[i] = (res.screenshot, s.received - rx)

                res = await fleet.desktop_forks(c, self.snap.id, N, job, batch=N, frames=cache)
                res.values()

        asyncio.run(run())
        self.check(cache, first, mid[0], second)


if __name__ == "__main__":
    unittest.main()
