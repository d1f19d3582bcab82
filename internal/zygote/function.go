package zygote

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/capped"
	"github.com/tine-run/tine/internal/kernel/cgroup"
	"github.com/tine-run/tine/internal/kernel/seccomp"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
)

//go:embed agent/python.py
var pythonAgent string

// pythonBoot is the zygote's `-c` program, which runs pythonAgent (the
// first message it reads) compiled in a child, so that neither the
// compiler's memory nor copies of the source are the zygote's.
//
//go:embed agent/boot.py
var pythonBoot string

// Errors a caller can test for.
var (
	ErrNoFunction = errors.New("no such function")
	ErrWarm       = errors.New("the function failed to warm up")
	// ErrEntry: the function's own code failed while the zygote imported
	// it (a syntax error, a missing handler, an exception at import).
	ErrEntry    = errors.New("the function's entry failed to load")
	ErrTooLarge = errors.New("payload too large")
)

// Limits of one request's answer.
const (
	maxReply  = 16 << 20
	maxOutput = 1 << 20
	// zygoteMemory is what the zygote itself may use on top of its
	// requests' limits.
	zygoteMemory = 256 << 20
)

// function is one registered function and, while warm, its sandbox.
type function struct {
	spec    api.FunctionSpec
	scripts string    // host directory of registered scripts (the pool only)
	admit   AdmitFunc // counts its sandbox against the host budget (nil: nowhere)
	net     *network.Manager
	images  ImageFunc // makes spec.Image its root
	slots   chan struct{}
	calls   atomic.Int64
	seq     atomic.Uint64

	mu       sync.Mutex
	sb       *sandbox.Sandbox
	budget   func()      // gives sb's share of the host budget back (at most once)
	zyg      *zygoteProc // nil when cold, or after the zygote died
	groups   *groupPool  // request cgroups ready in sb
	nodes    *nodePool   // node workers ready (runtime node)
	warming  chan struct{}
	warmErr  error
	warmMs   float64
	lastUsed time.Time
	inflight int
}

// zygoteProc is a running agent: the daemon's end of its control socket.
type zygoteProc struct {
	ctl  int
	mu   sync.Mutex // one sendmsg at a time
	l    *sandbox.Launched
	dead chan struct{}
	why  string
	log  *tailBuffer
	// armed is the daemon's end of the spares socket, on which the zygote
	// offers its spares; spares, the request groups it keeps them waiting
	// in (nil for a zygote that only starts Node workers).
	armed  *os.File
	spares *spares
}

func (f *function) timeout() time.Duration {
	return time.Duration(f.spec.Limits.TimeoutSeconds * float64(time.Second))
}

// warmState is what a request runs on.
type warmState struct {
	sb     *sandbox.Sandbox
	zyg    *zygoteProc
	groups *groupPool
	nodes  *nodePool // runtime node only
}

// ensureWarm returns what a request runs on, warming the function first if
// it is cold or its zygote died; cold says it had to, warmMs how long
// that took.
func (f *function) ensureWarm() (w warmState, cold bool, warmMs float64, err error) {
	for {
		f.mu.Lock()
		if f.warming != nil {
			wait := f.warming
			f.mu.Unlock()
			<-wait
			continue
		}
		if z := f.zyg; z != nil && z.gone() {
			f.zyg = nil
			go z.close() // its socket
		}
		if f.sb != nil && f.zyg != nil {
			select {
			case <-f.sb.Done():
			default:
				w := warmState{f.sb, f.zyg, f.groups, f.nodes}
				f.mu.Unlock()
				return w, cold, warmMs, nil
			}
		}
		if cold && f.warmErr != nil {
			err := f.warmErr
			f.mu.Unlock()
			return warmState{}, true, 0, err
		}
		wait := make(chan struct{})
		f.warming = wait
		old, oldBudget, oldGroups, oldNodes := f.sb, f.budget, f.groups, f.nodes
		f.mu.Unlock()

		if oldNodes != nil {
			oldNodes.close() // its workers came from the old zygote
		}
		t0 := time.Now()
		sb, budget, z, err := f.warm(old, oldBudget)
		var groups *groupPool
		var nodes *nodePool
		if err == nil && sb == old && oldGroups != nil {
			groups, oldGroups = oldGroups, nil
		} else if err == nil {
			groups = newGroupPool(sb, f.requestLimits(), f.spec.Concurrency, &f.seq)
		}
		if oldGroups != nil {
			oldGroups.close()
		}
		if err == nil && f.spec.Runtime == RuntimeNode {
			if nodes, err = newNodePool(f, z, groups); err != nil {
				groups.close()
				z.close()
				budget()
				sb.Destroy()
				sb, budget, z, groups = nil, nil, nil, nil
			}
		} else if err == nil {
			z.spares = newSpares(z, groups, z.armed)
		}
		f.mu.Lock()
		f.sb, f.budget, f.zyg, f.groups, f.nodes, f.warmErr, f.warming = sb, budget, z, groups, nodes, err, nil
		f.warmMs = ms(time.Since(t0))
		cold, warmMs = true, f.warmMs
		f.mu.Unlock()
		close(wait)
	}
}

