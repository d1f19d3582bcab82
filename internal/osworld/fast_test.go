package osworld

import (
	"math"
	"strings"
	"testing"
)

const prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "

func TestParseProgram(t *testing.T) {
	ok := []struct {
		code  string
		steps int
	}{
		{prefix + "pyautogui.click(100, 200)", 1},
		{prefix + "pyautogui.click(x=100, y=200, button='right', clicks=2, interval=0.05)", 1},
		{prefix + "pyautogui.moveTo(10.7, -3); time.sleep(0.5); pyautogui.typewrite('a;b#c\\n', interval=0.01)", 3},
		{prefix + "\npyautogui.hotkey('ctrl', 'shift', 't')\n# a comment\n\npyautogui.press(['a', 'b'], presses=2)  # trailing\n", 2},
		{prefix + "pyautogui.dragTo(300, 400, duration=0.5, tween=pyautogui.easeInOutQuad, button='left')", 1},
		{prefix + "pyautogui.scroll(-5, x=10, y=20); pyautogui.hscroll(3)", 2},
		{prefix + "pyautogui.PAUSE = 0; pyautogui.write(r'C:\\path'); pyautogui.click((5, 6))", 2},
		{prefix + "pyautogui.click(\n  100,\n  200,\n)", 1},
		// computer_13's MOVE_TO as OSWorld's execute_action writes it.
		{prefix + "pyautogui.moveTo(100, 200, 0.7312, pyautogui.easeInBounce)", 1},
		{prefix + "pyautogui.moveTo(100, 200, 0.51, pyautogui.easeInElastic)", 1},
		{"import pyautogui\nimport time\npyautogui.FAILSAFE = False\npyautogui.keyDown('shift'); pyautogui.keyUp('shift')", 2},
	}
	for _, c := range ok {
		p, err := parseProgram(c.code)
		if err != nil {
			t.Errorf("%q: %v", c.code, err)
			continue
		}
		if len(p.steps) != c.steps {
			t.Errorf("%q: %d steps, want %d", c.code, len(p.steps), c.steps)
		}
	}
	// Everything the fast path cannot prove it runs as Python would.
	refused := []string{
		"import pyautogui; pyautogui.click(1, 2)", // FAILSAFE left on
		prefix + "for i in range(3): pyautogui.press('a')",
		prefix + "for i in range(3):\n    pyautogui.press('a')",
		prefix + "x = 5; pyautogui.click(x, 5)",
		prefix + "pyautogui.click(1 + 2, 5)",
		prefix + "pyautogui.click(button='nope')", // pyautogui raises: the interpreter gives the traceback
		prefix + "pyautogui.click(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)",
		prefix + "pyautogui.click(foo=1)",
		prefix + "pyautogui.locateOnScreen('a.png')",
		prefix + "pyautogui.click('button.png')",
		prefix + "print(pyautogui.position())",
		prefix + "import os; os.system('true')",
		prefix + "pyautogui.typewrite('''x''')",
		prefix + "pyautogui.click(1, \\\n 2)",
		prefix + "time.sleep(200)",
		prefix + "time.sleep(-1)",
		prefix + "pyautogui.moveTo(1, 2, tween=lambda n: n)",
		prefix + "pyautogui.click(1, 2",
		prefix + "pyautogui.typewrite('\\N{BULLET}')",
		prefix + "pyautogui.click(012, 5)",
		prefix + "subprocess.run(['ls'])",
	}
	for _, code := range refused {
		if _, err := parseProgram(code); err == nil {
			t.Errorf("%q: the fast path took it", code)
		}
	}
	if _, ok := fastProgram([]string{"python", "-c", prefix + "pyautogui.click(1, 2)"}); !ok {
		t.Error("OSWorld's own shape refused")
	}
	if _, ok := fastProgram([]string{"python", "-B", "-c", prefix + "pyautogui.click(1, 2)"}); ok {
		t.Error("python -B -c taken: only the exact shape is the fast path's")
	}
}

func TestParseValues(t *testing.T) {
	p, err := parseProgram(prefix + `pyautogui.typewrite("tab\there \"q\" \x41\u00e9", interval=1e-3)`)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.steps) != 1 || p.steps[0].call.name != "typewrite" {
		t.Fatalf("steps %+v", p.steps)
	}
	pp := &parser{src: `(1, -2.5, 'x', [True, None], (3,), pyautogui.linear)`}
	v, err := pp.value()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(strings.TrimSpace(fmtValue(v)), " ", "")
	if got != "[1,-2.5,x,[true,<nil>],[3],linear]" {
		t.Fatalf("value %s", got)
	}
}

func fmtValue(v Value) string {
	switch x := v.(type) {
	case []Value:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmtValue(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case nil:
		return "<nil>"
	case bool:
		if x {
			return "true"
		}
		return "false"
	case Tween:
		return string(x)
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(pyRepr(v), "'", ""), "\"", ""), "\n", ""))
}

// Every easing starts at 0 and ends at 1: a tweened move ends where it
// was sent.
func TestTweens(t *testing.T) {
	for name, f := range tweens {
		// (Penner's elastic curves miss by 2^-11; glide ends at the point anyway.)
		if a, b := f(0), f(1); math.Abs(a) > 1e-3 || math.Abs(b-1) > 1e-3 {
			t.Errorf("%s(0) = %v, %s(1) = %v", name, a, name, b)
		}
	}
}

func TestShlexSplit(t *testing.T) {
	for in, want := range map[string]string{
		`ls -l "a b" 'c d' e\ f`:    "ls|-l|a b|c d|e f",
		`python -c "print(\"hi\")"`: `python|-c|print("hi")`,
		`  x  `:                     "x",
		`a''b ""`:                   "ab|",
	} {
		got, err := shlexSplit(in)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("shlexSplit(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := shlexSplit(`echo "unclosed`); err == nil {
		t.Error("unclosed quote accepted")
	}
}
