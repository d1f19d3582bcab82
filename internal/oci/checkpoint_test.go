package oci

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRestoreRefusesForeignImages: a directory that holds no tine-runc
// checkpoint (runc's images, nothing, another version) is refused before
// anything is made, saying why.
func TestRestoreRefusesForeignImages(t *testing.T) {
	runc := t.TempDir()
	os.WriteFile(filepath.Join(runc, "inventory.img"), []byte("criu"), 0o600) // runc's layout
	if _, err := readImage(runc); err == nil || !strings.Contains(err.Error(), "no checkpoint made by tine-runc") {
		t.Errorf("runc's images: %v", err)
	}
	for _, v := range []string{"1", "3"} { // the nested layout before flat.go, a newer one
		other := t.TempDir()
		os.WriteFile(filepath.Join(other, imageName), []byte(`{"version":`+v+`,"command":2}`), 0o600)
		if _, err := readImage(other); err == nil || !strings.Contains(err.Error(), "version "+v) {
			t.Errorf("format %s: %v", v, err)
		}
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, imageName), []byte(`{"version":2,"command":1}`), 0o600)
	if _, err := readImage(bad); err == nil || !strings.Contains(err.Error(), "command pid 1") {
		t.Errorf("PID 1 as the command: %v", err)
	}
	good := t.TempDir()
	os.WriteFile(filepath.Join(good, imageName), []byte(`{"version":2,"command":2,"stdio":["pipe:[7]","",""]}`), 0o600)
	if img, err := readImage(good); err != nil || img.Command != 2 || img.Stdio[0] != "pipe:[7]" {
		t.Errorf("readImage = %+v, %v", img, err)
	}
}

// TestCheckpointWantsAnEmptyImageDir: images are never mixed with an
// older checkpoint's.
func TestCheckpointWantsAnEmptyImageDir(t *testing.T) {
	dir := t.TempDir()
	if err := emptyDir(filepath.Join(dir, "new")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "manifest.json"), nil, 0o600)
	if err := emptyDir(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a directory holding a checkpoint: %v", err)
	}
}

// TestCheckpointStdioKeys: the keys of this process's stdio are criu's
// (a pipe by inode, a file by mount and inode, in hex).
func TestCheckpointStdioKeys(t *testing.T) {
	k := stdioKeys()
	for fd, key := range k {
		link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		switch {
		case strings.HasPrefix(link, "pipe:"):
			if key != link {
				t.Errorf("fd %d (%s): key %q", fd, link, key)
			}
		case strings.HasPrefix(link, "/"):
			if !strings.HasPrefix(key, "file[") || !strings.HasSuffix(key, "]") || !strings.Contains(key, ":") {
				t.Errorf("fd %d (%s): key %q", fd, link, key)
			}
		}
	}
}
