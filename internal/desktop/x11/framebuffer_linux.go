package x11

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"os"

	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
	"golang.org/x/sys/unix"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// framebuffer is the screen of an Xvfb started with -shmem, mapped
// read-only into this process. A capture copies from it while the server
// is grabbed: one round trip and one copy, where MIT-SHM GetImage costs the
// server a copy into the segment and this process a second one.
type framebuffer struct {
	mem    []byte // the whole segment or file mapping, for detaching
	pix    []byte // the pixels, bounded by the header read at attach time
	stride int
	unmap  func([]byte) error
}

// The fields of an XWD file header Xvfb keeps at the start of the segment:
// 25 big-endian 32-bit words, then the window name, then the colour map.
const (
	xwdHeaderSize = iota
	xwdFileVersion
	xwdPixmapFormat
	xwdPixmapDepth
	xwdPixmapWidth
	xwdPixmapHeight
	xwdXOffset
	xwdByteOrder
	xwdBitmapUnit
	xwdBitmapBitOrder
	xwdBitmapPad
	xwdBitsPerPixel
	xwdBytesPerLine
	xwdVisualClass
	xwdRedMask
	xwdGreenMask
	xwdBlueMask
	xwdBitsPerRGB
	xwdColormapEntries
	xwdNColors
	xwdWords // the header's length in words, without the name
)

const xwdColorSize = 12 // one XWDColor entry

// UseFramebuffer makes captures read the screen straight from Xvfb's
// shared-memory framebuffer, segment shmid (Xvfb -shmem prints it as
// "screen 0 shmid N"). The software cursor Xvfb draws into that memory is
// hidden for as long as this connection lives (XFixes), so captures show
// it only when asked, as with GetImage. On an error nothing changes and
// captures keep using MIT-SHM or GetImage.
//
// The header is read once, here, before any client but the caller's own
// can have written to the segment; later captures trust only the geometry
// found now, so a client that scribbles on the segment can garble the
// pixels it could draw anyway, never make a capture read out of bounds.
func (d *Display) UseFramebuffer(shmid int) error {
	if !d.xfixes {
		return errors.New("the X server lacks XFixes, needed to keep the cursor out of the framebuffer")
	}
	mem, err := unix.SysvShmAttach(shmid, 0, unix.SHM_RDONLY)
	if err != nil {
		return fmt.Errorf("attach framebuffer segment %d: %w", shmid, err)
	}
	if err := d.useFramebuffer(mem, unix.SysvShmDetach); err != nil {
		return fmt.Errorf("framebuffer segment %d: %w", shmid, err)
	}
	return nil
}

// UseFramebufferFile is UseFramebuffer for an Xvfb started with -fbdir:
// its screen is the file at path, mapped here read-only and shared.
func (d *Display) UseFramebufferFile(path string) error {
	if !d.xfixes {
		return errors.New("the X server lacks XFixes, needed to keep the cursor out of the framebuffer")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("framebuffer file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("framebuffer file: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map framebuffer file %s: %w", path, err)
	}
	if err := d.useFramebuffer(mem, unix.Munmap); err != nil {
		return fmt.Errorf("framebuffer file %s: %w", path, err)
	}
	return nil
}

// useFramebuffer checks mem's header and makes captures read from it,
// releasing it with unmap on an error or when the display closes.
func (d *Display) useFramebuffer(mem []byte, unmap func([]byte) error) error {
	fb, err := parseXWD(mem, d.width, d.height)
	if err != nil {
		unmap(mem)
		return err
	}
	if err := xfixes.HideCursorChecked(d.conn, d.root).Check(); err != nil {
		unmap(mem)
		return fmt.Errorf("hide the cursor: %w", d.connErr(err))
	}
	fb.unmap = unmap
	d.capMu.Lock()
	d.fb = fb
	d.capMu.Unlock()
	return nil
}

// parseXWD checks that mem holds a width×height screen of BGRX pixels
// after an XWD header and returns where they are.
func parseXWD(mem []byte, width, height int) (*framebuffer, error) {
	if len(mem) < xwdWords*4 {
		return nil, fmt.Errorf("%d bytes, shorter than an XWD header", len(mem))
	}
	word := func(i int) int { return int(binary.BigEndian.Uint32(mem[i*4:])) }
	switch {
	case word(xwdFileVersion) != 7:
		return nil, fmt.Errorf("XWD version %d, want 7", word(xwdFileVersion))
	case word(xwdPixmapFormat) != int(xproto.ImageFormatZPixmap) || word(xwdBitsPerPixel) != 32 || word(xwdByteOrder) != int(xproto.ImageOrderLSBFirst):
		return nil, fmt.Errorf("pixel format %d at %d bpp, byte order %d; want ZPixmap at 32 bpp, LSB first",
			word(xwdPixmapFormat), word(xwdBitsPerPixel), word(xwdByteOrder))
	case word(xwdRedMask) != 0xff0000 || word(xwdGreenMask) != 0xff00 || word(xwdBlueMask) != 0xff:
		return nil, fmt.Errorf("colour masks %#x %#x %#x; want BGRX", word(xwdRedMask), word(xwdGreenMask), word(xwdBlueMask))
	case word(xwdPixmapWidth) != width || word(xwdPixmapHeight) != height:
		return nil, fmt.Errorf("%dx%d pixels; the screen is %dx%d", word(xwdPixmapWidth), word(xwdPixmapHeight), width, height)
	}
	stride := word(xwdBytesPerLine)
	start := word(xwdHeaderSize) + word(xwdNColors)*xwdColorSize
	if stride < width*4 || start < xwdWords*4 || start > len(mem) || (len(mem)-start)/stride < height {
		return nil, fmt.Errorf("header says %d bytes per line from offset %d; the segment has %d bytes", stride, start, len(mem))
	}
	return &framebuffer{mem: mem, pix: mem[start : start+stride*height], stride: stride}, nil
}

// grabFramebuffer copies r out of the framebuffer into buf's memory (or
// new memory), zeroing the padding byte like every capture. The server is
// grabbed meanwhile, so no client draws mid-copy; the round trip after
// the grab makes sure every request that came before it has been drawn.
func (d *Display) grabFramebuffer(buf *frame.Frame, r image.Rectangle) (*frame.Frame, error) {
	xproto.GrabServer(d.conn)
	defer xproto.UngrabServer(d.conn)
	if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
		return nil, err
	}
	f := newFrame(buf, r.Dx(), r.Dy())
	row := r.Dx() * 4
	for y := range r.Dy() {
		src := d.fb.pix[(r.Min.Y+y)*d.fb.stride+r.Min.X*4:]
		copyColour(f.Pix[y*f.Stride:y*f.Stride+row], src[:row])
	}
	return f, nil
}

func (fb *framebuffer) detach() { fb.unmap(fb.mem) }
