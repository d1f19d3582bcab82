package handoff

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

// The client reads the daemon's answer without net/http: a refusal comes
// back as the daemon's api.Error whether net/http framed its body with a
// Content-Length (a short one) or in chunks (a long one, flushed early).
func TestDialReadsARefusalAsNetHTTPFramesIt(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := "no room: " + r.URL.Query().Get("n")
		if r.Header.Get("X-Long") != "" {
			msg = strings.Repeat("x", 10000)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(api.Error{Code: "unavailable", Message: msg})
		if r.Header.Get("X-Long") != "" {
			w.(http.Flusher).Flush()
		}
	})}
	go srv.Serve(l)
	defer srv.Close()

	_, err = Dial(socket, Request{Args: []string{"true"}}, [3]*os.File{os.Stdin, os.Stdout, os.Stderr})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != "unavailable" || !strings.HasPrefix(ae.Message, "no room") {
		t.Errorf("short refusal: got %v, want the daemon's api.Error", err)
	}
	// The long body, chunked: read through a raw request with the header.
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("POST /v1/run HTTP/1.1\r\nHost: tine\r\nX-Long: 1\r\nContent-Length: 0\r\n\r\n"))
	br := newReader(c)
	status, body, err := readAnswer(br)
	if err != nil || !strings.HasPrefix(status, "503 ") {
		t.Fatalf("long refusal: status %q, %v", status, err)
	}
	var e api.Error
	if err := json.NewDecoder(body).Decode(&e); err != nil || len(e.Message) != 10000 {
		t.Errorf("long refusal's body: %d bytes of message, %v", len(e.Message), err)
	}
}

func TestReadAnswerRefusesWhatIsNoHTTP(t *testing.T) {
	for _, in := range []string{"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1\r\n\r\n", ""} {
		if _, _, err := readAnswer(newReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
	status, _, err := readAnswer(newReader(strings.NewReader("HTTP/1.1 101 Switching Protocols\r\nUpgrade: tine-run\r\n\r\n")))
	if err != nil || status != "101 Switching Protocols" {
		t.Errorf("101: %q, %v", status, err)
	}
}

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// TestRequestJSONCoversEveryField: with every field of a Request (and of
// the types it holds) set, appendJSON still writes what encoding/json does,
// so a field added to Request, or to api.Limits, api.Bind or sandbox.User,
// without its line in appendJSON fails here.
func TestRequestJSONCoversEveryField(t *testing.T) {
	var r Request
	fill(t, reflect.ValueOf(&r).Elem())
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.appendJSON(nil); string(got) != string(want) {
		t.Fatalf("appendJSON\n got %s\nwant %s", got, want)
	}
}

// fill sets every field of v to a value that is not its zero value.
func fill(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint32, reflect.Uint64, reflect.Uint:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0))
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	default:
		t.Fatalf("fill: a field of kind %s; teach fill (and appendJSON) about it", v.Kind())
	}
}
