package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/image"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/zygote"
)

// runImageFlags are tine run's image flags.
type runImageFlags struct {
	image, pull string
	noBytecode  bool
	store       imageFlags
	workdirSet  bool
}

func (f *runImageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.image, "image", "", "run from this OCI image (its layers are the read-only root; its Env, Entrypoint, Cmd, WorkingDir and User apply), pulled first unless --pull says otherwise")
	cmd.Flags().StringVar(&f.pull, "pull", "missing", "with --image: missing (pull when not stored), never, or always")
	cmd.Flags().BoolVar(&f.noBytecode, "no-bytecode", false, "with --image: no bytecode layer (by default a Python standard library without compiled files is compiled once per image, in a sandbox, into a layer stacked on it)")
	f.store.register(cmd)
}

// resolveImage finds (or pulls, per --pull) the image of f and makes it
// s's root. The lease keeps the image from removal while s runs.
func (f *runImageFlags) apply(s *sandbox.Spec, oneShot bool) (*image.Lease, error) {
	if f.image == "" {
		return nil, nil
	}
	if s.RootFS != "" {
		return nil, usageError{"--image and --rootfs both name the root: drop one of them"}
	}
	switch f.pull {
	case "missing", "never", "always":
	default:
		return nil, usageError{fmt.Sprintf("invalid --pull %q: want missing, never or always", f.pull)}
	}
	st, err := f.store.open()
	if err != nil {
		return nil, err
	}
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
	lease, err := st.Use(img)
	if err != nil {
		return nil, err
	}
	if err := img.Apply(s, image.ApplyOptions{OneShot: oneShot, WorkdirSet: f.workdirSet}); err != nil {
		lease.Release()
		return nil, usageError{err.Error()}
	}
	return lease, nil
}

// functionImages makes the image roots of warm functions, from the image
// store under stateDir (opened on first use).
func functionImages(stateDir string, regs image.Registries) zygote.ImageFunc {
	var once sync.Once
	var st *image.Store
	var openErr error
	return func(ref string, spec *sandbox.Spec) (func(), error) {
		once.Do(func() { st, openErr = image.Open(stateDir, image.Options{Registries: regs}) })
		if openErr != nil {
			return nil, openErr
		}
		img, err := st.Lookup(ref)
		if errors.Is(err, image.ErrNotFound) {
			img, err = st.Pull(context.Background(), ref, nil)
		}
		if err != nil {
			return nil, err
		}
		if withBC, _, err := st.WithBytecode(img); err == nil {
			img = withBC // a warm function imports faster; without, it still runs
		}
		lease, err := st.Use(img)
		if err != nil {
			return nil, err
		}
		if err := img.Apply(spec, image.ApplyOptions{}); err != nil {
			lease.Release()
			return nil, err
		}
		return lease.Release, nil
	}
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
