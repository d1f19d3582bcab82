package e2b

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tine-run/tine/client"
)

// A state file the daemon cannot read back stops it with what to do,
// instead of starting without the paused sandboxes it names; one it can
// comes back as paused sandboxes.
func TestRestorePaused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "e2b-paused.json")
	cfg := Config{Client: client.NewUnix(filepath.Join(dir, "none.sock")), Keys: []string{"e2b_00"}, EnvdBinary: "/bin/true", StateFile: path}
	for _, bad := range []string{"not json", `{"format": 9, "paused": []}`, `{"format": 1, "paused": [{"id": "a"}]}`} {
		os.WriteFile(path, []byte(bad), 0o600)
		if s, err := New(cfg); err == nil || !strings.Contains(err.Error(), "move") {
			if s != nil {
				s.Close()
			}
			t.Errorf("state %q: %v, want an error saying to move the file away", bad, err)
		}
	}
	os.WriteFile(path, []byte(`{"format": 1, "paused": [{"id": "abc", "token": "t", "snapshots": ["s1"], "metadata": {"k": "v"}}]}`), 0o600)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.lookup("abc")
	if err != nil || b.state != statePaused || b.token != "t" || b.metadata["k"] != "v" {
		t.Fatalf("restored %+v %v, want a paused abc with its token and metadata", b, err)
	}
	s.stop()
	<-s.done
	// What Close writes back is the same sandbox (it is paused: kept).
	s.persist()
	got, _ := os.ReadFile(path)
	if !strings.Contains(string(got), `"id": "abc"`) || !strings.Contains(string(got), `"snapshots": [`) {
		t.Errorf("written back: %s", got)
	}
}
