package zygote

import (
	"context"
	"encoding/base64"
	"time"

	"github.com/tine-run/tine/api"
)

// invokeExec runs one request of a runtime-exec function: a child of the
// function's zygote walls itself in as a Python request does (its own
// mount, IPC and network namespaces, private /tmp and /dev/shm, Landlock:
// it writes nowhere else, so nothing one request leaves in the root
// reaches the next), joins the request's cgroup and spawns the command,
// whose stdin is the payload and whose stdout is the result; it answers
// with how the command ended.
func (f *function) invokeExec(ctx context.Context, z *zygoteProc, groups *groupPool, payload []byte, inv *api.Invocation, arrived time.Time) error {
	if err := f.invokeForked(ctx, z, groups, payload, request{command: f.spec.Command}, inv, arrived); err != nil {
		return err
	}
	inv.ResultBase64 = base64.StdEncoding.EncodeToString([]byte(inv.Stdout))
	inv.Stdout = ""
	return nil
}
