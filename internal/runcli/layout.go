package runcli

import (
	"os"
	"strings"
)

// make build installs tine as three files side by side (ADR 0023): tine, the
// small front that runs `tine run` itself; tine-run, the same file, which is
// `tine run` alone; and tine-full, the full program, which the front execs for
// every other command. A lone full program (go build ./cmd/tine) is all of
// tine by itself.
const (
	FullSuffix = "-full"
	RunSuffix  = "-run"
)

// FullProgram is the path of the full program installed beside the front or
// tine-run at self.
func FullProgram(self string) string {
	return strings.TrimSuffix(self, RunSuffix) + FullSuffix
}

// Front is the path of the tine that users run, as the full program at self
// finds it: the front beside it, or self when there is none (a lone full
// program).
func Front(self string) string {
	front := strings.TrimSuffix(self, FullSuffix)
	if st, err := os.Stat(front); front == self || err != nil || !st.Mode().IsRegular() {
		return self
	}
	return front
}
