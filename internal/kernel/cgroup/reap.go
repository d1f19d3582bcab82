package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/kernel/rawfile"
	"golang.org/x/sys/unix"
)

var groupSeq atomic.Uint64

// owner names this process in group names: its pid and start time, so a
// later reap can tell whether the owner is gone even when a new tine got
// the same pid (a daemon that is PID 1 of a container always does).
var owner = sync.OnceValue(func() string {
	return fmt.Sprintf("%d.%d", os.Getpid(), procstat.StartTime(os.Getpid()))
})

// NewName returns a group name unique on this host: the owning tine
// (pid.starttime) and a sequence number.
func NewName() string {
	return fmt.Sprintf("%s-%d", owner(), groupSeq.Add(1))
}

// ownerAlive reports whether the tine process that named group name still runs.
func ownerAlive(name string) bool {
	who, _, ok := strings.Cut(name, "-")
	if !ok {
		return false
	}
	if who == owner() {
		return true
	}
	pidStr, startStr, _ := strings.Cut(who, ".")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	if unix.Kill(pid, 0) == unix.ESRCH {
		return false
	}
	// Same pid, another process: the owner is gone.
	start, err := strconv.ParseUint(startStr, 10, 64)
	return err != nil || procstat.StartTime(pid) == start
}

// Reap kills the processes of, and removes, every sandbox cgroup whose
// owning tine is gone (one that was SIGKILLed mid-run, or a crashed daemon).
// It returns the directories it removed.
//
// On v1 it lists one hierarchy, memory's: every group of tine's is made
// there first and removed from there last (Create, Remove, the cleanup a
// one-shot run leaves), so a group that is anywhere is there. Each listing
// of a hierarchy's tine directory reads its dozens of control files too:
// one, not five, on every tine's start.
func (h *Host) Reap() ([]string, error) {
	var parents, listed []string
	switch h.Version {
	case V2:
		parents = []string{filepath.Join(h.V2Mount, Parent)}
	case V1:
		for _, c := range Controllers {
			if m := h.V1Mounts[c]; m != "" {
				parents = append(parents, filepath.Join(m, Parent))
			}
		}
		if m := h.V1Mounts["memory"]; m != "" {
			listed = []string{filepath.Join(m, Parent)}
		}
	}
	if listed == nil {
		listed = parents
	}
	var removed []string
	var errs []error
	var dead []string // groups of dead owners, named once
	seenName := map[string]bool{}
	// Every hierarchy lists the same groups, and an owner has many: each
	// owner is looked up once (a signal and a /proc read).
	alive := map[string]bool{}
	for _, parent := range listed {
		names, err := rawfile.Subdirs(parent)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list %s: %w", parent, err))
			}
			if names == nil {
				continue
			}
		}
		for _, name := range names {
			if seenName[name] {
				continue
			}
			who, _, _ := strings.Cut(name, "-")
			ok, seen := alive[who]
			if !seen {
				ok = ownerAlive(name)
				alive[who] = ok
			}
			if !ok {
				seenName[name] = true
				dead = append(dead, name)
			}
		}
	}
	// A group its owner froze (a snapshot under way when it died) is
	// thawed first, in every hierarchy: a frozen task does not die of
	// SIGKILL, and its group could never be removed.
	for _, parent := range parents {
		for _, name := range dead {
			if dir := filepath.Join(parent, name); isDir(dir) {
				thaw(dir)
			}
		}
	}
	// The listed hierarchy last, as Remove does.
	order := append(slices.DeleteFunc(slices.Clone(parents), func(p string) bool { return slices.Contains(listed, p) }), listed...)
	for _, parent := range order {
		for _, name := range dead {
			dir := filepath.Join(parent, name)
			if !isDir(dir) {
				continue
			}
			killProcs(dir)
			if err := removeTree(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}
