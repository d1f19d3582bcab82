// Package snapshot owns the daemon's snapshots on disk: their versioned
// metadata, their lineage, and which store layers they hold. Taking one
// (freezing a sandbox, capturing its upper, dumping its processes) is the
// caller's work; this package makes what it wrote durable and atomic.
//
// Layout under the state directory (default /var/lib/tine):
//
//	snapshots/<id>/snapshot.json   the metadata (format FormatVersion)
//	snapshots/<id>/memory/         the memory tier's criu images
//	snapshots/.draft-<id>/         a snapshot being written
//	snapshots/.gone-<id>/          a snapshot being deleted
//	store/                         the layers (internal/store)
//
// A snapshot becomes visible only by the rename of its complete draft
// directory, so a crash leaves a draft (removed by the next Open), never a
// half snapshot that can be listed or forked. Layers no snapshot names are
// removed by Open and by Delete.
package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/store"
	"golang.org/x/sys/unix"
)

// FormatVersion is the version of snapshot.json this code writes and reads.
const FormatVersion = 1

// Tiers.
const (
	TierFS     = "fs"     // filesystem changes only; a fork boots fresh
	TierMemory = "memory" // filesystem and the whole process tree (criu)
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("no such snapshot")
	ErrInUse    = errors.New("snapshot in use")
)

