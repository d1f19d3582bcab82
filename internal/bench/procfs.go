package bench

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The suites read what they measure about processes from /proc; each file
// has a parser of its text here, unit-tested on its own.

// parsePss sums the "Pss:" line of a /proc/PID/smaps_rollup, in bytes.
func parsePss(smapsRollup string) (int64, error) {
	return parseKBField(smapsRollup, "Pss:")
}

// parseKBField finds the line starting with key (e.g. "Pss:", "VmRSS:",
// "MemAvailable:") in a /proc file of "key value kB" lines and returns the
// value in bytes.
func parseKBField(text, key string) (int64, error) {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, key)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s %q: want a number of kB", key, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s %q: %w", key, f[0], err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s line", strings.TrimSuffix(key, ":"))
}

// parseIntField finds "key\tN" in a /proc/PID/status (e.g. "Threads:").
func parseIntField(text, key string) (int64, error) {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", strings.TrimSuffix(key, ":"))
}

// parseHostUsed is MemTotal − MemAvailable of a /proc/meminfo, in bytes:
// what the whole host uses, kernel memory included.
func parseHostUsed(meminfo string) (int64, error) {
	total, err := parseKBField(meminfo, "MemTotal:")
	if err != nil {
		return 0, err
	}
	avail, err := parseKBField(meminfo, "MemAvailable:")
	if err != nil {
		return 0, err
	}
	return total - avail, nil
}

// HostKernel is the kernel memory of a /proc/meminfo that grows with
// processes and namespaces.
type HostKernel struct {
	PageTablesBytes    int64 `json:"page_tables_bytes"`
	KernelStackBytes   int64 `json:"kernel_stack_bytes"`
	SlabUnreclaimBytes int64 `json:"slab_unreclaimable_bytes"`
}

func parseHostKernel(meminfo string) (HostKernel, error) {
	var k HostKernel
	var err error
	for _, f := range []struct {
		key string
		to  *int64
	}{{"PageTables:", &k.PageTablesBytes}, {"KernelStack:", &k.KernelStackBytes}, {"SUnreclaim:", &k.SlabUnreclaimBytes}} {
		if *f.to, err = parseKBField(meminfo, f.key); err != nil {
			return k, err
		}
	}
	return k, nil
}

// parseMetric finds an unlabelled sample of name (e.g. go_goroutines) in a
// Prometheus text exposition.
func parseMetric(exposition, name string) (float64, error) {
	for line := range strings.Lines(exposition) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue // a comment, another metric with this prefix, or labels
		}
		f := strings.Fields(rest)
		if len(f) < 1 {
			break
		}
		return strconv.ParseFloat(f[0], 64)
	}
	return 0, fmt.Errorf("no %s sample in the metrics", name)
}

// processTree lists pid and all its descendants, pid first (from
// /proc/PID/task/*/children). Processes that end while it walks are left
// out.
func processTree(pid int) []int {
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, childPids(tree[i])...)
	}
	return tree
}

// childPids lists pid's children (from /proc/PID/task/*/children).
func childPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// processPSS is the PSS of one process in bytes. A process that has ended
// (or is a zombie, which has no memory) counts 0.
func processPSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if errors.Is(err, os.ErrNotExist) || err == nil && len(b) == 0 {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parsePss(string(b))
}

// treePSS sums the PSS of pid and all its descendants; unreadable
// processes (ended meanwhile) count 0.
func treePSS(pid int) int64 {
	total, _, _ := treePSSCount(pid)
	return total
}

// treePSSCount is treePSS that also says how many processes it summed and
// the first error other than a process that ended.
func treePSSCount(pid int) (total int64, procs int, err error) {
	for _, p := range processTree(pid) {
		pss, e := processPSS(p)
		if e != nil {
			err = cmp.Or(err, fmt.Errorf("pss of pid %d: %w", p, e))
			continue
		}
		total += pss
		procs++
	}
	return total, procs, err
}

// processStatus reads /proc/PID/status.
func processStatus(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return string(b), err
}

// openFDs counts the open descriptors of pid (/proc/PID/fd).
func openFDs(pid int) (int, error) {
	d, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names), err
}

// openSockets counts the open descriptors of pid that are sockets.
func openSockets(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	n := 0
	for _, name := range names {
		if target, err := os.Readlink(dir + "/" + name); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, err
}

// parseLimit reads one row of a /proc/PID/limits ("Max open files  soft
// hard units") and returns its soft and hard values (-1: unlimited).
func parseLimit(limits, name string) (soft, hard int64, err error) {
	sc := bufio.NewScanner(strings.NewReader(limits))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			break
		}
		val := func(s string) (int64, error) {
			if s == "unlimited" {
				return -1, nil
			}
			return strconv.ParseInt(s, 10, 64)
		}
		if soft, err = val(f[0]); err == nil {
			hard, err = val(f[1])
		}
		return soft, hard, err
	}
	return 0, 0, fmt.Errorf("no %q row in the limits", name)
}
