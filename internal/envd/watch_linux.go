package envd

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// watcher follows a directory (and with recursive, the directories under
// it, including ones made later) through inotify.
type watcher struct {
	root         string
	recursive    bool
	includeEntry bool
	fd           *os.File // non-blocking under Go's poller, so close ends read
	ifd          int

	mu     sync.Mutex
	dirs   map[int32]string // watch descriptor → directory
	queued []FilesystemEvent
	events chan FilesystemEvent // nil for a polled watcher (CreateWatcher)
	closed bool
}

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_ONLYDIR

func newWatcher(root string, recursive, includeEntry, streamed bool) (*watcher, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fsError("watch", root, err)
	}
	if !st.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("watch %s: not a directory", root))
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("inotify: %w", err))
	}
	w := &watcher{root: root, recursive: recursive, includeEntry: includeEntry, fd: os.NewFile(uintptr(fd), "inotify"), ifd: fd, dirs: map[int32]string{}}
	if streamed {
		w.events = make(chan FilesystemEvent, 256)
	}
	if err := w.add(root); err != nil {
		w.fd.Close()
		return nil, fsError("watch", root, err)
	}
	go w.read()
	return w, nil
}

// add watches dir and, for a recursive watcher, every directory below.
func (w *watcher) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.ifd, dir, watchMask)
	if err != nil {
		return &fs.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.mu.Unlock()
	if !w.recursive {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone or unreadable: nothing more to follow
	}
	for _, e := range ents {
		if e.IsDir() {
			w.add(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func (w *watcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.fd.Read(buf)
		if err != nil {
			w.finish()
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafePointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			name := cString(nameBytes)
			w.mu.Lock()
			dir, ok := w.dirs[raw.Wd]
			w.mu.Unlock()
			if !ok || name == "" {
				continue
			}
			full := filepath.Join(dir, name)
			typ := eventType(raw.Mask)
			if typ == "" {
				continue
			}
			if w.recursive && raw.Mask&unix.IN_ISDIR != 0 && raw.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				w.add(full)
			}
			rel, _ := filepath.Rel(w.root, full)
			ev := FilesystemEvent{Name: rel, Type: typ}
			if w.includeEntry && typ != EventRemove && typ != EventRename {
				ev.Entry, _ = entryOf(full)
			}
			w.deliver(ev)
		}
	}
}

func eventType(mask uint32) string {
	switch {
	case mask&unix.IN_CREATE != 0, mask&unix.IN_MOVED_TO != 0:
		return EventCreate
	case mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
		return EventWrite
	case mask&unix.IN_DELETE != 0:
		return EventRemove
	case mask&unix.IN_MOVED_FROM != 0:
		return EventRename
	case mask&unix.IN_ATTRIB != 0:
		return EventChmod
	}
	return ""
}

func (w *watcher) deliver(ev FilesystemEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.events != nil {
		select {
		case w.events <- ev:
		default: // a client that does not read loses events, not envd's memory
		}
		return
	}
	if len(w.queued) < 10000 {
		w.queued = append(w.queued, ev)
	}
}

func (w *watcher) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		if w.events != nil {
			close(w.events)
		}
	}
}

func (w *watcher) close() {
	w.fd.Close() // ends read, which calls finish
	w.finish()
}

func (f *filesystem) WatchDir(ctx context.Context, req *connect.Request[WatchDirRequest], s *connect.ServerStream[WatchDirResponse]) error {
	w, err := newWatcher(f.env.resolve(req.Msg.Path), req.Msg.Recursive, req.Msg.IncludeEntry, true)
	if err != nil {
		return err
	}
	defer w.close()
	if err := s.Send(&WatchDirResponse{Start: &Empty{}}); err != nil {
		return err
	}
	tick := time.NewTicker(keepaliveInterval(req.Header()))
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return nil
			}
			if err := s.Send(&WatchDirResponse{Filesystem: &ev}); err != nil {
				return err
			}
		case <-tick.C:
			if err := s.Send(&WatchDirResponse{Keepalive: &Empty{}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (f *filesystem) CreateWatcher(_ context.Context, req *connect.Request[WatchDirRequest]) (*connect.Response[CreateWatcherResponse], error) {
	w, err := newWatcher(f.env.resolve(req.Msg.Path), req.Msg.Recursive, req.Msg.IncludeEntry, false)
	if err != nil {
		return nil, err
	}
	id := rand.Text()
	f.mu.Lock()
	f.watchers[id] = w
	f.mu.Unlock()
	return connect.NewResponse(&CreateWatcherResponse{WatcherID: id}), nil
}

func (f *filesystem) watcher(id string) (*watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return w, nil
}

func (f *filesystem) GetWatcherEvents(_ context.Context, req *connect.Request[WatcherRequest]) (*connect.Response[GetWatcherEventsResponse], error) {
	w, err := f.watcher(req.Msg.WatcherID)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs := w.queued
	w.queued = nil
	w.mu.Unlock()
	return connect.NewResponse(&GetWatcherEventsResponse{Events: evs}), nil
}

func (f *filesystem) RemoveWatcher(_ context.Context, req *connect.Request[WatcherRequest]) (*connect.Response[Empty], error) {
	w, err := f.watcher(req.Msg.WatcherID)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	delete(f.watchers, req.Msg.WatcherID)
	f.mu.Unlock()
	w.close()
	return connect.NewResponse(&Empty{}), nil
}
