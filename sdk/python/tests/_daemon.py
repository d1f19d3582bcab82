"""A real ``tine serve`` for the SDK's tests: one per test run, started on
first use (as root) with a unix socket, a TCP listener with a token, no
sandbox pool, and its data in a temporary directory; stopped at exit."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))  # test the tree, not an installed copy

import tine  # noqa: E402


class Daemon:
    """A running daemon: ``socket``, ``tcp`` (host:port) and ``token``."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="tine-sdk-test-"))
        self.socket = str(self.tmp / "tine.sock")
        self.token = "sdk-test-token"
        tok = self.tmp / "token"
        tok.write_text(self.token)
        tok.chmod(0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.tcp = "127.0.0.1:%d" % s.getsockname()[1]
        self.log = open(self.tmp / "daemon.log", "wb")
        self.proc = subprocess.Popen(
            [str(binary()), "serve", "--socket", self.socket, "--data-dir", str(self.tmp / "data"),
             "--state-dir", str(self.tmp / "state"),
             "--pool", "0", "--listen", self.tcp, "--token-file", str(tok),
             # The budget counts limits, not use: the desktops and functions
             # these tests keep at once must fit on a small CI machine too.
             "--max-memory", "64g"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                with tine.Client(self.socket) as c:
                    c.health()
                break
            except tine.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("tine serve did not come up: " + self.logtail())
                time.sleep(0.05)

    def logtail(self) -> str:
        try:
            return (self.tmp / "daemon.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def binary() -> Path:
    """bin/tine of this repository ($TINE_BIN overrides), built when missing."""
    b = Path(os.environ.get("TINE_BIN") or REPO / "bin" / "tine")
    if not b.exists():
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-o", str(b), "./cmd/tine"], cwd=REPO, check=True)
    return b


_daemon: Daemon | None = None


def daemon(case: unittest.TestCase | type[unittest.TestCase] | None = None) -> Daemon:
    """The shared daemon; raises :class:`unittest.SkipTest` when not root."""
    global _daemon
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root: tine serve makes namespaces, cgroups and mounts")
    if _daemon is None:
        _daemon = Daemon()
        atexit.register(_daemon.stop)
    return _daemon
