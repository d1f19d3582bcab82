package image

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/tine-run/tine/internal/inroot"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/store"
)

// buildTimeout bounds a layer build (its sandbox is killed then): a
// compilation takes seconds, an environment from an index minutes at most.
const buildTimeout = 15 * time.Minute

// layerBuild is a command whose writes, in a sandbox of an image, become a
// layer of their own (the bytecode layer, a dependency layer).
type layerBuild struct {
	what      string // names the command in errors
	args, env []string
	pin       string // the pin that keeps the layer
	tail      int    // how much of a failed command's output its error quotes
	// reason, when set, picks what a failed command's error quotes.
	reason func(out string, n int) string
	// resolvConf, when set, is the build network's /etc/resolv.conf,
	// written before the command and kept out of the layer.
	resolvConf []byte
}

// buildLayer runs b in a live sandbox of img made from spec, as root, and
// commits its writable layer, pinned before it is published (as a pull's
// layers are).
func (s *Store) buildLayer(img *Image, spec *sandbox.Spec, b layerBuild) (store.Digest, error) {
	if err := img.Apply(spec, ApplyOptions{}); err != nil {
		return "", err
	}
	spec.User = nil // root writes the layer; its files stay root's, as the sources are
	if s.opts.Admit != nil {
		release, err := s.opts.Admit(spec.DefaultLimits.MemoryBytes)
		if err != nil {
			return "", fmt.Errorf("%s: %w", b.what, err)
		}
		defer release()
	}
	sb, err := sandbox.Create(spec)
	if err != nil {
		return "", err
	}
	defer sb.Destroy()
	if b.resolvConf != nil {
		root, err := inroot.Open(sb.Root())
		if err != nil {
			return "", err
		}
		_, err = root.Write("/etc/resolv.conf", bytes.NewReader(b.resolvConf), 0o644, 4096, 0, 0)
		root.Close()
		if err != nil {
			return "", fmt.Errorf("write the build's /etc/resolv.conf: %w", err)
		}
	}
	out, err := os.CreateTemp("", "tine-layer-build-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	l, err := sb.Launch(&sandbox.ExecSpec{Args: b.args, Env: b.env, Stdio: [3]*os.File{nil, out, out}, Timeout: buildTimeout})
	if err != nil {
		return "", fmt.Errorf("start %s: %w", b.what, err)
	}
	o, err := l.Wait()
	if err != nil {
		return "", err
	}
	if o.Reason == "timeout" {
		return "", fmt.Errorf("%s did not finish within %s: stopped", b.what, buildTimeout)
	}
	if o.ExitCode != 0 {
		msg, _ := os.ReadFile(out.Name())
		reason := tail
		if b.reason != nil {
			reason = b.reason
		}
		return "", fmt.Errorf("%s exited %d: %s", b.what, o.ExitCode, reason(string(msg), b.tail))
	}
	upper, err := sb.OpenUpper()
	if err != nil {
		return "", err
	}
	defer upper.Close()
	if b.resolvConf != nil {
		if err := dropResolvConf(upper); err != nil {
			return "", err
		}
	}
	p, err := s.Layers.Copy(upper, 0)
	if err != nil {
		return "", err
	}
	d := p.Digest()
	if err := s.Layers.Pin(b.pin, []store.Digest{d}); err != nil {
		p.Discard()
		return "", err
	}
	if _, err := p.Publish(); err != nil {
		return "", err
	}
	return d, nil
}
