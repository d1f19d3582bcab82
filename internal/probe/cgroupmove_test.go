package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The probe really moves a process (it times writes that succeeded) and
// leaves no group behind.
func TestMeasureCgroupMove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	c, err := MeasureCgroupMove(2, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hierarchy == "" || c.QuietMs <= 0 || c.BusyMs <= 0 || c.Samples != 2 {
		t.Errorf("measured %+v", c)
	}
	if c.ThreadHierarchy != "" && c.ThreadQuietMs <= 0 {
		t.Errorf("the thread move was not measured: %+v", c)
	}
	left, _ := filepath.Glob(filepath.Join(c.Hierarchy, fmt.Sprintf("tine-doctor-%d-*", os.Getpid())))
	if c.ThreadHierarchy != "" {
		more, _ := filepath.Glob(filepath.Join(c.ThreadHierarchy, fmt.Sprintf("tine-doctor-%d-*", os.Getpid())))
		left = append(left, more...)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
