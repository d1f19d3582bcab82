package snapshot

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// open opens the catalog under state and closes it (unmounting its
// store) when the test ends.
func open(t *testing.T, state string) *Catalog {
	t.Helper()
	c, err := Open(state)
	must(t, err)
	t.Cleanup(c.Close)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// upper makes a small tree standing in for a captured upper directory.
func upper(t *testing.T, content string) *os.File {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "marker"), []byte(content), 0o644))
	f, err := os.Open(dir)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// take writes a snapshot with one new layer over parent's layers.
func take(t *testing.T, c *Catalog, content string, parent *Snapshot) *Snapshot {
	t.Helper()
	d, err := c.Begin(NewID())
	must(t, err)
	l, err := d.CommitLayer(upper(t, content), 0, nil)
	must(t, err)
	s := &Snapshot{Tier: TierFS, Kind: "sandbox", Source: "abc", CreatedAt: time.Now(), Layers: []store.Digest{l.Digest}, Bytes: l.Bytes, Spec: []byte(`{"memory":"1g"}`)}
	if parent != nil {
		s.Parent = parent.ID
		s.Layers = append(s.Layers, parent.Layers...)
	}
	must(t, d.Commit(s))
	return s
}

func TestSnapshotsSurviveReopen(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	c := open(t, state)
	root := take(t, c, "golden", nil)
	child := take(t, c, "fork", root)
	if _, err := Open(state); err == nil || !strings.Contains(err.Error(), "in use by another tine daemon") {
		t.Fatalf("a second Open of a held state directory = %v", err)
	}
	c.Close()
	c2 := open(t, state)
	got, err := c2.Get(child.ID)
	must(t, err)
	if got.Parent != root.ID || len(got.Layers) != 2 || got.Layers[1] != root.Layers[0] || string(got.Spec) != `{"memory":"1g"}` {
		t.Errorf("reloaded %+v", got)
	}
	if list := c2.List(); len(list) != 2 || list[0].ID != root.ID {
		t.Errorf("List after reopen = %v", list)
	}
	b, err := os.ReadFile(filepath.Join(c2.Layers.Path(got.Layers[0]), "marker"))
	if err != nil || string(b) != "fork" {
		t.Errorf("fork layer marker = %q, %v", b, err)
	}
}

// TestInterruptedSnapshotLeavesNothing: a draft that never committed (the
// daemon died mid-snapshot) is gone after the next Open, with its layer.
func TestInterruptedSnapshotLeavesNothing(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	c := open(t, state)
	d, err := c.Begin(NewID())
	must(t, err)
	l, err := d.CommitLayer(upper(t, "half"), 0, nil)
	must(t, err)
	if !c.Layers.Has(l.Digest) {
		t.Fatal("held layer missing before the crash")
	}
	c.lock.Close() // no Commit, no Abort: as after kill -9 (the mount stays)
	c2 := open(t, state)
	if len(c2.List()) != 0 {
		t.Errorf("an uncommitted snapshot is listed: %v", c2.List())
	}
	if c2.Layers.Has(l.Digest) {
		t.Error("the interrupted snapshot's layer survived")
	}
	entries, _ := os.ReadDir(filepath.Join(state, "snapshots"))
	if len(entries) != 0 {
		t.Errorf("snapshots/ holds %d entries after recovery", len(entries))
	}
}

func TestDeleteRefusedInUseAndKeepsSharedLayers(t *testing.T) {
	require.Root(t)
	c := open(t, t.TempDir())
	root := take(t, c, "golden", nil)
	child := take(t, c, "fork", root)
	release, err := c.Use(root.ID)
	must(t, err)
	if err := c.Delete(root.ID); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "1 live sandbox") {
		t.Fatalf("delete in use = %v", err)
	}
	release()
	release() // a second release is harmless
	must(t, c.Delete(root.ID))
	if !c.Layers.Has(root.Layers[0]) {
		t.Error("deleting the parent removed a layer its child still stacks")
	}
	must(t, c.Delete(child.ID))
	if list, _ := c.Layers.List(); len(list) != 0 {
		t.Errorf("layers left after deleting every snapshot: %v", list)
	}
	if err := c.Delete(child.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete = %v", err)
	}
}

func TestAbortRemovesOnlyItsLayers(t *testing.T) {
	require.Root(t)
	c := open(t, t.TempDir())
	kept := take(t, c, "same", nil)
	d, err := c.Begin(NewID())
	must(t, err)
	l, err := d.CommitLayer(upper(t, "same"), 0, nil) // same tree: shared layer
	must(t, err)
	if l.Digest != kept.Layers[0] {
		t.Fatalf("identical trees got two layers")
	}
	d.Abort()
	if !c.Layers.Has(l.Digest) {
		t.Error("Abort removed a layer a committed snapshot names")
	}
}

