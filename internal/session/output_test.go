package session

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"golang.org/x/sys/unix"
)

// scripted is the interpreter's side of an agent's channels, written by
// the test: what the daemon reads, in the order the test puts it there.
type scripted struct {
	t    *testing.T
	a    *agent
	ends agentEnds
}

func newScripted(t *testing.T) *scripted {
	a, ends, err := newAgent()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.closeFDs(); ends.close() })
	return &scripted{t: t, a: a, ends: ends}
}

// write writes raw output to stdout, as a process bypassing sys.stdout
// or sys.stdout itself does.
func (s *scripted) write(b string) {
	if _, err := s.ends[1].WriteString(b); err != nil {
		s.t.Fatal(err)
	}
}

// frame sends a frame as the agent does.
func (s *scripted) frame(f map[string]any) {
	b, _ := json.Marshal(f)
	if _, err := s.ends[0].Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		s.t.Fatal(err)
	}
}

// cell runs one cell whose whole course (output and frames) the script
// has already put in the channels, and returns its stdout.
func (s *scripted) cell() string {
	ex := s.a.run(context.Background(), api.CellRequest{Code: "pass"}, &Options{MaxOutput: 1 << 20}, nil)
	if ex.Status != api.ExecOK {
		s.t.Fatalf("cell: %+v", ex)
	}
	return ex.Stdout
}

// Output written past sys.stdout's count (a process of the session, an
// os.write) is neither lost nor cut, and does not hold the next cell's
// own output back, however the daemon's reads of the pipes and the socket
// fall against each other.
func TestOutputPastTheCountsStaysWhole(t *testing.T) {
	t.Run("written between cells, read with a frame", func(t *testing.T) {
		// The fork ahead's (or a fork's check's) frame comes with what a
		// process wrote after the last cell; the next cell prints "next".
		s := newScripted(t)
		s.write("between cells\n")
		s.frame(map[string]any{"type": "held", "out": 0})
		if _, err := s.a.held(); err != nil {
			t.Fatal(err)
		}
		s.write("next\n")
		s.frame(map[string]any{"type": "end", "count": 1, "out": 5})
		if got, want := s.cell(), "between cells\nnext\n"; got != want {
			t.Errorf("the next cell's stdout is %q, want %q", got, want)
		}
	})
	t.Run("written between cells, read before a frame", func(t *testing.T) {
		s := newScripted(t)
		s.write("between cells\n")
		s.frame(map[string]any{"type": "end", "count": 1, "out": 0})
		if got := s.cell(); got != "between cells\n" {
			t.Errorf("stdout %q", got)
		}
		s.write("next\n")
		s.frame(map[string]any{"type": "end", "count": 2, "out": 5})
		if got, want := s.cell(), "next\n"; got != want {
			t.Errorf("the next cell's stdout is %q, want %q", got, want)
		}
	})
	t.Run("written in a cell, read before its end", func(t *testing.T) {
		// A cell's subprocess writes and the daemon reads it before any
		// frame; the next cell's output then comes with its end frame.
		s := newScripted(t)
		done := make(chan string)
		go func() { done <- s.cell() }()
		s.write("sub\n")
		s.drained()
		s.frame(map[string]any{"type": "end", "count": 1, "out": 0})
		if got := <-done; got != "sub\n" {
			t.Errorf("stdout %q", got)
		}
		s.write("x\n")
		s.frame(map[string]any{"type": "end", "count": 2, "out": 2})
		if got, want := s.cell(), "x\n"; got != want {
			t.Errorf("the next cell's stdout is %q, want %q", got, want)
		}
	})
}

// drained waits until the daemon has read all of stdout.
func (s *scripted) drained() {
	for {
		n, err := unix.IoctlGetInt(int(s.ends[1].Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			s.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
