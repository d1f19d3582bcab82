package sandbox

import (
	"path"
	"testing"
)

// FuzzParseBind: -v HOST:GUEST[:ro|:rw] is refused with an error that
// quotes it, or gives two absolute paths that print back to the same bind.
func FuzzParseBind(f *testing.F) {
	for _, s := range []string{"/src:/dst", "/data:/mnt/data:ro", "/a:/b:rw", "/:/host:ro",
		"", "/a", "rel:/b", "/a:rel", "/a:/b:xx", "/a:/b:ro:rw", ":::", "/a::/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBind(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseBind(%q): empty error", s)
			}
			return
		}
		if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) {
			t.Fatalf("ParseBind(%q) = %+v: a relative path was accepted", s, b)
		}
		text := b.Source + ":" + b.Target
		if b.ReadOnly {
			text += ":ro"
		}
		if back, err := ParseBind(text); err != nil || back != b {
			t.Fatalf("ParseBind(%q) = %+v, but %q parses as %+v, %v", s, b, text, back, err)
		}
	})
}
