package seccomp

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{Default, Strict, Unconfined} {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	_, err := ParseMode("permissive")
	if !errors.Is(err, ErrUnknownMode) || !strings.Contains(err.Error(), `"unconfined"`) {
		t.Errorf("ParseMode(permissive): %v, want ErrUnknownMode naming the accepted modes", err)
	}
}

func TestUnconfinedHasNoProgram(t *testing.T) {
	prog, err := Program(Unconfined)
	if err != nil || prog != nil {
		t.Fatalf("Program(Unconfined) = %d instructions, %v; want nil, nil", len(prog), err)
	}
	if _, err := Program("permissive"); !errors.Is(err, ErrUnknownMode) {
		t.Fatalf("Program(permissive): %v, want ErrUnknownMode", err)
	}
}
