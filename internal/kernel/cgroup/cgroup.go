// Package cgroup is tine's cgroup driver. It finds out what the host really
// enforces (cgroup v2 with controllers, or the v1 hierarchies of a hybrid
// host), creates one cgroup per sandbox under a "tine" parent, sets limits,
// places processes, reads usage, kills and removes it, and reaps cgroups
// left behind by a tine that died.
//
// It is written over cgroupfs by hand (see docs/decisions/0002-cgroup-driver.md):
// it is on the start path of every sandbox, and the libraries pull in
// dbus, systemd and ebpf for features tine does not use.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tine-run/tine/internal/kernel/rawfile"
)

// Version is the cgroup interface tine drives on this host.
type Version int

const (
	// None: no usable hierarchy; limits cannot be enforced.
	None Version = iota
	// V1: the legacy per-controller hierarchies (hybrid hosts).
	V1
	// V2: the unified hierarchy, with controllers enabled for tine.
	V2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "none"
}

// Parent is the cgroup under each hierarchy's root that holds every sandbox.
const Parent = "tine"

// Controllers tine uses, in the order it sets them up. cpuacct exists only
// on v1 (v2 accounts CPU time in every cgroup), and so does freezer (v2
// freezes any group through cgroup.freeze).
var Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// ErrUnavailable means the host has no hierarchy where a limit can be enforced.
var ErrUnavailable = errors.New("cgroup limits are unavailable on this host")

// Host describes the cgroup hierarchies of this machine as tine sees them.
type Host struct {
	Version Version
	// V2Mount is where the unified hierarchy is mounted ("" if it is not).
	V2Mount string
	// V1Mounts maps a v1 controller to its mount point.
	V1Mounts map[string]string
	// Enforceable lists the controllers of Controllers that tine can use.
	Enforceable []string
	// Why explains a missing controller or the choice of version.
	Why string
}

// Detect reads /proc/self/mountinfo and the v2 root's controllers and
// decides which interface tine drives: v2 when the unified hierarchy offers
// memory and pids, else v1 when those controllers are mounted, else None.
// It is on the start of every one-shot run: both files are read with one
// read(2) each (rawfile), not through an os.File and a Scanner.
func Detect() (*Host, error) {
	b, err := rawfile.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	h := &Host{V1Mounts: map[string]string{}}
	parseMountinfo(h, b)
	if h.V2Mount != "" {
		avail := v2Available(h.V2Mount)
		if slices.Contains(avail, "memory") && slices.Contains(avail, "pids") {
			h.Version = V2
			for _, c := range Controllers {
				if slices.Contains(avail, c) {
					h.Enforceable = append(h.Enforceable, c)
				}
			}
			h.Why = fmt.Sprintf("unified hierarchy at %s offers %s", h.V2Mount, strings.Join(avail, " "))
			return h, nil
		}
	}
	if h.V1Mounts["memory"] != "" && h.V1Mounts["pids"] != "" {
		h.Version = V1
		for _, c := range Controllers {
			if h.V1Mounts[c] != "" {
				h.Enforceable = append(h.Enforceable, c)
			}
		}
		if h.V2Mount != "" {
			h.Why = fmt.Sprintf("hybrid host: the v2 hierarchy at %s has no memory/pids controllers, so tine uses the v1 hierarchies", h.V2Mount)
		} else {
			h.Why = "legacy host: only v1 hierarchies are mounted"
		}
		return h, nil
	}
	h.Version = None
	h.Why = "neither a v2 hierarchy with memory and pids controllers nor v1 memory and pids hierarchies are mounted"
	return h, nil
}

// v2Available returns the controllers tine's parent can hand to sandboxes:
// those listed in the root's cgroup.controllers (the parent is created and
// its subtree_control filled on first use).
func v2Available(mount string) []string {
	b, err := rawfile.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// parseMountinfo fills h's mount points from mountinfo's lines:
// "id parent major:minor root mountpoint opts ... - fstype source superopts".
// The first mount of a kind wins.
func parseMountinfo(h *Host, b []byte) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		pre, post, ok := bytes.Cut(line, []byte(" - "))
		if !ok {
			continue
		}
		// The mount point is pre's fifth field; fstype and superopts are
		// post's first and third.
		mnt, ok := field(pre, 4)
		fstype, ok2 := field(post, 0)
		opts, ok3 := field(post, 2)
		if !ok || !ok2 || !ok3 {
			continue
		}
		switch string(fstype) {
		case "cgroup2":
			if h.V2Mount == "" {
				h.V2Mount = unescapeMount(string(mnt))
			}
		case "cgroup":
			for opts := opts; len(opts) > 0; {
				var opt []byte
				opt, opts, _ = bytes.Cut(opts, []byte{','})
				for _, c := range Controllers {
					if string(opt) != c {
						continue
					}
					if _, seen := h.V1Mounts[c]; !seen {
						h.V1Mounts[c] = unescapeMount(string(mnt))
					}
				}
			}
		}
	}
}

// field returns the i-th space-separated field of b (mountinfo separates
// its fields by one space and escapes spaces within them).
func field(b []byte, i int) ([]byte, bool) {
	for ; i > 0; i-- {
		j := bytes.IndexByte(b, ' ')
		if j < 0 {
			return nil, false
		}
		b = b[j+1:]
	}
	if j := bytes.IndexByte(b, ' '); j >= 0 {
		b = b[:j]
	}
	return b, len(b) > 0
}

// Has reports whether controller c is enforceable.
func (h *Host) Has(c string) bool { return slices.Contains(h.Enforceable, c) }

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
