package session_test

import (
	"context"
	"fmt"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/sandbox"
	"github.com/tine-run/tine/internal/session"
)

// A session in a live sandbox: cells share one interpreter's state.
func ExampleSession() {
	sb, err := sandbox.Create(&sandbox.Spec{})
	if err != nil {
		panic(err)
	}
	defer sb.Destroy()
	launch := session.LaunchFunc(func(e *sandbox.ExecSpec) (session.Process, error) { return sb.Launch(e) })
	s, err := session.Start("s1", "my-sandbox", launch, session.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.Run(ctx, api.CellRequest{Code: "x = 41"}, nil)
	ex, _ := s.Run(ctx, api.CellRequest{Code: "print('hi')\nx + 1", TimeoutMs: 5000}, func(e session.Event) {
		if e.Type == api.EventStdout {
			fmt.Print("streamed: ", e.Text)
		}
	})
	fmt.Println(ex.Status, ex.Text(), ex.ExecutionCount)
}
