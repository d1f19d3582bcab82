package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The plain HTTP routes of envd: /health, /envs, /init, /metrics and file
// upload and download.

// httpError is the JSON error body envd's HTTP routes answer with.
func httpError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fileStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// initRequest is what an orchestrator's POST /init carries; envd keeps the
// variables and the working directory (the access token is checked by
// tine's daemon, in front of envd).
type initRequest struct {
	EnvVars        map[string]string `json:"envVars"`
	DefaultWorkdir string            `json:"defaultWorkdir"`
}

func (e *environment) serveInit(w http.ResponseWriter, r *http.Request) {
	var req initRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			httpError(w, http.StatusBadRequest, "init body: %v", err)
			return
		}
	}
	e.mu.Lock()
	for k, v := range req.EnvVars {
		e.vars[k] = v
	}
	if req.DefaultWorkdir != "" {
		e.workDir = req.DefaultWorkdir
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (e *environment) serveEnvs(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	vars := make(map[string]string, len(e.vars))
	for k, v := range e.vars {
		vars[k] = v
	}
	e.mu.Unlock()
	writeJSON(w, vars)
}

// serveMetrics answers what only the sandbox can see: its root's disk use.
func serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		httpError(w, http.StatusInternalServerError, "statfs /: %v", err)
		return
	}
	total := int64(st.Blocks) * st.Bsize
	writeJSON(w, map[string]int64{"disk_total": total, "disk_used": total - int64(st.Bfree)*st.Bsize})
}

func (e *environment) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		httpError(w, http.StatusBadRequest, "the path query parameter is required")
		return
	}
	p = e.resolve(p)
	f, err := os.Open(p)
	if err != nil {
		httpError(w, fileStatus(err), "open %s: %v", p, errCause(err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		httpError(w, fileStatus(err), "stat %s: %v", p, errCause(err))
		return
	}
	if st.IsDir() {
		httpError(w, http.StatusBadRequest, "%s is a directory", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		io.Copy(gz, f)
		gz.Close()
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	io.Copy(w, f)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(strings.SplitN(part, ";", 2)[0]) == "gzip" {
			return true
		}
	}
	return false
}

type uploaded struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload writes files: a raw body to ?path=, or each multipart "file" part
// to ?path= or, without it, to the part's file name. Parents are created.
func (e *environment) upload(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query().Get("path")
	md := metadataOf(r.Header)
	var out []uploaded
	write := func(target string, body io.Reader) bool {
		if target == "" {
			httpError(w, http.StatusBadRequest, "no target path: give the path query parameter or a file name")
			return false
		}
		p := e.resolve(target)
		if err := writeFile(p, body); err != nil {
			httpError(w, fileStatus(err), "write %s: %v", p, errCause(err))
			return false
		}
		if err := setMetadata(p, md); err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return false
		}
		out = append(out, uploaded{Path: p, Name: filepath.Base(p), Type: "file", Metadata: readMetadata(p)})
		return true
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "gzip body: %v", err)
			return
		}
		body = gz
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				httpError(w, http.StatusBadRequest, "multipart body: %v", err)
				return
			}
			if part.FormName() != "file" {
				continue
			}
			target := query
			if target == "" {
				// The SDK names the part by the whole target path;
				// Part.FileName would keep only its base name.
				_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				target = disp["filename"]
			}
			if !write(target, part) {
				return
			}
		}
	} else if !write(query, body) {
		return
	}
	writeJSON(w, out)
}

func writeFile(p string, body io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func errCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// PortHeader carries the sandbox port a request is for when it is not
// envd's own: tine's daemon sets it (and drops any the client sent), and
// envd forwards the request to that port on the sandbox's loopback, which
// only the sandbox's network namespace reaches.
const PortHeader = "Tine-Sandbox-Port"

func forwarder() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			port := pr.In.Header.Get(PortHeader)
			pr.SetURL(&url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", port)})
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(PortHeader)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			httpError(w, http.StatusBadGateway, "nothing answers on port %s in the sandbox: %v", r.Header.Get(PortHeader), err)
		},
	}
}
