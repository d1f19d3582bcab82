//go:build turbojpeg

package encode

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <jpeglib.h>

struct tine_jpeg_error {
	struct jpeg_error_mgr mgr;
	jmp_buf jump;
	char message[JMSG_LENGTH_MAX];
};

// libjpeg's default error handler exits the process; this one returns to
// tine_jpeg with the message.
static void tine_jpeg_error_exit(j_common_ptr c) {
	struct tine_jpeg_error *e = (struct tine_jpeg_error *)c->err;
	(*c->err->format_message)(c, e->message);
	longjmp(e->jump, 1);
}

static void tine_jpeg_quiet(j_common_ptr c, int level) {}

// tine_jpeg encodes height rows of BGRX pixels (stride bytes apart) as a
// baseline 4:2:0 JPEG with the standard Huffman tables, into a buffer it
// mallocs (*out, *size; the caller frees it), guess bytes to start with.
// 0 on success; otherwise -1 and the message in message.
static int tine_jpeg(unsigned char *pix, int width, int height, int stride, int quality,
                     unsigned long guess, unsigned char **out, unsigned long *size, char *message) {
	struct jpeg_compress_struct c;
	struct tine_jpeg_error e;
	c.err = jpeg_std_error(&e.mgr);
	e.mgr.error_exit = tine_jpeg_error_exit;
	e.mgr.emit_message = tine_jpeg_quiet;
	// A buffer of the picture's likely size: with none, libjpeg starts
	// with 4 KiB and copies into one twice as large each time it fills.
	// libjpeg never frees a buffer it was given; when this one is too
	// small it moves to its own and hands that back in *out.
	unsigned char *given = malloc(guess);
	*out = given;
	*size = given ? guess : 0;
	if (setjmp(e.jump)) {
		jpeg_destroy_compress(&c);
		// *out is libjpeg's own buffer once it outgrew ours (it frees
		// only the ones it replaced itself).
		if (*out != given)
			free(*out);
		free(given);
		*out = NULL;
		snprintf(message, JMSG_LENGTH_MAX, "%s", e.message);
		return -1;
	}
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, out, size);
	c.image_width = width;
	c.image_height = height;
	c.input_components = 4;
	c.in_color_space = JCS_EXT_BGRX;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, quality, TRUE);
	c.dct_method = JDCT_IFAST;
	c.optimize_coding = FALSE; // the bands of one picture must share tables
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		JSAMPROW row = pix + (size_t)c.next_scanline * stride;
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	if (*out != given)
		free(given);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/tine-run/tine/internal/desktop/frame"
)

// JPEGBackend names the JPEG encoder this build carries.
const JPEGBackend = "libjpeg-turbo"

// encodeJPEG encodes f as one baseline 4:2:0 JPEG with the standard
// Huffman tables through libjpeg-turbo, which reads the BGRX pixels as
// they are.
func encodeJPEG(f *frame.Frame, quality int) ([]byte, error) {
	var out *C.uchar
	var size C.ulong
	var msg [C.JMSG_LENGTH_MAX]C.char
	if C.tine_jpeg((*C.uchar)(unsafe.Pointer(&f.Pix[0])), C.int(f.Width), C.int(f.Height), C.int(f.Stride), C.int(quality),
		C.ulong(firstBuffer(f.Width, f.Height)), &out, &size, &msg[0]) != 0 {
		return nil, fmt.Errorf("libjpeg: %s", C.GoString(&msg[0]))
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoBytes(unsafe.Pointer(out), C.int(size)), nil
}

// firstBuffer is the size of the buffer libjpeg-turbo starts a
// width×height JPEG in: four bits a pixel, twice what q80 takes on a
// screen of text (1.8 on the bench's desktop), so that a screenshot never
// outgrows it.
func firstBuffer(width, height int) int { return width*height/2 + 4096 }
