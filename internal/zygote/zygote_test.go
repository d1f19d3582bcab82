package zygote

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	good := `name = "resize"
entry = "handler.py"
handler = "main"
preload = ["json", "PIL.Image"]
concurrency = 8
cold_after = "90s"

[limits]
memory = "128m"
cpus = 0.5
pids = 32
timeout = "2.5"
`
	s, err := ParseSpec([]byte(good), "/srv/fn")
	if err != nil {
		t.Fatal(err)
	}
	if s.Entry != "/srv/fn/handler.py" || s.Runtime != RuntimePython || s.Handler != "main" || s.Concurrency != 8 ||
		s.ColdAfterSeconds != 90 || s.Network != NetworkIsolated || s.Limits.MemoryBytes != 128<<20 || s.Limits.CPUs != 0.5 || s.Limits.Pids != 32 || s.Limits.TimeoutSeconds != 2.5 {
		t.Errorf("parsed %+v", s)
	}

	withIndex, err := ParseSpec([]byte("name = \"a\"\nentry = \"h.py\"\nimage = \"py\"\nrequirements = \"r.txt\"\nindex_url = \"https://pypi.lan/simple\"\n"), "/srv/fn")
	if err != nil || withIndex.IndexURL != "https://pypi.lan/simple" || withIndex.Requirements != "/srv/fn/r.txt" || withIndex.FindLinks != "" {
		t.Errorf("requirements from an index: %+v, %v", withIndex, err)
	}

	for _, c := range []struct{ src, want string }{
		{"name = \"a\"\nentry = \"h.py\"\n\n[limits]\nmemroy = \"1g\"\n", `unknown key "limits.memroy" (line 5)`},
		{"name = \"a\"\nentry = \"h.py\"\ncolour = 1\n", `unknown key "colour" (line 3)`},
		{"name = \"a\"\nentry = \"h.py\"\n[limits]\nmemory = \"lots\"\n", `limits.memory "lots" (line 4)`},
		{"name = \"a\"\nentry = \"h.py\"\ncold_after = \"-1s\"\n", `cold_after "-1s" (line 3)`},
		{"name = \"a\"\nentry = \n", "line 2"},
		{"name = \"A b\"\nentry = \"h.py\"\n", `name "A b"`},
		{"name = \"a\"\n", "needs entry"},
		{"name = \"a\"\nentry = \"h.py\"\nruntime = \"node\"\n", ".js, .cjs or .mjs"},
		{"name = \"a\"\nentry = \"h.js\"\nruntime = \"deno\"\n", `runtime "deno"`},
		{"name = \"a\"\nruntime = \"exec\"\n", "needs command"},
		{"name = \"a\"\nentry = \"h.py\"\npreload = [\"os; rm\"]\n", `preload "os; rm"`},
		{"name = \"a\"\nentry = \"h.py\"\nconcurrency = 100000\n", "concurrency 100000"},
		{"name = \"a\"\nentry = \"h.py\"\n\nnetwork = \"host\"\n", `network "host": want "isolated"`},
		{"name = \"a\"\nentry = \"h.py\"\n\nnetwork = \"host\"\n", "(line 4)"},
		{"name = \"a\"\nentry = \"h.py\"\nimage = \"py\"\nrequirements = \"r.txt\"\n", "find_links (a directory of wheels and sdists) or index_url"},
		{"name = \"a\"\nentry = \"h.py\"\nindex_url = \"http://pypi.lan/simple\"\n", "is for requirements"},
		{"name = \"a\"\nentry = \"h.py\"\nimage = \"py\"\nrequirements = \"r.txt\"\nindex_url = \"pypi.lan/simple\"\n", "want an http:// or https:// URL"},
	} {
		_, err := ParseSpec([]byte(c.src), "/srv/fn")
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an invalid-spec error saying %q", c.src, err, c.want)
		}
	}
}
