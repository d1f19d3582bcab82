package a11y

import (
	"strings"
	"testing"

	"github.com/tine-run/tine/api"
)

func str(s string) *string { return &s }

// The XML is byte for byte what OSWorld's lxml serialization gives for the
// same tree: namespace declarations on the root only, attributes in the
// order it sets them (a repeated key keeps its first place), Python tuple
// strings for coordinates, libxml2's escaping, self-closing empty elements.
func TestXML(t *testing.T) {
	apps := []*Node{{
		Role: "application", Name: "demo", States: []string{}, Children: []*Node{{
			Role: "frame", Name: `Tom & "Jerry" <1>`, States: []string{"active", "showing", "visible"},
			Attributes: [][2]string{{"toolkit", "GTK"}, {"bad key", "dropped"}},
			Bounds:     []int{0, 20, 300, 200},
			Children: []*Node{
				{Role: "push button", Name: "OK", States: []string{"enabled"}, Bounds: []int{10, 30, 80, 24},
					Actions: [][3]string{{"click", "Clicks it", "<Alt>o"}, {"click", "again", ""}}, Children: []*Node{}},
				{Role: "text", Name: "", States: []string{"editable"}, Text: str("line1\nline2\r & <b>"),
					Value: [][2]string{{"value", "1.0"}}, Image: true, Selection: true},
				{Role: "", Name: "tab\there"},
			},
		}},
	}}
	ns := ` xmlns:st="https://accessibility.ubuntu.example.org/ns/state" xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes" xmlns:cp="https://accessibility.ubuntu.example.org/ns/component" xmlns:doc="https://accessibility.ubuntu.example.org/ns/document" xmlns:docattr="https://accessibility.ubuntu.example.org/ns/document/attributes" xmlns:txt="https://accessibility.ubuntu.example.org/ns/text" xmlns:val="https://accessibility.ubuntu.example.org/ns/value" xmlns:act="https://accessibility.ubuntu.example.org/ns/action"`
	want := `<desktop-frame` + ns + `>` +
		`<application name="demo">` +
		`<frame name="Tom &amp; &quot;Jerry&quot; &lt;1&gt;" st:active="true" st:showing="true" st:visible="true" attr:toolkit="GTK" cp:screencoord="(0, 20)" cp:size="(300, 200)">` +
		`<push-button name="OK" st:enabled="true" cp:screencoord="(10, 30)" cp:size="(80, 24)" act:click_desc="again" act:click_kb=""/>` +
		`<text name="" st:editable="true" image="true" selection="true" val:value="1.0">line1` + "\n" + `line2&#13; &amp; &lt;b&gt;</text>` +
		`<unknown name="tab&#9;here"/>` +
		`</frame></application></desktop-frame>`
	if got := XML(apps); got != want {
		t.Fatalf("XML:\n got %s\nwant %s", got, want)
	}
	if got := XML(nil); got != `<desktop-frame`+ns+`/>` {
		t.Fatalf("empty tree: %s", got)
	}
}

func TestCompactFilters(t *testing.T) {
	shown := []string{"enabled", "showing", "visible"}
	apps := []*Node{{Role: "application", Name: "demo", Children: []*Node{{
		Role: "filler", States: shown, Bounds: []int{0, 0, 10, 10}, Children: []*Node{
			{Role: "push button", Name: "OK", States: shown, Bounds: []int{1, 2, 3, 4}},
			{Role: "push button", Name: "Hidden", States: []string{"enabled"}, Bounds: nil},
			{Role: "label", Name: "", States: shown, Bounds: []int{1, 2, 3, 4}},
			{Role: "entry", Text: str("typed"), States: []string{"editable", "showing", "visible"}, Bounds: []int{5, 5, 5, 5}},
		}}}}}
	names := func(filter string) string {
		tree, err := CompactTree(apps, filter)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		var walk func(ns []*api.ACINode)
		walk = func(ns []*api.ACINode) {
			for _, n := range ns {
				out = append(out, n.Role+":"+n.Name+n.Text)
				walk(n.Children)
			}
		}
		walk(tree)
		return strings.Join(out, " ")
	}
	if got := names(FilterInteractive); got != "application:demo push-button:OK entry:typed" {
		t.Fatalf("interactive: %s", got)
	}
	if got := names(FilterVisible); got != "application:demo filler: push-button:OK label: entry:typed" {
		t.Fatalf("visible: %s", got)
	}
	if got := names(FilterNone); got != "application:demo filler: push-button:OK push-button:Hidden label: entry:typed" {
		t.Fatalf("none: %s", got)
	}
	if _, err := CompactTree(apps, "shiny"); err == nil {
		t.Fatal("unknown filter accepted")
	}
}
