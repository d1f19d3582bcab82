package session

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/require"
	"github.com/tine-run/tine/internal/sandbox"
)

// newSandbox is a real live sandbox for sessions, destroyed with the test.
func newSandbox(t *testing.T, memory int64) *sandbox.Sandbox {
	t.Helper()
	require.Root(t)
	require.Binary(t, "python3")
	sb, err := sandbox.Create(&sandbox.Spec{Hostname: "sess", Seccomp: seccomp.Default, Limits: cgroup.Limits{Pids: 64, MemoryBytes: memory}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy() })
	return sb
}

func launcher(sb *sandbox.Sandbox) Launcher {
	return LaunchFunc(func(e *sandbox.ExecSpec) (Process, error) { return sb.Launch(e) })
}

func start(t *testing.T, sb *sandbox.Sandbox, o Options) *Session {
	t.Helper()
	s, err := Start("s1", "sb1", launcher(sb), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, s *Session, code string) *api.Execution {
	t.Helper()
	ex, err := s.Run(context.Background(), api.CellRequest{Code: code}, nil)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return ex
}

func TestCellsKeepStateAndReportLikeJupyter(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{Spec: api.SessionSpec{Workdir: "/tmp", Env: []string{"GREETING=hej"}}})

	ex := run(t, s, "import os\nx = 41\nprint('out', os.environ['GREETING'])\nimport sys; print('err', file=sys.stderr)")
	if ex.Status != api.ExecOK || ex.Stdout != "out hej\n" || ex.Stderr != "err\n" || len(ex.Results) != 0 || ex.ExecutionCount != 1 {
		t.Fatalf("first cell: %+v", ex)
	}
	ex = run(t, s, "x + 1")
	if ex.Status != api.ExecOK || ex.Text() != "42" || ex.ExecutionCount != 2 || !ex.Results[0].IsMain {
		t.Fatalf("second cell sees no state: %+v", ex)
	}
	// Open files and the working directory persist too.
	run(t, s, "f = open('notes', 'w'); os.chdir('/')")
	ex = run(t, s, "f.write('kept'); f.close(); os.getcwd(), open('/tmp/notes').read()")
	if ex.Text() != "('/', 'kept')" {
		t.Fatalf("files or cwd lost: %+v", ex)
	}
	// Rich results: an object's _repr_*_ methods and display().
	ex = run(t, s, `class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_json_(self): return {"a": 1}
    def __repr__(self): return "Rich()"
display(1, "two")
Rich()`)
	if ex.Status != api.ExecOK || len(ex.Results) != 3 {
		t.Fatalf("rich cell: %+v", ex)
	}
	if ex.Results[0].Text() != "1" || ex.Results[1].Text() != "'two'" || ex.Results[0].IsMain {
		t.Fatalf("display results: %+v", ex.Results)
	}
	main := ex.Results[2]
	if !main.IsMain || main.Data["text/html"] != "<b>rich</b>" || main.Text() != "Rich()" {
		t.Fatalf("main result: %+v", main)
	}
	if j, ok := main.Data["application/json"].(map[string]any); !ok || j["a"] != float64(1) {
		t.Fatalf("application/json is not a JSON value: %#v", main.Data["application/json"])
	}
	// The sandbox's walls hold for the session: seccomp filters it.
	ex = run(t, s, "[l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1]")
	if ex.Text() != "'2'" {
		t.Fatalf("the interpreter is not under seccomp: %+v", ex)
	}
	if s.Info().State != api.SessionIdle || s.Info().ExecutionCount != 6 || s.Info().Pid <= 1 {
		t.Fatalf("info: %+v", s.Info())
	}
}

