package oci

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// checkOOMScore refuses, at create, a score the command could not set
// itself after start. Without CAP_SYS_RESOURCE a process may not go below
// its oom_score_adj_min, which the container's processes inherit from
// this one and which no file shows: so the score is tried on this
// process, then put back.
func checkOOMScore(score int) error {
	const path = "/proc/self/oom_score_adj"
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("process.oomScoreAdj: %w", err)
	}
	own := strings.TrimSpace(string(b))
	if own == strconv.Itoa(score) {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(score)), 0); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("process.oomScoreAdj %d: lowering the OOM score that far needs CAP_SYS_RESOURCE, which this runtime lacks (its own is %s; containerd's CRI plugin: restrict_oom_score_adj = true keeps scores at or above containerd's)", score, own)
		}
		return fmt.Errorf("process.oomScoreAdj %d: %w", score, err)
	}
	return os.WriteFile(path, []byte(own), 0)
}
