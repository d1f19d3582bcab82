package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tine-run/tine/internal/units"
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

// parseScreen parses --size WIDTHxHEIGHT, 64 to 8192 pixels each way (the
// daemon's and the guest's range).
func parseScreen(s string) (width, height int, err error) {
	w, h, ok := strings.Cut(s, "x")
	width, werr := strconv.Atoi(w)
	height, herr := strconv.Atoi(h)
	if !ok || werr != nil || herr != nil || width < 64 || height < 64 || width > 8192 || height > 8192 {
		return 0, 0, usageError{fmt.Sprintf("invalid --size %q: want WIDTHxHEIGHT, 64 to 8192 each, e.g. 1280x800", s)}
	}
	return width, height, nil
}

// parseApp parses --app: a JSON argv like ["xterm","-bg","black"], or a
// command name.
func parseApp(s string) []string {
	var argv []string
	if json.Unmarshal([]byte(s), &argv) != nil || len(argv) == 0 {
		return []string{s}
	}
	return argv
}