func TestErrorsStartAtTheUsersCode(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{})
	ex := run(t, s, "def f():\n    return 1 / 0\nprint('before')\nf()")
	if ex.Status != api.ExecError || ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Error.Value != "division by zero" || ex.Stdout != "before\n" {
		t.Fatalf("error cell: %+v %+v", ex, ex.Error)
	}
	tb := ex.Error.Traceback
	if !strings.HasPrefix(tb, "Traceback (most recent call last):\n  File \"<cell 1>\", line 4") ||
		!strings.Contains(tb, "return 1 / 0") || strings.Contains(tb, "<string>") {
		t.Fatalf("traceback does not start at the user's code:\n%s", tb)
	}
	ex = run(t, s, "x = (")
	if ex.Status != api.ExecError || ex.Error.Name != "SyntaxError" || !strings.Contains(ex.Error.Traceback, "<cell 2>") {
		t.Fatalf("syntax error: %+v %+v", ex, ex.Error)
	}
	// The session goes on, SystemExit included.
	if ex = run(t, s, "raise SystemExit(3)"); ex.Error == nil || ex.Error.Name != "SystemExit" {
		t.Fatalf("SystemExit: %+v", ex)
	}
	if ex = run(t, s, "2 * 21"); ex.Text() != "42" || ex.ExecutionCount != 4 {
		t.Fatalf("after errors: %+v", ex)
	}
}

func TestStreamedEventsComeInOrder(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{})
	var got []string
	ex, err := s.Run(context.Background(), api.CellRequest{Code: "print('a')\ndisplay(1)\nprint('é' * 3)\nimport sys; sys.stderr.write('b')\n5"},
		func(e Event) {
			switch e.Type {
			case api.EventResult:
				got = append(got, "result:"+e.Result.Text())
			default:
				// Output comes as it is written: merge the chunks.
				if n := len(got); n > 0 && strings.HasPrefix(got[n-1], string(e.Type)+":") {
					got[n-1] += e.Text
				} else {
					got = append(got, string(e.Type)+":"+e.Text)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	want := "stdout:a\n|result:1|stdout:ééé\n|stderr:b|result:5"
	if strings.Join(got, "|") != want || ex.Status != api.ExecOK {
		t.Fatalf("events %q, want %q (%+v)", strings.Join(got, "|"), want, ex)
	}
}

func TestInterruptAndTimeoutEndOnlyTheCell(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{})
	run(t, s, "state = 'kept'")

	done := make(chan *api.Execution)
	go func() {
		ex, _ := s.Run(context.Background(), api.CellRequest{Code: "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.01)"}, func(e Event) {
			if e.Type == api.EventStdout {
				s.Interrupt()
			}
		})
		done <- ex
	}()
	ex := <-done
	if ex.Status != api.ExecInterrupted || ex.Error.Name != "KeyboardInterrupt" || strings.Contains(ex.Error.Traceback, "<string>") {
		t.Fatalf("interrupted cell: %+v %+v", ex, ex.Error)
	}
	ex, _ = s.Run(context.Background(), api.CellRequest{Code: "while True: pass", TimeoutMs: 200}, nil)
	if ex.Status != api.ExecTimeout || ex.SessionDead != "" {
		t.Fatalf("timed-out cell: %+v", ex)
	}
	if ex = run(t, s, "state"); ex.Text() != "'kept'" {
		t.Fatalf("the session did not survive: %+v", ex)
	}
	// A cell that ignores its interrupt: the interpreter has to go.
	s.opts.InterruptGrace = 300 * time.Millisecond
	ex, _ = s.Run(context.Background(), api.CellRequest{Code: "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", TimeoutMs: 200}, nil)
	if ex.Status != api.ExecTimeout || !strings.Contains(ex.SessionDead, "was killed") || s.Info().State != api.SessionDead {
		t.Fatalf("wedged cell: %+v, %+v", ex, s.Info())
	}
	if _, err := s.Run(context.Background(), api.CellRequest{Code: "1"}, nil); !errors.Is(err, ErrDead) {
		t.Fatalf("run on a dead session: %v", err)
	}
	// Restart brings it back, empty.
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	ex = run(t, s, "'state' in globals()")
	if ex.Text() != "False" || ex.ExecutionCount != 1 {
		t.Fatalf("after restart: %+v", ex)
	}
}

func TestOOMKillsTheSession(t *testing.T) {
	sb := newSandbox(t, 96<<20)
	s := start(t, sb, Options{})
	ex := run(t, s, "hog = []\nwhile True: hog.append(bytearray(8 << 20))")
	if ex.Status != api.ExecOOM || ex.SessionDead == "" || s.Info().State != api.SessionDead || ex.ExecutionCount != 1 {
		t.Fatalf("oom cell: %+v, %+v", ex, s.Info())
	}
	if !strings.Contains(s.Info().DeadReason, "out of memory") {
		t.Fatalf("dead reason: %q", s.Info().DeadReason)
	}
}

func TestCellsQueue(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{})
	first := make(chan struct{})
	var once sync.Once
	results := make(chan *api.Execution, 2)
	go func() {
		ex, _ := s.Run(context.Background(), api.CellRequest{Code: "import time\nprint('go', flush=True)\nwhile not __import__('os').path.exists('/tmp/release'): time.sleep(0.01)\n'first'"}, func(e Event) {
			if e.Type == api.EventStdout {
				once.Do(func() { close(first) })
			}
		})
		results <- ex
	}()
	<-first
	go func() {
		ex, _ := s.Run(context.Background(), api.CellRequest{Code: "'second'"}, nil)
		results <- ex
	}()
	for s.Info().Queued != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.Info().State; st != api.SessionBusy {
		t.Fatalf("state while a cell runs: %s", st)
	}
	if _, err := s.Held(); !errors.Is(err, ErrBusy) {
		t.Fatalf("fork check while a cell runs: %v", err)
	}
	out, err := exec.Command("touch", "/proc/"+itoa(sbPid(sb))+"/root/tmp/release").CombinedOutput()
	if err != nil {
		t.Fatalf("release: %v %s", err, out)
	}
	a, b := <-results, <-results
	if a.Text() != "'first'" || b.Text() != "'second'" || b.ExecutionCount != 2 {
		t.Fatalf("queued cells: %+v then %+v", a, b)
	}
}

func TestHeldNamesWhatAForkCannotCarry(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{})
	h, err := s.Held()
	if err != nil || h.Err() != nil {
		t.Fatalf("a fresh session holds something: %+v %v", h, err)
	}
	run(t, s, "import threading, socket, subprocess, time\nev = threading.Event()\nth = threading.Thread(target=ev.wait); th.start()\nsk = socket.socket(socket.AF_UNIX)\np = subprocess.Popen(['sleep', '100'])")
	h, err = s.Held()
	if err != nil {
		t.Fatal(err)
	}
	msg := h.Err().Error()
	for _, want := range []string{"1 thread(s)", "socket(s) on fd", "child process(es)"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("held error %q does not name %q", msg, want)
		}
	}
	run(t, s, "ev.set(); th.join(); sk.close(); p.kill(); p.wait()")
	if h, _ = s.Held(); h.Err() != nil {
		t.Fatalf("after letting go: %v", h.Err())
	}
}

