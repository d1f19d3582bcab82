package main

import (
	"testing"

	"github.com/spf13/pflag"
)

// `tine run` is dispatched through a root with only the run command (its
// start is on every one-shot sandbox's path): it must parse exactly the
// flags the full command tree gives it.
func TestRunRootParsesRunAsTheFullRootDoes(t *testing.T) {
	full, _, err := newRootCommand().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	lean, _, err := newRunRoot().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(fs *pflag.FlagSet) map[string]string {
		m := map[string]string{}
		fs.VisitAll(func(f *pflag.Flag) { m[f.Name] = f.Shorthand + " " + f.DefValue + " " + f.Usage })
		return m
	}
	a, b := describe(full.Flags()), describe(lean.Flags())
	pa, pb := describe(full.InheritedFlags()), describe(lean.InheritedFlags())
	if len(a) == 0 || len(a) != len(b) || len(pa) != len(pb) {
		t.Fatalf("run's flags differ: %d/%d own, %d/%d inherited", len(a), len(b), len(pa), len(pb))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("--%s: %q in the full tree, %q in the run root", k, v, b[k])
		}
	}
	if full.Long != lean.Long || full.Use != lean.Use {
		t.Error("run's help differs between the roots")
	}
}