// warm makes the function's sandbox (reusing old if it is still alive),
// starts its zygote and waits until it has imported everything (for exec
// and node, only the agent itself: their requests are children it forks
// that wall themselves in and exec).
// A new sandbox first takes its share of the host budget; budget gives it
// back, at most once: when the sandbox is destroyed here or by cool, or
// dies on its own.
func (f *function) warm(old *sandbox.Sandbox, oldBudget func()) (sb *sandbox.Sandbox, budget func(), z *zygoteProc, err error) {
	sb, budget = old, oldBudget
	if sb != nil {
		select {
		case <-sb.Done():
			budget()
			sb.Destroy()
			sb, budget = nil, nil
		default:
		}
	}
	if sb == nil {
		spec := f.sandboxSpec()
		release := func() {}
		if f.admit != nil {
			if release, err = f.admit(spec.Limits.MemoryBytes); err != nil {
				return nil, nil, nil, fmt.Errorf("function %s: %w", f.spec.Name, err)
			}
		}
		if f.spec.Image != "" {
			unuse, err := f.images(&f.spec, spec, f.admit)
			if err != nil {
				release()
				return nil, nil, nil, fmt.Errorf("%w: function %s: image %s: %v", ErrWarm, f.spec.Name, f.spec.Image, err)
			}
			budgetOnly := release
			release = func() { budgetOnly(); unuse() }
		}
		att, err := f.attach(spec)
		if err != nil {
			release()
			return nil, nil, nil, err
		}
		if sb, err = sandbox.Create(spec); err != nil {
			release()
			if att != nil {
				att.Detach()
			}
			return nil, nil, nil, fmt.Errorf("%w: create its sandbox: %v", ErrWarm, err)
		}
		if att != nil {
			// The network goes with the sandbox, however it ends.
			go func(done <-chan struct{}) { <-done; att.Detach() }(sb.Done())
			if err := writeResolvConf(sb, att); err != nil {
				release()
				sb.Destroy()
				return nil, nil, nil, fmt.Errorf("%w: %v", ErrWarm, err)
			}
		}
		once := sync.OnceFunc(release)
		go func(done <-chan struct{}) { <-done; once() }(sb.Done())
		budget = once
	}
	if z, err = f.startZygote(sb); err != nil {
		budget()
		sb.Destroy()
		return nil, nil, nil, err
	}
	return sb, budget, z, nil
}

func (f *function) sandboxSpec() *sandbox.Spec {
	l := f.spec.Limits
	n := int64(f.spec.Concurrency)
	s := &sandbox.Spec{
		Zygote:   true,
		Seccomp:  seccomp.Default,
		Hostname: f.spec.Name,
		Limits: cgroup.Limits{
			MemoryBytes: l.MemoryBytes*n + zygoteMemory,
			Pids:        l.Pids*n + 16,
		},
	}
	if f.spec.Entry != "" {
		s.Binds = append(s.Binds, sandbox.Bind{Source: filepath.Dir(f.spec.Entry), Target: entryTarget, ReadOnly: true})
	}
	return s
}

// entryTarget is where a function's sandbox sees its entry's directory (a
// read-only bind). Not under /tmp, which each request replaces with its
// own. The pool's scripts are not in its sandbox at all: each request is
// handed its own script's descriptors, so no script can read another.
const entryTarget = "/tine/fn"

// bindNowEnv is the zygote's own: the agent removes it at start.
const bindNowEnv = "LD_BIND_NOW=1"

// agentConfig is the agent's first message (the bootstrap reads its source before it).
type agentConfig struct {
	Entry    string                `json:"entry,omitempty"`
	Handler  string                `json:"handler"`
	Preload  []string              `json:"preload"`
	TmpBytes int64                 `json:"tmp_bytes"`
	Network  string                `json:"network"`
	Walls    *sandbox.RequestWalls `json:"walls"`
}

