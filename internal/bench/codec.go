package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/tine-run/tine/api"
)

// codecWords are what the scenes print: real words, so tesseract's
// dictionary helps no more than it would an agent's reading.
var codecWords = strings.Fields(`system window button network process memory cancel
	accept folder private public server client update install remove search
	display history profile account setting option manual report number
	channel signal market garden summer winter yellow purple orange silver
	planet rocket bridge castle dragon forest island valley harbor canyon`)

// codecScene is a screen full of known text.
type codecScene struct {
	name string
	app  func(file string) []string
}

var codecScenes = []codecScene{
	{"dense terminal (6x13 font)", func(f string) []string {
		return []string{"xterm", "-geometry", "210x60+0+0", "-e", "sh", "-c", "cat " + f + "; exec cat"}
	}},
	{"large font (10x20)", func(f string) []string {
		return []string{"xterm", "-fn", "10x20", "-geometry", "126x38+0+0", "-e", "sh", "-c", "cat " + f + "; exec cat"}
	}},
}

// codecCell is one encoding of a screenshot.
type codecCell struct {
	format  string
	quality int
	edge    int
}

func (c codecCell) String() string {
	q := ""
	if c.format == "jpeg" {
		q = fmt.Sprintf(" q%d", c.quality)
	}
	e := "native"
	if c.edge > 0 {
		e = fmt.Sprintf("@%d", c.edge)
	}
	return c.format + q + " " + e
}

// Codec measures, for each scene and each cell of format × quality ×
// max_long_edge, a screenshot's bytes and round trip, and how many of the
// scene's scripted words Debian's tesseract still reads in the image as
// delivered (no upscaling): the cells that read about as well as the
// lossless native PNG are the ones safe for agents that read text off the
// screen.
func Codec(ctx context.Context, d *Daemon, reps int) (*SeriesReport, error) {
	if _, err := exec.LookPath("tesseract"); err != nil {
		return nil, fmt.Errorf("tine bench codec needs tesseract (apt-get install tesseract-ocr): %w", err)
	}
	g := NewGuard(runtime.NumCPU())
	r, before := newSeriesReport("codec", g)
	c := d.Client
	var cells []codecCell
	cells = append(cells, codecCell{"png", 0, 0}, codecCell{"png", 0, 1024})
	for _, q := range []int{80, 50, 10} {
		for _, e := range []int{0, 1024, 768, 512} {
			cells = append(cells, codecCell{"jpeg", q, e})
		}
	}
	tmp, err := os.MkdirTemp("", "tine-bench-codec-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rng := rand.New(rand.NewPCG(13, 13))
	for _, sc := range codecScenes {
		var lines []string
		var want []string
		for range 36 {
			var l []string
			for range 9 {
				w := codecWords[rng.IntN(len(codecWords))]
				l = append(l, w)
				want = append(want, w)
			}
			lines = append(lines, strings.Join(l, " "))
		}
		dt, err := c.CreateDesktop(ctx, &api.DesktopSpec{Width: 1280, Height: 800})
		if err != nil {
			return nil, fmt.Errorf("create the desktop: %w", err)
		}
		a, err := c.DialACI(ctx, dt.ID)
		if err != nil {
			c.DeleteDesktop(ctx, dt.ID)
			return nil, err
		}
		err = func() error {
			defer c.DeleteDesktop(ctx, dt.ID)
			defer a.Close()
			if err := a.WriteFile(ctx, "/tmp/words.txt", []byte(strings.Join(lines, "\n")+"\n"), 0); err != nil {
				return err
			}
			if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "launch", Cmd: sc.app("/tmp/words.txt")}); err != nil {
				return err
			}
			time.Sleep(time.Second) // the xterm maps and prints
			if _, _, err := a.Step(ctx, nil, &api.ACIObserve{SettleMs: 300}); err != nil {
				return err
			}
			var ceiling float64 // what the judge reads in the lossless native picture
			for _, cell := range cells {
				var lat []sample
				var img []byte
				for range reps {
					t0 := time.Now()
					_, b, err := a.Screenshot(ctx, &api.ACIScreenshot{Format: cell.format, Quality: cell.quality, MaxLongEdge: cell.edge})
					lat = append(lat, sample{latency: time.Since(t0), err: err})
					img = b
				}
				s := summarize(sc.name+": "+cell.String(), lat)
				r.Series = append(r.Series, s)
				read, err := ocrWords(tmp, cell.format, img)
				if err != nil {
					return err
				}
				legible := 100 * float64(countFound(want, read)) / float64(len(want))
				if cell == cells[0] {
					ceiling = legible
				}
				verdict := "not safe for text"
				if legible >= 0.95*ceiling {
					verdict = "safe for text"
				}
				r.Figures[fmt.Sprintf("%s: %-16s bytes, p50 ms, words read", sc.name, cell)] =
					fmt.Sprintf("%7d, %6.2f, %5.1f%% (%s)", len(img), float64(s.Latency.P50Ns)/1e6, legible, verdict)
			}
			return nil
		}()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.name, err)
		}
	}
	r.Figures["legibility judged by"] = "tesseract " + tesseractVersion() + " on the image as delivered; a cell is safe for text when it reads at least 95% of what the lossless native PNG reads (the judge's own ceiling)"
	r.finish(g, before, false)
	return r, nil
}

// ocrWords runs tesseract on an image and returns the words it read.
func ocrWords(dir, format string, img []byte) (map[string]int, error) {
	f := filepath.Join(dir, "shot."+format)
	if err := os.WriteFile(f, img, 0o600); err != nil {
		return nil, err
	}
	out, err := exec.Command("tesseract", f, "stdout").Output()
	if err != nil {
		return nil, fmt.Errorf("tesseract: %w", err)
	}
	words := map[string]int{}
	for _, w := range strings.FieldsFunc(strings.ToLower(string(out)), func(r rune) bool { return r < 'a' || r > 'z' }) {
		words[w]++
	}
	return words, nil
}

// countFound counts the wanted words read, each reading used once.
func countFound(want []string, read map[string]int) int {
	n := 0
	for _, w := range want {
		if read[w] > 0 {
			read[w]--
			n++
		}
	}
	return n
}

func tesseractVersion() string {
	out, _ := exec.Command("tesseract", "--version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(first), "tesseract ")
}
