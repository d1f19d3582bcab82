package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// A sandbox's life: create it, exec into it, delete it. The client finds
// the daemon through TINE_SOCKET (or TINE_HOST and TINE_TOKEN).
func Example() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		panic(err)
	}
	sb, err := c.Create(ctx, &api.SandboxSpec{
		Limits:     api.Limits{MemoryBytes: 512 << 20, Pids: 256},
		TTLSeconds: 600,
	})
	if err != nil {
		panic(err)
	}
	defer c.Delete(ctx, sb.ID)

	res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{
		Argv:  []string{"python3", "-c", "import sys; print(sys.stdin.read().upper())"},
		Stdin: []byte("hello"),
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
}

// Stream a command's stdio: write its stdin, read its output as it comes.
func ExampleClient_ExecStream() {
	ctx := context.Background()
	c := client.NewUnix(client.DefaultSocket)
	st, err := c.ExecStream(ctx, "0123456789ab", &api.ExecRequest{Argv: []string{"/bin/sh"}})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	go func() {
		io.WriteString(st.Stdin, "echo hi from $(hostname)\nexit 3\n")
		st.Stdin.Close()
	}()
	go io.Copy(os.Stderr, st.Stderr)
	io.Copy(os.Stdout, st.Stdout)
	exit, err := st.Wait()
	if err != nil {
		panic(err)
	}
	fmt.Println("exit code", exit.ExitCode)
}

// Files go in and out of a sandbox confined to its root.
func ExampleClient_WriteFile() {
	ctx := context.Background()
	c := client.NewUnix(client.DefaultSocket)
	id := "0123456789ab"
	if _, err := c.WriteFile(ctx, id, "/tmp/main.py", strings.NewReader("print(42)\n"), &client.WriteOptions{Mode: 0o644}); err != nil {
		panic(err)
	}
	rc, err := c.ReadFile(ctx, id, "/tmp/main.py")
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	io.Copy(os.Stdout, rc)
}

// Every failure the daemon reports carries an API error code.
func ExampleErrorCode() {
	err := error(&client.Error{Status: 429, Code: api.CodeCapacity, Message: "capacity: 8 of 8 sandboxes are live"})
	switch client.ErrorCode(err) {
	case api.CodeCapacity:
		fmt.Println("host full, retry later")
	case api.CodeNotFound:
		fmt.Println("no such sandbox")
	}
	// Output: host full, retry later
}
