package bench

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// Fingerprint says which machine, which tine and when a result came from, so
// a number is never read without its context. Facts that cannot be read are
// "unknown" (or 0), never left out.
type Fingerprint struct {
	Kernel        string `json:"kernel"`
	CPUModel      string `json:"cpu_model"`
	CPUs          int    `json:"cpus"`
	MemTotalBytes uint64 `json:"mem_total_bytes"`
	// Cgroup is the interface tine drives here: v1, v2 or none.
	Cgroup            string   `json:"cgroup"`
	CgroupEnforceable []string `json:"cgroup_enforceable"`
	CgroupWhy         string   `json:"cgroup_why"`
	TineVersion       string   `json:"tine_version"`
	GoVersion         string   `json:"go_version"`
	Date              string   `json:"date"`
	// Before and After bracket the whole suite; each group keeps its own.
	Before HostState `json:"before"`
	After  HostState `json:"after"`
}

const unknown = "unknown"

// TakeFingerprint reads the static facts of this host now. Before and After
// are left for the suite runner to fill.
func TakeFingerprint() Fingerprint {
	fp := Fingerprint{
		Kernel:      unknown,
		CPUModel:    cpuModel(),
		CPUs:        runtime.NumCPU(),
		Cgroup:      unknown,
		TineVersion: tineVersion(),
		GoVersion:   runtime.Version(),
		Date:        time.Now().Format(time.RFC3339),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		fp.Kernel = strings.TrimSpace(string(b))
	}
	fp.MemTotalBytes = memTotal()
	if host, err := cgroup.Detect(); err != nil {
		fp.CgroupWhy = err.Error()
	} else {
		fp.Cgroup = host.Version.String()
		fp.CgroupEnforceable = host.Enforceable
		fp.CgroupWhy = host.Why
	}
	return fp
}

// cpuModel is the first "model name" of /proc/cpuinfo (absent on some
// architectures, hence unknown).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return unknown
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return unknown
}

// memTotal is MemTotal of /proc/meminfo in bytes, 0 if unreadable.
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest) // "16318412 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// tineVersion names the tine that ran. The revision stamped into the binary
// at build time comes first, as it describes this binary even when it is run
// from elsewhere; then the commit of the tine checkout in the working
// directory; then unknown.
func tineVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var revision, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if revision != "" {
			if len(revision) > 12 {
				revision = revision[:12]
			}
			if modified == "true" {
				revision += "-dirty"
			}
			return revision
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	if rev := checkoutRevision(); rev != "" {
		return rev
	}
	return unknown
}

// checkoutRevision is `git rev-parse --short HEAD` when the working directory
// is inside a checkout of tine itself (not some other repository).
func checkoutRevision() string {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return ""
	}
	gomod, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "go.mod"))
	if err != nil || !bytes.Contains(gomod, []byte("module github.com/tine-run/tine\n")) {
		return ""
	}
	out, err = exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
