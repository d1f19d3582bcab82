package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/internal/runcli"
)

// FuzzFlags: the parsers of tine's flag values (--memory/--disk, --timeout,
// --cpus, --pids, --size, --app, -e) refuse a bad value with a usage error
// naming the flag and the value, and give values in their range.
func FuzzFlags(f *testing.F) {
	seeds := map[uint8][]string{
		flagSize:     {"512m", "2g", "1048576", "1GiB", "64K", "1.5m", "256MB", "", "m", "-1m", "0", "1e9", "12q", "9999999999t"},
		flagDuration: {"1m30s", "2.5", "30s", "0", "-1s", "soon", "1e-10"},
		flagCPUs:     {"0.5", "2", "4096", "0", "-1", "4097", "NaN", "Inf", "0x1p-2", "1e-300"},
		flagCount:    {"64", "1", "0", "-5", "1.5", "9223372036854775808"},
		flagScreen:   {"1280x800", "64x64", "8192x8192", "63x64", "1280x", "x800", "1280x800x600", "+1280x800", "1280X800", "1280 x 800"},
		flagApp:      {"xterm", `["xterm","-bg","black"]`, `[]`, `[""]`, `["a"`, `"xterm"`},
		flagEnv:      {"A=1", "A", "=x", "A==", ""},
	}
	for which, vals := range seeds {
		for _, v := range vals {
			f.Add(which, v)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, s string) {
		var err error
		var got any
		switch which % flagKinds {
		case flagSize:
			var v int64
			v, err = parseSize("memory", s)
			got = v
			if err == nil && v < 1 {
				t.Fatalf("--memory %q = %d", s, v)
			}
		case flagDuration:
			var v time.Duration
			v, err = parseDuration("timeout", s)
			got = v
			if err == nil && v <= 0 {
				t.Fatalf("--timeout %q = %v", s, v)
			}
		case flagCPUs:
			var v float64
			v, err = parseCPUs(s)
			got = v
			if err == nil && (math.IsNaN(v) || v <= 0 || v > 4096) {
				t.Fatalf("--cpus %q = %v", s, v)
			}
		case flagCount:
			var v int64
			v, err = parseCount("pids", s)
			got = v
			if err == nil && v <= 0 {
				t.Fatalf("--pids %q = %d", s, v)
			}
		case flagScreen:
			var w, h int
			w, h, err = parseScreen(s)
			got = [2]int{w, h}
			if err == nil && (w < 64 || h < 64 || w > 8192 || h > 8192) {
				t.Fatalf("--size %q = %dx%d", s, w, h)
			}
		case flagApp:
			argv := parseApp(s)
			if len(argv) == 0 {
				t.Fatalf("--app %q: no argv", s)
			}
			return
		case flagEnv:
			k, v, ok := runcli.CutEnv(s)
			if ok && k+"="+v != s || !ok && (k != s || strings.Contains(s, "=")) {
				t.Fatalf("CutEnv(%q) = %q, %q, %v", s, k, v, ok)
			}
			return
		}
		if err == nil {
			return
		}
		if msg := err.Error(); !isUsage(err) || !strings.HasPrefix(msg, "invalid --") || !strings.Contains(msg, fmt.Sprintf("%q", s)) {
			t.Fatalf("kind %d, value %q (got %v): error %q is no usage error naming the flag and the value", which%flagKinds, s, got, err)
		}
	})
}

// Kinds of flag value FuzzFlags parses.
const (
	flagSize uint8 = iota
	flagDuration
	flagCPUs
	flagCount
	flagScreen
	flagApp
	flagEnv
	flagKinds
)
