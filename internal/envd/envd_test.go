package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// These tests run envd's handler on the host as a plain user would see
// it (no sandbox needed) and talk to it as the SDKs do: Connect with the
// JSON codec, streams and all. test/e2b drives it with the real SDK
// inside sandboxes.

func serve(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	srv := httptest.NewServer(Handler(home))
	t.Cleanup(srv.Close)
	return srv.URL
}

func start(t *testing.T, base string, req *StartRequest) []*ProcessEvent {
	t.Helper()
	c := connect.NewClient[StartRequest, StreamResponse](http.DefaultClient, base+"/process.Process/Start", connect.WithCodec(jsonCodec{}))
	s, err := c.CallServerStream(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	var evs []*ProcessEvent
	for s.Receive() {
		evs = append(evs, s.Msg().Event)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return evs
}

func output(evs []*ProcessEvent) (stdout, stderr, pty string) {
	for _, ev := range evs {
		if ev.Data != nil {
			stdout += string(ev.Data.Stdout)
			stderr += string(ev.Data.Stderr)
			pty += string(ev.Data.PTY)
		}
	}
	return
}

func TestStartStreamsStartDataEnd(t *testing.T) {
	base := serve(t)
	evs := start(t, base, &StartRequest{Process: &ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; pwd; echo $HOME; exit 7"}, Envs: map[string]string{"X": "1"}}})
	if evs[0].Start == nil || evs[0].Start.Pid == 0 {
		t.Fatalf("first event %+v, want start with a pid (the SDK requires it first)", evs[0])
	}
	end := evs[len(evs)-1].End
	if end == nil || end.ExitCode != 7 || !end.Exited {
		t.Fatalf("last event %+v, want end with exit code 7", evs[len(evs)-1])
	}
	stdout, stderr, _ := output(evs)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if lines[0] != "out" || stderr != "err\n" || lines[1] != lines[2] {
		t.Errorf("stdout %q stderr %q: want out, the home as cwd and $HOME", stdout, stderr)
	}
}

func TestStartErrors(t *testing.T) {
	base := serve(t)
	c := connect.NewClient[StartRequest, StreamResponse](http.DefaultClient, base+"/process.Process/Start", connect.WithCodec(jsonCodec{}))
	for name, req := range map[string]*StartRequest{
		"no command":      {Process: &ProcessConfig{}},
		"missing program": {Process: &ProcessConfig{Cmd: "/no/such/program"}},
		"bad cwd":         {Process: &ProcessConfig{Cmd: "/bin/true", Cwd: ptr("/no/such/dir")}},
	} {
		s, err := c.CallServerStream(context.Background(), connect.NewRequest(req))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestPTYIsATerminalOfTheRequestedSize(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx")
	}
	base := serve(t)
	evs := start(t, base, &StartRequest{Process: &ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "tty; stty size"}}, PTY: &PTY{Size: &PTYSize{Cols: 91, Rows: 33}}})
	_, _, pty := output(evs)
	if !strings.Contains(pty, "/dev/pts/") || !strings.Contains(pty, "33 91") {
		t.Errorf("pty output %q: want a /dev/pts terminal sized 33x91", pty)
	}
}

func unary[Req, Res any](t *testing.T, base, proc string, req *Req) (*Res, error) {
	t.Helper()
	c := connect.NewClient[Req, Res](http.DefaultClient, base+"/"+proc, connect.WithCodec(jsonCodec{}))
	res, err := c.CallUnary(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func TestFilesystemCodes(t *testing.T) {
	base := serve(t)
	dir := t.TempDir()
	if _, err := unary[PathRequest, EntryResponse](t, base, "filesystem.Filesystem/MakeDir", &PathRequest{Path: dir + "/a/b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := unary[PathRequest, EntryResponse](t, base, "filesystem.Filesystem/MakeDir", &PathRequest{Path: dir + "/a/b"}); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("second MakeDir: %v, want already_exists (the SDK's makeDir returns false)", err)
	}
	os.WriteFile(dir+"/a/b/f", []byte("12345"), 0o644)
	ls, err := unary[ListDirRequest, ListDirResponse](t, base, "filesystem.Filesystem/ListDir", &ListDirRequest{Path: dir, Depth: 3})
	if err != nil || len(ls.Entries) != 3 {
		t.Fatalf("ListDir depth 3: %v %+v, want a, a/b, a/b/f", err, ls)
	}
	st, err := unary[PathRequest, EntryResponse](t, base, "filesystem.Filesystem/Stat", &PathRequest{Path: dir + "/a/b/f"})
	if err != nil || st.Entry.Type != FileTypeFile || st.Entry.Size != 5 || st.Entry.Permissions != "-rw-r--r--" {
		t.Errorf("Stat: %v %+v", err, st)
	}
	// int64 size travels as a string, as proto3 JSON has it.
	b, _ := json.Marshal(st.Entry)
	if !bytes.Contains(b, []byte(`"size":"5"`)) {
		t.Errorf("entry JSON %s: size is not a string", b)
	}
	if _, err := unary[PathRequest, EntryResponse](t, base, "filesystem.Filesystem/Stat", &PathRequest{Path: dir + "/nope"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat of a missing file: %v, want not_found", err)
	}
	if _, err := unary[MoveRequest, EntryResponse](t, base, "filesystem.Filesystem/Move", &MoveRequest{Source: dir + "/a/b/f", Destination: dir + "/c/g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/c/g"); err != nil {
		t.Errorf("Move: %v", err)
	}
	if _, err := unary[PathRequest, Empty](t, base, "filesystem.Filesystem/Remove", &PathRequest{Path: dir + "/a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := unary[PathRequest, Empty](t, base, "filesystem.Filesystem/Remove", &PathRequest{Path: dir + "/a"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("second Remove: %v, want not_found", err)
	}
}

func TestWatcherCalls(t *testing.T) {
	base := serve(t)
	dir := t.TempDir()
	w, err := unary[WatchDirRequest, CreateWatcherResponse](t, base, "filesystem.Filesystem/CreateWatcher", &WatchDirRequest{Path: dir, Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(dir+"/sub", 0o755)
	// The new directory is watched once its create event was read; poll
	// for that event before writing inside it.
	var seen []FilesystemEvent
	poll := func(want string) {
		t.Helper()
		for range 1000 {
			evs, err := unary[WatcherRequest, GetWatcherEventsResponse](t, base, "filesystem.Filesystem/GetWatcherEvents", &WatcherRequest{WatcherID: w.WatcherID})
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, evs.Events...)
			for _, e := range seen {
				if e.Name == want {
					return
				}
			}
		}
		t.Fatalf("no event for %s among %+v", want, seen)
	}
	poll("sub")
	os.WriteFile(dir+"/sub/f", []byte("x"), 0o644)
	poll(filepath.Join("sub", "f"))
	if _, err := unary[WatcherRequest, Empty](t, base, "filesystem.Filesystem/RemoveWatcher", &WatcherRequest{WatcherID: w.WatcherID}); err != nil {
		t.Fatal(err)
	}
	if _, err := unary[WatcherRequest, GetWatcherEventsResponse](t, base, "filesystem.Filesystem/GetWatcherEvents", &WatcherRequest{WatcherID: w.WatcherID}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("events of a removed watcher: %v, want not_found", err)
	}
}

func TestFilesUploadAndDownload(t *testing.T) {
	base := serve(t)
	dir := t.TempDir()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range []string{dir + "/x/one", dir + "/y/two"} {
		fw, _ := mw.CreateFormFile("file", p) // the SDK names the part by the whole path
		fw.Write([]byte("data of " + filepath.Base(p)))
	}
	mw.Close()
	resp, err := http.Post(base+"/files", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	var out []uploaded
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(out) != 2 || out[0].Path != dir+"/x/one" {
		t.Fatalf("multipart upload: %d %+v", resp.StatusCode, out)
	}
	if b, _ := os.ReadFile(dir + "/y/two"); string(b) != "data of two" {
		t.Errorf("uploaded two = %q", b)
	}
	resp, _ = http.Post(base+"/files?path="+dir+"/raw", "application/octet-stream", strings.NewReader("raw body"))
	resp.Body.Close()
	resp, err = http.Get(base + "/files?path=" + dir + "/raw")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "raw body" {
		t.Errorf("download = %q", b)
	}
	resp, _ = http.Get(base + "/files?path=" + dir + "/missing")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !bytes.Contains(b, []byte(`"message"`)) {
		t.Errorf("missing file: %d %s, want 404 with a JSON message", resp.StatusCode, b)
	}
	resp, _ = http.Get(base + "/files?path=" + dir)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("download of a directory: %d, want 400", resp.StatusCode)
	}
}

// TestLeavingStreamUnblocksThePublisher: a stream that stops reading holds
// the process's output back (as a pipe's reader does), but once it goes
// away the output must flow to the others again: a publish blocked on it
// moves on when it unsubscribes.
func TestLeavingStreamUnblocksThePublisher(t *testing.T) {
	p := &process{subs: map[*subscriber]struct{}{}}
	reader, idle := p.subscribe(), p.subscribe()
	go func() {
		for range reader.ch {
		}
	}()
	published := make(chan struct{})
	go func() {
		for range cap(idle.ch) + 1 { // one more than idle's buffer holds
			p.publish(&ProcessEvent{Data: &DataEvent{Stdout: []byte("x")}}, false)
		}
		close(published)
	}()
	for !blockedIn("(*process).publish(") {
		runtime.Gosched()
	}
	p.unsubscribe(idle) // the idle stream's client went away
	select {
	case <-published:
	case <-time.After(time.Minute): // not a speed bound: a publish that never returns
		t.Fatal("the publish blocked on a stream that had left never returned: the process's output is stalled for every stream")
	}
}

// blockedIn reports whether a goroutine in fn is blocked (on a channel or
// a select).
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && (strings.Contains(g, "[chan send") || strings.Contains(g, "[select")) {
			return true
		}
	}
	return false
}

func TestUploadMetadata(t *testing.T) {
	base := serve(t)
	dir := t.TempDir()
	if err := unix.Setxattr(dir, "user.e2b.probe", []byte("x"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", dir, err)
	}
	req, _ := http.NewRequest("POST", base+"/files?path="+dir+"/m.txt", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-Owner-Team", "data")
	req.Header.Set("x-metadata-stage", "raw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out []uploaded
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	want := map[string]string{"owner-team": "data", "stage": "raw"}
	if len(out) != 1 || fmt.Sprint(out[0].Metadata) != fmt.Sprint(want) {
		t.Fatalf("upload answered %+v, want metadata %v", out, want)
	}
	st, err := unary[PathRequest, EntryResponse](t, base, "filesystem.Filesystem/Stat", &PathRequest{Path: dir + "/m.txt"})
	if err != nil || fmt.Sprint(st.Entry.Metadata) != fmt.Sprint(want) {
		t.Errorf("Stat: %v %+v, want metadata %v", err, st, want)
	}
	// Kept as the file's own attributes.
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(dir+"/m.txt", "user.e2b.stage", buf); err != nil || string(buf[:n]) != "raw" {
		t.Errorf("user.e2b.stage = %q %v", buf[:n], err)
	}
}
