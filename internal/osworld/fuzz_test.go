package osworld

import "testing"

// FuzzParseProgram: the fast path's parser never panics, and a program it
// takes binds only known calls.
func FuzzParseProgram(f *testing.F) {
	for _, s := range []string{
		prefix + "pyautogui.click(100, 200)",
		prefix + "pyautogui.typewrite('a\\x41\\u00e9', interval=0.1); time.sleep(.5)",
		prefix + "pyautogui.hotkey(['ctrl', 'c']); pyautogui.moveTo((1, 2), duration=1e-1)",
		prefix + "pyautogui.click(-1, +-2, button=3)",
		"import pyautogui\n  pyautogui.click(1)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		p, err := parseProgram(code)
		if err != nil {
			return
		}
		for _, s := range p.steps {
			if s.call != nil {
				if _, ok := signatures[s.call.name]; !ok {
					t.Fatalf("bound an unknown call %q", s.call.name)
				}
			}
		}
	})
}