func TestVersionAndIDChecked(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	c := open(t, state)
	s := take(t, c, "x", nil)
	meta := filepath.Join(c.Dir(s.ID), "snapshot.json")
	b, _ := os.ReadFile(meta)
	must(t, os.WriteFile(meta, []byte(strings.Replace(string(b), `"version":1`, `"version":99`, 1)), 0o600))
	c.Close()
	if _, err := Open(state); err == nil || !strings.Contains(err.Error(), "format version 99") {
		t.Errorf("Open with a future format = %v", err)
	}
	for _, bad := range []string{"", "s", "../x", "S0123456789ab", "s0123456789aZ", "s0123456789abc"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q)", bad)
		}
	}
	if !ValidID(NewID()) {
		t.Error("NewID not valid")
	}
}

// TestCollectionKeepsPinnedLayers: the store is shared with images, whose
// layers no snapshot names but a pin keeps: neither the collection at Open
// nor the one after a delete removes them; an unpinned stranger goes.
func TestCollectionKeepsPinnedLayers(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	c := open(t, state)
	sn := take(t, c, "snap", nil)
	imageLayer, err := c.Layers.Commit(upper(t, "image layer"), 0)
	must(t, err)
	stranger, err := c.Layers.Commit(upper(t, "nobody's"), 0)
	must(t, err)
	must(t, c.Layers.Pin("image-test", []store.Digest{imageLayer.Digest}))
	must(t, c.Delete(sn.ID))
	if !c.Layers.Has(imageLayer.Digest) {
		t.Fatal("a delete's collection removed a pinned layer")
	}
	if c.Layers.Has(stranger.Digest) {
		t.Error("an unpinned layer no snapshot names survived the collection")
	}
	c.Close()
	c = open(t, state)
	if !c.Layers.Has(imageLayer.Digest) {
		t.Fatal("Open's collection removed a pinned layer")
	}
	must(t, c.Layers.Unpin("image-test"))
}

// TestOpenWaitsForADeadDaemonsChildren: a daemon killed with children that
// still hold its lock's descriptor (clones of it, dying) does not keep the
// next daemon out; a live holder does (TestSnapshotsSurviveReopen).
func TestOpenWaitsForADeadDaemonsChildren(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	lock, err := os.OpenFile(filepath.Join(state, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	must(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	lock.WriteString("999999999 1\n") // a holder that is gone
	child := exec.Command("sleep", "0.5")
	child.ExtraFiles = []*os.File{lock} // the dying child's copy
	must(t, child.Start())
	lock.Close()
	// The negative control: the lock is still held.
	probe, _ := os.Open(filepath.Join(state, "lock"))
	if err := unix.Flock(int(probe.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Fatal("the child's copy does not hold the lock: the test proves nothing")
	}
	probe.Close()
	c, err := Open(state)
	child.Wait()
	if err != nil {
		t.Fatalf("Open while a dead holder's child held the lock: %v", err)
	}
	c.Close()
}

// An unsynced snapshot (a live fork's) carries the boot it was taken in:
// it survives a reopen within that boot, and is removed, with its layer,
// by an Open after a reboot (a boot id that is not the host's).
func TestUnsyncedSnapshotGoesAfterAReboot(t *testing.T) {
	require.Root(t)
	state := t.TempDir()
	c := open(t, state)
	d, err := c.Begin(NewID())
	must(t, err)
	d.Unsynced()
	l, err := d.CommitLayer(upper(t, "live"), 0, nil)
	must(t, err)
	s := &Snapshot{Tier: TierFS, Kind: "sandbox", Source: "abc", CreatedAt: time.Now(), Layers: []store.Digest{l.Digest}, Spec: []byte(`{}`)}
	must(t, d.Commit(s))
	now, err := bootID()
	must(t, err)
	if s.BootID != now || now == "" {
		t.Fatalf("the unsynced snapshot's boot id %q, the host's %q", s.BootID, now)
	}
	synced := take(t, c, "durable", nil)
	if synced.BootID != "" {
		t.Fatalf("a synced snapshot carries boot id %q", synced.BootID)
	}
	c.Close()
	c = open(t, state)
	if _, err := c.Get(s.ID); err != nil {
		t.Fatalf("the unsynced snapshot after a reopen in the same boot: %v", err)
	}
	c.Close()
	// A reboot, as the next Open sees it.
	path := filepath.Join(state, "snapshots", s.ID, "snapshot.json")
	b, err := os.ReadFile(path)
	must(t, err)
	must(t, os.WriteFile(path, []byte(strings.Replace(string(b), now, "00000000-0000-0000-0000-000000000000", 1)), 0o600))
	c = open(t, state)
	if _, err := c.Get(s.ID); err == nil {
		t.Fatal("the unsynced snapshot survived a reboot")
	}
	if _, err := c.Get(synced.ID); err != nil {
		t.Fatalf("the synced snapshot after the reboot: %v", err)
	}
	if _, err := os.Stat(c.Layers.Path(l.Digest)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the unsynced snapshot's layer after the reboot: %v", err)
	}
}
