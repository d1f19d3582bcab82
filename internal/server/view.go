package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tine-run/tine/api"
)

// The desktop viewer: GET /v1/desktops/{id}/view serves a page that plays
// the desktop's screencast on a canvas and sends the viewer's input over
// the ACI. A browser cannot put the daemon's bearer token on a WebSocket,
// and a URL is no place for it, so the page and its ACI session take a
// view token instead: short-lived, for one desktop, signed with a key the
// daemon makes at start (it dies with the daemon), and view-only when
// asked, which the guest enforces (no input).

//go:embed view.html
var viewPage string

var viewTemplate = template.Must(template.New("view").Parse(viewPage))

const (
	defaultViewTTL = 10 * time.Minute
	maxViewTTL     = 24 * time.Hour
)

// viewKeys holds the daemon's signing key, made on first use.
type viewKeys struct {
	once sync.Once
	key  []byte
}

func (v *viewKeys) get() []byte {
	v.once.Do(func() {
		v.key = make([]byte, 32)
		rand.Read(v.key)
	})
	return v.key
}

// viewClaims is what a view token grants.
type viewClaims struct {
	desktop  string
	expires  time.Time
	viewOnly bool
}

func (s *Server) signView(c viewClaims) string {
	ro := "0"
	if c.viewOnly {
		ro = "1"
	}
	payload := c.desktop + "|" + strconv.FormatInt(c.expires.Unix(), 10) + "|" + ro
	mac := hmac.New(sha256.New, s.view.get())
	mac.Write([]byte(payload))
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(mac.Sum(nil))
}

// viewToken checks r's ?token= for the desktop in its path; ok is false
// without a valid one (none, another desktop's, expired, forged).
func (s *Server) viewToken(r *http.Request) (viewClaims, bool) {
	tok := r.URL.Query().Get("token")
	p, sig, found := strings.Cut(tok, ".")
	if !found {
		return viewClaims{}, false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	got, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return viewClaims{}, false
	}
	mac := hmac.New(sha256.New, s.view.get())
	mac.Write(payload)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return viewClaims{}, false
	}
	f := strings.Split(string(payload), "|")
	if len(f) != 3 {
		return viewClaims{}, false
	}
	unix, err := strconv.ParseInt(f[1], 10, 64)
	c := viewClaims{desktop: f[0], expires: time.Unix(unix, 0), viewOnly: f[2] == "1"}
	if err != nil || time.Now().After(c.expires) || viewPath(r.URL.Path) != c.desktop {
		return viewClaims{}, false
	}
	return c, true
}

// viewPath is the desktop id of a path a view token may open (the page
// and its ACI WebSocket), "" for any other.
func viewPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/desktops/")
	if !ok {
		return ""
	}
	id, leaf, ok := strings.Cut(rest, "/")
	if !ok || (leaf != "view" && leaf != "aci") || id == "" {
		return ""
	}
	return id
}

// createView is POST /v1/desktops/{id}/view: a view token and the page's
// path with it.
func (s *Server) createView(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookupDesktop(r)
	if err != nil {
		return err
	}
	var spec api.ViewSpec
	if err := decodeJSON(w, r, 1<<10, &spec); err != nil {
		return err
	}
	ttl := time.Duration(spec.TTLSeconds) * time.Second
	switch {
	case spec.TTLSeconds == 0:
		ttl = defaultViewTTL
	case spec.TTLSeconds < 0 || ttl > maxViewTTL:
		return fmt.Errorf("%w: ttl_seconds %d: want 1 to %d (0: %d)", ErrInvalidArgument, spec.TTLSeconds, int(maxViewTTL.Seconds()), int(defaultViewTTL.Seconds()))
	}
	c := viewClaims{desktop: b.id, expires: time.Now().Add(ttl).Truncate(time.Second), viewOnly: spec.ViewOnly}
	tok := s.signView(c)
	writeJSON(w, http.StatusCreated, api.View{Path: desktopPath(b.id) + "/view?token=" + tok, Token: tok, ExpiresAt: c.expires.UTC(), ViewOnly: c.viewOnly})
	return nil
}

// viewDesktop is GET /v1/desktops/{id}/view?token=…: the viewer page.
func (s *Server) viewDesktop(w http.ResponseWriter, r *http.Request) error {
	c, ok := s.viewToken(r)
	if !ok {
		return fmt.Errorf("%w: the viewer needs a valid view token for this desktop in ?token= (tine desktop view ID prints a URL with one)", ErrUnauthorized)
	}
	if _, err := s.lookupDesktop(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src blob:")
	return viewTemplate.Execute(w, map[string]any{"Desktop": c.desktop, "Token": r.URL.Query().Get("token"), "ViewOnly": c.viewOnly})
}

func desktopPath(id string) string { return "/v1/desktops/" + id }