// agentReady is the agent's answer to its config.
type agentReady struct {
	OK     bool                 `json:"ok"`
	Pid    int                  `json:"pid"`
	WarmMs float64              `json:"warm_ms"`
	Error  *api.InvocationError `json:"error"`
}

func (f *function) startZygote(sb *sandbox.Sandbox) (*zygoteProc, error) {
	walls, err := sb.RequestWalls()
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: control socket: %v", ErrWarm, err)
	}
	agentEnd := os.NewFile(uintptr(pair[1]), "zygote control")
	// A blocked send (a wedged zygote, its queue full) fails instead of
	// holding every request of the function.
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	// The zygote's spares offer themselves on a socket of their own,
	// which the daemon reads (without waiting) when a request takes one.
	spares, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(pair[0])
		agentEnd.Close()
		return nil, fmt.Errorf("%w: spares socket: %v", ErrWarm, err)
	}
	unix.SetNonblock(spares[0], true)
	armed := os.NewFile(uintptr(spares[0]), "zygote spares")
	defer unix.Close(spares[1]) // the agent's copy arrives with its config
	logR, logW, err := os.Pipe()
	if err != nil {
		unix.Close(pair[0])
		agentEnd.Close()
		armed.Close()
		return nil, err
	}
	defer logW.Close()
	python := f.spec.Python
	if python == "" {
		python = "python3"
	}
	l, err := sb.Launch(&sandbox.ExecSpec{
		Args: []string{python, "-I", "-c", pythonBoot},
		// The dynamic linker binds every function at start, in the zygote:
		// bound lazily, the first call of each in a request (setsid, dup2,
		// socketpair, ...) writes its library's GOT there, a copied page
		// each. The agent drops the variable again before any of the
		// function's code runs, so what the function starts does not get it.
		Env:   []string{bindNowEnv},
		Stdio: [3]*os.File{agentEnd, logW, logW},
	})
	agentEnd.Close() // only the agent holds it now: its death is EOF here
	if err != nil {
		unix.Close(pair[0])
		armed.Close()
		logR.Close()
		return nil, fmt.Errorf("%w: start %s: %v", ErrWarm, python, err)
	}
	z := &zygoteProc{ctl: pair[0], l: l, dead: make(chan struct{}), log: &tailBuffer{max: 16 << 10}, armed: armed}
	go func() { io.Copy(z.log, logR); logR.Close() }()
	go func() {
		o, _ := l.Wait()
		if o != nil {
			z.why = fmt.Sprintf("the zygote ended (%s, exit code %d)", o.Reason, o.ExitCode)
		}
		close(z.dead)
	}()
	reqNet := f.spec.Network
	if reqNet == NetworkEgress {
		reqNet = NetworkShared // the requests share the sandbox's egress namespace
	}
	cfg := agentConfig{Handler: f.spec.Handler, TmpBytes: 64 << 20, Network: reqNet, Walls: walls}
	if f.spec.Runtime == RuntimePython {
		cfg.Entry, cfg.Preload = entryInside(f.spec.Entry), f.spec.Preload
	}
	b, _ := json.Marshal(cfg)
	var ready agentReady
	err = z.send([]byte(pythonAgent), nil) // the bootstrap runs it
	if err == nil {
		err = z.send(b, []int{spares[1]})
	}
	if err == nil {
		var buf [1 << 16]byte
		var n int
		n, err = readSeqpacket(z.ctl, buf[:], f.timeout()+30*time.Second)
		if err == nil {
			if n == 0 {
				<-z.dead
				err = fmt.Errorf("%w: %s before it was ready; its output:\n%s", ErrWarm, z.why, z.log.String())
			} else if jerr := json.Unmarshal(buf[:n], &ready); jerr != nil {
				err = fmt.Errorf("%w: bad ready message: %v", ErrWarm, jerr)
			}
		}
	}
	if err == nil && !ready.OK {
		e := ready.Error
		err = fmt.Errorf("%w: %s: %s\n%s", ErrEntry, e.Type, e.Message, e.Traceback)
	}
	if err != nil {
		z.close()
		return nil, err
	}
	return z, nil
}

// entryInside is where the sandbox sees the entry file.
func entryInside(entry string) string {
	if entry == "" {
		return ""
	}
	return entryTarget + "/" + filepath.Base(entry)
}

