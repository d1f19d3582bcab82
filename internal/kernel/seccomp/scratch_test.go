package seccomp

import "testing"

func TestScratchDump(t *testing.T) {
	for _, m := range []Mode{Default, Strict} {
		c, err := compile(m)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d instructions, skipped %d", m, len(c.program), len(c.skipped))
		if m == Strict {
			for i, in := range c.program {
				t.Logf("%d: %v", i, in)
			}
		}
	}
}

func BenchmarkScratchProgram(b *testing.B) {
	for b.Loop() {
		if _, err := Program(Default); err != nil {
			b.Fatal(err)
		}
	}
}
