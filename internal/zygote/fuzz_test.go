package zygote

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/kernel/cgroup"
)

// lineZero is an error that points at no line: the key or value it names
// was not found in the file.
var lineZero = regexp.MustCompile(`\(line 0\)|line 0:`)

// FuzzParseSpec: a function spec file (TOML) is refused with an
// ErrInvalidSpec error that names a real line when it names one, or gives
// a spec that Validate keeps as it is and that survives the trip through
// the API's JSON.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		// docs/functions.md and the tests
		"name = \"resize\"\nentry = \"handler.py\"\nhandler = \"main\"\npreload = [\"json\", \"PIL.Image\"]\nconcurrency = 8\ncold_after = \"90s\"\n\n[limits]\nmemory = \"128m\"\ncpus = 0.5\npids = 32\ntimeout = \"2.5\"\n",
		"name = \"hello\"\nruntime = \"node\"\nentry = \"/srv/fn/index.mjs\"\npreload = [\"lodash\", \"@scope/pkg/sub\"]\n",
		"name = \"wc\"\nruntime = \"exec\"\ncommand = [\"/usr/bin/wc\", \"-c\"]\n[limits]\nmemory = \"64m\"\ntimeout = \"1m30s\"\n",
		"name = \"a\"\nentry = \"h.py\"\n\n[limits]\nmemroy = \"1g\"\n",
		"name = \"a\"\nentry = \"h.py\"\ncolour = 1\n",
		"name = \"a\"\nentry = \"h.py\"\n[limits]\nmemory = \"lots\"\n",
		"name = \"a\"\nentry = \"h.py\"\ncold_after = \"-1s\"\n",
		"name = \"a\"\nentry = \n",
		"name = \"a\"\nentry = \"h.py\"\nconcurrency = 100000\n",
		"[[limits]]\n", "name = [1, 2]\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := ParseSpec([]byte(src), "/srv/fn")
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v is not ErrInvalidSpec", err)
			}
			if lineZero.MatchString(err.Error()) {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		if !validLimits(s) {
			t.Fatalf("accepted limits out of range: %+v", s.Limits)
		}
		again := *s
		if err := Validate(&again); err != nil || !reflect.DeepEqual(&again, s) {
			t.Fatalf("Validate does not keep an accepted spec: %+v -> %+v, %v", s, again, err)
		}
		// JSON leaves out empty lists: an empty command or preload comes
		// back as none, which means the same.
		if len(s.Command) == 0 {
			s.Command = nil
		}
		if len(s.Preload) == 0 {
			s.Preload = nil
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("an accepted spec does not encode as the API's JSON: %v", err)
		}
		var back api.FunctionSpec
		if err := json.Unmarshal(b, &back); err != nil || Validate(&back) != nil || !reflect.DeepEqual(&back, s) {
			t.Fatalf("the spec changes through JSON: %+v -> %s -> %+v", s, b, back)
		}
	})
}

// FuzzValidate: a function spec over the API (PUT /v1/functions/{name})
// is refused with ErrInvalidSpec or accepted with limits a daemon can
// apply, and Validate is idempotent.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"name": "resize", "runtime": "python", "entry": "/srv/fn/handler.py", "handler": "main", "preload": ["json"], "concurrency": 8, "cold_after_seconds": 90, "limits": {"memory_bytes": 134217728, "cpus": 0.5, "pids": 32, "timeout_seconds": 2.5}}`,
		`{"name": "hello", "runtime": "node", "entry": "/srv/fn/index.mjs"}`,
		`{"name": "wc", "runtime": "exec", "command": ["/usr/bin/wc", "-c"]}`,
		`{"name": "x", "entry": "/a.py", "limits": {"memory_bytes": 1}}`,
		`{"name": "", "runtime": "deno"}`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var s api.FunctionSpec
		if json.Unmarshal([]byte(body), &s) != nil {
			return
		}
		if err := Validate(&s); err != nil {
			if !errors.Is(err, ErrInvalidSpec) || strings.TrimPrefix(err.Error(), ErrInvalidSpec.Error()+": ") == "" {
				t.Fatalf("error %q is not a specific ErrInvalidSpec", err)
			}
			return
		}
		if v, ok := withNUL(&s); ok {
			t.Fatalf("accepted %q, which holds a NUL byte", v)
		}
		if !validLimits(&s) {
			t.Fatalf("accepted limits out of range: %+v, cold_after %v", s.Limits, s.ColdAfterSeconds)
		}
		again := s
		if err := Validate(&again); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("Validate does not keep an accepted spec: %+v -> %+v, %v", s, again, err)
		}
	})
}

// validLimits says whether an accepted spec's numbers are ones the daemon
// can apply: finite, in range, and convertible to durations and cgroup
// values without overflow.
func validLimits(s *api.FunctionSpec) bool {
	l := s.Limits
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	return s.Concurrency >= 1 && s.Concurrency <= MaxConcurrency &&
		l.MemoryBytes >= 4<<20 && l.Pids >= 1 &&
		finite(l.CPUs) && l.CPUs >= 0 && l.CPUs <= cgroup.MaxCPUs &&
		l.TimeoutSeconds > 0 && l.TimeoutSeconds <= 24*3600 &&
		finite(s.ColdAfterSeconds) && s.ColdAfterSeconds > 0
}
