package zygote

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tine-run/tine/api"
)

//go:embed agent/node.js
var nodeAgent string

// nodeWorker is a pre-started Node process waiting for its one request.
type nodeWorker struct {
	rg      *requestGroup
	io      *requestIO
	stdin   *os.File // the daemon's end of the worker's stdin
	started time.Time
}

func (w *nodeWorker) discard() {
	w.rg.KillMembers() // first: on stdin's EOF it would serve an empty request
	w.stdin.Close()
	w.io.output()
	w.io.closeAll()
	w.rg.release()
}

// nodePool keeps a function's Node workers ready: Node cannot fork, so
// each request takes a worker started ahead (walled in by a child of the
// sandbox's Python zygote that exec'd node), and a new one is started in
// the background.
type nodePool struct {
	f      *function
	z      *zygoteProc
	groups *groupPool
	stock  *stock[*nodeWorker]
}

func newNodePool(f *function, z *zygoteProc, groups *groupPool) (*nodePool, error) {
	p := &nodePool{f: f, z: z, groups: groups}
	// The first worker is started here, so a broken entry fails fn up.
	w, err := p.spawn()
	if err != nil {
		return nil, err
	}
	p.stock = newStock(f.spec.Concurrency, f.spec.Concurrency, p.spawn, (*nodeWorker).discard)
	p.stock.put(w)
	return p, nil
}

// take returns a ready worker, waiting for one (the refill is kicked).
func (p *nodePool) take(ctx context.Context) (*nodeWorker, error) {
	defer p.stock.kick()
	if w, ok := p.stock.tryTake(); ok {
		return w, nil
	}
	p.stock.kick()
	t := time.NewTimer(p.f.timeout() + 30*time.Second)
	defer t.Stop()
	select {
	case w := <-p.stock.ready:
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("%w: no Node worker became ready: %v", ErrWarm, p.stock.err())
	}
}

func (p *nodePool) close() { p.stock.close() }

// nodeConfig is the worker's last argument.
type nodeConfig struct {
	Entry   string   `json:"entry"`
	Handler string   `json:"handler"`
	Preload []string `json:"preload"`
}

// spawn starts one worker: a request of the Python zygote whose child,
// once walled in, execs node with the worker script, and waits until the
// worker has loaded the entry.
func (p *nodePool) spawn() (*nodeWorker, error) {
	rg, err := p.groups.take()
	if err != nil {
		return nil, err
	}
	rio := newRequestIO(nil)
	stdinR, stdinW, perr := os.Pipe()
	if rio.err != nil || perr != nil {
		rio.closeAll()
		rg.release()
		return nil, fmt.Errorf("%w: worker pipes: %v", ErrWarm, firstErr(rio.err, perr))
	}
	node := p.f.spec.Node
	if node == "" {
		node = "node"
	}
	cfg, _ := json.Marshal(nodeConfig{Entry: entryInside(p.f.spec.Entry), Handler: p.f.spec.Handler, Preload: p.f.spec.Preload})
	hdr, _ := json.Marshal(map[string]any{"exec": []string{node, "-e", nodeAgent, string(cfg)}})
	fds := append([]int{rio.replyW, int(stdinR.Fd()), rio.outW, rio.errW}, rg.procs...)
	err = p.z.send(hdr, fds)
	stdinR.Close()
	rio.closeChildEnds()
	rio.drain() // a worker waits for its request: its output is read as it comes
	w := &nodeWorker{rg: rg, io: rio, stdin: stdinW, started: time.Now()}
	if err != nil {
		w.discard()
		return nil, fmt.Errorf("%w: %v", errZygoteGone, err)
	}
	var tag [1]byte
	rio.replyR.SetReadDeadline(time.Now().Add(p.f.timeout() + 30*time.Second))
	_, rerr := io.ReadFull(rio.replyR, tag[:])
	rio.replyR.SetReadDeadline(time.Time{})
	if err := rerr; err != nil || tag[0] != 'R' {
		why := "it exited"
		if err == nil && tag[0] == 'E' {
			if rep, rerr := rio.readReply(); rerr == nil && rep.Error != nil {
				w.discard()
				e := rep.Error
				return nil, fmt.Errorf("%w: %s: %s\n%s", ErrEntry, e.Type, e.Message, e.Traceback)
			}
		}
		w.discard()
		_, stderr, _ := rio.output()
		return nil, fmt.Errorf("%w: the Node worker did not start (%s): %s", ErrWarm, why, stderr)
	}
	return w, nil
}

// invokeNode serves one request with a ready worker.
func (f *function) invokeNode(ctx context.Context, pool *nodePool, payload []byte, req request, inv *api.Invocation, arrived time.Time) error {
	w, err := pool.take(ctx)
	if err != nil {
		return err
	}
	defer w.rg.release()
	defer w.io.closeAll()
	flag := byte('j')
	if req.raw {
		flag = 'r'
	}
	sent := monotonic()
	inv.Timings.Queue = ms(time.Since(arrived))
	w.stdin.SetWriteDeadline(time.Now().Add(f.timeout()))
	_, werr := w.stdin.Write(append([]byte{flag}, payload...))
	w.stdin.Close()
	rep, got, err := f.awaitReply(ctx, w.rg, w.io, inv, nil)
	if rep == nil {
		if err == nil && werr != nil && inv.Status == api.StatusCrashed {
			inv.Error.Message += " (writing the payload: " + werr.Error() + ")"
		}
		return err
	}
	// The worker was forked, admitted and walled in ahead of the request:
	// those phases are not part of it.
	t := rep.T
	inv.Timings.Dispatch = nsMs(t.Isolated - sent)
	inv.Timings.Run = nsMs(t.Ran - t.Isolated)
	inv.Timings.Reply = nsMs(got - t.Ran)
	return nil
}
