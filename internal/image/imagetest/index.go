package imagetest

import (
	"crypto/sha256"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Index is a PEP 503 "simple" package index of the wheels in a directory,
// served over HTTP on a listener the test gives (in a test network's
// namespace): /simple/NAME/ lists NAME's files, /files/FILE serves one.
type Index struct {
	// Requests counts the requests it answered.
	Requests atomic.Int64
	dir      string
}

// ServeIndex serves the wheels in dir on ln until the test ends.
func ServeIndex(t testing.TB, ln net.Listener, dir string) *Index {
	t.Helper()
	ix := &Index{dir: dir}
	srv := &http.Server{Handler: ix}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ix
}

// normalize is PEP 503's name normalization.
func normalize(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name))
}

func (ix *Index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ix.Requests.Add(1)
	if f, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok && !strings.Contains(f, "/") {
		http.ServeFile(w, r, filepath.Join(ix.dir, f))
		return
	}
	project := strings.Trim(r.URL.Path[strings.LastIndex(strings.TrimSuffix(r.URL.Path, "/"), "/")+1:], "/")
	entries, err := os.ReadDir(ix.dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var links []string
	for _, e := range entries {
		name, _, _ := strings.Cut(e.Name(), "-")
		if normalize(name) != normalize(project) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(ix.dir, e.Name()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		links = append(links, fmt.Sprintf(`<a href="/files/%s#sha256=%x">%s</a><br>`, html.EscapeString(e.Name()), sha256.Sum256(b), html.EscapeString(e.Name())))
	}
	if len(links) == 0 {
		http.NotFound(w, r)
		return
	}
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n%s\n</body></html>\n", strings.Join(links, "\n"))
}
