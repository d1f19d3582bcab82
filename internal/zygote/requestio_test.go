package zygote

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childWrite writes b to fd (a child's end of an output pipe), blocking as
// the child does, then closes it; done reports when it has.
func childWrite(fd int, b []byte) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		for len(b) > 0 {
			n, err := unix.Write(fd, b)
			if err != nil {
				break
			}
			b = b[n:]
		}
		unix.Close(fd)
	}()
	return done
}

// A request that ended its output before its reply has it read on the
// spot, with no goroutine per pipe.
func TestRequestOutputReadAfterTheReply(t *testing.T) {
	r := newRequestIO([]byte("payload"))
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.closeAll()
	out, errw := r.outW, r.errW
	r.outW, r.errW = -1, -1 // the child's now
	r.closeChildEnds()
	r.drainLater()
	<-childWrite(out, []byte("to stdout"))
	<-childWrite(errw, []byte("to stderr"))
	stdout, stderr, truncated := r.output()
	if stdout != "to stdout" || stderr != "to stderr" || truncated {
		t.Errorf("output %q %q truncated %v", stdout, stderr, truncated)
	}
	if len(r.drains) != 0 {
		t.Errorf("%d goroutines drained the pipes, want none", len(r.drains))
	}
}

// A request whose output is more than a pipe holds is not left waiting
// for its reply to be read: goroutines drain the pipes after drainAfter,
// and the first maxOutput bytes are kept.
func TestRequestOutputDrainedWhileItRuns(t *testing.T) {
	r := newRequestIO(nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.closeAll()
	out, errw := r.outW, r.errW
	r.outW, r.errW = -1, -1
	r.closeChildEnds()
	r.drainLater()
	flood := bytes.Repeat([]byte("x"), 3*maxOutput)
	wrote := childWrite(out, flood)
	unix.Close(errw)
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer of 3 MiB still blocks after 5 s: nothing read the pipe")
	}
	stdout, _, truncated := r.output()
	if len(stdout) != maxOutput || !truncated || strings.Trim(stdout, "x") != "" {
		t.Errorf("kept %d bytes, truncated %v; want the first %d, truncated", len(stdout), truncated, maxOutput)
	}
}

// A pipe a leftover process still holds when the reply comes is read
// until that process lets go (here, a little later), within outputGrace.
func TestRequestOutputWaitsForALeftoverWriter(t *testing.T) {
	r := newRequestIO(nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.closeAll()
	out, errw := r.outW, r.errW
	r.outW, r.errW = -1, -1
	r.closeChildEnds()
	unix.Close(errw)
	unix.Write(out, []byte("early "))
	go func() {
		time.Sleep(50 * time.Millisecond)
		unix.Write(out, []byte("late"))
		unix.Close(out)
	}()
	stdout, _, truncated := r.output()
	if stdout != "early late" || truncated {
		t.Errorf("output %q truncated %v, want \"early late\" (all of it, up to the writer's end)", stdout, truncated)
	}
}
