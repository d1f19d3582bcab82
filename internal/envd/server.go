// Package envd is tine's own implementation of E2B's in-sandbox agent,
// envd: the Connect-RPC process and filesystem services and the plain
// HTTP routes (/files, /health, /envs, /init, /metrics) the E2B SDKs
// speak, JSON-encoded as they send it. It runs inside the sandbox as
// `tine envd` (ADR 0017), serving on a unix socket that tine's daemon
// reaches through the sandbox's root; the daemon checks the SDK's access
// token in front of it, so envd itself trusts every request.
package envd

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
)

// Version is the envd version tine reports to the SDKs, which gate
// features on it: 0.6.4 has everything this package implements (recursive
// watch, stdin on request, the server's default user, CloseStdin,
// octet-stream upload, file metadata, entries in watch events, watches on
// network mounts, of which a sandbox has none) and nothing it does not.
const Version = "0.6.4"

// Socket is where envd listens inside the sandbox (/run is the sandbox's
// own tmpfs).
const Socket = "/run/tine-envd.sock"

// ReadyLine is what `tine envd --ready` prints once its socket accepts
// connections.
const ReadyLine = "envd ready"

// jsonCodec is proto3 JSON over this package's plain structs: the SDKs
// use the JSON encoding only, so no generated protobuf code is needed.
type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// Handler serves envd's API; home is the commands' default working
// directory and HOME ("" for envd's own).
func Handler(home string) http.Handler {
	env := newEnvironment(home)
	procs := &processes{env: env, byPid: map[uint32]*process{}}
	files := &filesystem{env: env, watchers: map[string]*watcher{}}
	opt := connect.WithCodec(jsonCodec{})
	mux := http.NewServeMux()
	unary := func(name string, h http.Handler) { mux.Handle("/"+name, h) }
	unary("process.Process/Start", connect.NewServerStreamHandler("/process.Process/Start", procs.Start, opt))
	unary("process.Process/Connect", connect.NewServerStreamHandler("/process.Process/Connect", procs.Connect, opt))
	unary("process.Process/List", connect.NewUnaryHandler("/process.Process/List", procs.List, opt))
	unary("process.Process/SendInput", connect.NewUnaryHandler("/process.Process/SendInput", procs.SendInput, opt))
	unary("process.Process/SendSignal", connect.NewUnaryHandler("/process.Process/SendSignal", procs.SendSignal, opt))
	unary("process.Process/CloseStdin", connect.NewUnaryHandler("/process.Process/CloseStdin", procs.CloseStdin, opt))
	unary("process.Process/Update", connect.NewUnaryHandler("/process.Process/Update", procs.Update, opt))
	unary("filesystem.Filesystem/Stat", connect.NewUnaryHandler("/filesystem.Filesystem/Stat", files.Stat, opt))
	unary("filesystem.Filesystem/MakeDir", connect.NewUnaryHandler("/filesystem.Filesystem/MakeDir", files.MakeDir, opt))
	unary("filesystem.Filesystem/Move", connect.NewUnaryHandler("/filesystem.Filesystem/Move", files.Move, opt))
	unary("filesystem.Filesystem/ListDir", connect.NewUnaryHandler("/filesystem.Filesystem/ListDir", files.ListDir, opt))
	unary("filesystem.Filesystem/Remove", connect.NewUnaryHandler("/filesystem.Filesystem/Remove", files.Remove, opt))
	unary("filesystem.Filesystem/WatchDir", connect.NewServerStreamHandler("/filesystem.Filesystem/WatchDir", files.WatchDir, opt))
	unary("filesystem.Filesystem/CreateWatcher", connect.NewUnaryHandler("/filesystem.Filesystem/CreateWatcher", files.CreateWatcher, opt))
	unary("filesystem.Filesystem/GetWatcherEvents", connect.NewUnaryHandler("/filesystem.Filesystem/GetWatcherEvents", files.GetWatcherEvents, opt))
	unary("filesystem.Filesystem/RemoveWatcher", connect.NewUnaryHandler("/filesystem.Filesystem/RemoveWatcher", files.RemoveWatcher, opt))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /envs", env.serveEnvs)
	mux.HandleFunc("POST /init", env.serveInit)
	mux.HandleFunc("GET /metrics", serveMetrics)
	mux.HandleFunc("GET /files", env.download)
	mux.HandleFunc("POST /files", env.upload)
	fwd := forwarder()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(PortHeader) != "" {
			fwd.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Listen makes envd's socket at path (replacing a stale one).
func Listen(path string) (net.Listener, error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// Serve answers on ln until it fails.
func Serve(ln net.Listener, home string) error {
	srv := &http.Server{Handler: Handler(home), ReadHeaderTimeout: 30 * time.Second}
	return srv.Serve(ln)
}
