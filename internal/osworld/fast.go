package osworld

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The fast path: OSWorld runs each action as
//
//	["python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; <code>"]
//
// A program made only of such imports, PAUSE and FAILSAFE assignments,
// pyautogui calls and time.sleep calls with literal arguments is run
// here, natively, without an interpreter. Anything else — a loop, a
// variable, an expression, an unknown function, a call pyautogui would
// reject, FAILSAFE left on (whether it fires depends on where the pointer
// is as it runs) — is not proved understood and goes to a real python3
// with tine's pyautogui module, which gives Python's own answer.

// maxFastSleep bounds the time.sleep and PAUSE a fast program may add up
// to: OSWorld's guest kills a command after 120 s, and the interpreter
// gives that answer.
const maxFastSleep = 110.0

// program is a parsed fast-path program.
type program struct {
	steps []step
}

type step struct {
	call  *call   // a pyautogui call, or
	sleep float64 // time.sleep(sleep)
	// state is PAUSE and FAILSAFE as the step sees them.
	state State
}

// fastProgram recognises `python -c CODE` (or python3) and parses CODE;
// ok is false when the fast path cannot run it.
func fastProgram(argv []string) (*program, bool) {
	if len(argv) != 3 || (argv[0] != "python" && argv[0] != "python3" && argv[0] != "/usr/bin/python3" && argv[0] != "/usr/bin/python") || argv[1] != "-c" {
		return nil, false
	}
	p, err := parseProgram(argv[2])
	if err != nil {
		return nil, false
	}
	return p, true
}

// parseProgram parses and binds every statement; an error means the
// program is not for the fast path (it says why, for tests and logs).
func parseProgram(code string) (*program, error) {
	if !utf8.ValidString(code) {
		return nil, fmt.Errorf("not UTF-8")
	}
	stmts, err := splitStatements(code)
	if err != nil {
		return nil, err
	}
	st := DefaultState
	imported := map[string]bool{}
	prog := &program{}
	total := 0.0
	for _, s := range stmts {
		ps := &parser{src: s}
		switch {
		case ps.accept("import "):
			for _, m := range strings.Split(ps.rest(), ",") {
				m = strings.TrimSpace(m)
				if m != "pyautogui" && m != "time" {
					return nil, fmt.Errorf("import of %q", m)
				}
				imported[m] = true
			}
			continue
		}
		ps = &parser{src: s}
		name, err := ps.dotted()
		if err != nil {
			return nil, err
		}
		mod, attr, _ := strings.Cut(name, ".")
		if !imported[mod] || attr == "" || strings.Contains(attr, ".") {
			return nil, fmt.Errorf("%q is not an imported module's attribute", name)
		}
		ps.space()
		if ps.accept("=") {
			v, err := ps.value()
			if err != nil {
				return nil, err
			}
			if err := ps.end(); err != nil {
				return nil, err
			}
			switch {
			case name == "pyautogui.FAILSAFE":
				b, ok := v.(bool)
				if !ok {
					return nil, fmt.Errorf("FAILSAFE set to %v", v)
				}
				st.FailSafe = b
			case name == "pyautogui.PAUSE":
				f, err := pyFloat("PAUSE", "PAUSE", v)
				if err != nil || f < 0 {
					return nil, fmt.Errorf("PAUSE set to %v", v)
				}
				st.Pause = f
			default:
				return nil, fmt.Errorf("assignment to %s", name)
			}
			continue
		}
		pos, kw, err := ps.callArgs()
		if err != nil {
			return nil, err
		}
		if err := ps.end(); err != nil {
			return nil, err
		}
		if mod == "time" {
			if attr != "sleep" || len(pos) != 1 || len(kw) != 0 {
				return nil, fmt.Errorf("time.%s", attr)
			}
			f, err := pyFloat("sleep", "secs", pos[0])
			if err != nil || f < 0 {
				return nil, fmt.Errorf("time.sleep(%v)", pos[0])
			}
			total += f
			prog.steps = append(prog.steps, step{sleep: f, state: st})
			continue
		}
		if st.FailSafe {
			return nil, fmt.Errorf("FAILSAFE is on")
		}
		c, err := bindCall(attr, pos, kw)
		if err != nil {
			return nil, err
		}
		if c.pause {
			total += st.Pause
		}
		prog.steps = append(prog.steps, step{call: c, state: st})
	}
	if total > maxFastSleep {
		return nil, fmt.Errorf("sleeps add up to %.1f s", total)
	}
	return prog, nil
}