// errZygoteGone: the request could not be handed to the zygote, which
// died; nothing of the request ran, so it is retried on a new one.
var errZygoteGone = errors.New("the zygote is gone")

// gone reports whether the agent has died.
func (z *zygoteProc) gone() bool {
	select {
	case <-z.dead:
		return true
	default:
		return false
	}
}

// send sends one message with descriptors to the agent.
func (z *zygoteProc) send(msg []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.ctl < 0 {
		return errZygoteGone
	}
	err := unix.Sendmsg(z.ctl, msg, oob, nil, unix.MSG_NOSIGNAL)
	if errors.Is(err, unix.EAGAIN) {
		// Not reading for SO_SNDTIMEO: wedged. It goes; the request is
		// retried on a new one.
		go z.close()
		return fmt.Errorf("%w: it took no request for 5 s and was killed", errZygoteGone)
	}
	return err
}

// close kills the agent and closes its socket. Its running requests are
// in sessions and cgroups of their own, so they finish or time out on
// their own.
func (z *zygoteProc) close() {
	z.l.Signal(unix.SIGKILL)
	<-z.dead
	if z.spares != nil {
		z.spares.close() // and the spares socket
	} else {
		z.armed.Close()
	}
	z.mu.Lock()
	if z.ctl >= 0 {
		unix.Close(z.ctl)
		z.ctl = -1
	}
	z.mu.Unlock()
}

// readSeqpacket reads one message from a blocking socket, giving up after d.
func readSeqpacket(fd int, buf []byte, d time.Duration) (int, error) {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	n, _, _, _, err := unix.Recvmsg(fd, buf, nil, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: no word from the zygote in %s: %v", ErrWarm, d, err)
	}
	return n, nil
}

// childReply is what a request's child writes to its reply pipe.
type childReply struct {
	Status       string               `json:"status"`
	Result       json.RawMessage      `json:"result"`
	ResultBase64 string               `json:"result_base64"`
	Error        *api.InvocationError `json:"error"`
	T            struct {
		Fork, Start, Admitted, Isolated, Ran int64
	} `json:"t"`
	// How a runtime-exec request's command ended: its exit code, or the
	// signal that killed it.
	ExitCode *int `json:"exit_code"`
	Signal   int  `json:"signal"`
}

// request is one call's daemon side.
type request struct {
	script string
	raw    bool
	// command: a runtime-exec request, whose child spawns it (payload on
	// stdin, stdout the result) and answers with how it ended.
	command []string
}

// invokeForked runs one request as a child of the zygote, walled in like
// every request: the function's handler, a pool script, or (runtime exec)
// the function's command.
func (f *function) invokeForked(ctx context.Context, z *zygoteProc, groups *groupPool, payload []byte, req request, inv *api.Invocation, arrived time.Time) error {
	io := newRequestIO(payload)
	defer io.closeAll()
	if io.err != nil {
		return io.err
	}
	h := map[string]any{"script": req.script, "raw": req.raw}
	if req.command != nil {
		h["spawn"] = req.command
	}
	fds := []int{io.replyW, io.payload, io.outW, io.errW}
	var cache *codeCache
	if req.script != "" {
		src, err := os.Open(filepath.Join(f.scripts, req.script+".py"))
		if err != nil {
			return fmt.Errorf("%w: script %s: %v", ErrNoFunction, req.script, err)
		}
		defer src.Close()
		fds = append(fds, int(src.Fd()))
		if cache = f.scriptCache(req.script); cache.pyc != nil {
			defer cache.pyc.Close()
			h["pyc"] = true
			fds = append(fds, int(cache.pyc.Fd()))
		} else if cache.w != nil {
			h["cache"] = true
			fds = append(fds, int(cache.w.Fd()))
		}
	}
	// The group last, once the request is known to be good: an armed
	// group has the request's process waiting in it already, and a spare
	// given back is a fork and its walls thrown away.
	sp, armed := z.spares.take()
	rg := sp.rg
	if !armed {
		var err error
		if rg, err = groups.take(); err != nil {
			if cache != nil {
				cache.sent()
			}
			return err
		}
	}
	defer rg.release()
	fds = append(fds, rg.procs...)
	hdr, _ := json.Marshal(h)
	sent := monotonic()
	var err error
	if !armed || sp.hand(hdr, fds, sent) != nil {
		err = z.send(hdr, fds) // no spare (or it died): the zygote forks
	}
	z.spares.kick()
	io.closeChildEnds()
	io.drainLater()
	if cache != nil {
		cache.sent()
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errZygoteGone, err)
	}
	inv.Timings.Queue = ms(time.Since(arrived)) - msSince(sent)
	rep, got, err := f.awaitReply(ctx, rg, io, inv, z)
	if rep == nil {
		return err
	}
	t := rep.T
	inv.Timings.Dispatch = nsMs(t.Fork - sent)
	inv.Timings.Fork = nsMs(t.Start - t.Fork)
	inv.Timings.Admit = nsMs(t.Admitted - t.Start)
	inv.Timings.Isolate = nsMs(t.Isolated - t.Admitted)
	inv.Timings.Run = nsMs(t.Ran - t.Isolated)
	inv.Timings.Reply = nsMs(got - t.Ran)
	if t.Isolated == 0 { // failed while walling itself in
		inv.Timings.Isolate, inv.Timings.Run = nsMs(t.Ran-t.Admitted), 0
	}
	inv.ExitCode = rep.ExitCode
	if rep.Signal != 0 && rg.oomKilled() {
		inv.Status, inv.Error = api.StatusOOM, f.oomError()
	}
	return nil
}

