package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/zygote"
)

// runImageFlags are tine run's image flags.
type runImageFlags struct {
	image, pull             string
	noBytecode              bool
	requirements, findLinks string
	indexURL                string
	store                   imageFlags
	workdirSet              bool
}

func (f *runImageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.image, "image", "", "run from this OCI image (its layers are the read-only root; its Env, Entrypoint, Cmd, WorkingDir and User apply), pulled first unless --pull says otherwise")
	cmd.Flags().StringVar(&f.pull, "pull", "missing", "with --image: missing (pull when not stored), never, or always")
	cmd.Flags().BoolVar(&f.noBytecode, "no-bytecode", false, "with --image: no bytecode layer (by default a Python standard library without compiled files is compiled once per image, in a sandbox, into a layer stacked on it)")
	cmd.Flags().StringVar(&f.requirements, "requirements", "", "with --image: a pip requirements file, installed into a virtual environment at "+image.VenvDir+" (first on PATH) built once per image and file, then reused")
	cmd.Flags().StringVar(&f.findLinks, "find-links", "", "with --requirements: a directory of wheels and sdists pip installs from")
	cmd.Flags().StringVar(&f.indexURL, "index-url", "", "with --requirements: a PEP 503 simple index pip installs from, reached over an egress network that allows only its host and port (needs root and nftables)")
	f.store.register(cmd)
}

// apply finds (or pulls, per --pull) the image of f and makes it s's
// root. release ends its lease, which keeps the image from removal while s
// runs, and closes the image store (without --image it does nothing).
func (f *runImageFlags) apply(s *sandbox.Spec, oneShot bool) (release func(), err error) {
	if f.image == "" {
		return func() {}, nil
	}
	if s.RootFS != "" {
		return nil, usageError{"--image and --rootfs both name the root: drop one of them"}
	}
	switch f.pull {
	case "missing", "never", "always":
	default:
		return nil, usageError{fmt.Sprintf("invalid --pull %q: want missing, never or always", f.pull)}
	}
	var egress image.Egress
	if f.indexURL != "" {
		if f.requirements == "" {
			return nil, usageError{"--index-url is for --requirements"}
		}
		if err := image.CheckIndexURL(f.indexURL); err != nil {
			return nil, usageError{err.Error()}
		}
		net := &lazyBuildNet{}
		defer net.Close()
		egress = net
	}
	st, err := f.store.openWith(egress)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	img, err := st.Lookup(f.image)
	switch {
	case f.pull == "always" || (errors.Is(err, image.ErrNotFound) && f.pull == "missing"):
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		prog := newPullProgress(os.Stderr, false)
		img, err = st.Pull(ctx, f.image, prog.update)
		prog.finish()
		stop()
		if err != nil {
			return nil, err
		}
	case errors.Is(err, image.ErrNotFound):
		return nil, fmt.Errorf("image %s is not stored and --pull is never: tine pull %s first", f.image, f.image)
	case err != nil:
		return nil, err
	}
	if !f.noBytecode {
		img = withBytecode(st, img)
	}
	if f.requirements != "" {
		if img, err = withRequirements(st, img, f.requirements, image.Requirements{FindLinks: f.findLinks, IndexURL: f.indexURL}); err != nil {
			return nil, err
		}
		s.Env = append(img.VenvEnv(), s.Env...) // the image's, then the venv's, then -e
	} else if f.findLinks != "" {
		return nil, usageError{"--find-links is for --requirements"}
	}
	lease, err := st.Use(img)
	if err != nil {
		return nil, err
	}
	if err := img.Apply(s, image.ApplyOptions{OneShot: oneShot, WorkdirSet: f.workdirSet}); err != nil {
		lease.Release()
		return nil, usageError{err.Error()}
	}
	return func() { lease.Release(); st.Close() }, nil
}

// functionImages makes the image roots of warm functions, from the image
// store under stateDir (opened on first use).
func functionImages(stateDir string, regs image.Registries, net image.Egress) (_ zygote.ImageFunc, closeStore func()) {
	var once sync.Once
	var st *image.Store
	var openErr error
	closeStore = func() {
		once.Do(func() { openErr = errors.New("images: the daemon is shutting down") })
		if st != nil {
			st.Close()
		}
	}
	images := func(fn *api.FunctionSpec, spec *sandbox.Spec, admit zygote.AdmitFunc) (func(), error) {
		// One budget for all functions (the daemon's): the first call's.
		once.Do(func() {
			st, openErr = image.Open(stateDir, image.Options{Registries: regs, Network: net, Admit: image.AdmitFunc(admit)})
		})
		if openErr != nil {
			return nil, openErr
		}
		img, err := st.Lookup(fn.Image)
		if errors.Is(err, image.ErrNotFound) {
			img, err = st.Pull(context.Background(), fn.Image, nil)
		}
		if err != nil {
			return nil, err
		}
		if withBC, _, err := st.WithBytecode(img); err == nil {
			img = withBC // a warm function imports faster; without, it still runs
		}
		if fn.Requirements != "" {
			b, err := os.ReadFile(fn.Requirements)
			if err != nil {
				return nil, fmt.Errorf("requirements: %w", err)
			}
			v, err := st.Venv(img, image.Requirements{File: b, FindLinks: fn.FindLinks, IndexURL: fn.IndexURL})
			if err != nil {
				return nil, err
			}
			img = img.WithLayer(v.Path)
			spec.Env = append(img.VenvEnv(), spec.Env...)
		}
		lease, err := st.Use(img)
		if err != nil {
			return nil, err
		}
		if err := img.Apply(spec, image.ApplyOptions{}); err != nil {
			lease.Release()
			return nil, err
		}
		// The zygote walls each request in with root's capabilities (its
		// own namespaces, a private /tmp), so it runs as the sandbox's root.
		spec.User = nil
		return lease.Release, nil
	}
	return images, closeStore
}

// withBytecode stacks img's bytecode layer on it, compiling it first when
// needed; a failure only warns (the image runs as it is).
func withBytecode(st *image.Store, img *image.Image) *image.Image {
	img, bc, err := st.WithBytecode(img)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "tine: warning: no bytecode layer for %s: %v\n", img.Ref, err)
	case bc.Built:
		fmt.Fprintf(os.Stderr, "tine: compiled the Python standard library of %s into a bytecode layer (%.0f ms, once per image)\n", img.Ref, bc.Ms)
	}
	return img
}

// withRequirements stacks the dependency layer of requirements (built
// first when this image and file have none) on img.
func withRequirements(st *image.Store, img *image.Image, requirements string, req image.Requirements) (*image.Image, error) {
	b, err := os.ReadFile(requirements)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--requirements: %v", err)}
	}
	req.File = b
	if req.FindLinks == "" && req.IndexURL == "" {
		return nil, usageError{"--requirements needs the packages to install: --find-links DIR (wheels and sdists) or --index-url URL (a package index)"}
	}
	if req.FindLinks != "" {
		if req.FindLinks, err = filepath.Abs(req.FindLinks); err != nil {
			return nil, usageError{fmt.Sprintf("--find-links: %v", err)}
		}
	}
	v, err := st.Venv(img, req)
	if err != nil {
		return nil, err
	}
	if v.Built {
		fmt.Fprintf(os.Stderr, "tine: built the environment of %s over %s (%.0f ms, once per image and file)\n", requirements, img.Ref, v.Ms)
	}
	return img.WithLayer(v.Path), nil
}
