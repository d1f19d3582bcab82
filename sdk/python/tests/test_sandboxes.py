"""The sync client against a real daemon: sandboxes, exec, files, errors, TCP."""

from __future__ import annotations

import io
import tarfile
import unittest

from _daemon import Daemon, daemon

import tine


class SyncClientTest(unittest.TestCase):
    d: Daemon
    c: tine.Client
    sb: tine.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = daemon()
        cls.c = tine.Client(cls.d.socket)
        cls.sb = cls.c.create(tine.SandboxSpec(hostname="sdkbox", env=["GREETING=hi"],
                                               limits=tine.Limits(pids=64)))

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.c.delete(cls.sb.id)
        except tine.NotFound:
            pass
        cls.c.close()

    def test_lifecycle(self) -> None:
        sb = self.c.create({"ttl_seconds": 60, "limits": {"memory_bytes": 128 << 20}})
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.spec.ttl_seconds, 60)
        self.assertIsNotNone(sb.expires_at)
        self.assertIn(sb.id, [s.id for s in self.c.list()])
        got = self.c.get(sb.id)
        self.assertEqual(got.id, sb.id)
        self.assertGreater(got.usage.pids, 0)
        self.c.delete(sb.id)
        self.assertNotIn(sb.id, [s.id for s in self.c.list()])
        with self.assertRaises(tine.NotFound):
            self.c.get(sb.id)

    def test_exec_stdin_and_exit_code(self) -> None:
        r = self.c.exec(self.sb.id, ["sh", "-c", "tr a-z A-Z; echo \"$GREETING $X $(hostname) $(pwd)\" >&2; exit 3"],
                        stdin=b"hello\n", env={"X": "y"}, workdir="/tmp", timeout=10)
        self.assertEqual((r.exit_code, r.reason), (3, "exit"))
        self.assertFalse(r.ok)
        self.assertEqual(r.stdout, b"HELLO\n")
        self.assertEqual(r.stderr, b"hi y sdkbox /tmp\n")
        self.assertGreater(r.timings_ms.total, 0)

    def test_exec_timeout_and_not_found(self) -> None:
        r = self.c.exec(self.sb.id, ["sleep", "10"], timeout=0.2)
        self.assertEqual((r.exit_code, r.reason), (124, "timeout"))
        r = self.c.exec(self.sb.id, ["/no/such/program"])
        self.assertEqual((r.exit_code, r.reason), (127, "not-found"))

    def test_exec_stream_sync(self) -> None:
        with self.c.exec_stream(self.sb.id, ["sh", "-c", "read l; echo \"got $l\"; echo e >&2; exit 2"]) as s:
            s.write("line\n")
            chunks = list(s)
        self.assertIn((1, b"got line\n"), chunks)
        self.assertIn((2, b"e\n"), chunks)
        assert s.exit is not None
        self.assertEqual(s.exit.exit_code, 2)
        r = self.c.exec_stream(self.sb.id, ["wc", "-c"]).communicate(b"y" * 70_000)
        self.assertEqual(r.stdout.strip(), b"70000")
        with self.assertRaises(tine.NotFound):
            self.c.exec_stream("no-such-sandbox", ["true"])
        with tine.Client(host=self.d.tcp, token=self.d.token) as c:  # over TCP too
            self.assertEqual(c.exec_stream(self.sb.id, ["echo", "tcp"]).communicate().stdout, b"tcp\n")

    def test_files_round_trip(self) -> None:
        sid = self.sb.id
        self.c.mkdir(sid, "/sdktest/a/b", parents=True)
        info = self.c.write_file(sid, "/sdktest/a/b/x.bin", bytes(range(256)) * 4, mode=0o640)
        self.assertEqual((info.type, info.size, info.mode), ("file", 1024, 0o640))
        self.c.write_file(sid, "/sdktest/a/streamed.txt", io.BytesIO(b"from a file object"))
        self.assertEqual(self.c.read_file(sid, "/sdktest/a/b/x.bin"), bytes(range(256)) * 4)
        self.assertEqual(self.c.read_file(sid, "/sdktest/a/streamed.txt"), b"from a file object")
        self.assertEqual(self.c.stat(sid, "/sdktest/a/b").type, "dir")
        self.assertEqual(sorted(e.name for e in self.c.list_dir(sid, "/sdktest/a")), ["b", "streamed.txt"])
        # The command sees what the API wrote.
        self.assertEqual(self.c.exec(sid, ["cat", "/sdktest/a/streamed.txt"]).stdout, b"from a file object")

        tar = self.c.download_archive(sid, "/sdktest/a")
        names = tarfile.open(fileobj=io.BytesIO(tar)).getnames()
        self.assertIn("b/x.bin", [n.lstrip("./") for n in names])
        out = io.BytesIO()
        self.c.download_archive(sid, "/sdktest/a", out=out)
        self.assertEqual(len(out.getvalue()), len(tar))

        self.c.mkdir(sid, "/sdkrestore")
        self.c.upload_archive(sid, "/sdkrestore", tar)
        self.assertEqual(self.c.read_file(sid, "/sdkrestore/b/x.bin"), bytes(range(256)) * 4)

        with self.assertRaises(tine.Conflict):
            self.c.remove(sid, "/sdktest/a")  # not empty
        self.c.remove(sid, "/sdktest/a", recursive=True)
        with self.assertRaises(tine.NotFound):
            self.c.stat(sid, "/sdktest/a")

    def test_errors(self) -> None:
        with self.assertRaises(tine.NotFound) as cm:
            self.c.get("no-such-sandbox")
        e = cm.exception
        self.assertEqual((e.code, e.status), ("not_found", 404))
        self.assertIn("no such sandbox", e.message)
        with self.assertRaises(tine.NotFound):
            self.c.exec("no-such-sandbox", ["true"])
        with self.assertRaises(tine.InvalidArgument) as bad:
            self.c.create({"bogus": 1})
        self.assertEqual(bad.exception.code, "invalid_argument")
        self.assertIn("bogus", bad.exception.message)
        with self.assertRaises(tine.InvalidArgument):
            self.c.create({"seccomp": "nonsense"})
        with self.assertRaises(tine.InvalidArgument):
            self.c.exec(self.sb.id, [])
        with self.assertRaises(tine.NotFound):
            self.c.read_file(self.sb.id, "/no/such/file")
        with self.assertRaises(tine.TineError):  # every error is a TineError
            self.c.get("no-such-sandbox")

    def test_keep_alive_reuse_across_threads(self) -> None:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda i: self.c.exec(self.sb.id, ["echo", str(i)]).stdout, range(8)))
        self.assertEqual(outs, [b"%d\n" % i for i in range(8)])

    def test_tcp_with_token(self) -> None:
        with tine.Client(host=self.d.tcp, token=self.d.token) as c:
            self.assertEqual(c.health()["status"], "ok")
            self.assertEqual(c.exec(self.sb.id, ["echo", "tcp"]).stdout, b"tcp\n")
        with tine.Client(host="http://" + self.d.tcp, token="wrong") as c:
            with self.assertRaises(tine.Unauthorized):
                c.list()

    def test_unreachable(self) -> None:
        with self.assertRaises(tine.TransportError) as cm:
            tine.Client("/nonexistent/tine.sock").health()
        self.assertEqual(cm.exception.code, "")


if __name__ == "__main__":
    unittest.main()
