package landlock

import (
	"reflect"
	"testing"
)

func TestRulesGrantsWholeTreeWithoutReadOnlyParts(t *testing.T) {
	got := Rules([]string{"/"}, nil, func(string) []Entry { t.Fatal("listed a directory it did not need"); return nil })
	want := []Rule{{Path: "/", Rights: Writable}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestRulesSkipReadOnlySubtrees(t *testing.T) {
	tree := map[string][]Entry{
		"/":     {{"data", true}, {"etc", true}, {"home", true}, {"file", false}},
		"/home": {{"a", true}, {"b", true}},
	}
	got := Rules([]string{"/"}, []string{"/data", "/home/b/"}, func(dir string) []Entry { return tree[dir] })
	want := []Rule{
		{Path: "/etc", Rights: Writable},
		{Path: "/file", Rights: FileWrite},
		{Path: "/home/a", Rights: Writable},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestWritableNeverAllowsDeviceNodes(t *testing.T) {
	if Writable&(MakeChar|MakeBlock) != 0 {
		t.Fatal("writable paths must not allow creating device nodes")
	}
	if Supported(Write, 1)&(Refer|Truncate) != 0 {
		t.Fatal("ABI 1 has neither refer nor truncate")
	}
}
