package aci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
	"github.com/tine-run/tine/internal/require"
)

func waitFor(t *testing.T, path, want string) {
	t.Helper()
	var got []byte
	for range 100 {
		if got, _ = os.ReadFile(path); string(got) == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s holds %q, want %q", path, got, want)
}

func aciCode(err error) string {
	var e *client.ACIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Anthropic's and OpenAI's computer-use actions as the models emit them,
// at a scale: the pointer lands at the mapped point, typed text reaches
// the xterm, each answer carries the screenshot at the model's size.
func TestComputerUse(t *testing.T) {
	a := startGuest(t, []string{"xterm", "-geometry", "80x24+0+0"})
	ctx := context.Background()
	dir := t.TempDir()
	half := &[2]int{400, 300} // the guest's screen is 800×600
	cursor := func() [2]int {
		t.Helper()
		rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "cursor"})
		if err != nil {
			t.Fatal(err)
		}
		return *rep.Cursor
	}
	anth := func(input string, scale *[2]int) (*api.ACIReply, []byte, error) {
		return a.Anthropic(ctx, json.RawMessage(input), scale)
	}
	oai := func(input string, scale *[2]int) (*api.ACIReply, []byte, error) {
		return a.OpenAI(ctx, json.RawMessage(input), scale)
	}
	shotSize := func(img []byte) [2]int {
		t.Helper()
		pic, err := png.Decode(bytes.NewReader(img))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		return [2]int{pic.Bounds().Dx(), pic.Bounds().Dy()}
	}

	t.Run("anthropic", func(t *testing.T) {
		rep, img, err := anth(`{"action":"left_click","coordinate":[100,50]}`, half)
		if err != nil {
			t.Fatal(err)
		}
		if c := cursor(); c != [2]int{200, 100} {
			t.Fatalf("cursor at %v, want [200 100] (the model's (100,50) at half scale)", c)
		}
		if s := shotSize(img); s != [2]int{400, 300} || rep.Width != 400 {
			t.Fatalf("tool result screenshot %v, want the model's 400x300", s)
		}
		rep, img, err = anth(`{"action":"cursor_position"}`, half)
		if err != nil || img != nil || rep.Output != "X=100,Y=50" {
			t.Fatalf("cursor_position: %+v %v (image %d bytes)", rep, err, len(img))
		}
		out := filepath.Join(dir, "anthropic.txt")
		if _, _, err := anth(fmt.Sprintf(`{"action":"type","text":"echo junk"}`), nil); err != nil {
			t.Fatal(err)
		}
		// xdotool key syntax, several combos at once: ctrl+u erases the junk.
		if _, _, err := anth(`{"action":"key","text":"ctrl+u"}`, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := anth(fmt.Sprintf(`{"action":"type","text":"echo claude > %s"}`, out), nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := anth(`{"action":"key","text":"Return"}`, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, out, "claude\n")
		// zoom: the region at the screen's own resolution.
		_, img, err = anth(`{"action":"zoom","region":[0,0,200,150]}`, half)
		if err != nil {
			t.Fatal(err)
		}
		if s := shotSize(img); s != [2]int{400, 300} {
			t.Fatalf("zoom of the model's 200x150 at half scale: %v, want 400x300 screen pixels", s)
		}
		if _, _, err := anth(`{"action":"double_click","coordinate":[200,200],"text":"shift"}`, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := anth(`{"action":"scroll","coordinate":[200,200],"scroll_direction":"down","scroll_amount":2}`, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := anth(`{"action":"left_click_drag","start_coordinate":[200,200],"coordinate":[260,240]}`, nil); err != nil || cursor() != [2]int{260, 240} {
			t.Fatalf("drag: %v, cursor %v", err, cursor())
		}
	})
	t.Run("openai", func(t *testing.T) {
		_, img, err := oai(`{"type":"click","button":"left","x":50,"y":60}`, half)
		if err != nil || cursor() != [2]int{100, 120} {
			t.Fatalf("click: %v, cursor %v", err, cursor())
		}
		if s := shotSize(img); s != [2]int{400, 300} {
			t.Fatalf("screenshot %v", s)
		}
		out := filepath.Join(dir, "openai.txt")
		// A whole computer_call with a batch of actions, one screenshot.
		call := fmt.Sprintf(`{"type":"computer_call","call_id":"c1","actions":[{"type":"type","text":"echo gpt > %s"},{"type":"keypress","keys":["ENTER"]},{"type":"move","x":300,"y":200}]}`, out)
		rep, img, err := oai(call, nil)
		if err != nil || len(img) == 0 {
			t.Fatalf("batch: %v", err)
		}
		waitFor(t, out, "gpt\n")
		if c := cursor(); c != [2]int{300, 200} {
			t.Fatalf("cursor %v after the batch", c)
		}
		item := client.OpenAIComputerCallOutput("c1", rep, img)
		if u := item["output"].(map[string]any)["image_url"].(string); !strings.HasPrefix(u, "data:image/png;base64,iVBOR") {
			t.Fatalf("computer_call_output image_url %.40s", u)
		}
		if _, _, err := oai(`{"type":"scroll","x":200,"y":200,"scroll_x":0,"scroll_y":300}`, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := oai(`{"type":"drag","path":[{"x":200,"y":200},{"x":230,"y":230},{"x":250,"y":270}]}`, nil); err != nil || cursor() != [2]int{250, 270} {
			t.Fatalf("drag: %v, cursor %v", err, cursor())
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			op, input string
			scale     *[2]int
			code      string
			mentions  string
		}{
			{"anthropic", `{"action":"teleport"}`, nil, api.ACIUnknownAction, `"teleport"`},
			{"openai", `{"type":"levitate","x":1,"y":1}`, nil, api.ACIUnknownAction, `"levitate"`},
			{"openai", `[{"type":"wait"},{"type":"fly"}]`, nil, api.ACIUnknownAction, `"fly"`},
			{"anthropic", `{"action":"left_click","coordinate":[500,10]}`, half, api.ACIOffScreen, "500"},
			{"anthropic", `{"action":"scroll","coordinate":[1,1]}`, nil, api.ACIBadRequest, "scroll_direction"},
			{"anthropic", `{"action":"mouse_move"}`, nil, api.ACIBadRequest, "coordinate"},
			{"anthropic", `{"action":"key","text":"ctrl+nosuchkey"}`, nil, api.ACIUnknownKey, "nosuchkey"},
			{"anthropic", `{"action":"screenshot"}`, &[2]int{400, 400}, api.ACIBadRequest, "aspect"},
			{"openai", `{"type":"click","button":"nose","x":1,"y":1}`, nil, api.ACIBadRequest, "nose"},
			{"openai", ``, nil, api.ACIBadRequest, "input"},
		} {
			_, _, err := a.Do(ctx, &api.ACIRequest{Op: c.op, Input: json.RawMessage(c.input), Scale: c.scale})
			if aciCode(err) != c.code || !strings.Contains(err.Error(), c.mentions) {
				t.Errorf("%s %s: %v, want %s naming %s", c.op, c.input, err, c.code, c.mentions)
			}
		}
		// The desktop is still usable.
		if _, _, err := anth(`{"action":"mouse_move","coordinate":[5,5]}`, nil); err != nil || cursor() != [2]int{5, 5} {
			t.Fatalf("after the errors: %v, cursor %v", err, cursor())
		}
	})
}

// record_start/record_stop film the screen into an H.264 mp4: ffprobe
// reads it, its duration is what the reply says (and about the time it
// ran), and a window that appeared during the recording is in a late frame
// and not in an early one.
func TestRecord(t *testing.T) {
	require.Binary(t, "ffmpeg")
	require.Binary(t, "ffprobe")
	a := startGuest(t)
	ctx := context.Background()
	if _, _, err := a.RecordStop(ctx); aciCode(err) != api.ACIBadRequest {
		t.Fatalf("record_stop with none running: %v", err)
	}
	if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "record_start", Format: "webm"}); aciCode(err) != api.ACIBadRequest {
		t.Fatalf("record_start webm: %v", err)
	}
	t0 := time.Now()
	if err := a.RecordStart(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordStart(ctx, 10); aciCode(err) != api.ACIBadRequest {
		t.Fatalf("a second record_start: %v", err)
	}
	time.Sleep(time.Second)
	// A red window appears a second in.
	if _, _, err := a.Do(ctx, &api.ACIRequest{Op: "launch", Cmd: []string{"xterm", "-bg", "#ff0000", "-geometry", "60x20+0+0"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	rep, mp4, err := a.RecordStop(ctx)
	wall := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rec.mp4")
	os.WriteFile(file, mp4, 0o644)
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height,nb_frames:format=duration", "-of", "default=nw=1", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	probe := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		probe[k] = v
	}
	t.Logf("ffprobe: %v; reply %d frames %.0f ms; wall %v", probe, rep.Frames, rep.DurationMs, wall)
	dur, _ := strconv.ParseFloat(probe["duration"], 64)
	if probe["codec_name"] != "h264" || probe["width"] != "800" || probe["height"] != "600" || probe["nb_frames"] != strconv.Itoa(rep.Frames) {
		t.Fatalf("ffprobe %v, reply %d frames", probe, rep.Frames)
	}
	if d := dur*1000 - rep.DurationMs; d < -1 || d > 1 {
		t.Fatalf("file lasts %.3f s, the reply says %.0f ms", dur, rep.DurationMs)
	}
	// Frames follow the wall clock (a slow capture repeats frames).
	if dur < 2 || dur > wall.Seconds()+0.5 {
		t.Fatalf("file lasts %.2f s for a recording of %v", dur, wall)
	}
	redAt := func(sec float64) bool {
		t.Helper()
		png, err := exec.Command("ffmpeg", "-v", "error", "-ss", fmt.Sprint(sec), "-i", file, "-frames:v", "1", "-f", "image2", "-c:v", "png", "pipe:1").Output()
		if err != nil {
			t.Fatalf("frame at %.1f s: %v", sec, err)
		}
		return isRed(t, png, 100, 100)
	}
	if redAt(0.3) {
		t.Fatal("the red window is in the first frames, before it was launched")
	}
	if !redAt(dur - 0.3) {
		t.Fatal("the red window is not in the last frames")
	}
}

func isRed(t *testing.T, img []byte, x, y int) bool {
	t.Helper()
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	r, g, b, _ := pic.At(x, y).RGBA()
	return r>>8 > 200 && g>>8 < 60 && b>>8 < 60
}
