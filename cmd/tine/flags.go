package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseSize parses a byte size: a number with an optional unit k, m, g, t
// (powers of 1024; "KiB", "MB", "M" and friends are accepted too).
func parseSize(flag, s string) (int64, error) {
	bad := usageError{fmt.Sprintf("invalid --%s %q: want a size like 512m, 2g or 1048576 (bytes)", flag, s)}
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, bad
	}
	num, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || num < 0 {
		return 0, bad
	}
	mult := 1.0
	switch strings.TrimSuffix(strings.TrimSuffix(t[i:], "ib"), "b") {
	case "":
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	case "t":
		mult = 1 << 40
	default:
		return 0, bad
	}
	v := num * mult
	if v > math.MaxInt64 || v < 1 {
		return 0, bad
	}
	return int64(v), nil
}

// parseDuration accepts Go durations ("90s", "1m30s") or plain seconds ("1.5").
func parseDuration(flag, s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e9 {
		return time.Duration(f * float64(time.Second)), nil
	}
	return 0, usageError{fmt.Sprintf("invalid --%s %q: want a positive duration like 30s, 1m30s or 2.5 (seconds)", flag, s)}
}

// parseCPUs accepts a positive number of cores, e.g. 0.5 or 2.
func parseCPUs(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 4096 || math.IsNaN(f) {
		return 0, usageError{fmt.Sprintf("invalid --cpus %q: want a positive number of cores like 0.5 or 2", s)}
	}
	return f, nil
}

// parseCount accepts a positive integer.
func parseCount(flag, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, usageError{fmt.Sprintf("invalid --%s %q: want a positive whole number", flag, s)}
	}
	return n, nil
}

// parseLimits parses --memory, --cpus and --pids; an empty flag means no limit.
func parseLimits(memory, cpus, pids string) (memBytes int64, cores float64, maxPids int64, err error) {
	if memory != "" {
		if memBytes, err = parseSize("memory", memory); err != nil {
			return
		}
	}
	if cpus != "" {
		if cores, err = parseCPUs(cpus); err != nil {
			return
		}
	}
	if pids != "" {
		maxPids, err = parseCount("pids", pids)
	}
	return
}
