package image

import (
	"fmt"
	"os"

	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/store"
)

// layerBuild is a command whose writes, in a sandbox of an image, become a
// layer of their own (the bytecode layer, a dependency layer).
type layerBuild struct {
	what      string // names the command in errors
	args, env []string
	pin       string // the pin that keeps the layer
	tail      int    // how much of a failed command's output its error quotes
}

// buildLayer runs b in a live sandbox of img made from spec, as root, and
// commits its writable layer, pinned before it is published (as a pull's
// layers are).
func (s *Store) buildLayer(img *Image, spec *sandbox.Spec, b layerBuild) (store.Digest, error) {
	if err := img.Apply(spec, ApplyOptions{}); err != nil {
		return "", err
	}
	spec.User = nil // root writes the layer; its files stay root's, as the sources are
	sb, err := sandbox.Create(spec)
	if err != nil {
		return "", err
	}
	defer sb.Destroy()
	out, err := os.CreateTemp("", "tine-layer-build-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	l, err := sb.Launch(&sandbox.ExecSpec{Args: b.args, Env: b.env, Stdio: [3]*os.File{nil, out, out}})
	if err != nil {
		return "", fmt.Errorf("start %s: %w", b.what, err)
	}
	o, err := l.Wait()
	if err != nil {
		return "", err
	}
	if o.ExitCode != 0 {
		msg, _ := os.ReadFile(out.Name())
		return "", fmt.Errorf("%s exited %d: %s", b.what, o.ExitCode, tail(string(msg), b.tail))
	}
	upper, err := sb.OpenUpper()
	if err != nil {
		return "", err
	}
	defer upper.Close()
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
