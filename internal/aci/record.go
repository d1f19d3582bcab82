package aci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/record"
)

// record_start films the display into an mp4 (H.264, Debian's ffmpeg
// grabbing the screen: internal/desktop/record); record_stop ends it and answers with the
// file. One recording per desktop at a time; it outlives the session that
// started it.
func (ss *session) record(ctx context.Context, req *api.ACIRequest) (*api.ACIReply, []byte) {
	s := ss.s
	rep := &api.ACIReply{ID: req.ID, OK: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Op == "record_start" {
		if req.Format != "" && req.Format != "mp4" {
			return failErr(req.ID, bad("record format %q: want mp4", req.Format)), nil
		}
		if req.FPS < 0 || req.FPS > record.MaxFPS {
			return failErr(req.ID, bad("record fps %d: want 1 to %d (default %d)", req.FPS, record.MaxFPS, record.DefaultFPS)), nil
		}
		if s.rec != nil && s.rec.Running() {
			return failErr(req.ID, bad("a recording is already running: stop it with record_stop")), nil
		}
		f, err := os.CreateTemp("", "tine-recording-*.mp4")
		if err != nil {
			return failErr(req.ID, fmt.Errorf("recording file: %w", err)), nil
		}
		f.Close()
		cursor := req.Screenshot != nil && req.Screenshot.Cursor
		rec, err := record.Start(s.D, record.Options{FPS: req.FPS, Path: f.Name(), Cursor: cursor})
		if err != nil {
			os.Remove(f.Name())
			if errors.Is(err, record.ErrNoFFmpeg) {
				return failErr(req.ID, bad("%v", err)), nil
			}
			return failErr(req.ID, err), nil
		}
		s.rec = rec
		return rep, nil
	}
	rec := s.rec
	if rec == nil {
		return failErr(req.ID, bad("no recording is running: start one with record_start")), nil
	}
	s.rec = nil
	defer os.Remove(rec.Path())
	err := rec.Stop(ctx)
	if err != nil {
		return failErr(req.ID, err), nil
	}
	data, err := readFile(&api.ACIRequest{Op: "record_stop", File: rec.Path()}, rep)
	if err != nil {
		return failErr(req.ID, err), nil
	}
	rep.Format, rep.Frames = "mp4", rec.Frames
	rep.DurationMs = float64(time.Duration(rec.Frames)*time.Second/time.Duration(rec.FPS())) / 1e6
	return rep, data
}
