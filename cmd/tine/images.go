package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tine-run/tine/internal/image"
	"golang.org/x/term"
)

// imageFlags are the flags of every command that opens the image store.
type imageFlags struct {
	stateDir, registries string
}

func (f *imageFlags) register(cmd *cobra.Command) {
	def := os.Getenv("TINE_STATE_DIR")
	if def == "" {
		def = "/var/lib/tine"
	}
	cmd.Flags().StringVar(&f.stateDir, "state-dir", def, "directory of the images and their layer store (shared with the daemon's snapshots; default $TINE_STATE_DIR, else /var/lib/tine)")
	cmd.Flags().StringVar(&f.registries, "registries", "", "registries file: mirrors and plain-HTTP registries (default "+image.DefaultRegistriesFile+" when it exists)")
}

// none reports that the state directory has no images yet: the commands
// that only read or remove then answer at once instead of making (and
// mounting) a layer store to look in.
func (f *imageFlags) none() bool {
	_, err := os.Stat(filepath.Join(f.stateDir, "images"))
	return errors.Is(err, os.ErrNotExist)
}

func (f *imageFlags) open() (*image.Store, error) { return f.openWith(nil) }

// openWith opens the store with net for dependency builds from an index.
func (f *imageFlags) openWith(net image.Egress) (*image.Store, error) {
	regs, err := image.LoadRegistries(f.registries)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return image.Open(f.stateDir, image.Options{Registries: regs, Network: net})
}

