package a11y

import (
	"github.com/tine-run/tine/api"

	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// OSWorld's namespaces, in the order its nsmap declares them.
var namespaces = [][2]string{
	{"st", "https://accessibility.ubuntu.example.org/ns/state"},
	{"attr", "https://accessibility.ubuntu.example.org/ns/attributes"},
	{"cp", "https://accessibility.ubuntu.example.org/ns/component"},
	{"doc", "https://accessibility.ubuntu.example.org/ns/document"},
	{"docattr", "https://accessibility.ubuntu.example.org/ns/document/attributes"},
	{"txt", "https://accessibility.ubuntu.example.org/ns/text"},
	{"val", "https://accessibility.ubuntu.example.org/ns/value"},
	{"act", "https://accessibility.ubuntu.example.org/ns/action"},
}

// XML renders the applications as OSWorld's guest serializes its tree
// (lxml, encoding="unicode"): a desktop-frame root declaring the
// namespaces, an element per node named by its role, attributes in the
// order OSWorld adds them, the text as the element's text.
func XML(apps []*Node) string {
	var b strings.Builder
	b.WriteString("<desktop-frame")
	for _, ns := range namespaces {
		fmt.Fprintf(&b, ` xmlns:%s="%s"`, ns[0], ns[1])
	}
	if len(apps) == 0 {
		b.WriteString("/>")
		return b.String()
	}
	b.WriteByte('>')
	for _, a := range apps {
		writeNode(&b, a)
	}
	b.WriteString("</desktop-frame>")
	return b.String()
}

// attrs keeps a Python dict's semantics: a key set again keeps its place.
type attrs struct {
	keys []string
	vals map[string]string
}

func (a *attrs) set(k, v string) {
	if !validName(k) {
		return // lxml refuses the name; OSWorld's node would be dropped
	}
	if _, ok := a.vals[k]; !ok {
		a.keys = append(a.keys, k)
	}
	a.vals[k] = v
}

// validName is an XML (qualified) name.
func validName(s string) bool {
	for _, part := range strings.SplitN(s, ":", 2) {
		if part == "" {
			return false
		}
		for j, r := range part {
			if !(r == '_' || unicode.IsLetter(r) || (j > 0 && (unicode.IsDigit(r) || r == '-' || r == '.'))) {
				return false
			}
		}
	}
	return true
}

// Tag is the element name OSWorld gives a role.
func Tag(role string) string {
	role = strings.TrimSpace(role)
	if role == "" {
		return "unknown"
	}
	return strings.ReplaceAll(role, " ", "-")
}

func writeNode(b *strings.Builder, n *Node) {
	a := &attrs{vals: map[string]string{}}
	a.set("name", n.Name)
	for _, s := range n.States {
		a.set("st:"+s, "true")
	}
	for _, kv := range n.Attributes {
		a.set("attr:"+kv[0], kv[1])
	}
	if len(n.Bounds) == 4 {
		a.set("cp:screencoord", fmt.Sprintf("(%d, %d)", n.Bounds[0], n.Bounds[1]))
		a.set("cp:size", fmt.Sprintf("(%d, %d)", n.Bounds[2], n.Bounds[3]))
	}
	if n.Image {
		a.set("image", "true")
	}
	if n.Selection {
		a.set("selection", "true")
	}
	for _, kv := range n.Value {
		a.set("val:"+kv[0], kv[1])
	}
	for _, act := range n.Actions {
		name := strings.ReplaceAll(act[0], " ", "-")
		a.set("act:"+name+"_desc", act[1])
		a.set("act:"+name+"_kb", act[2])
	}
	tag := Tag(n.Role)
	b.WriteByte('<')
	b.WriteString(tag)
	for _, k := range a.keys {
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteString(`="`)
		escape(b, a.vals[k], true)
		b.WriteByte('"')
	}
	text := ""
	if n.Text != nil {
		text = *n.Text
	}
	if text == "" && len(n.Children) == 0 {
		b.WriteString("/>")
		return
	}
	b.WriteByte('>')
	escape(b, text, false)
	for _, c := range n.Children {
		writeNode(b, c)
	}
	b.WriteString("</")
	b.WriteString(tag)
	b.WriteByte('>')
}

// escape writes s as libxml2 serializes an attribute value or text;
// characters XML cannot carry are dropped.
func escape(b *strings.Builder, s string, attr bool) {
	for _, r := range strings.ToValidUTF8(s, "") {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"' && attr:
			b.WriteString("&quot;")
		case r == '\r':
			b.WriteString("&#13;")
		case (r == '\n' || r == '\t') && attr:
			fmt.Fprintf(b, "&#%d;", r)
		case r < 0x20 && r != '\n' && r != '\t', r == 0xFFFE, r == 0xFFFF, r == utf8.RuneError:
		default:
			b.WriteRune(r)
		}
	}
}

