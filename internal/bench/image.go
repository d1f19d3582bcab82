package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
	"github.com/tine-run/tine/internal/image/hostimage"
	"golang.org/x/sys/unix"
)

// ImageTargets are the bars for images.
var ImageTargets = struct {
	Cached, Bytecode Target
}{
	Cached:   Target{Variant: "image, cached", MaxRatio: 1.2, Text: "a cached image run of python3 -c pass at most 1.2x the host-root one-shot (both in-process)"},
	Bytecode: Target{Variant: "bytecode layer", MaxRatio: 1.0 / 3, Text: "tine run of the 16 imports with the bytecode layer at most 1/3 of the run without it (whole runs)"},
}

// ImageBench is what the image suite set up: a registry serving a Python
// image built from the host's files, and a state directory holding it.
type ImageBench struct {
	Ref      string
	StateDir string
	wheels   string
	close    func()
}

// Close stops the registry and removes the state directory (unmounting
// its layer store).
func (b *ImageBench) Close() { b.close() }

// SetUpImage builds busybox and the host's python3.11 without compiled
// files into an image, serves it from a registry on a loopback port in
// this process, pulls it into a fresh state directory (compiling its
// bytecode layer) and writes a wheel for the dependency groups.
func SetUpImage(tine string) (*ImageBench, error) {
	base, err := hostimage.BusyboxTar()
	if err != nil {
		return nil, err
	}
	py, err := hostimage.PythonTar(false)
	if err != nil {
		return nil, err
	}
	var layers []v1.Layer
	for _, b := range [][]byte{base, py} {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/usr/bin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go srv.Serve(ln)
	ref := ln.Addr().String() + "/bench/python:3.11-nobytecode"
	r, err := name.ParseReference(ref)
	if err == nil {
		err = remote.Write(r, img)
	}
	state, err2 := os.MkdirTemp("", "tine-bench-image-")
	var cleaned atomic.Bool
	b := &ImageBench{Ref: ref, StateDir: state, close: func() {
		if cleaned.Swap(true) {
			return
		}
		srv.Close()
		// Both state directories' layer stores (the first-run group has
		// its own), loop-mounted when /tmp shares the root's filesystem.
		unix.Unmount(filepath.Join(state, "first", "store"), unix.MNT_DETACH)
		unix.Unmount(filepath.Join(state, "store"), unix.MNT_DETACH)
		os.RemoveAll(state)
	}}
	if err == nil {
		err = err2
	}
	if err == nil {
		b.wheels = filepath.Join(state, "wheels")
		_, err = hostimage.Wheel(b.wheels, "tinebench", "1.0", "VALUE = 1\n")
	}
	if err == nil {
		// Pulled and its bytecode layer compiled before anything is timed.
		out, rerr := exec.Command(tine, "run", "--in-process", "--state-dir", state, "--image", ref, "--", "python3", "-c", "pass").CombinedOutput()
		if rerr != nil {
			err = fmt.Errorf("first run of the bench image: %v: %s", rerr, out)
		}
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// ImageGroups are the image suite: the first run of an image (pull,
// unpack, run) against a cached one; a cached image run of python3 -c
// pass against the host-root one-shot; the 16 stdlib imports with and
// without the bytecode layer; a dependency environment's first build
// against its reuse.
func ImageGroups(tine string, b *ImageBench) []Group {
	run := []string{tine, "run", "--in-process", "--state-dir", b.StateDir}
	img := slices.Concat(run, []string{"--image", b.Ref, "--pull", "never"})
	verify := func(prefix []string) func(context.Context) error {
		return VerifyExitCode(slices.Concat(prefix, []string{"--", "/bin/sh", "-c", "exit 7"}), 7)
	}
	// The first run's own state directory: removed image and all after
	// each (untimed), so every timed run pulls and unpacks again.
	firstState := filepath.Join(b.StateDir, "first")
	first := slices.Concat([]string{tine, "run", "--in-process", "--state-dir", firstState, "--image", b.Ref, "--no-bytecode", "--", "python3", "-c", "pass"})
	imports := "import " + strings.Join(WarmImports, ", ")
	var seq atomic.Int64
	req := filepath.Join(b.StateDir, "requirements.txt")
	os.WriteFile(req, []byte("tinebench\n"), 0o644)
	venv := slices.Concat(img, []string{"--requirements", req, "--find-links", b.wheels})
	return []Group{
		{
			Name: "first run of an image vs cached (python3 -c pass, no bytecode layer)", Reference: "image, cached", Subject: "first run",
			Variants: []Variant{
				{Name: "image, cached", Argv: slices.Concat(img, []string{"--no-bytecode", "--", "python3", "-c", "pass"}), Verify: verify(img)},
				{Name: "first run", Func: func(ctx context.Context) error { return runQuiet(ctx, first) },
					After: func(ctx context.Context) error {
						return runQuiet(ctx, []string{tine, "rmi", "--state-dir", firstState, b.Ref})
					}},
			},
		},
		{
			Name: "python3 -c pass: image vs host root", Reference: "host root", Subject: "image, cached",
			Targets: []Target{ImageTargets.Cached},
			Variants: []Variant{
				{Name: "host root", Argv: slices.Concat(run, []string{"--", "/usr/bin/python3", "-c", "pass"}), Verify: verify(run)},
				{Name: "image, cached", Argv: slices.Concat(img, []string{"--", "python3", "-c", "pass"}), Verify: verify(img)},
			},
		},
		{
			Name: "16 stdlib imports: bytecode layer vs none", Reference: "no bytecode layer", Subject: "bytecode layer",
			Targets: []Target{ImageTargets.Bytecode},
			Variants: []Variant{
				{Name: "no bytecode layer", Argv: slices.Concat(img, []string{"--no-bytecode", "--", "python3", "-c", imports})},
				{Name: "bytecode layer", Argv: slices.Concat(img, []string{"--", "python3", "-c", imports})},
			},
		},
		{
			Name: "requirements: environment reused vs first build", Reference: "reused", Subject: "first build",
			Variants: []Variant{
				{Name: "reused", Argv: slices.Concat(venv, []string{"--", "python3", "-c", "import tinebench"})},
				{Name: "first build", Func: func(ctx context.Context) error {
					// A new file each time (a comment), so a new environment.
					f := filepath.Join(b.StateDir, fmt.Sprintf("requirements-%d.txt", seq.Add(1)))
					if err := os.WriteFile(f, []byte(fmt.Sprintf("tinebench  # %d\n", seq.Load())), 0o644); err != nil {
						return err
					}
					return runQuiet(ctx, slices.Concat(img, []string{"--requirements", f, "--find-links", b.wheels, "--", "python3", "-c", "import tinebench"}))
				}},
			},
		},
	}
}

func runQuiet(ctx context.Context, argv []string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return &CommandError{Argv: argv, Err: err, Output: truncate(string(out), stderrLimit)}
	}
	return nil
}