// run runs the program's steps. pyautogui pauses after every call; the
// pause after the last one only delays the answer (nothing runs after
// it, and OSWorld waits after each step anyway), so it is left out.
func (prog *program) run(ctx context.Context, p *PyAutoGUI) error {
	last := -1
	for i, s := range prog.steps {
		if s.call != nil {
			last = i
		}
	}
	for i, s := range prog.steps {
		if s.call == nil {
			if err := sleep(ctx, s.sleep); err != nil {
				return err
			}
			continue
		}
		if err := p.run(ctx, s.state, s.call, i != last); err != nil {
			return err
		}
	}
	return nil
}

// splitStatements splits code into simple statements at newlines and
// semicolons outside strings and brackets, dropping comments and blank
// ones. A line that starts indented, a line continuation, a compound
// statement or a triple-quoted string is refused.
func splitStatements(code string) ([]string, error) {
	var out []string
	var cur strings.Builder
	depth := 0
	atLineStart := true
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if atLineStart && depth == 0 && c != '\n' {
			if c == ' ' || c == '\t' {
				// Indentation is a block (or an IndentationError):
				// unless the line is blank or a comment.
				j := i
				for j < len(code) && (code[j] == ' ' || code[j] == '\t') {
					j++
				}
				if j < len(code) && code[j] != '\n' && code[j] != '#' {
					return nil, fmt.Errorf("indented line")
				}
				i = j - 1
				continue
			}
		}
		atLineStart = false
		switch c {
		case '#':
			for i < len(code) && code[i] != '\n' {
				i++
			}
			i--
		case '\\':
			return nil, fmt.Errorf("line continuation")
		case '\'', '"':
			j, err := skipString(code, i)
			if err != nil {
				return nil, err
			}
			cur.WriteString(code[i:j])
			i = j - 1
		case '(', '[', '{':
			depth++
			cur.WriteByte(c)
		case ')', ']', '}':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced %c", c)
			}
			cur.WriteByte(c)
		case ';':
			if depth > 0 {
				return nil, fmt.Errorf("; inside brackets")
			}
			flush()
		case '\n':
			if depth == 0 {
				flush()
				atLineStart = true
			} else {
				cur.WriteByte(' ')
			}
		default:
			cur.WriteByte(c)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed bracket")
	}
	flush()
	for _, s := range out {
		if strings.HasSuffix(s, ":") {
			return nil, fmt.Errorf("compound statement")
		}
	}
	return out, nil
}

