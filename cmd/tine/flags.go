package main

import (
	"fmt"
	"github.com/tine-run/tine/internal/units"
	"math"
	"strconv"
	"time"
)

// parseSize parses a byte size flag (see units.ParseSize).
func parseSize(flag, s string) (int64, error) {
	v, err := units.ParseSize(s)
	if err != nil {
		return 0, usageError{fmt.Sprintf("invalid --%s %q: %v", flag, s, err)}
	}
	return v, nil
}

// parseDuration parses a duration flag (see units.ParseDuration).
func parseDuration(flag, s string) (time.Duration, error) {
	d, err := units.ParseDuration(s)
	if err != nil {
		return 0, usageError{fmt.Sprintf("invalid --%s %q: %v", flag, s, err)}
	}
	return d, nil
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