// awaitReply waits for a request's answer, under its timeout and ctx, then
// kills what the request left and collects its output. With an answer it
// fills inv's status and result and returns the reply and when it came;
// without one it fills inv's status (timeout, oom, crashed) and returns a
// nil reply, and an error only when ctx ended.
func (f *function) awaitReply(ctx context.Context, rg *requestGroup, io *requestIO, inv *api.Invocation, z *zygoteProc) (*childReply, int64, error) {
	var timedOut atomic.Bool
	// Either ends the wait even if the request's process never joined its
	// group (and so was not killed): the group is then removed, not
	// recycled, so a late joiner finds no group and exits.
	giveUp := func() {
		rg.spoil()
		rg.KillMembers()
		io.replyR.SetReadDeadline(time.Now())
	}
	timer := time.AfterFunc(f.timeout(), func() { timedOut.Store(true); giveUp() })
	stop := context.AfterFunc(ctx, giveUp)
	rep, rerr := io.readReply()
	got := monotonic()
	timer.Stop()
	stop()
	rg.KillMembers() // the request is over: whatever it left running goes
	inv.Stdout, inv.Stderr, inv.Truncated = io.output()
	if rerr == nil {
		inv.Timings.Throttled = rg.throttled()
		inv.Status, inv.Result, inv.ResultBase64, inv.Error = rep.Status, rep.Result, rep.ResultBase64, rep.Error
		return rep, got, nil
	}
	inv.Timings.Throttled = rg.throttled()
	oom := rg.oomKilled() // before the group goes
	rg.spoil()
	switch {
	case timedOut.Load():
		inv.Status, inv.Error = api.StatusTimeout, f.timeoutError()
	case oom:
		inv.Status, inv.Error = api.StatusOOM, f.oomError()
	case ctx.Err() != nil:
		return nil, got, ctx.Err()
	default:
		inv.Status = api.StatusCrashed
		why := "the request's process died without answering"
		if z != nil && z.gone() {
			why += "; " + z.why + " (it is warmed again on the next call)"
		}
		inv.Error = &api.InvocationError{Type: "Crashed", Message: why + ": " + rerr.Error()}
	}
	return nil, got, nil
}

func (f *function) timeoutError() *api.InvocationError {
	return &api.InvocationError{Type: "Timeout", Message: fmt.Sprintf("the request ran longer than its %s timeout; its processes were killed", f.timeout())}
}

func (f *function) oomError() *api.InvocationError {
	return &api.InvocationError{Type: "OutOfMemory", Message: fmt.Sprintf("the request exceeded its %d-byte memory limit and was killed", f.spec.Limits.MemoryBytes)}
}

// codeCache is a pool script's compiled code on the daemon's side: either
// already stored next to the script (opened, for the request), or a pipe
// the request's process writes it into (before any of the script runs) for
// the daemon to store.
type codeCache struct {
	pyc *os.File // the stored code, for the request to read
	w   *os.File // the child's end, until sent
}

// maxCompiled bounds a script's compiled code.
const maxCompiled = 16 << 20

