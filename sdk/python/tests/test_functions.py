"""Warm functions and pool scripts against a real daemon."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import textwrap
import unittest
from pathlib import Path

from _daemon import Daemon, daemon

import tine
from tine import fleet

HANDLER = textwrap.dedent('''
    import json

    def handler(event):
        if isinstance(event, bytes):
            return event[::-1]
        if event.get("fail"):
            explode(event["fail"])
        print("log line")
        return {"doubled": event["n"] * 2, "dumped": json.dumps(event, sort_keys=True)}

    def explode(why):
        raise ValueError("bad input: " + why)
''')


class FunctionsTest(unittest.TestCase):
    d: Daemon
    c: tine.Client
    dir: Path
    fn: tine.Function

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()
        cls.c = tine.Client(cls.d.socket)
        cls.dir = Path(tempfile.mkdtemp(prefix="tine-sdk-fn-"))
        entry = cls.dir / "handler.py"
        entry.write_text(HANDLER)
        spec = tine.FunctionSpec(name="sdk-double", entry=str(entry), preload=["json"],
                                 concurrency=2,
                                 limits=tine.FunctionLimits(memory_bytes=128 << 20, timeout_seconds=10))
        try:
            cls.fn = cls.c.put_function(spec)
        except tine.Unsupported as e:  # cgroup v2 hosts, for now
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise unittest.SkipTest(f"functions unsupported on this host: {e.message}")

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.c.delete_function("sdk-double")
        except tine.NotFound:
            pass
        cls.c.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_registered(self) -> None:
        self.assertEqual(self.fn.state, "warm")
        self.assertEqual(self.fn.spec.entry, str(self.dir / "handler.py"))
        self.assertIn("sdk-double", [f.spec.name for f in self.c.functions()])
        self.assertEqual(self.c.function("sdk-double").spec.concurrency, 2)
        with self.assertRaises(tine.NotFound):
            self.c.function("no-such-function")

    def test_invoke_ok(self) -> None:
        inv = self.c.invoke("sdk-double", {"n": 21})
        self.assertTrue(inv.ok, inv)
        self.assertEqual(inv.result["doubled"], 42)
        self.assertEqual(inv.stdout, "log line\n")
        self.assertGreater(inv.timings.total, 0)

    def test_invoke_raw(self) -> None:
        inv = self.c.invoke_raw("sdk-double", b"\x00abc")
        self.assertEqual(inv.status, "ok", inv)
        self.assertEqual(inv.result_bytes, b"cba\x00")

    def test_invoke_error_has_traceback(self) -> None:
        inv = self.c.invoke("sdk-double", {"fail": "nope"})
        self.assertEqual(inv.status, "error")
        assert inv.error is not None
        self.assertEqual(inv.error.type, "ValueError")
        self.assertIn("bad input: nope", inv.error.message)
        self.assertIn("explode", inv.error.traceback or "")

    def test_bad_spec_and_unknown_function(self) -> None:
        with self.assertRaises(tine.InvalidArgument):
            self.c.put_function({"name": "sdk-bad", "entry": str(self.dir / "handler.py"), "bogus": 1})
        broken = self.dir / "broken.py"
        broken.write_text("def handler(event):\n    return (\n")
        with self.assertRaises(tine.InvalidArgument) as cm:
            self.c.put_function({"name": "sdk-broken", "entry": str(broken)})
        self.assertIn("SyntaxError", cm.exception.message)
        with self.assertRaises(tine.NotFound):
            self.c.invoke("no-such-function", {})

    def test_script_through_pool(self) -> None:
        digest = self.c.put_script("def handler(event):\n    return sum(event)\n")
        self.assertRegex(digest, r"^[0-9a-f]{64}$")
        inv = self.c.invoke_script(digest, [1, 2, 3])
        self.assertEqual((inv.status, inv.result), ("ok", 6), inv)
        bad = self.c.put_script("def handler(event):\n    return 1/0\n")
        inv = self.c.invoke_script(bad, None)
        self.assertEqual(inv.status, "error")
        self.assertEqual(inv.error.type if inv.error else None, "ZeroDivisionError")
        with self.assertRaises(tine.NotFound):
            self.c.invoke_script("0" * 64, 1)

    def test_fleet_invoke(self) -> None:
        async def go() -> list[tine.Invocation]:
            async with tine.AsyncClient(self.d.socket) as c:
                return (await fleet.invoke(c, "sdk-double", [{"n": i} for i in range(6)], limit=3)).values()

        invs = asyncio.run(go())
        self.assertEqual([i.result["doubled"] for i in invs], [2 * i for i in range(6)])


if __name__ == "__main__":
    unittest.main()
