package server

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// capacity is the host budget: how many sandboxes may live at once and how
// much memory their limits may add up to. A sandbox without a memory limit
// counts the default, so the sum never silently exceeds the budget.
type capacity struct {
	maxSandboxes  int
	maxMemory     int64
	defaultMemory int64
	retryAfter    time.Duration

	mu     sync.Mutex
	live   int
	memory int64
}

// charge is what one sandbox counts against the budget.
func (c *capacity) charge(memoryLimit int64) int64 {
	if memoryLimit > 0 {
		return memoryLimit
	}
	return c.defaultMemory
}

// admit reserves room for a sandbox with the given memory limit (0: none)
// and returns the function that gives it back, or a *capacityError.
func (c *capacity) admit(memoryLimit int64) (release func(), err error) {
	mem := c.charge(memoryLimit)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case mem > c.maxMemory:
		return nil, fmt.Errorf("%w: a sandbox counting %s of memory can never fit the daemon's budget of %s; ask for less memory (limits.memory_bytes), or start tine serve with a larger --max-memory",
			ErrInvalidArgument, formatBytes(mem), formatBytes(c.maxMemory))
	case c.live >= c.maxSandboxes:
		return nil, &capacityError{
			msg:        fmt.Sprintf("capacity: %d of %d sandboxes are live; delete one, or retry later", c.live, c.maxSandboxes),
			retryAfter: c.retryAfter,
		}
	case c.memory+mem > c.maxMemory:
		return nil, &capacityError{
			msg: fmt.Sprintf("capacity: live sandboxes already count %s of the %s memory budget, this one would add %s (a sandbox without limits.memory_bytes counts %s); delete one, ask for less, or retry later",
				formatBytes(c.memory), formatBytes(c.maxMemory), formatBytes(mem), formatBytes(c.defaultMemory)),
			retryAfter: c.retryAfter,
		}
	}
	c.live++
	c.memory += mem
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.live--
			c.memory -= mem
			c.mu.Unlock()
		})
	}, nil
}

// admitN reserves room for n sandboxes alike, all or none: a fork's
// replicas are made only when every one of them fits.
func (c *capacity) admitN(memoryLimit int64, n int) ([]func(), error) {
	shares := make([]func(), 0, n)
	for range n {
		release, err := c.admit(memoryLimit)
		if err != nil {
			for _, r := range shares {
				r()
			}
			var ce *capacityError
			if errors.As(err, &ce) {
				ce.msg = fmt.Sprintf("capacity for %d sandboxes: %s", n, ce.msg)
			}
			return nil, err
		}
		shares = append(shares, release)
	}
	return shares, nil
}

// used reports the sandboxes and memory currently counted.
func (c *capacity) used() (live int, memory int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live, c.memory
}

// hostMemory reads MemTotal from /proc/meminfo.
func hostMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse MemTotal %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// formatBytes prints n in the largest binary unit that keeps it readable.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
