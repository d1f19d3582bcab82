package rawfile

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestReadFileReadsPastOneRead reads a file longer than the first buffer
// to its end, and one of /proc (whose size stat does not know).
func TestReadFileReadsPastOneRead(t *testing.T) {
	p := t.TempDir() + "/f"
	want := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, len(want))
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	got, err = ReadFileHint("/proc/self/mountinfo", 16)
	if err != nil || len(got) != len(mi) {
		t.Fatalf("mountinfo: read %d bytes (%v), os.ReadFile %d", len(got), err, len(mi))
	}
	if _, err := ReadFile(p + "-missing"); !os.IsNotExist(err) {
		t.Fatalf("a missing file: %v", err)
	}
}

// TestSubdirsListsDirectoriesOnly lists more entries than one getdents64
// buffer holds, of which only the directories count.
func TestSubdirsListsDirectoriesOnly(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 600 {
		name := "entry-with-a-long-name-" + strconv.Itoa(i)
		if i%3 == 0 {
			if err := os.WriteFile(dir+"/"+name, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Mkdir(dir+"/"+name, 0o755); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	if err := os.Symlink(".", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	got, err := Subdirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("got %d names, want %d (%v)", len(got), len(want), got[:min(5, len(got))])
	}
	if _, err := Subdirs(dir + "/missing"); !os.IsNotExist(err) {
		t.Fatalf("a missing directory: %v", err)
	}
}
