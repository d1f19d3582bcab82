package store

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tine-run/tine/internal/require"
)

// TestOpenKeepsALiveDraft opens the store a second time (tine pull beside
// the daemon) while a draft is being filled: the draft survives, and is
// published whole; a draft whose writer is gone is removed.
func TestOpenKeepsALiveDraft(t *testing.T) {
	require.Root(t)
	s := openStore(t)
	d := Digest("sha256:" + hex64('c'))
	p, err := s.Draft(d)
	must(t, err)
	write(t, p.Dir()+"/etc/hostname", "img\n", 0o644)
	write(t, s.tmpDir()+"/crashed/file", "x", 0o644) // no writer holds it
	if _, err := Open(s.Root()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.tmpDir() + "/crashed"); !os.IsNotExist(err) {
		t.Errorf("debris without a writer survived Open: %v", err)
	}
	if _, err := os.Stat(p.Dir() + "/etc/hostname"); err != nil {
		t.Fatalf("a live draft was removed by another Open: %v", err)
	}
	l, err := p.Publish()
	must(t, err)
	if b, err := os.ReadFile(l.Path + "/etc/hostname"); err != nil || string(b) != "img\n" {
		t.Errorf("published draft: %q, %v", b, err)
	}
}

func TestPins(t *testing.T) {
	s := openStore(t)
	a, b := Digest("sha256:"+hex64('a')), Digest("sha256:"+hex64('b'))
	must(t, s.Pin("image-1", []Digest{a, b}))
	must(t, s.Pin("pull-2", []Digest{b}))
	got, err := s.Pinned()
	must(t, err)
	if !slices.Equal(got[a], []string{"image-1"}) || len(got[b]) != 2 {
		t.Errorf("Pinned = %v", got)
	}
	must(t, s.Unpin("image-1"))
	must(t, s.Unpin("image-1")) // gone already: no error
	got, _ = s.Pinned()
	if _, ok := got[a]; ok || !slices.Equal(got[b], []string{"pull-2"}) {
		t.Errorf("after Unpin: %v", got)
	}
	if err := s.Pin("../escape", nil); err == nil {
		t.Error("a pin name with a slash was accepted")
	}
	// Names are at most 128 bytes.
	must(t, s.Pin("p"+strings.Repeat("x", 127), nil))
	if err := s.Pin("p"+strings.Repeat("x", 128), nil); err == nil {
		t.Error("a pin name of 129 bytes was accepted")
	}
}

func hex64(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}
