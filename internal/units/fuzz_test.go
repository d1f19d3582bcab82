package units

import (
	"errors"
	"strconv"
	"testing"
)

// FuzzParseSize: a size is refused with ErrSize or is a positive number of
// bytes, and the plain number it gave parses back to itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512m", "2g", "1048576", "1GiB", "64K", "1.5m", "256MB", " 4t ", "1.5",
		"", "m", "-1m", "0", "1e9", "12q", "9999999999t", "0.5", ".", "1..2k", "NaN", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrSize) {
				t.Fatalf("ParseSize(%q): error %v is not ErrSize", s, err)
			}
			return
		}
		if v < 1 {
			t.Fatalf("ParseSize(%q) = %d, want a positive size", s, v)
		}
		if back, err := ParseSize(strconv.FormatInt(v, 10)); err != nil || back != v {
			t.Fatalf("ParseSize(%q) = %d, but %d parses as %d, %v", s, v, v, back, err)
		}
	})
}

// FuzzParseDuration: a duration is refused with ErrDuration or is
// positive, and its Go spelling parses back to itself.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30s", "1m30s", "2.5", "90s", "1h", "1.5", "999999999", "100ns",
		"", "0", "-1s", "soon", "1e9", "NaN", "Inf", "+1s", "9223372036s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrDuration) {
				t.Fatalf("ParseDuration(%q): error %v is not ErrDuration", s, err)
			}
			return
		}
		if d <= 0 {
			t.Fatalf("ParseDuration(%q) = %v, want a positive duration", s, d)
		}
		if back, err := ParseDuration(d.String()); err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, but %q parses as %v, %v", s, d, d.String(), back, err)
		}
	})
}
