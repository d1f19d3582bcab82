package cli

import (
	"slices"
	"testing"
)

// TestRestoreSingleDashFlags: go-runc sends restore's -no-subreaper with
// one dash, as runc's flag parser accepts; pflag reads two.
func TestRestoreSingleDashFlags(t *testing.T) {
	got := runcArgs([]string{"restore", "--detach", "-no-subreaper", "--bundle", "b", "id", "--", "-no-subreaper"})
	want := []string{"restore", "--detach", "--no-subreaper", "--bundle", "b", "id", "--", "-no-subreaper"}
	if !slices.Equal(got, want) {
		t.Errorf("runcArgs = %v, want %v", got, want)
	}
}
