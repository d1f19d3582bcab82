package zygote

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/require"
)

func TestSmoke(t *testing.T) {
	require.Root(t)
	m, err := NewManager(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f, err := m.Up(api.FunctionSpec{Name: "smoke", Entry: "/tmp/fn1/" + os.Getenv("FN")})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", f)
	for range 3 {
		inv, err := m.Invoke(context.Background(), "smoke", []byte(`{"a":1}`), false)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(inv, "", " ")
		t.Logf("%s", b)
	}
}
