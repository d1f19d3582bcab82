package inroot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRaceSwapDirectoryForSymlink swaps a directory for symlinks out of the
// root (absolute and climbing) while the API writes, reads, makes, removes
// and extracts beneath it. Some operations must land (the negative check),
// and nothing may ever land outside.
func TestRaceSwapDirectoryForSymlink(t *testing.T) {
	r, dir := newRoot(t)
	outside := t.TempDir()
	mustWriteFile(t, filepath.Join(outside, "f"), sentinelText, 0o644)
	parent := filepath.Dir(outside)
	before := snapshot(t, parent, dir)

	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	targets := []string{outside, strings.Repeat("../", 16) + strings.TrimPrefix(outside, "/")}
	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Add(1)
	go func() {
		defer swapper.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(d, d+".real")
			os.Symlink(targets[i%2], d)
			time.Sleep(time.Microsecond)
			os.Remove(d)
			os.Rename(d+".real", d)
		}
	}()

	var landed atomic.Int64
	var workers sync.WaitGroup
	deadline := time.Now().Add(500 * time.Millisecond)
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for time.Now().Before(deadline) {
				var err error
				switch w {
				case 0:
					_, err = r.Write("d/f", body("pwned"), 0o644, 100, -1, -1)
				case 1:
					if err = r.Mkdir("d/sub/deeper", 0o755, true, -1, -1); err == nil {
						err = r.Remove("d/sub", true)
					}
				case 2:
					var out bytes.Buffer
					_, err = r.Read("d/f", &out, 100)
					if strings.Contains(out.String(), sentinelText) {
						t.Error("read the outside file")
					}
				case 3:
					err = r.ExtractTar("d", tarOf(t, entry{name: "x/f", body: "pwned"}, entry{name: "l", typ: '2', link: "/"}), 100, -1, -1)
				}
				if err == nil {
					landed.Add(1)
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	swapper.Wait()

	if landed.Load() == 0 {
		t.Fatal("no operation succeeded: the race proved nothing")
	}
	t.Logf("%d operations landed inside the root", landed.Load())
	sameSnapshot(t, "race", before, snapshot(t, parent, dir))
}