// skipString returns the index just past the string literal at code[i]
// (its quote); prefixes are part of the identifier before it.
func skipString(code string, i int) (int, error) {
	q := code[i]
	if strings.HasPrefix(code[i:], strings.Repeat(string(q), 3)) {
		return 0, fmt.Errorf("triple-quoted string")
	}
	for j := i + 1; j < len(code); j++ {
		switch code[j] {
		case '\\':
			j++
		case '\n':
			return 0, fmt.Errorf("newline in a string")
		case q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string")
}

// parser reads one statement's expressions: literals only.
type parser struct {
	src string
	pos int
}

func (p *parser) rest() string { return p.src[p.pos:] }

func (p *parser) space() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) accept(s string) bool {
	p.space()
	if strings.HasPrefix(p.src[p.pos:], s) {
		p.pos += len(s)
		return true
	}
	return false
}

func (p *parser) end() error {
	p.space()
	if p.pos != len(p.src) {
		return fmt.Errorf("unexpected %q", p.rest())
	}
	return nil
}

func (p *parser) ident() string {
	p.space()
	start := p.pos
	for p.pos < len(p.src) {
		r, size := utf8.DecodeRuneInString(p.src[p.pos:])
		if !(r == '_' || unicode.IsLetter(r) || (p.pos > start && unicode.IsDigit(r))) {
			break
		}
		p.pos += size
	}
	return p.src[start:p.pos]
}

// dotted reads a.b.c.
func (p *parser) dotted() (string, error) {
	name := p.ident()
	if name == "" {
		return "", fmt.Errorf("want a name at %q", p.rest())
	}
	for p.pos < len(p.src) && p.src[p.pos] == '.' {
		p.pos++
		n := p.ident()
		if n == "" {
			return "", fmt.Errorf("want a name after '.'")
		}
		name += "." + n
	}
	return name, nil
}

// callArgs reads (positional..., keyword=...).
func (p *parser) callArgs() ([]Value, map[string]Value, error) {
	if !p.accept("(") {
		return nil, nil, fmt.Errorf("want a call at %q", p.rest())
	}
	var pos []Value
	kw := map[string]Value{}
	for {
		if p.accept(")") {
			return pos, kw, nil
		}
		save := p.pos
		if name := p.ident(); name != "" && p.accept("=") && !strings.HasPrefix(p.rest(), "=") {
			if _, dup := kw[name]; dup {
				return nil, nil, fmt.Errorf("keyword %s twice", name)
			}
			v, err := p.value()
			if err != nil {
				return nil, nil, err
			}
			kw[name] = v
		} else {
			p.pos = save
			if len(kw) > 0 {
				return nil, nil, fmt.Errorf("positional argument after a keyword")
			}
			v, err := p.value()
			if err != nil {
				return nil, nil, err
			}
			pos = append(pos, v)
		}
		if p.accept(",") {
			continue
		}
		if !p.accept(")") {
			return nil, nil, fmt.Errorf("want , or ) at %q", p.rest())
		}
		return pos, kw, nil
	}
}

// value reads a literal: a number (with a sign), a string, True, False,
// None, a tuple or list of literals, or pyautogui.<easing>.
func (p *parser) value() (Value, error) {
	p.space()
	if p.pos >= len(p.src) {
		return nil, fmt.Errorf("want a value")
	}
	c := p.src[p.pos]
	switch {
	case c == '(' || c == '[':
		closer := map[byte]string{'(': ")", '[': "]"}[c]
		p.pos++
		var items []Value
		for {
			if p.accept(closer) {
				return items, nil
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			if p.accept(",") {
				continue
			}
			if !p.accept(closer) {
				return nil, fmt.Errorf("want , or %s", closer)
			}
			if c == '(' && len(items) == 1 {
				return items[0], nil // (x) is x, not a tuple
			}
			return items, nil
		}
	case c == '\'' || c == '"':
		return p.str(false)
	case c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'):
		return p.number()
	}
	name, err := p.dotted()
	if err != nil {
		return nil, err
	}
	if (name == "r" || name == "R" || name == "u" || name == "U") && p.pos < len(p.src) && (p.src[p.pos] == '\'' || p.src[p.pos] == '"') {
		return p.str(name == "r" || name == "R")
	}
	switch name {
	case "True":
		return true, nil
	case "False":
		return false, nil
	case "None":
		return nil, nil
	}
	if t, ok := strings.CutPrefix(name, "pyautogui."); ok {
		if _, known := tweens[Tween(t)]; known {
			return Tween(t), nil
		}
	}
	return nil, fmt.Errorf("%s is not a literal", name)
}

func (p *parser) number() (Value, error) {
	start := p.pos
	neg := false
	for p.pos < len(p.src) && (p.src[p.pos] == '-' || p.src[p.pos] == '+') {
		neg = neg != (p.src[p.pos] == '-')
		p.pos++
		p.space()
	}
	digits := p.pos
	for p.pos < len(p.src) && strings.IndexByte("0123456789.eE_", p.src[p.pos]) >= 0 {
		if (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') && p.pos+1 < len(p.src) && (p.src[p.pos+1] == '-' || p.src[p.pos+1] == '+') {
			p.pos++
		}
		p.pos++
	}
	lit := strings.ReplaceAll(p.src[digits:p.pos], "_", "")
	if lit == "" {
		return nil, fmt.Errorf("want a number at %q", p.src[start:])
	}
	if strings.ContainsAny(lit, ".eE") {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return nil, fmt.Errorf("number %q", lit)
		}
		if neg {
			f = -f
		}
		return f, nil
	}
	if len(lit) > 1 && lit[0] == '0' {
		return nil, fmt.Errorf("number %q", lit) // 0x…, 0o…, or Python's SyntaxError for 012
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("number %q", lit)
	}
	if neg {
		n = -n
	}
	return n, nil
}

// str reads a '…' or "…" literal with Python's common escapes; raw keeps
// backslashes.
func (p *parser) str(raw bool) (Value, error) {
	q := p.src[p.pos]
	p.pos++
	var b strings.Builder
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == q:
			p.pos++
			return b.String(), nil
		case c == '\\' && raw:
			if p.pos+1 >= len(p.src) {
				return nil, fmt.Errorf("unterminated string")
			}
			b.WriteString(p.src[p.pos : p.pos+2])
			p.pos += 2
			continue
		case c == '\\':
			if p.pos+1 >= len(p.src) {
				return nil, fmt.Errorf("unterminated string")
			}
			e := p.src[p.pos+1]
			p.pos += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if p.pos+n > len(p.src) {
					return nil, fmt.Errorf("short \\%c escape", e)
				}
				v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(v)) {
					return nil, fmt.Errorf("bad \\%c escape", e)
				}
				b.WriteRune(rune(v))
				p.pos += n
			default:
				return nil, fmt.Errorf("escape \\%c", e) // \N{…}, octal, and Python's warnings: not here
			}
			continue
		}
		b.WriteByte(c)
		p.pos++
	}
	return nil, fmt.Errorf("unterminated string")
}
