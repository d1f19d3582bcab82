package checkpoint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/probe"
	"github.com/tine-run/tine/internal/require"
)

// server listens on a TCP port of the sandbox's loopback and holds one
// established connection to itself; each client that connects is sent
// the nonce drawn at start, and the state of the held connection.
const server = `
import os, random, socket, time
nonce = random.getrandbits(64)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 7000))
srv.listen()
held = socket.create_connection(("127.0.0.1", 7000))
peer, _ = srv.accept()
held.setblocking(False)
open("/tmp/ready", "w").close()
while True:
    c, _ = srv.accept()
    try:
        got = held.recv(1)
        conn = "closed" if got == b"" else "data"
    except BlockingIOError:
        conn = "open"
    except OSError as e:
        conn = "error:" + type(e).__name__
    c.sendall(b"%d %d %s" % (os.getpid(), nonce, conn.encode()))
    c.close()
`

// ask connects to the server in sb and returns its answer.
const ask = `python3 -c 'import socket; s = socket.create_connection(("127.0.0.1", 7000), timeout=5); print(s.recv(200).decode())'`

// TestRestoredTCPListener checkpoints a process holding a listening TCP
// socket and an established connection: each replica's restored process
// accepts on its own port (its own network namespace) and answers with
// the golden's nonce; the established connection is closed at restore
// (TcpClose, docs/snapshots.md). criu 4.1 cannot dump internet sockets
// on Linux >= 6.16 (SO_PASSCRED, criu issue #2718); 4.2 can
// (`SUITE=sid make criu` installs Debian sid's 4.2.1).
func TestRestoredTCPListener(t *testing.T) {
	require.Root(t)
	require.CRIU(t, "4.1")
	require.Binary(t, "python3")
	if c := probe.Get("criu"); !probe.VersionAtLeast(c.Version, "4.2") {
		t.Skipf("criu %s cannot dump TCP sockets on this kernel (needs 4.2: criu issue #2718)", c.Version)
	}
	tier := New()
	if err := tier.Usable(); err != nil {
		t.Fatal(err)
	}
	golden := newSandbox(t)
	out := run(t, golden, "cd /tmp && python3 -c '"+strings.ReplaceAll(server, "'", `'"'"'`)+"' </dev/null >/dev/null 2>&1 & echo $!; while [ ! -e /tmp/ready ]; do sleep 0.005; done")
	var pid uint64
	fmt.Sscan(out, &pid)
	var gpid, nonce uint64
	var conn string
	if _, err := fmt.Sscan(run(t, golden, ask), &gpid, &nonce, &conn); err != nil || gpid != pid || conn != "open" {
		t.Fatalf("the golden's server answered pid %d nonce %d connection %q (%v); want pid %d and an open connection", gpid, nonce, conn, err, pid)
	}

	dir := filepath.Join(t.TempDir(), "memory")
	d, err := tier.Dump(golden, dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Resume()
	// Left running, its connection untouched.
	if got := run(t, golden, ask); got != fmt.Sprintf("%d %d open\n", pid, nonce) {
		t.Errorf("the golden after the dump answered %q", got)
	}
	for i := range 2 {
		r := newSandbox(t)
		if _, err := tier.Restore(r, dir); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d %d closed\n", pid, nonce)
		got := run(t, r, ask)
		t.Logf("replica %d: %q", i, got)
		if got != want {
			t.Errorf("replica %d answered %q, want %q (the golden's server, its held connection closed)", i, got, want)
		}
	}
}
