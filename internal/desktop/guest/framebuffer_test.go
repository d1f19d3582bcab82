package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A guest killed with SIGKILL leaves its screen file behind; the next
// guest removes it, and keeps those of guests still running.
func TestDeadGuestsScreenFileIsRemoved(t *testing.T) {
	parent := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, framebufferPrefix+strconv.Itoa(dead.Process.Pid)+"-1")
	live := filepath.Join(parent, framebufferPrefix+strconv.Itoa(os.Getppid())+"-2")
	other := filepath.Join(parent, "tine-xvfb-notapid")
	for _, d := range []string{stale, live, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "Xvfb_screen0"), []byte("pixels"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := makeFramebufferDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(dir), framebufferPrefix+strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("new directory %s does not name this process", dir)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead guest's directory is still there (%v)", err)
	}
	for _, d := range []string{live, other, dir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
