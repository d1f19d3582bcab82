package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"sync"

	"github.com/tine-run/tine/api"
)

// Compositor rebuilds whole frames from a screencast's messages: a
// keyframe replaces the picture, a delta's rectangles are drawn over it.
type Compositor struct {
	img  *image.RGBA
	seq  uint64
	hash string
}

// ErrSequenceGap is a delta that does not follow the last message
// applied: a message was lost, and the picture is stale until the next
// keyframe (ask for one with Screencast.Keyframe).
var ErrSequenceGap = errors.New("screencast: a message is missing before this delta")

// Apply draws one message (its header and the images after it) onto the
// picture. A delta out of sequence is ErrSequenceGap and leaves the
// picture alone.
func (c *Compositor) Apply(h *api.ACIFrame, payload []byte) error {
	if h.Kind != "key" && (c.img == nil || h.Seq != c.seq+1) {
		return fmt.Errorf("%w: delta %d after %d", ErrSequenceGap, h.Seq, c.seq)
	}
	if h.Kind == "key" && (c.img == nil || c.img.Rect.Dx() != h.Width || c.img.Rect.Dy() != h.Height) {
		c.img = image.NewRGBA(image.Rect(0, 0, h.Width, h.Height))
	}
	off := 0
	for _, r := range h.Rects {
		if r.Bytes < 0 || off+r.Bytes > len(payload) {
			return fmt.Errorf("screencast: message %d: rectangle images run past its %d bytes", h.Seq, len(payload))
		}
		data := payload[off : off+r.Bytes]
		off += r.Bytes
		var tile image.Image
		var err error
		if h.Format == "jpeg" {
			tile, err = jpeg.Decode(bytes.NewReader(data))
		} else {
			tile, err = png.Decode(bytes.NewReader(data))
		}
		if err != nil {
			return fmt.Errorf("screencast: message %d: decode %s tile: %w", h.Seq, h.Format, err)
		}
		dst := image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H)
		draw.Draw(c.img, dst, tile, tile.Bounds().Min, draw.Src)
	}
	c.seq, c.hash = h.Seq, h.FrameHash
	return nil
}

// Image is the picture as of the last message applied (nil before the
// first keyframe); later messages draw into it.
func (c *Compositor) Image() *image.RGBA { return c.img }

// Seq is the last message applied.
func (c *Compositor) Seq() uint64 { return c.seq }

// FrameHash is the guest's hash of the picture after the last message
// (a lossless stream's picture hashes to it; see FrameHash).
func (c *Compositor) FrameHash() string { return c.hash }

// Screencast is a running stream on an ACI session (StartScreencast).
type Screencast struct {
	Width, Height int
	Format        string

	a *ACI
	c Compositor

	mu    sync.Mutex
	queue []screencastMsg
	lost  int           // messages dropped because nobody read them
	ready chan struct{} // a token when queue has something
	ended bool
}

type screencastMsg struct {
	h       *api.ACIFrame
	payload []byte
}

// maxQueued bounds the messages waiting for Next: past it they are
// dropped and a keyframe is asked for.
const maxQueued = 64

// StartScreencast starts streaming the screen (docs/aci.md,
// "Screencast"); read it with Next. One per session.
func (a *ACI) StartScreencast(ctx context.Context, o *api.ACIScreencast) (*Screencast, error) {
	s := &Screencast{a: a, ready: make(chan struct{}, 1)}
	a.mu.Lock()
	if a.cast != nil {
		a.mu.Unlock()
		return nil, errors.New("aci: a screencast is already running on this session")
	}
	a.cast = s
	a.mu.Unlock()
	rep, _, err := a.Do(ctx, &api.ACIRequest{Op: "screencast_start", Screencast: o})
	if err != nil {
		a.mu.Lock()
		a.cast = nil
		a.mu.Unlock()
		return nil, err
	}
	s.Width, s.Height, s.Format = rep.Width, rep.Height, rep.Format
	return s, nil
}

// Next waits for the next message, draws it and returns its header and
// the whole picture (the compositor's: valid until the next call). After
// messages were lost it returns ErrSequenceGap once per skipped delta
// until a keyframe arrives.
func (s *Screencast) Next(ctx context.Context) (*api.ACIFrame, *image.RGBA, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			if err := s.c.Apply(m.h, m.payload); err != nil {
				return m.h, nil, err
			}
			return m.h, s.c.Image(), nil
		}
		ended := s.ended
		s.mu.Unlock()
		if ended {
			s.a.mu.Lock()
			err := s.a.err
			s.a.mu.Unlock()
			if err == nil {
				err = errors.New("screencast stopped")
			}
			return nil, nil, err
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// Lost is how many messages were dropped because Next was not called
// fast enough.
func (s *Screencast) Lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Keyframe asks for a keyframe now.
func (s *Screencast) Keyframe(ctx context.Context) error {
	return s.a.do(ctx, api.ACIRequest{Op: "screencast_keyframe"})
}

// Stop ends the stream; messages already queued can still be read.
func (s *Screencast) Stop(ctx context.Context) error {
	err := s.a.do(ctx, api.ACIRequest{Op: "screencast_stop"})
	s.a.mu.Lock()
	if s.a.cast == s {
		s.a.cast = nil
	}
	s.a.mu.Unlock()
	s.end()
	return err
}

func (s *Screencast) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.wake()
}

func (s *Screencast) wake() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// deliver queues a message from the read loop; it never blocks it.
func (s *Screencast) deliver(h *api.ACIFrame, payload []byte) {
	s.mu.Lock()
	drop := len(s.queue) >= maxQueued
	if drop {
		s.lost += len(s.queue)
		s.queue = s.queue[:0]
	}
	s.queue = append(s.queue, screencastMsg{h, payload})
	s.mu.Unlock()
	if drop {
		go s.Keyframe(context.Background())
	}
	s.wake()
}

// screencastFrame is the header of a binary message when it is a
// screencast's, nil when it is a reply.
func screencastFrame(head []byte) *api.ACIFrame {
	if !bytes.HasPrefix(head, []byte(`{"type":"frame"`)) {
		return nil
	}
	var h api.ACIFrame
	if json.Unmarshal(head, &h) != nil {
		return nil
	}
	return &h
}
