"""The asyncio client against a real daemon: streaming exec, files, fleet."""

from __future__ import annotations

import asyncio
import signal
import unittest

from _daemon import Daemon, daemon

import tine
from tine import fleet


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    d: Daemon
    c: tine.AsyncClient
    sb: tine.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()

    async def asyncSetUp(self) -> None:
        self.c = tine.AsyncClient(self.d.socket)
        self.sb = await self.c.create({"hostname": "asyncbox"})

    async def asyncTearDown(self) -> None:
        try:
            await self.c.delete(self.sb.id)
        finally:
            await self.c.close()

    async def test_exec_json_and_files(self) -> None:
        r = await self.c.exec(self.sb.id, ["sh", "-c", "cat; exit 7"], stdin="in")
        self.assertEqual((r.exit_code, r.stdout), (7, b"in"))
        await self.c.mkdir(self.sb.id, "/asdk", parents=True)
        await self.c.write_file(self.sb.id, "/asdk/f", b"\x00\x01data")
        self.assertEqual(await self.c.read_file(self.sb.id, "/asdk/f"), b"\x00\x01data")
        self.assertEqual((await self.c.stat(self.sb.id, "/asdk/f")).size, 6)
        tar = await self.c.download_archive(self.sb.id, "/asdk")
        await self.c.mkdir(self.sb.id, "/asdk2")
        await self.c.upload_archive(self.sb.id, "/asdk2", tar)
        self.assertEqual([e.name for e in await self.c.list_dir(self.sb.id, "/asdk2")], ["f"])
        with self.assertRaises(tine.NotFound):
            await self.c.get("no-such-sandbox")
        with self.assertRaises(tine.InvalidArgument):
            await self.c.create({"bogus": True})

    async def test_exec_stream(self) -> None:
        s = await self.c.exec_stream(self.sb.id, ["sh", "-c", "read line; echo \"got $line\"; echo oops >&2; cat; exit 4"])
        async with s:
            await s.write(b"first\n")
            out, err = bytearray(), bytearray()
            async for fd, data in s:
                (out if fd == 1 else err).extend(data)
                if out == b"got first\n":
                    await s.write(b"rest")
                    await s.close_stdin()
        self.assertEqual(bytes(out), b"got first\nrest")
        self.assertEqual(bytes(err), b"oops\n")
        assert s.exit is not None
        self.assertEqual((s.exit.exit_code, s.exit.reason), (4, "exit"))

    async def test_exec_stream_communicate_signal_tty(self) -> None:
        s = await self.c.exec_stream(self.sb.id, ["wc", "-c"])
        r = await s.communicate(b"x" * 100_000)  # several stdin frames
        self.assertEqual((r.exit_code, r.stdout.strip()), (0, b"100000"))

        s = await self.c.exec_stream(self.sb.id, ["sleep", "30"])
        await s.signal(signal.SIGTERM)
        ex = await asyncio.wait_for(s.wait(), 10)
        self.assertEqual((ex.reason, ex.exit_code), ("signal", 128 + signal.SIGTERM))

        # The daemon applies the initial cols/rows after the command started,
        # so the size is checked after an explicit resize, ordered before stdin.
        s = await self.c.exec_stream(self.sb.id, ["sh", "-c", "read x; stty size; tty >/dev/null && echo tty"],
                                     tty=True, cols=80, rows=24)
        await s.resize(100, 30)
        await s.write(b"go\n")
        r = await s.communicate()
        self.assertIn(b"30 100", r.stdout)
        self.assertIn(b"tty", r.stdout)

    async def test_exec_stream_errors(self) -> None:
        with self.assertRaises(tine.NotFound):
            await self.c.exec_stream("no-such-sandbox", ["true"])
        s = await self.c.exec_stream(self.sb.id, [])
        with self.assertRaises(tine.InvalidArgument):
            await s.wait()

    async def test_fleet_five_sandboxes(self) -> None:
        async def job(c: tine.AsyncClient, sb: tine.Sandbox, i: int) -> bytes:
            if i == 3:
                raise ValueError("job 3 fails")
            r = await c.exec(sb.id, ["sh", "-c", f"echo {i} $(hostname)"])
            return r.stdout

        before = {s.id for s in await self.c.list()}
        res = await fleet.sandboxes(self.c, 5, job, spec={"hostname": "fleet"}, limit=5)
        self.assertEqual(len(res), 5)
        self.assertEqual([o.value for o in res if o.ok], [b"%d fleet\n" % i for i in (0, 1, 2, 4)])
        self.assertIsInstance(res[3].error, ValueError)
        with self.assertRaises(ExceptionGroup):
            res.values()
        # Every fleet sandbox was deleted, the failed one too.
        self.assertEqual({s.id for s in await self.c.list()}, before)

    async def test_fleet_map_limit(self) -> None:
        running = peak = 0

        async def f(x: int) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1
            return x * x

        res = await fleet.map(f, range(10), limit=3)
        self.assertEqual(res.values(), [x * x for x in range(10)])
        self.assertLessEqual(peak, 3)


if __name__ == "__main__":
    unittest.main()