func (f *function) scriptCache(digest string) *codeCache {
	path := filepath.Join(f.scripts, digest+".pyc")
	c := &codeCache{}
	if pyc, err := os.Open(path); err == nil {
		c.pyc = pyc
		return c
	}
	r, w, err := os.Pipe()
	if err != nil {
		return c // compiled again next time
	}
	c.w = w
	go func() {
		defer r.Close()
		b, err := io.ReadAll(io.LimitReader(r, maxCompiled+1))
		if err != nil || len(b) == 0 || len(b) > maxCompiled {
			return
		}
		tmp, err := os.CreateTemp(f.scripts, ".pyc-*")
		if err != nil {
			return
		}
		_, werr := tmp.Write(b)
		if cerr := tmp.Close(); werr == nil && cerr == nil && os.Chmod(tmp.Name(), 0o644) == nil && os.Rename(tmp.Name(), path) == nil {
			return
		}
		os.Remove(tmp.Name())
	}()
	return c
}

// sent closes the daemon's copy of the child's end.
func (c *codeCache) sent() {
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
}

func (f *function) requestLimits() cgroup.Limits {
	l := f.spec.Limits
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids}
}

// requestIO are one request's descriptors: the payload as a memfd, pipes
// for the reply, stdout and stderr. The child's ends stay plain
// descriptors (an *os.File would register them with the poller, and Fd
// would set them blocking again: syscalls on every request for nothing).
//
// The output pipes are read without a goroutine while the request is
// short: the request's process closes its stdout and stderr before it
// writes its reply, so once the reply is in, the daemon reads what the
// pipes hold up to their end, synchronously. A goroutine per pipe
// (registered with the poller) was two more goroutines started and woken
// per request, each a thread woken across CPUs here. The pipes are read
// by goroutines (draining) only when a request runs for longer than
// drainAfter (its output may fill a pipe, and a writer must not wait for
// its reply), when its reply never came, or when a pipe has not ended by
// the reply (a process the request left still holds it).
type requestIO struct {
	payload            int
	replyR             *os.File
	replyW, outW, errW int // the child's ends
	out, errb          *capped.Buffer
	err                error
	childEndsClosed    bool

	// The daemon's ends of stdout and stderr: raw descriptors (-1 once
	// handed to a goroutine or closed) until draining.
	mu        sync.Mutex
	outFd     int
	errFd     int
	draining  bool            // goroutines own what is left of the pipes
	drains    []chan struct{} // closed as each draining goroutine ends
	drainFile []*os.File      // the pipes' ends the goroutines read
	timer     *time.Timer     // starts draining after drainAfter
}

// drainAfter is how long a request's output pipes go unread before
// goroutines read them: long past a warm request's few milliseconds, short
// enough that a request whose output fills a pipe (64 KiB) waits little.
const drainAfter = 20 * time.Millisecond

func newRequestIO(payload []byte) *requestIO {
	r := &requestIO{payload: -1, replyW: -1, outW: -1, errW: -1, outFd: -1, errFd: -1}
	fd, err := unix.MemfdCreate("tine-payload", unix.MFD_CLOEXEC)
	if err != nil {
		r.err = fmt.Errorf("payload memfd: %w", err)
		return r
	}
	r.payload = fd
	// At explicit offsets: the file's own offset stays at 0, where the
	// child starts reading.
	for off := 0; off < len(payload); {
		n, err := unix.Pwrite(fd, payload[off:], int64(off))
		if err != nil {
			r.err = fmt.Errorf("payload memfd: %w", err)
			return r
		}
		off += n
	}
	var replyFd int
	if replyFd, r.replyW, err = daemonPipe("reply"); err != nil {
		r.err = err
		return r
	}
	r.replyR = os.NewFile(uintptr(replyFd), "reply")
	r.out, r.errb = capped.New(maxOutput), capped.New(maxOutput)
	if r.outFd, r.outW, err = daemonPipe("output"); err != nil {
		r.err = err
		return r
	}
	if r.errFd, r.errW, err = daemonPipe("output"); err != nil {
		r.err = err
		return r
	}
	return r
}

// drainLater has goroutines read the output pipes if the request is not
// over within drainAfter.
func (r *requestIO) drainLater() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.draining && r.timer == nil {
		r.timer = time.AfterFunc(drainAfter, r.drain)
	}
}

// drain hands what is left of the output pipes to goroutines, which read
// them (through the poller) to their end.
func (r *requestIO) drain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked()
}

