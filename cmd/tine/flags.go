package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tine-run/tine/internal/runcli"
)

// The parsers tine run shares (runcli); their errors are usage errors.
var (
	parseSize     = runcli.ParseSize
	parseDuration = runcli.ParseDuration
	parseCPUs     = runcli.ParseCPUs
	parseCount    = runcli.ParseCount
	parseLimits   = runcli.ParseLimits
)

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