func TestMatplotlibFiguresBecomePNG(t *testing.T) {
	require.Feature(t, "matplotlib")
	sb := newSandbox(t, 512<<20)
	s := start(t, sb, Options{Spec: api.SessionSpec{Env: []string{"MPLCONFIGDIR=/tmp/mpl"}}})
	ex := run(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure(); plt.bar([1], [2]); None")
	if ex.Status != api.ExecOK || len(ex.Results) != 2 {
		t.Fatalf("figure cell: %+v %+v", ex, ex.Error)
	}
	for _, r := range ex.Results {
		if png := r.PNG(); !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("result is not a PNG: %v", r.Data)
		}
	}
	if ex = run(t, s, "len(plt.get_fignums())"); ex.Text() != "0" {
		t.Fatalf("figures left open after they were shown: %+v", ex)
	}
	// The backend is the session's alone: a python3 the cell starts
	// imports pyplot with matplotlib's default.
	ex = run(t, s, "import subprocess\nsubprocess.run(['python3', '-c', 'import matplotlib.pyplot as p; print(p.get_backend())'], capture_output=True, text=True).stdout.strip()")
	if ex.Text() != "'agg'" {
		t.Fatalf("a subprocess's matplotlib backend: %+v %+v", ex, ex.Error)
	}
}

