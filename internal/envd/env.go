package envd

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// environment is what /init sets and every command inherits: extra
// variables and the default working directory.
type environment struct {
	mu      sync.Mutex
	vars    map[string]string
	workDir string
}

// newEnvironment's working directory is home when given (made if
// missing, and HOME for the commands), else $HOME, else /.
func newEnvironment(home string) *environment {
	e := &environment{vars: map[string]string{}}
	if home != "" {
		if err := os.MkdirAll(home, 0o755); err == nil {
			e.workDir = home
			e.vars["HOME"] = home
			return e
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		if st, err := os.Stat(home); err == nil && st.IsDir() {
			e.workDir = home
		}
	}
	if e.workDir == "" {
		e.workDir = "/"
	}
	return e
}

// all is envd's own environment with /init's variables over it.
func (e *environment) all() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	e.mu.Lock()
	maps.Copy(out, e.vars)
	e.mu.Unlock()
	return out
}

// commandEnv is a command's environment: all() with its own over it.
func (e *environment) commandEnv(own map[string]string) []string {
	vars := e.all()
	maps.Copy(vars, own)
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

func (e *environment) workdir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.workDir
}

// resolve makes a path the SDK gave absolute: relative paths and ~ are
// taken from the default working directory, as envd does with the user's
// home.
func (e *environment) resolve(p string) string {
	if rest, ok := strings.CutPrefix(p, "~"); ok && (rest == "" || rest[0] == '/') {
		e.mu.Lock()
		home := e.vars["HOME"]
		e.mu.Unlock()
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if home != "" {
			return filepath.Join(home, rest)
		}
		p = strings.TrimPrefix(rest, "/")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(e.workdir(), p)
	}
	return filepath.Clean(p)
}