// Snapshot is one immutable capture of a sandbox.
type Snapshot struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Tier    string `json:"tier"`
	// Kind is "sandbox" or "desktop": what a fork of it becomes.
	Kind string `json:"kind"`
	// Source is the sandbox it was taken from; Parent the snapshot that
	// sandbox was forked from ("" for a sandbox created from scratch).
	Source    string    `json:"source"`
	Parent    string    `json:"parent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Layers are the overlay lowers a fork stacks over its base, topmost
	// first: this snapshot's own capture, then its parent's layers.
	Layers []store.Digest `json:"layers"`
	// Bytes is what this snapshot added on disk: its own layer's files
	// and its memory images.
	Bytes int64 `json:"bytes"`
	// Spec is the source's creation spec, as the API took it.
	Spec json.RawMessage `json:"spec"`
	// PausedMs is how long the source was frozen or stopped to take it.
	PausedMs float64 `json:"paused_ms"`
	// Memory describes the memory tier's images (nil for fs).
	Memory *Memory `json:"memory,omitempty"`
	// BootID is set on a snapshot committed without syncing its files
	// (Draft.Unsynced: a live fork's): it is good only within that boot of
	// the host, and Open removes it after a reboot.
	BootID string `json:"boot_id,omitempty"`
}

// Memory is what the memory tier dumped.
type Memory struct {
	// Bytes is the images' size; Processes the tree's size.
	Bytes     int64 `json:"bytes"`
	Processes int   `json:"processes"`
}

// Catalog is the set of snapshots of one state directory.
type Catalog struct {
	dir    string
	Layers *store.Store
	lock   *os.File // flock'ed: one daemon per state directory
	// fs is the catalog's hold on the store's filesystem, released by
	// Close.
	fs *store.OwnFilesystem

	// gc orders layer commits (read side: many at once) before collection
	// (write side), so a layer just committed for a draft is held before
	// any collection can see it unnamed. Taken before mu.
	gc    sync.RWMutex
	mu    sync.Mutex
	snaps map[string]*Snapshot
	users map[string]int       // live sandboxes forked from a snapshot
	held  map[store.Digest]int // layers committed for drafts not yet published
}

// Exists reports whether stateDir holds a catalog already.
func Exists(stateDir string) bool {
	_, err := os.Stat(filepath.Join(stateDir, "snapshots"))
	return err == nil
}

// Open loads the catalog under stateDir, removing drafts and deletions a
// crash interrupted and layers no snapshot names. One process at a time
// holds a state directory (a lock file); a second Open fails saying so.
// The layer store gets a filesystem of its own when it shares the root's
// (store.EnsureOwnFilesystem).
func Open(stateDir string) (_ *Catalog, err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	if err := lockStateDir(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("open snapshots: state directory %s is in use by another tine daemon (%w); give this one its own --state-dir", stateDir, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	storeDir := filepath.Join(stateDir, "store")
	fs, err := store.EnsureOwnFilesystem(storeDir, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fs.Release()
		}
	}()
	layers, err := store.Open(storeDir)
	if err != nil {
		return nil, err
	}
	c := &Catalog{dir: filepath.Join(stateDir, "snapshots"), Layers: layers, lock: lock, fs: fs,
		snaps: map[string]*Snapshot{}, users: map[string]int{}, held: map[store.Digest]int{}}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			if err := os.RemoveAll(filepath.Join(c.dir, name)); err != nil {
				return nil, fmt.Errorf("open snapshots: remove debris %s: %w", name, err)
			}
			continue
		}
		s, err := c.load(name)
		if err != nil {
			return nil, err
		}
		if s.BootID != "" {
			if now, err := bootID(); err != nil || now != s.BootID {
				// Unsynced, and the host went down since: its files may
				// not be on disk.
				if err := os.RemoveAll(filepath.Join(c.dir, name)); err != nil {
					return nil, fmt.Errorf("open snapshots: remove %s, unsynced before a reboot: %w", name, err)
				}
				continue
			}
		}
		c.snaps[s.ID] = s
	}
	if err := c.collect(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Catalog) load(id string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, id, "snapshot.json"))
	if err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", id, err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", id, err)
	}
	if s.Version != FormatVersion {
		return nil, fmt.Errorf("load snapshot %s: format version %d, this tine reads %d", id, s.Version, FormatVersion)
	}
	if s.ID != id {
		return nil, fmt.Errorf("load snapshot %s: its metadata names %q", id, s.ID)
	}
	for _, d := range s.Layers {
		if !c.Layers.Has(d) {
			return nil, fmt.Errorf("load snapshot %s: layer %s is missing from %s", id, d, c.Layers.Root())
		}
	}
	return &s, nil
}

// Close releases the state directory. Live forks keep their layers: an
// overlay holds its lower directories, and a lazy unmount waits for them.
func (c *Catalog) Close() {
	c.fs.Release()
	c.lock.Close()
}

// Users counts the live sandboxes forked from snapshot id.
func (c *Catalog) Users(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.users[id]
}

// NewID returns a fresh snapshot id: "s" and 12 hex digits.
func NewID() string {
	var b [6]byte
	rand.Read(b[:])
	return "s" + hex.EncodeToString(b[:])
}

// ValidID reports whether id has NewID's form (ids arrive in URLs).
func ValidID(id string) bool {
	if len(id) != 13 || id[0] != 's' {
		return false
	}
	_, err := hex.DecodeString(id[1:])
	return err == nil && strings.ToLower(id) == id
}

// Draft is a snapshot being written.
type Draft struct {
	c        *Catalog
	id       string
	dir      string
	held     []store.Digest
	unsynced bool
}

// Unsynced makes the draft commit without syncing anything to disk: its
// snapshot is kept only while the host runs on (Snapshot.BootID). A live
// fork's children live no longer than their parent's processes, so the
// fork does not wait for the disk.
func (d *Draft) Unsynced() { d.unsynced = true }

// Begin starts snapshot id: its draft directory exists until Commit or
// Abort.
func (c *Catalog) Begin(id string) (*Draft, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("snapshot id %q: not of NewID's form", id)
	}
	d := &Draft{c: c, id: id, dir: filepath.Join(c.dir, ".draft-"+id)}
	if err := os.Mkdir(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return d, nil
}

// Dir is the draft's directory: the memory tier dumps into Dir()/memory.
func (d *Draft) Dir() string { return d.dir }

// CommitLayer commits the tree open at src (a captured upper) to the
// store for this draft: it is kept, even unnamed, until Commit or Abort.
// done is called once the copy is made, before it is synced to disk: the
// source can be let go (a frozen sandbox thawed) from then on.
func (d *Draft) CommitLayer(src *os.File, maxBytes int64, done func()) (store.Layer, error) {
	d.c.gc.RLock()
	defer d.c.gc.RUnlock()
	p, err := d.c.Layers.Copy(src, maxBytes)
	if done != nil {
		done()
	}
	if err != nil {
		return store.Layer{}, err
	}
	publish := p.Publish
	if d.unsynced {
		publish = p.PublishUnsynced
	}
	l, err := publish()
	if err != nil {
		return l, err
	}
	d.hold(l.Digest)
	return l, nil
}

// hold keeps layer from collection until Commit or Abort. Called under
// the catalog's gc read lock, before a collection can see the layer
// unnamed.
func (d *Draft) hold(layer store.Digest) {
	d.c.mu.Lock()
	d.c.held[layer]++
	d.c.mu.Unlock()
	d.held = append(d.held, layer)
}

// MergeLayers commits one layer standing for layers (topmost first) over
// the directories below (store.Merge), held by the draft as CommitLayer's is: a fork
// chain past FlattenDepth is flattened into it.
func (d *Draft) MergeLayers(layers []store.Digest, below []string) (store.Layer, error) {
	d.c.gc.RLock()
	defer d.c.gc.RUnlock()
	l, err := d.c.Layers.Merge(layers, below)
	if err != nil {
		return l, err
	}
	d.hold(l.Digest)
	return l, nil
}

// FlattenDepth is the deepest stack of layers a snapshot keeps: a snapshot
// of a fork whose chain would stack more is taken with the whole chain
// merged into one layer (docs/decisions/0012).
const FlattenDepth = 16

// release drops the draft's holds on its layers. c.mu is held.
func (d *Draft) release() {
	for _, l := range d.held {
		if d.c.held[l]--; d.c.held[l] <= 0 {
			delete(d.c.held, l)
		}
	}
	d.held = nil
}

// Abort removes the draft and every layer only it named.
func (d *Draft) Abort() {
	os.RemoveAll(d.dir)
	d.c.gc.Lock()
	defer d.c.gc.Unlock()
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	d.release()
	d.c.collect()
}

// Commit writes s's metadata into the draft and publishes it under its id.
func (d *Draft) Commit(s *Snapshot) error {
	s.Version, s.ID = FormatVersion, d.id
	if d.unsynced {
		id, err := bootID()
		if err != nil {
			return fmt.Errorf("commit snapshot %s: %w", d.id, err)
		}
		s.BootID = id
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("commit snapshot %s: %w", d.id, err)
	}
	if err := writeFile(filepath.Join(d.dir, "snapshot.json"), b, !d.unsynced); err != nil {
		return fmt.Errorf("commit snapshot %s: %w", d.id, err)
	}
	if err := os.Rename(d.dir, filepath.Join(d.c.dir, d.id)); err != nil {
		return fmt.Errorf("commit snapshot %s: %w", d.id, err)
	}
	if !d.unsynced {
		if err := syncDir(d.c.dir); err != nil {
			return fmt.Errorf("commit snapshot %s: %w", d.id, err)
		}
	}
	d.c.mu.Lock()
	d.c.snaps[d.id] = s
	d.release()
	d.c.mu.Unlock()
	return nil
}

// Dir is where snapshot id's files live once committed.
func (c *Catalog) Dir(id string) string { return filepath.Join(c.dir, id) }

// Get returns snapshot id.
func (c *Catalog) Get(id string) (*Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.snaps[id]
	if !ok {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	return s, nil
}

// List returns every snapshot, oldest first.
func (c *Catalog) List() []*Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Snapshot, 0, len(c.snaps))
	for _, s := range c.snaps {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// Use records a live sandbox running on snapshot id's layers; the returned
// func ends the use. A snapshot in use cannot be deleted.
func (c *Catalog) Use(id string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.snaps[id]; !ok {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	c.users[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.users[id]--
			if c.users[id] == 0 {
				delete(c.users, id)
			}
			c.mu.Unlock()
		})
	}, nil
}

// Delete removes snapshot id and the layers no other snapshot names. It
// refuses (ErrInUse) while live sandboxes forked from it run: their
// overlays stack its layers.
func (c *Catalog) Delete(id string) error {
	c.gc.Lock()
	defer c.gc.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.snaps[id]; !ok {
		return fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if n := c.users[id]; n > 0 {
		return fmt.Errorf("snapshot %s: %w by %d live sandbox(es) forked from it; remove them first", id, ErrInUse, n)
	}
	gone := filepath.Join(c.dir, ".gone-"+id)
	if err := os.Rename(c.Dir(id), gone); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	delete(c.snaps, id)
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return c.collect()
}

// collect removes the layers no snapshot names, no draft holds and no
// other holder pins (images share the store). c.gc and c.mu are held (or
// c is not shared yet).
func (c *Catalog) collect() error {
	// List before reading the pins: a pull pins a layer before it
	// publishes it, so every layer listed that a pull wants is pinned by
	// the time the pins are read.
	all, err := c.Layers.List()
	if err != nil {
		return err
	}
	pinned, err := c.Layers.Pinned()
	if err != nil {
		return err
	}
	named := map[store.Digest]bool{}
	for d := range pinned {
		named[d] = true
	}
	for _, s := range c.snaps {
		for _, d := range s.Layers {
			named[d] = true
		}
	}
	for _, d := range all {
		if !named[d] && c.held[d] == 0 {
			if err := c.Layers.Remove(d); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeSynced(path string, b []byte) error { return writeFile(path, b, true) }

func writeFile(path string, b []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// bootID names this boot of the host (an unsynced snapshot's validity).
var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// lockWait bounds the wait for a state directory whose daemon is gone but
// whose lock is still held: the copies of its descriptors in its children
// (clones of it, dying of its death) close a moment later.
const lockWait = 10 * time.Second

// lockStateDir takes the state directory's lock and writes its holder (pid
// and start time) into it. When another holds it: at once an error if that
// daemon lives, else it waits up to lockWait for the dead one's children.
func lockStateDir(lock *os.File) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			lock.Truncate(0)
			lock.WriteAt([]byte(holder(os.Getpid())), 0)
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		b := make([]byte, 64)
		n, _ := lock.ReadAt(b, 0)
		var pid int
		fmt.Sscanf(string(b[:n]), "%d", &pid)
		if pid <= 0 || holder(pid) == string(b[:n]) || time.Now().After(deadline) {
			return err // a live holder, one that did not say, or too long
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holder identifies a live process: its pid and its start time ("" once
// it is gone), which tells it from a later one with the same pid.
func holder(pid int) string {
	start := procstat.StartTime(pid)
	if start == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d\n", pid, start)
}
