package fds

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadNamesFromTheStartEveryTime(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 700 { // more than one getdents buffer of names
		name := strings.Repeat("n", 40) + string(rune('a'+i%26)) + filepath.Base(t.Name()) + string(rune('A'+i/26))
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	slices.Sort(want)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for range 2 { // the second call starts over, not at the end
		got, err := ReadNames(fd)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("listed %d names, want %d", len(got), len(want))
		}
	}
}

func TestReadlinkAtLongTarget(t *testing.T) {
	dir := t.TempDir()
	target := strings.Repeat("x/", 600) + "end"
	if err := os.Symlink(target, filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got, err := ReadlinkAt(fd, "l")
	if err != nil || got != target {
		t.Fatalf("ReadlinkAt = %d bytes, %v; want %d bytes", len(got), err, len(target))
	}
}

func TestWriteAll(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := []byte(strings.Repeat("0123456789", 100000))
	if err := WriteAll(int(f.Fd()), data); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(f.Name())
	if string(got) != string(data) {
		t.Fatalf("wrote %d bytes, want %d", len(got), len(data))
	}
}