func (r *requestIO) drainLocked() {
	if r.draining {
		return
	}
	r.draining = true
	for _, p := range []struct {
		fd *int
		c  *capped.Buffer
	}{{&r.outFd, r.out}, {&r.errFd, r.errb}} {
		if *p.fd < 0 {
			continue
		}
		f := os.NewFile(uintptr(*p.fd), "output")
		*p.fd = -1
		done := make(chan struct{})
		r.drains, r.drainFile = append(r.drains, done), append(r.drainFile, f)
		go func(c *capped.Buffer) { io.Copy(c, f); close(done) }(p.c)
	}
}

// readNow reads *fd (non-blocking) to its end into c, and closes it; it
// reports false, leaving *fd open, when the pipe has no end yet (a writer
// still holds it).
func readNow(fd *int, c *capped.Buffer) bool {
	var buf [16 << 10]byte
	for {
		n, err := unix.Read(*fd, buf[:])
		switch {
		case n > 0:
			c.Write(buf[:n])
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return false
		default: // EOF (or a broken pipe: nothing more will come)
			unix.Close(*fd)
			*fd = -1
			return true
		}
	}
}

func (r *requestIO) closeChildEnds() {
	if r.childEndsClosed {
		return
	}
	r.childEndsClosed = true
	for _, fd := range []*int{&r.replyW, &r.outW, &r.errW, &r.payload} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

func (r *requestIO) closeAll() {
	r.closeChildEnds()
	if r.replyR != nil {
		r.replyR.Close()
	}
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.draining = true // nothing starts reading the pipes any more
	for _, fd := range []*int{&r.outFd, &r.errFd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	files := r.drainFile
	r.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

// readReply reads the child's length-prefixed answer.
func (r *requestIO) readReply() (*childReply, error) {
	var n [8]byte
	if _, err := io.ReadFull(r.replyR, n[:]); err != nil {
		return nil, fmt.Errorf("no answer: %w", err)
	}
	size := binary.NativeEndian.Uint64(n[:])
	if size > maxReply {
		return nil, fmt.Errorf("answer of %d bytes is over the %d-byte limit", size, maxReply)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r.replyR, b); err != nil {
		return nil, fmt.Errorf("answer cut short: %w", err)
	}
	var rep childReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bad answer: %w", err)
	}
	return &rep, nil
}

// outputGrace bounds the wait for a request's output to end once the
// request is over: a process that escaped the kill (or the zygote still
// holding a request it never forked) keeps the pipes open.
const outputGrace = time.Second

// output waits for stdout and stderr to end (every writer gone: the
// request's cgroup was killed), at most outputGrace, and returns them.
// Called once the request is over (and the daemon's copies of the child's
// ends are closed). What the pipes hold is read here, without a
// goroutine, unless goroutines drain them already; a pipe that has not
// ended is handed to one, and waited for.
func (r *requestIO) output() (stdout, stderr string, truncated bool) {
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop() // or it ran, and draining says so
	}
	if !r.draining {
		ended := true
		for _, p := range []struct {
			fd *int
			c  *capped.Buffer
		}{{&r.outFd, r.out}, {&r.errFd, r.errb}} {
			if *p.fd >= 0 && !readNow(p.fd, p.c) {
				ended = false
			}
		}
		if ended {
			r.draining = true // nothing left to drain
		} else {
			r.drainLocked()
		}
	}
	drains, files := r.drains, r.drainFile
	r.mu.Unlock()
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	for _, done := range drains {
		select {
		case <-done:
		case <-t.C:
			truncated = true
			for _, f := range files {
				f.SetReadDeadline(time.Now())
			}
			<-done
		}
	}
	return r.out.String(), r.errb.String(), truncated || r.out.Dropped() || r.errb.Dropped()
}

// daemonPipe makes a pipe whose read end, non-blocking, the daemon keeps
// and whose write end, blocking, goes to a request.
func daemonPipe(name string) (int, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("%s pipe: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, fmt.Errorf("%s pipe: %w", name, err)
	}
	return p[0], p[1], nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, the clock of the agents'
// timings, without a system call: Go's monotonic clock is the same clock,
// read through the vDSO.
func monotonic() int64 { return monoBase + int64(time.Since(monoStart)) }

var monoBase, monoStart = func() (int64, time.Time) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano(), time.Now()
}()

func msSince(t int64) float64    { return nsMs(monotonic() - t) }
func nsMs(ns int64) float64      { return float64(ns) / 1e6 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
