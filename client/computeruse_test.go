package client

import (
	"fmt"
	"testing"
)

func TestRecommendedScale(t *testing.T) {
	for _, c := range []struct {
		w, h int
		want string
	}{
		{1920, 1080, "&[1366 768]"}, // 16:9
		{2560, 1600, "&[1280 800]"}, // 16:10
		{1600, 1200, "&[1024 768]"}, // 4:3
		{1024, 768, "<nil>"},        // already XGA
		{800, 800, "<nil>"},         // no target of that shape
	} {
		got := "<nil>"
		if s := RecommendedScale(c.w, c.h); s != nil {
			got = fmt.Sprint(s)
		}
		if got != c.want {
			t.Errorf("RecommendedScale(%d, %d) = %s, want %s", c.w, c.h, got, c.want)
		}
	}
}
