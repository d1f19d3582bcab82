package server

import (
	"archive/tar"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// TestArchiveCap: a download is capped as an upload is. An archive over
// the cap before its first byte is a 413; one that passes it mid-stream
// is cut off, so that the client sees a broken body, not a short archive.
func TestArchiveCap(t *testing.T) {
	ts := newTestServer(t, Config{MaxFileBytes: 8192})
	ctx := context.Background()
	sb, err := ts.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/d"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "e"} {
		if _, err := ts.c.WriteFile(ctx, sb.ID, "/d/"+name, strings.NewReader(strings.Repeat(name, 3000)), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Under the cap: whole.
	rc, err := ts.c.ReadArchive(ctx, sb.ID, "/d/a")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	if hdr, err := tr.Next(); err != nil || hdr.Size != 3000 {
		t.Fatalf("archive of one file under the cap: %v %+v", err, hdr)
	}
	rc.Close()
	// Over it mid-stream: the body breaks.
	rc, err = ts.c.ReadArchive(ctx, sb.ID, "/d")
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if err == nil {
		t.Fatal("an archive over the cap was sent whole")
	}

	// Over it before the first byte: 413.
	small := newTestServer(t, Config{MaxFileBytes: 100})
	sb, err = small.c.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.c.WriteFile(ctx, sb.ID, "/f", strings.NewReader("tiny"), nil); err != nil {
		t.Fatal(err)
	}
	_, err = small.c.ReadArchive(ctx, sb.ID, "/f")
	if client.ErrorCode(err) != api.CodeTooLarge {
		t.Fatalf("archive over a cap smaller than its first block: got %v, want too_large", err)
	}
}
