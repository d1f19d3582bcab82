package runcli

// The parsers of flag values that tine run shares with tine's other
// commands.

import (
	"math"
	"strconv"
	"time"

	"github.com/tine-run/tine/internal/units"
)

// ParseSize parses a byte size flag (see units.ParseSize).
func ParseSize(flag, s string) (int64, error) {
	v, err := units.ParseSize(s)
	if err != nil {
		return 0, usage("invalid --%s %q: %v", flag, s, err)
	}
	return v, nil
}

// ParseDuration parses a duration flag (see units.ParseDuration).
func ParseDuration(flag, s string) (time.Duration, error) {
	d, err := units.ParseDuration(s)
	if err != nil {
		return 0, usage("invalid --%s %q: %v", flag, s, err)
	}
	return d, nil
}

// ParseCPUs accepts a positive number of cores, e.g. 0.5 or 2.
func ParseCPUs(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 4096 || math.IsNaN(f) {
		return 0, usage("invalid --cpus %q: want a positive number of cores like 0.5 or 2", s)
	}
	return f, nil
}

// ParseCount accepts a positive integer.
func ParseCount(flag, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, usage("invalid --%s %q: want a positive whole number", flag, s)
	}
	return n, nil
}

// ParseLimits parses --memory, --cpus and --pids; an empty flag means no limit.
func ParseLimits(memory, cpus, pids string) (memBytes int64, cores float64, maxPids int64, err error) {
	if memory != "" {
		if memBytes, err = ParseSize("memory", memory); err != nil {
			return
		}
	}
	if cpus != "" {
		if cores, err = ParseCPUs(cpus); err != nil {
			return
		}
	}
	if pids != "" {
		maxPids, err = ParseCount("pids", pids)
	}
	return
}
