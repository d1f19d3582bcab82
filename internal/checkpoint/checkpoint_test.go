package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A daemon that is not root gets a tier that refuses, saying why.
func TestRootlessTierRefuses(t *testing.T) {
	tier := newTier(1000)
	err := tier.Usable()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "root") || !strings.Contains(err.Error(), "fs snapshot") {
		t.Fatalf("a rootless tier: %v", err)
	}
	if _, err := tier.Dump(nil, t.TempDir()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Dump on a rootless tier: %v", err)
	}
	if _, err := tier.Restore(nil, t.TempDir()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Restore on a rootless tier: %v", err)
	}
}

// A manifest that names a directory outside its own is refused.
func TestManifestStaysInItsDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{`{"version":1,"trees":[{"dir":"../x","root":2,"pids":[2]}]}`, "outside its directory"},
		{`{"version":9,"trees":[]}`, "format 9"},
		{`not json`, "manifest"},
	} {
		os.WriteFile(filepath.Join(dir, manifestName), []byte(tc.body), 0o600)
		if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("manifest %s: %v, want an error saying %q", tc.body, err, tc.want)
		}
	}
}
