package zygote

import (
	"bytes"
	"fmt"

	"github.com/tine-run/tine/internal/inroot"
	"github.com/tine-run/tine/internal/network"
	"github.com/tine-run/tine/internal/sandbox"
)

// attach gives an egress function's sandbox spec its network (nil for
// the other modes).
func (f *function) attach(spec *sandbox.Spec) (*network.Attachment, error) {
	if f.spec.Network != NetworkEgress {
		return nil, nil
	}
	if f.net == nil {
		return nil, fmt.Errorf("%w: function %s: network egress needs the daemon's network", ErrWarm, f.spec.Name)
	}
	p, err := network.ParsePolicy(f.spec.Allow, f.spec.Deny)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	att, err := f.net.Attach(p, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: function %s: %v", ErrWarm, f.spec.Name, err)
	}
	spec.NetNS = att.NetNS()
	return att, nil
}

// writeResolvConf points the sandbox at tine's resolver, before anything
// of the function runs in it (internal/inroot: never through a symlink
// out of the sandbox's root).
func writeResolvConf(sb *sandbox.Sandbox, att *network.Attachment) error {
	root, err := inroot.Open(sb.Root())
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.Write("/etc/resolv.conf", bytes.NewReader(att.ResolvConf()), 0o644, 4096, 0, 0); err != nil {
		return fmt.Errorf("write the sandbox's /etc/resolv.conf: %w", err)
	}
	return nil
}
