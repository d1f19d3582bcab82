package zygote

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
)

// invokeExec runs one request of a runtime-exec function: a fresh process
// of the function's command, launched by the sandbox's PID 1 and born in
// the request's cgroup (it joins before its execve). The payload is its
// stdin, its stdout the result.
func (f *function) invokeExec(ctx context.Context, sb *sandbox.Sandbox, groups *groupPool, payload []byte, inv *api.Invocation, arrived time.Time) error {
	rg, err := groups.take()
	if err != nil {
		return err
	}
	defer rg.release()
	rio := newRequestIO(payload)
	defer rio.closeAll()
	if rio.err != nil {
		return rio.err
	}
	stdin := os.NewFile(uintptr(rio.payload), "payload")
	rio.payload = -1
	defer stdin.Close()
	t0 := time.Now()
	l, err := sb.Launch(&sandbox.ExecSpec{
		Args:        f.spec.Command,
		Stdio:       [3]*os.File{stdin, rio.childFile(&rio.outW, "stdout"), rio.childFile(&rio.errW, "stderr")},
		CgroupProcs: rg.procs,
	})
	rio.closeChildEnds()
	if err != nil {
		return fmt.Errorf("%w: launch %s: %v", ErrWarm, f.spec.Command[0], err)
	}
	inv.Timings.Queue = ms(t0.Sub(arrived))
	inv.Timings.Fork = ms(time.Since(t0))
	var timedOut atomic.Bool
	timer := time.AfterFunc(f.timeout(), func() { timedOut.Store(true); rg.KillMembers() })
	stop := context.AfterFunc(ctx, func() { rg.KillMembers() })
	t1 := time.Now()
	o, _ := l.Wait()
	inv.Timings.Run = ms(time.Since(t1))
	timer.Stop()
	stop()
	rg.KillMembers()
	t2 := time.Now()
	stdout, stderr, truncated := rio.output()
	inv.Timings.Reply = ms(time.Since(t2))
	inv.Stderr, inv.Truncated = stderr, truncated
	inv.Timings.Throttled = rg.throttled()
	code := o.ExitCode
	inv.ExitCode = &code
	switch {
	case timedOut.Load():
		inv.Status, inv.Error = api.StatusTimeout, f.timeoutError()
	case rg.oomKilled():
		inv.Status, inv.Error = api.StatusOOM, f.oomError()
	case ctx.Err() != nil:
		return ctx.Err()
	case o.Reason == "exit" && o.ExitCode == 0:
		inv.Status = api.StatusOK
	case o.Reason == "exit":
		inv.Status = api.StatusError
		inv.Error = &api.InvocationError{Type: "ExitStatus", Message: fmt.Sprintf("%s exited with code %d", f.spec.Command[0], o.ExitCode)}
	default:
		inv.Status = api.StatusCrashed
		inv.Error = &api.InvocationError{Type: "Crashed", Message: fmt.Sprintf("%s was killed by signal %d", f.spec.Command[0], o.Signal)}
	}
	inv.ResultBase64 = base64.StdEncoding.EncodeToString([]byte(stdout))
	return nil
}
