package image_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/image/imagetest"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/network/nettest"
	"github.com/tine-run/tine/internal/require"
)

// indexNet is an egress network under a name and pool of the test's own,
// and a peer namespace beyond it for package indexes.
func indexNet(t *testing.T) (*network.Manager, *nettest.Host) {
	t.Helper()
	require.Root(t)
	require.Feature(t, "nftables")
	tag := "i" + nettest.RandTag(4)
	sub := byte(rand.IntN(60)) * 4 // a /30 of 192.0.2.0/24 (TEST-NET-1)
	peer, err := nettest.NewHost(tag+"p", netip.AddrFrom4([4]byte{192, 0, 2, sub + 1}), netip.AddrFrom4([4]byte{192, 0, 2, sub + 2}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Close)
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256)), 0}), 24)
	m, err := network.NewManager(network.Config{Name: tag, Pool: pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, peer
}

func serveIndex(t *testing.T, peer *nettest.Host, port, dir string) *imagetest.Index {
	t.Helper()
	ln, err := peer.Listen("tcp4", ":"+port)
	if err != nil {
		t.Fatal(err)
	}
	return imagetest.ServeIndex(t, ln, dir)
}

// TestVenvFromAnIndex: a requirements file is installed from a PEP 503
// index on another network namespace, over the build's egress network;
// the index's URL is part of the cache key; the build reaches the index's
// host and port only (the file's own --extra-index-url on another port is
// refused, though that port serves the host); a build that cannot reach
// its index fails with pip's reason and leaves nothing.
func TestVenvFromAnIndex(t *testing.T) {
	m, peer := indexNet(t)
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "py:1", imagetest.PythonImage(t, true))
	dir := stateDir(t)
	s, err := image.Open(dir, image.Options{Network: m})
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	wheels, others := t.TempDir(), t.TempDir()
	imagetest.Wheel(t, wheels, "tinedemo", "1.0", "VALUE = 1\n")
	imagetest.Wheel(t, others, "tineother", "1.0", "VALUE = 2\n")
	index := serveIndex(t, peer, "80", wheels)
	other := serveIndex(t, peer, "8081", others)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the build's temporary files, checked below

	url := "http://" + peer.Addr.String() + "/simple"
	req := image.Requirements{File: []byte("tinedemo==1.0\n"), IndexURL: url}
	v, err := s.Venv(img, req)
	if err != nil {
		t.Fatalf("%v (the index had %d requests)", err, index.Requests.Load())
	}
	if !v.Built || index.Requests.Load() == 0 {
		t.Fatalf("built %v with %d requests to the index", v.Built, index.Requests.Load())
	}
	mods, _ := filepath.Glob(filepath.Join(v.Path, "opt/tine/venv/lib/python3*/site-packages/tinedemo/__init__.py"))
	if len(mods) != 1 {
		t.Errorf("the layer does not hold the package from the index (%v)", mods)
	}
	if _, err := os.Lstat(filepath.Join(v.Path, "etc/resolv.conf")); !os.IsNotExist(err) {
		t.Errorf("the build network's resolv.conf is in the layer: %v", err)
	}
	if again, err := s.Venv(img, req); err != nil || again.Built || again.Path != v.Path {
		t.Errorf("same image, file and index: built %v (%v), %s vs %s", again.Built, err, again.Path, v.Path)
	}
	n := index.Requests.Load()
	other80 := req
	other80.IndexURL = "http://" + peer.Addr.String() + ":80/simple/"
	if v2, err := s.Venv(img, other80); err != nil || !v2.Built || v2.Path == v.Path || index.Requests.Load() == n {
		t.Errorf("another index URL reused the environment: built %v (%v)", v2.Built, err)
	}

	// The file widens the sources to port 8081 of the same host.
	extra := peer.Addr.String() + ":8081"
	widen := image.Requirements{File: []byte("--extra-index-url http://" + extra + "/simple\n--trusted-host " + extra + "\ntinedemo\ntineother\n"), IndexURL: url}
	_, err = s.Venv(img, widen)
	if err == nil || !strings.Contains(err.Error(), "tineother") || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("a package from an index the policy does not allow was installed (or another error): %v", err)
	}
	t.Log(err)
	if k := other.Requests.Load(); k != 0 {
		t.Errorf("the build reached port 8081 (%d requests)", k)
	}
	// The negative control: port 8081 serves the package to the host.
	resp, err := http.Get("http://" + peer.Addr.String() + ":8081/simple/tineother/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || other.Requests.Load() != 1 {
		t.Fatalf("the control request to port 8081: %s, %d requests", resp.Status, other.Requests.Load())
	}

	// Nothing listens on port 8082: pip's reason, and nothing left.
	venvs, _ := os.ReadDir(filepath.Join(dir, "images/venvs"))
	layers, _ := os.ReadDir(filepath.Join(dir, "store/layers"))
	_, err = s.Venv(img, image.Requirements{File: []byte("tinedemo\n"), IndexURL: "http://" + peer.Addr.String() + ":8082/simple"})
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("an unreachable index: %v, want pip's reason (Connection refused)", err)
	}
	t.Log(err)
	venvs2, _ := os.ReadDir(filepath.Join(dir, "images/venvs"))
	layers2, _ := os.ReadDir(filepath.Join(dir, "store/layers"))
	if len(venvs2) != len(venvs) || len(layers2) != len(layers) {
		t.Errorf("a failed build left records (%d, were %d) or layers (%d, were %d)", len(venvs2), len(venvs), len(layers2), len(layers))
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the builds left temporary files: %v", left)
	}

	// A store without a network refuses an index at once.
	bare := open(t, dir)
	if _, err := bare.Venv(img, image.Requirements{File: []byte("x\n"), IndexURL: url + "/x"}); !errors.Is(err, image.ErrNoEgress) {
		t.Errorf("an index without egress: %v, want ErrNoEgress", err)
	}
	if _, err := bare.Venv(img, image.Requirements{File: []byte("x\n"), IndexURL: "http://127.0.0.1:8080/simple"}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a loopback index: %v", err)
	}
}