func TestBadSpecs(t *testing.T) {
	for _, o := range []Options{
		{Spec: api.SessionSpec{Language: "ruby"}},
		{Spec: api.SessionSpec{Workdir: "tmp"}},
		{Spec: api.SessionSpec{Env: []string{"NOEQUALS"}}},
	} {
		if _, err := Start("s", "b", nil, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o.Spec, err)
		}
	}
	sb := newSandbox(t, 128<<20)
	_, err := Start("s", "b", launcher(sb), Options{Python: "no-such-python"})
	if !errors.Is(err, ErrStart) || !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing interpreter: %v", err)
	}
}

func sbPid(sb *sandbox.Sandbox) int { return sb.Pid() }

func itoa(n int) string { return strconv.Itoa(n) }

// openFDs counts this process's descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestNothingLeftBehind(t *testing.T) {
	sb := newSandbox(t, 96<<20)
	before := openFDs(t)
	// Closed while idle, closed while a cell runs, dead of OOM, restarted.
	s := start(t, sb, Options{})
	run(t, s, "x = 1")
	s.Close()
	s = start(t, sb, Options{})
	started := make(chan struct{})
	var once sync.Once
	done := make(chan *api.Execution)
	go func() {
		ex, _ := s.Run(context.Background(), api.CellRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(3600)"}, func(e Event) {
			once.Do(func() { close(started) })
		})
		done <- ex
	}()
	<-started
	s.Close()
	if ex := <-done; ex.Status != api.ExecDead || !strings.Contains(ex.SessionDead, "deleted") {
		t.Fatalf("the cell of a deleted session: %+v", ex)
	}
	if _, err := s.Run(context.Background(), api.CellRequest{Code: "1"}, nil); !errors.Is(err, ErrNoSession) {
		t.Fatalf("run after delete: %v", err)
	}
	s = start(t, sb, Options{})
	if ex := run(t, s, "b = bytearray(200 << 20)"); ex.Status != api.ExecOOM {
		t.Fatalf("oom: %+v", ex)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, s, "1")
	s.Close()
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open before the sessions, %d after", before, after)
	}
	// The interpreters are gone from the sandbox: only its PID 1 is left.
	if u := sb.Usage(); u.Pids != 1 {
		t.Fatalf("%d processes in the sandbox after every session ended", u.Pids)
	}
}

func TestSandboxGoneMidCell(t *testing.T) {
	sb := newSandbox(t, 128<<20)
	s := start(t, sb, Options{})
	started := make(chan struct{})
	var once sync.Once
	done := make(chan *api.Execution)
	go func() {
		ex, _ := s.Run(context.Background(), api.CellRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(3600)"}, func(e Event) {
			once.Do(func() { close(started) })
		})
		done <- ex
	}()
	<-started
	sb.Destroy()
	if ex := <-done; ex.Status != api.ExecDead || ex.SessionDead == "" || s.Info().State != api.SessionDead {
		t.Fatalf("the cell of a destroyed sandbox: %+v, %+v", ex, s.Info())
	}
}

// A cell's env holds for that cell only: what it replaced (or its absence)
// comes back, and a child process the cell starts sees it too.
func TestCellEnvIsTheCellsOnly(t *testing.T) {
	sb := newSandbox(t, 256<<20)
	s := start(t, sb, Options{Spec: api.SessionSpec{Env: []string{"KEEP=session"}}})
	ex, err := s.Run(context.Background(), api.CellRequest{
		Code: "import os, subprocess\nprint(subprocess.run(['sh', '-c', 'echo $KEEP $NEW'], capture_output=True, text=True).stdout, end='')\n(os.environ['KEEP'], os.environ['NEW'])",
		Env:  map[string]string{"KEEP": "cell", "NEW": "only"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != api.ExecOK || ex.Stdout != "cell only\n" || ex.Text() != "('cell', 'only')" {
		t.Fatalf("in the cell: status %s stdout %q text %q error %+v", ex.Status, ex.Stdout, ex.Text(), ex.Error)
	}
	after := run(t, s, "import os\n(os.environ.get('KEEP'), os.environ.get('NEW'))")
	if after.Text() != "('session', None)" {
		t.Fatalf("after the cell: %q, want the session's KEEP back and no NEW", after.Text())
	}
	if _, err := s.Run(context.Background(), api.CellRequest{Code: "1", Env: map[string]string{"A=B": "x"}}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("env name with '=': %v, want ErrInvalid", err)
	}
}
