"""Code-interpreter sessions against a real daemon, sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
import unittest

from _daemon import Daemon, daemon

import tine


class SessionTest(unittest.TestCase):
    d: Daemon
    c: tine.Client
    sb: tine.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()
        cls.c = tine.Client(cls.d.socket)
        cls.sb = cls.c.create({"limits": {"pids": 64}})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.delete(cls.sb.id)
        cls.c.close()

    def test_state_results_and_errors(self) -> None:
        with self.c.session(self.sb, env={"K": "v"}, workdir="/tmp") as s:
            self.assertTrue(s.run("x = 41").ok)
            ex = s.run("x + 1")
            self.assertEqual(ex.text, "42")
            self.assertEqual(ex.execution_count, 2)
            ex = s.run("import os; print(os.environ['K'], os.getcwd())")
            self.assertEqual(ex.stdout, "v /tmp\n")
            self.assertIsNone(ex.text)
            ex = s.run("1 / 0")
            self.assertEqual(ex.status, "error")
            self.assertEqual(ex.error.name, "ZeroDivisionError")
            self.assertIn('File "<cell 4>"', ex.error.traceback)
            ex = s.run("def (")
            self.assertEqual(ex.error.name, "SyntaxError")
            self.assertIn(s.id, [i.id for i in self.c.sessions(self.sb.id)])
        with self.assertRaises(tine.NotFound):
            s.info()

    def test_live_fork(self) -> None:
        s = self.c.session(self.sb, forkable=True)
        s.run("import random\nx = 41")
        kids = s.fork(2)
        self.assertEqual(len(kids), 2)
        self.assertEqual(len({k.sandbox_id for k in kids} | {self.sb.id}), 3)
        draws = set()
        for k in kids:
            self.assertEqual(k.run("x + 1").text, "42")
            draws.add(k.run("random.random()").text)
        self.assertEqual(len(draws), 2)
        self.assertEqual(s.run("x").text, "41")
        with self.assertRaises(tine.Conflict):
            self.c.session(self.sb).fork(1)  # not forkable
        for k in kids:
            self.c.delete(k.sandbox_id)
        s.delete()

    def test_stream_interrupt_and_timeout(self) -> None:
        s = self.c.session(self.sb.id)
        try:
            out: list[str] = []
            results: list[tine.Result] = []
            ex = s.run("print('a'); display({'k': 1}); 'b'", on_stdout=out.append, on_result=results.append)
            self.assertEqual("".join(out), "a\n")
            self.assertEqual([r.text for r in results], ["{'k': 1}", "'b'"])
            self.assertEqual(ex.stdout, "a\n")
            self.assertEqual(ex.text, "'b'")
            # Interrupt from another thread once the cell has begun.
            started = threading.Event()
            t = threading.Thread(target=lambda: (started.wait(), s.interrupt()))
            t.start()
            ex = s.run("import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)",
                       on_stdout=lambda _: started.set())
            t.join()
            self.assertEqual(ex.status, "interrupted")
            self.assertEqual(ex.error.name, "KeyboardInterrupt")
            ex = s.run("while True: pass", timeout=0.2)
            self.assertEqual(ex.status, "timeout")
            self.assertEqual(s.run("x = 1; x").text, "1")
            s.restart()
            self.assertEqual(s.run("'x' in globals()").text, "False")
        finally:
            s.delete()


class AsyncSessionTest(unittest.IsolatedAsyncioTestCase):
    d: Daemon

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()

    async def test_async_session(self) -> None:
        async with tine.AsyncClient(self.d.socket) as c:
            sb = await c.create()
            try:
                s = await c.session(sb)
                await s.run("x = 41")
                self.assertEqual((await s.run("x + 1")).text, "42")
                errs: list[tine.CellError] = []
                ex = await s.run("print('o')\nraise ValueError('v')", on_error=errs.append)
                self.assertEqual((ex.status, ex.stdout), ("error", "o\n"))
                self.assertEqual([(e.name, e.value) for e in errs], [("ValueError", "v")])
                # Cells queue: the second waits for the first.
                first = asyncio.ensure_future(s.run("import os, time\nwhile not os.path.exists('/tmp/go'): time.sleep(0.01)\n'a'"))
                while (await s.info()).state != "busy":
                    await asyncio.sleep(0.01)
                second = asyncio.ensure_future(s.run("'b'"))
                while (await s.info()).queued != 1:
                    await asyncio.sleep(0.01)
                await c.write_file(sb.id, "/tmp/go", b"")
                self.assertEqual(((await first).text, (await second).text), ("'a'", "'b'"))
                self.assertEqual((await second).execution_count, 5)
                await s.delete()
            finally:
                await c.delete(sb.id)


if __name__ == "__main__":
    unittest.main()