// Filters of the compact form.
const (
	FilterNone        = ""
	FilterVisible     = "visible"     // showing, visible, with an area on the screen
	FilterInteractive = "interactive" // OSWorld's linearization filter
)

// CompactTree renders the applications in the compact form; a filter
// drops the nodes it rejects and lifts their children into their place.
func CompactTree(apps []*Node, filter string) ([]*api.ACINode, error) {
	var keep func(*Node) bool
	switch filter {
	case FilterNone:
		keep = func(*Node) bool { return true }
	case FilterVisible:
		keep = visible
	case FilterInteractive:
		keep = interactive
	default:
		return nil, fmt.Errorf("accessibility filter %q: want visible, interactive or none", filter)
	}
	var walk func(n *Node) []*api.ACINode
	walk = func(n *Node) []*api.ACINode {
		var kids []*api.ACINode
		for _, c := range n.Children {
			kids = append(kids, walk(c)...)
		}
		if !keep(n) {
			return kids
		}
		c := &api.ACINode{Role: Tag(n.Role), Name: n.Name, States: n.States, Bounds: n.Bounds, Children: kids}
		if n.Text != nil {
			c.Text = *n.Text
		}
		return []*api.ACINode{c}
	}
	out := []*api.ACINode{}
	for _, a := range apps {
		if filter != FilterNone && Tag(a.Role) == "application" {
			// Applications stay as the roots, so the agent knows whose
			// widgets these are.
			out = append(out, &api.ACINode{Role: "application", Name: a.Name, Children: flat(a, walk)})
			continue
		}
		out = append(out, walk(a)...)
	}
	return out, nil
}

func flat(a *Node, walk func(*Node) []*api.ACINode) []*api.ACINode {
	var kids []*api.ACINode
	for _, c := range a.Children {
		kids = append(kids, walk(c)...)
	}
	return kids
}

func has(states []string, s string) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func visible(n *Node) bool {
	return has(n.States, "showing") && has(n.States, "visible") && len(n.Bounds) == 4 &&
		n.Bounds[0] >= 0 && n.Bounds[1] >= 0 && n.Bounds[2] > 0 && n.Bounds[3] > 0
}

var interactiveSuffixes = []string{"item", "button", "heading", "label", "scrollbar", "searchbox", "textbox", "link", "tabelement", "textfield", "textarea", "menu"}

var interactiveTags = map[string]bool{"alert": true, "canvas": true, "check-box": true, "combo-box": true, "entry": true, "icon": true, "image": true,
	"paragraph": true, "scroll-bar": true, "section": true, "slider": true, "static": true, "table-cell": true, "terminal": true, "text": true}

// interactive is OSWorld's filter for its linearized tree
// (mm_agents/accessibility_tree_wrap/heuristic_retrieve.py).
func interactive(n *Node) bool {
	tag := Tag(n.Role)
	ok := strings.HasPrefix(tag, "document") || interactiveTags[tag]
	for _, s := range interactiveSuffixes {
		ok = ok || strings.HasSuffix(tag, s)
	}
	if !ok || !visible(n) {
		return false
	}
	if !(has(n.States, "enabled") || has(n.States, "editable") || has(n.States, "expandable") || has(n.States, "checkable")) {
		return false
	}
	return n.Name != "" || (n.Text != nil && *n.Text != "")
}
