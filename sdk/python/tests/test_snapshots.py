"""Snapshots and forks through the SDK (sync and asyncio) against a real daemon."""

from __future__ import annotations

import asyncio
import os
import secrets
import unittest

from _daemon import Daemon, daemon

import tine


def ok(res: tine.ExecResult) -> tine.ExecResult:
    """res, when its command exited 0."""
    if res.exit_code != 0:
        raise AssertionError(f"exit {res.exit_code} ({res.reason}): {res.stderr!r}")
    return res


class SnapshotTest(unittest.TestCase):
    d: Daemon
    c: tine.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()
        cls.c = tine.Client(cls.d.socket)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.close()

    def test_snapshot_fork_and_lineage(self) -> None:
        golden = self.c.create({"limits": {"memory_bytes": 256 << 20, "pids": 64}})
        self.addCleanup(self.c.delete, golden.id)
        nonce = secrets.token_hex(8)
        ok(self.c.exec(golden.id, ["sh", "-c", f"echo {nonce} > /etc/tine-sdk-marker"]))
        snap = self.c.snapshot(golden.id, name="golden")
        self.assertEqual((snap.tier, snap.kind, snap.source, snap.depth), ("fs", "sandbox", golden.id, 1))
        self.assertIn(snap.id, [s.id for s in self.c.snapshots()])
        res = self.c.fork(snap.id, 3, ttl_seconds=600)
        self.assertEqual(len(res.sandboxes), 3)
        self.assertEqual(res.snapshot.forks, 3)
        for r in res.sandboxes:
            self.addCleanup(self.c.delete, r.id)
            self.assertEqual(r.forked_from, snap.id)
            self.assertEqual(r.spec.ttl_seconds, 600)
            out = ok(self.c.exec(r.id, ["cat", "/etc/tine-sdk-marker"]))
            self.assertEqual(out.stdout.decode().strip(), nonce)
        # One replica's write is its own.
        a, b = res.ids[0], res.ids[1]
        ok(self.c.exec(a, ["sh", "-c", "echo mine > /etc/tine-sdk-own"]))
        self.assertNotEqual(self.c.exec(b, ["test", "-e", "/etc/tine-sdk-own"]).exit_code, 0)
        # A snapshot of a replica names its parent.
        child = self.c.snapshot(a)
        self.assertEqual((child.parent, child.depth), (snap.id, 2))
        with self.assertRaises(tine.Conflict):
            self.c.delete_snapshot(snap.id)
        with self.assertRaises(tine.NotFound):
            self.c.fork("s000000000000")
        self.c.delete_snapshot(child.id)
        with self.assertRaises(tine.NotFound):
            self.c.get_snapshot(child.id)

    def test_memory_tier(self) -> None:
        # A process holding a nonce only in its heap answers, in a replica
        # of a memory snapshot, with the same pid and nonce.
        golden = self.c.create()
        self.addCleanup(self.c.delete, golden.id)
        prog = ("import os, secrets, signal, time\n"
                "n = secrets.token_hex(8)\n"
                "signal.signal(signal.SIGUSR1, lambda *_: open('/tmp/n', 'w').write('%d %s' % (os.getpid(), n)))\n"
                "open('/tmp/ready', 'w').close()\n"
                "while True: time.sleep(0.01)\n")
        out = ok(self.c.exec(golden.id, ["sh", "-c", "cd /tmp && python3 -c \"$0\" </dev/null >/dev/null 2>&1 & echo $!;"
                                         " while [ ! -e /tmp/ready ]; do sleep 0.01; done", prog]))
        pid = int(out.stdout.decode())
        ask = ["sh", "-c", f"kill -USR1 {pid}; i=0; while [ ! -s /tmp/n ] && [ $i -lt 2000 ]; do sleep 0.005; i=$((i+1)); done; cat /tmp/n"]
        want = ok(self.c.exec(golden.id, ask)).stdout.decode()
        try:
            snap = self.c.snapshot(golden.id, tier="memory")
        except tine.Unsupported as e:
            if "criu" in os.environ.get("TINE_STRICT", "").split(","):
                raise
            self.skipTest(f"needs criu >= 4.1: {e}")
        self.addCleanup(self.c.delete_snapshot, snap.id)
        self.assertEqual((snap.tier, snap.processes), ("memory", 1))
        res = self.c.fork(snap.id, 2)
        for r in res.sandboxes:
            self.addCleanup(self.c.delete, r.id)
            self.assertEqual(ok(self.c.exec(r.id, ask)).stdout.decode(), want)

    def test_async_fork_sandbox(self) -> None:
        async def run() -> None:
            async with tine.AsyncClient(self.d.socket) as c:
                golden = await c.create()
                try:
                    await c.exec(golden.id, ["sh", "-c", "echo async > /etc/tine-sdk-async"])
                    res = await c.fork_sandbox(golden.id, 2)
                    self.assertEqual(len(res.ids), 2)
                    for rid in res.ids:
                        out = await c.exec(rid, ["cat", "/etc/tine-sdk-async"])
                        self.assertEqual(out.stdout, b"async\n")
                        await c.delete(rid)
                    got = await c.get_snapshot(res.snapshot.id)
                    self.assertEqual(got.forks, 0)
                    await c.delete_snapshot(got.id)
                finally:
                    await c.delete(golden.id)
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()


class ForkFleetTest(unittest.TestCase):
    def test_forks_run_in_every_replica(self) -> None:
        d = daemon()

        async def run() -> list[str]:
            async with tine.AsyncClient(d.socket) as c:
                golden = await c.create()
                try:
                    await c.exec(golden.id, ["sh", "-c", "echo fleet > /etc/tine-sdk-fleet"])
                    snap = await c.snapshot(golden.id)

                    async def job(c: tine.AsyncClient, r: tine.Sandbox, i: int) -> str:
                        if r.forked_from != snap.id:
                            raise AssertionError(f"replica {r.id} forked from {r.forked_from!r}")
                        out = await c.exec(r.id, ["sh", "-c", f"cat /etc/tine-sdk-fleet; echo {i} > /etc/i; cat /etc/i"])
                        return out.stdout.decode()

                    res = await tine.fleet.forks(c, snap.id, 5, job, batch=2)
                    self.assertEqual(len(await c.list()), 1, "the fleet left replicas behind")
                    await c.delete_snapshot(snap.id)
                    return res.values()
                finally:
                    await c.delete(golden.id)

        values = asyncio.run(run())
        self.assertEqual(values, [f"fleet\n{i}\n" for i in range(5)])
