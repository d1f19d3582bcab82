package sandbox

import "testing"

func BenchmarkHostViewCached(b *testing.B) {
	hostViewEntries(true)
	for i := 0; i < b.N; i++ {
		hostViewMemo.scan = nil
		hostViewEntries(true)
	}
}

func BenchmarkHostViewRead(b *testing.B) {
	for i := 0; i < b.N; i++ {
		readHostViewCache()
	}
}

func BenchmarkHostViewFresh(b *testing.B) {
	sc := readHostViewCache()
	for i := 0; i < b.N; i++ {
		sc.fresh()
	}
}

func BenchmarkHostViewScan(b *testing.B) {
	for i := 0; i < b.N; i++ {
		scanHostView(true)
	}
}
