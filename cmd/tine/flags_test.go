package main

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{"512m": 512 << 20, "2g": 2 << 30, "1048576": 1 << 20, "1GiB": 1 << 30, "64K": 64 << 10, "1.5m": 3 << 19, "256MB": 256 << 20}
	for in, want := range good {
		if got, err := parseSize("memory", in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"12q", "", "m", "-1m", "0", "1e9", "9999999999t"} {
		_, err := parseSize("memory", in)
		if !isUsage(err) {
			t.Errorf("parseSize(%q): got %v, want a usage error naming --memory", in, err)
		}
	}
}

func TestParseDurationAndCounts(t *testing.T) {
	if d, err := parseDuration("timeout", "1m30s"); err != nil || d != 90*time.Second {
		t.Errorf("1m30s: %v %v", d, err)
	}
	if d, err := parseDuration("timeout", "2.5"); err != nil || d != 2500*time.Millisecond {
		t.Errorf("2.5: %v %v", d, err)
	}
	for _, bad := range []string{"0", "-1s", "soon"} {
		if _, err := parseDuration("timeout", bad); err == nil {
			t.Errorf("parseDuration(%q) accepted", bad)
		}
	}
	if _, err := parseCPUs("0"); err == nil {
		t.Error("--cpus 0 accepted")
	}
	if _, err := parseCount("pids", "1.5"); err == nil {
		t.Error("--pids 1.5 accepted")
	}
	mem, cpus, pids, err := parseLimits("1g", "0.5", "64")
	if err != nil || mem != 1<<30 || cpus != 0.5 || pids != 64 {
		t.Errorf("parseLimits: %d %v %d %v", mem, cpus, pids, err)
	}
}
