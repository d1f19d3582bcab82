package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/inroot"
)

// inRoot runs fn on the root filesystem of the sandbox r names, opened
// confined (internal/inroot), and counts as activity on the sandbox.
func (s *Server) inRoot(r *http.Request, fn func(root *inroot.Root) error) error {
	b, done, err := s.use(r)
	if err != nil {
		return err
	}
	defer done()
	b.snapMu.RLock()
	defer b.snapMu.RUnlock()
	root, err := inroot.Open(b.inst.Root())
	if err != nil {
		select {
		case <-b.inst.Done():
			return fmt.Errorf("%w: sandbox %s died", ErrNotRunning, b.id)
		default:
		}
		return fmt.Errorf("open the root of sandbox %s: %w", b.id, err)
	}
	defer root.Close()
	return fn(root)
}

// fileQuery is the query of a file request.
type fileQuery struct {
	path      string
	mode      uint32
	uid, gid  int
	recursive bool
}

// parseFileQuery reads the query of a file request, allowing only the
// parameters named: an unknown parameter is an error, as an unknown JSON
// field is.
func parseFileQuery(r *http.Request, defaultMode uint32, allowed ...string) (fileQuery, error) {
	q := fileQuery{mode: defaultMode}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return q, fmt.Errorf("%w: query: %v", ErrInvalidArgument, err)
	}
	bad := func(name, v, want string) error {
		return fmt.Errorf("%w: query parameter %s=%q: want %s", ErrInvalidArgument, name, v, want)
	}
	for name, vs := range vals {
		if !slices.Contains(allowed, name) {
			return q, fmt.Errorf("%w: unknown query parameter %q (this route takes %v)", ErrInvalidArgument, name, allowed)
		}
		v := vs[len(vs)-1]
		switch name {
		case "path":
			q.path = v
		case "mode":
			m, err := strconv.ParseUint(v, 8, 32)
			if err != nil || m > 0o7777 {
				return q, bad(name, v, "octal permission bits like 0644")
			}
			q.mode = uint32(m)
		case "uid", "gid":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return q, bad(name, v, "a number >= 0")
			}
			if name == "uid" {
				q.uid = n
			} else {
				q.gid = n
			}
		case "recursive":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return q, bad(name, v, "true or false")
			}
			q.recursive = b
		}
	}
	if q.path == "" {
		return q, fmt.Errorf("%w: query parameter path is missing: name a file inside the sandbox, e.g. ?path=/tmp/a.txt", ErrInvalidArgument)
	}
	return q, nil
}

func fileInfo(i inroot.Info) api.FileInfo {
	return api.FileInfo{
		Path: i.Path, Name: i.Name, Type: i.Type, Size: i.Size, Mode: i.Mode,
		ModTime: i.ModTime, UID: i.UID, GID: i.GID, Link: i.Link,
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path")
	if err != nil {
		return err
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, err := root.Read(q.path, progressBody(w, r), s.cfg.MaxFileBytes)
		return err
	})
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0o644, "path", "mode", "uid", "gid")
	if err != nil {
		return err
	}
	answer := holdDeadlines(w, r)
	body := http.MaxBytesReader(w, progressRequestBody(w, r), s.cfg.MaxFileBytes)
	return s.inRoot(r, func(root *inroot.Root) error {
		info, err := root.Write(q.path, body, q.mode, s.cfg.MaxFileBytes, q.uid, q.gid)
		answer()
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, fileInfo(info))
		return nil
	})
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path", "recursive")
	if err != nil {
		return err
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		if err := root.Remove(q.path, q.recursive); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path")
	if err != nil {
		return err
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		info, err := root.Stat(q.path)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, fileInfo(info))
		return nil
	})
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path")
	if err != nil {
		return err
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		infos, err := root.List(q.path)
		if err != nil {
			return err
		}
		list := api.FileList{Entries: make([]api.FileInfo, 0, len(infos))}
		for _, i := range infos {
			list.Entries = append(list.Entries, fileInfo(i))
		}
		writeJSON(w, http.StatusOK, list)
		return nil
	})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req api.MkdirRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	switch {
	case req.Path == "":
		return fmt.Errorf("%w: path is missing", ErrInvalidArgument)
	case req.Mode > 0o7777:
		return fmt.Errorf("%w: mode %#o: want permission bits up to 07777", ErrInvalidArgument, req.Mode)
	case req.UID < 0 || req.GID < 0:
		return fmt.Errorf("%w: uid and gid must be >= 0", ErrInvalidArgument)
	}
	if req.Mode == 0 {
		req.Mode = 0o755
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		if err := root.Mkdir(req.Path, req.Mode, req.Parents, req.UID, req.GID); err != nil {
			return err
		}
		info, err := root.Stat(req.Path)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, fileInfo(info))
		return nil
	})
}

func (s *Server) readArchive(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path")
	if err != nil {
		return err
	}
	return s.inRoot(r, func(root *inroot.Root) error {
		w.Header().Set("Content-Type", "application/x-tar")
		// An archive is capped as an upload is: past the cap the stream
		// stops. Before its first byte that is a 413; after, instrument
		// can only abort the connection, so the client sees a broken body
		// rather than a short archive it might take for whole.
		body := &cappedWriter{w: progressBody(w, r), left: s.cfg.MaxFileBytes, limit: s.cfg.MaxFileBytes}
		return root.WriteTar(q.path, body)
	})
}

// cappedWriter passes on at most left bytes; a write that would go past
// them writes nothing and fails with ErrTooLarge.
type cappedWriter struct {
	w           io.Writer
	left, limit int64
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil // would commit the answer's status: archive/tar writes empty padding
	}
	if int64(len(b)) > c.left {
		c.left = 0
		return 0, fmt.Errorf("%w: the archive is larger than %d bytes, the daemon's limit for a download; fetch less at once", ErrTooLarge, c.limit)
	}
	n, err := c.w.Write(b)
	c.left -= int64(n)
	return n, err
}

func (s *Server) writeArchive(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFileQuery(r, 0, "path", "uid", "gid")
	if err != nil {
		return err
	}
	answer := holdDeadlines(w, r)
	body := http.MaxBytesReader(w, progressRequestBody(w, r), s.cfg.MaxFileBytes)
	return s.inRoot(r, func(root *inroot.Root) error {
		err := root.ExtractTar(q.path, body, s.cfg.MaxFileBytes, q.uid, q.gid)
		answer()
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
