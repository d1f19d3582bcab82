package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var groupSeq atomic.Uint64

// NewName returns a group name unique on this host: the owning tine's pid
// (so a later reap can tell whether the owner is gone) and a sequence number.
func NewName() string {
	return fmt.Sprintf("%d-%d", os.Getpid(), groupSeq.Add(1))
}

// ownerAlive reports whether the tine process that named group name still runs.
func ownerAlive(name string) bool {
	pidStr, _, ok := strings.Cut(name, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	return unix.Kill(pid, 0) != unix.ESRCH
}

// Reap kills the processes of, and removes, every sandbox cgroup whose
// owning tine is gone (one that was SIGKILLed mid-run, or a crashed daemon).
// It returns the directories it removed.
func (h *Host) Reap() ([]string, error) {
	var parents []string
	switch h.Version {
	case V2:
		parents = []string{filepath.Join(h.V2Mount, Parent)}
	case V1:
		for _, c := range Controllers {
			if m := h.V1Mounts[c]; m != "" {
				parents = append(parents, filepath.Join(m, Parent))
			}
		}
	}
	var removed []string
	var errs []error
	for _, parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list %s: %w", parent, err))
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || ownerAlive(e.Name()) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			killProcs(dir)
			if err := rmdirRetry(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}