func newPullCommand() *cobra.Command {
	var f imageFlags
	var quiet bool
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from its registry into the layer store",
		Long: `Pull an OCI or Docker image into the layer store under --state-dir.

REF takes Docker Hub's defaults ("python:3.12-slim" is
docker.io/library/python:3.12-slim), a registry ("ghcr.io/org/img:tag") or a
digest ("img@sha256:…"). From an index the host's platform is picked.
Credentials come from ~/.docker/config.json (and the credential helpers it
names); mirrors and plain-HTTP registries from the --registries file:

  [[registry]]
  host = "docker.io"
  mirrors = ["mirror.gcr.io"]

  [[registry]]
  host = "registry.lan:5000"
  insecure = true

Each layer is unpacked once, read-only, and shared by every image that has
it. A pull that is interrupted keeps the layers it finished: pulled again,
it fetches only the rest. Two pulls of one image fetch each layer once.`,
		Example: "  tine pull python:3.12-slim\n  tine pull ghcr.io/org/app@sha256:…",
		Args:    exactArgs(1, "pull: give one image reference"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open()
			if err != nil {
				return err
			}
			defer s.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			prog := newPullProgress(os.Stderr, quiet)
			img, err := s.Pull(ctx, args[0], prog.update)
			prog.finish()
			if err != nil {
				return err
			}
			fmt.Printf("%s %s\n", image.Familiar(args[0]), img.Record.Digest)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress")
	return cmd
}

func newLoadCommand() *cobra.Command {
	var f imageFlags
	var input string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "load -i FILE",
		Short: "Load images from a docker save tarball or an OCI layout, offline",
		Args:  exactArgs(0, "load: give the file with -i"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" {
				return usageError{"load: give the tarball or the OCI layout directory with -i"}
			}
			s, err := f.open()
			if err != nil {
				return err
			}
			defer s.Close()
			prog := newPullProgress(os.Stderr, quiet)
			refs, err := s.Load(context.Background(), input, prog.update)
			prog.finish()
			for _, r := range refs {
				fmt.Println("loaded " + r)
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&input, "input", "i", "", "a `docker save` tarball, or an OCI image layout directory")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress")
	return cmd
}

func newImagesCommand() *cobra.Command {
	var f imageFlags
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "images",
		Short: "List the images in the layer store",
		Args:  exactArgs(0, "images: takes no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []image.Summary
			if !f.none() {
				s, err := f.open()
				if err != nil {
					return err
				}
				defer s.Close()
				if list, err = s.List(); err != nil {
					return err
				}
			}
			if jsonOut {
				return printJSON(list)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REFERENCE\tDIGEST\tSIZE\tLAYERS\tIN USE")
			for _, im := range list {
				refs := strings.Join(im.Refs, ", ")
				if refs == "" {
					refs = "<none>"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%v\n", refs, im.Digest[:19], humanBytes(im.Size), im.Layers, im.InUse)
			}
			return w.Flush()
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func newRmiCommand() *cobra.Command {
	var f imageFlags
	cmd := &cobra.Command{
		Use:   "rmi REF...",
		Short: "Remove images (a reference, or the image when it was its last)",
		Long: `Remove a reference; when it was the image's last (or a digest is given), the
image goes, with the layers no other image holds. An image a sandbox,
function or desktop runs from is not removed.`,
		Args: minArgs(1, "rmi: give the images to remove"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.none() {
				return fmt.Errorf("image %s: %w (%s holds none)", args[0], image.ErrNotFound, f.stateDir)
			}
			s, err := f.open()
			if err != nil {
				return err
			}
			defer s.Close()
			var errs []error
			for _, ref := range args {
				removed, err := s.Remove(ref)
				switch {
				case err != nil:
					errs = append(errs, err)
				case removed:
					fmt.Println("removed " + ref)
				default:
					fmt.Println("untagged " + ref)
				}
			}
			return errors.Join(errs...)
		},
	}
	f.register(cmd)
	return cmd
}

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage images: ls, pull, load, rm, prune"}
	ls, rm := newImagesCommand(), newRmiCommand()
	ls.Use, rm.Use = "ls", "rm REF..."
	var f imageFlags
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove every image nothing runs from, and what interrupted pulls left",
		Args:  exactArgs(0, "prune: takes no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.none() {
				return nil
			}
			s, err := f.open()
			if err != nil {
				return err
			}
			defer s.Close()
			pr, err := s.Prune()
			for _, d := range pr.Images {
				fmt.Println("removed " + d)
			}
			if pr.Pulls > 0 {
				fmt.Printf("removed the leftovers of %d interrupted pull(s)\n", pr.Pulls)
			}
			return err
		},
	}
	f.register(prune)
	cmd.AddCommand(ls, newPullCommand(), newLoadCommand(), rm, prune)
	return cmd
}

// pullProgress shows a pull: on a terminal a block of per-layer lines and
// a total with the speed, redrawn; otherwise one line per finished layer.
type pullProgress struct {
	w        io.Writer
	tty      bool
	quiet    bool
	mu       sync.Mutex
	start    time.Time
	order    []string
	layers   map[string]*layerState
	drawn    int
	lastDraw time.Time
}

type layerState struct {
	status      string
	done, total int64
}

func newPullProgress(w *os.File, quiet bool) *pullProgress {
	return &pullProgress{w: w, tty: term.IsTerminal(int(w.Fd())), quiet: quiet, start: time.Now(), layers: map[string]*layerState{}}
}

func (p *pullProgress) update(ev image.Progress) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev.Status {
	case "resolved":
		if !p.tty {
			fmt.Fprintf(p.w, "%s: %s, %d layers, %s\n", ev.Ref, ev.Digest, ev.Layers, humanBytes(ev.Total))
		}
		return
	case "done":
		return
	}
	key := ev.Digest
	if key == "" {
		key = fmt.Sprintf("layer %d", len(p.order)+1)
	}
	st, ok := p.layers[key]
	if !ok {
		st = &layerState{}
		p.layers[key] = st
		p.order = append(p.order, key)
	}
	st.status, st.done, st.total = ev.Status, ev.Done, ev.Total
	if !p.tty {
		if ev.Status == "cached" || ev.Status == "unpacked" {
			fmt.Fprintf(p.w, "%s: %s (%s)\n", short(key), ev.Status, humanBytes(ev.Done))
		}
		return
	}
	if ev.Status == "fetching" && time.Since(p.lastDraw) < 100*time.Millisecond {
		return
	}
	p.draw()
}

func (p *pullProgress) draw() {
	p.lastDraw = time.Now()
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\x1b[J", p.drawn)
	}
	var done, total int64
	keys := p.order
	for _, k := range keys {
		st := p.layers[k]
		done, total = done+st.done, total+st.total
		fmt.Fprintf(&b, "  %s  %-9s %s / %s\n", short(k), st.status, humanBytes(st.done), humanBytes(st.total))
	}
	secs := time.Since(p.start).Seconds()
	fmt.Fprintf(&b, "  total             %s / %s  %s/s\n", humanBytes(done), humanBytes(total), humanBytes(int64(float64(done)/max(secs, 0.001))))
	p.drawn = len(keys) + 1
	io.WriteString(p.w, b.String())
}

func (p *pullProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && !p.quiet && len(p.order) > 0 {
		p.draw()
	}
}

func short(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// exactArgs and minArgs check the argument count with a usage error (exit 2).
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{msg}
		}
		return nil
	}
}

func minArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError{msg}
		}
		return nil
	}
}

func printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}
