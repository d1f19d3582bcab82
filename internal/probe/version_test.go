package probe

import "testing"

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		have, min string
		want      bool
	}{
		{"3.17.1", "4.1", false},
		{"4.0", "4.1", false},
		{"4.1", "4.1", true},
		{"4.1.0", "4.1", true},
		{"4.1.1", "4.1", true},
		{"4.2", "4.1", true},
		{"10.0", "4.1", true},
		{"4.10", "4.9", true},
		{"4.1-rc1", "4.1", true},
		{" 4.1\n", "4.1", true},
		{"", "4.1", false},
		{"unknown", "0", false},
	} {
		if got := VersionAtLeast(tc.have, tc.min); got != tc.want {
			t.Errorf("VersionAtLeast(%q, %q) = %v, want %v", tc.have, tc.min, got, tc.want)
		}
	}
}

func TestParseCRIUVersion(t *testing.T) {
	for out, want := range map[string]string{
		"Version: 3.17.1\n":                   "3.17.1",
		"Version: 4.1\nGitID: v4.1-12-gabc\n": "4.1",
		"criu: command not found\n":           "",
	} {
		if got := parseCRIUVersion(out); got != want {
			t.Errorf("parseCRIUVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestCRIUError(t *testing.T) {
	// `criu check` of criu 3.17.1 on kernel 6.18.
	out := `Error (criu/util.c:642): exited, status=1
Error (criu/util.c:642): exited, status=1
Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.
Error (criu/crtools.c:260): Could not initialize kernel features detection.
`
	if got, want := criuError(out), "vdso: Unexpected rt vDSO area bounds"; got != want {
		t.Errorf("criuError = %q, want %q", got, want)
	}
	if got := criuError("Looks good.\n"); got != "" {
		t.Errorf("criuError(passing output) = %q, want empty", got)
	}
}
