// Package units parses the sizes and durations users write in flags and
// function specs ("512m", "2g", "30s", "1.5").
package units

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrSize and ErrDuration say what a value should have looked like.
var (
	ErrSize     = errors.New("want a size like 512m, 2g or 1048576 (bytes)")
	ErrDuration = errors.New("want a positive duration like 30s, 1m30s or 2.5 (seconds)")
)

// ParseSize parses a byte size: a number with an optional unit k, m, g, t
// (powers of 1024; "KiB", "MB", "M" and friends are accepted too).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, ErrSize
	}
	num, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || num < 0 {
		return 0, ErrSize
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
		return 0, ErrSize
	}
	v := num * mult
	// 1<<63 itself does not fit an int64 (float64(math.MaxInt64) is 1<<63).
	if v >= 1<<63 || v < 1 {
		return 0, ErrSize
	}
	return int64(v), nil
}

// ParseDuration accepts Go durations ("90s", "1m30s") or plain seconds ("1.5").
func ParseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e9 {
		// Less than a nanosecond would round to no duration at all.
		if d := time.Duration(f * float64(time.Second)); d > 0 {
			return d, nil
		}
	}
	return 0, ErrDuration
}
