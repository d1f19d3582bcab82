// Package mcp serves tine as a Model Context Protocol server: tools to
// create and destroy sandboxes and desktops, run commands, read and write
// files, snapshot and fork, take a desktop's screenshot and act on it;
// and a resource template for a sandbox's files. It is a client of tine's
// API; `tine mcp` serves it on stdio and `tine serve --e2b` at /v1/mcp
// (streamable HTTP, behind the E2B API key).
package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

// Version is what the server reports as its implementation's version.
const Version = "0.1.0"

// maxReadBytes bounds a file read through a tool or resource.
const maxReadBytes = 8 << 20

// NewServer makes the MCP server over c.
func NewServer(c *client.Client) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "tine", Version: Version}, &mcp.ServerOptions{
		Instructions: "tine runs commands in isolated Linux sandboxes on this host. Create a sandbox, run commands and read or write its files, snapshot it and fork replicas, destroy it when done. Desktops are sandboxes with an X display you can screenshot and act on.",
	})
	t := &tools{c: c}
	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Description: "Create a live sandbox (the host's OS, read-only, with a private writable layer and no network). Returns its id."}, t.createSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "destroy_sandbox", Description: "Destroy a sandbox or desktop and everything in it."}, t.destroySandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sandboxes", Description: "List the live sandboxes."}, t.listSandboxes)
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: "Run a shell command (/bin/sh -c) in a sandbox and return its exit code, stdout and stderr."}, t.runCommand)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: "Run Python in a sandbox's code-interpreter session, whose state (variables, imports) persists from call to call. Without session_id a new session is started (its id is returned). Returns stdout, stderr, the last expression's value, errors with their traceback, and figures as PNG images."}, t.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: "Read a file in a sandbox (as text; up to 8 MiB)."}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: "Write a file in a sandbox (parents are created)."}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot", Description: "Snapshot a sandbox's files; forks of the snapshot start from them."}, t.snapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "fork", Description: "Fork replicas of a snapshot (snapshot_id), or of a sandbox (sandbox_id: snapshotted first). Returns the new sandboxes' ids."}, t.fork)
	mcp.AddTool(s, &mcp.Tool{Name: "create_desktop", Description: "Create a desktop: a sandbox with an X display and a window manager, for computer use."}, t.createDesktop)
	mcp.AddTool(s, &mcp.Tool{Name: "screenshot", Description: "Take a PNG screenshot of a desktop."}, t.screenshot)
	mcp.AddTool(s, &mcp.Tool{Name: "desktop_action", Description: "Act on a desktop: click or move at x,y; type text; press keys (e.g. ctrl+s)."}, t.desktopAction)
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "sandbox-file", URITemplate: "tine://sandboxes/{id}/files{+path}",
		Description: "A file in a sandbox, by absolute path: tine://sandboxes/<id>/files/etc/os-release",
	}, t.readResource)
	return s
}

// Handler serves NewServer(c) over streamable HTTP.
func Handler(c *client.Client) http.Handler {
	s := NewServer(c)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

type tools struct{ c *client.Client }

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

type createIn struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty" jsonschema:"destroy the sandbox this many seconds after creation (0: never)"`
}

type idOut struct {
	ID string `json:"id"`
}

func (t *tools) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, idOut, error) {
	sb, err := t.c.Create(ctx, &api.SandboxSpec{TTLSeconds: in.TTLSeconds})
	if err != nil {
		return nil, idOut{}, err
	}
	return text("created sandbox %s", sb.ID), idOut{ID: sb.ID}, nil
}

type idIn struct {
	ID string `json:"id" jsonschema:"the sandbox's or desktop's id"`
}

func (t *tools) destroySandbox(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
	err := t.c.Delete(ctx, in.ID)
	if client.ErrorCode(err) == api.CodeNotFound {
		// A desktop lives under its own route.
		err = t.c.DeleteDesktop(ctx, in.ID)
	}
	if err != nil {
		return nil, nil, err
	}
	return text("destroyed %s", in.ID), nil, nil
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
}

type sandboxOut struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Execs int    `json:"execs"`
}

func (t *tools) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listOut, error) {
	sbs, err := t.c.List(ctx)
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: []sandboxOut{}}
	var b strings.Builder
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, sandboxOut{ID: sb.ID, State: string(sb.State), Execs: sb.Execs})
		fmt.Fprintf(&b, "%s %s\n", sb.ID, sb.State)
	}
	if b.Len() == 0 {
		b.WriteString("no sandboxes")
	}
	return text("%s", b.String()), out, nil
}

type runIn struct {
	ID             string `json:"id" jsonschema:"the sandbox's id"`
	Command        string `json:"command" jsonschema:"a shell command, run by /bin/sh -c"`
	Workdir        string `json:"workdir,omitempty" jsonschema:"working directory (default: the sandbox's)"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this long (default 60)"`
}

type runOut struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	timeout := in.TimeoutSeconds
	if timeout <= 0 {
		timeout = 60
	}
	res, err := t.c.Exec(ctx, in.ID, &api.ExecRequest{Argv: []string{"/bin/sh", "-c", in.Command}, Workdir: in.Workdir, TimeoutMs: timeout * 1000})
	if err != nil {
		return nil, runOut{}, err
	}
	out := runOut{ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
	r := text("exit code %d (%s)\n--- stdout\n%s--- stderr\n%s", res.ExitCode, res.Reason, out.Stdout, out.Stderr)
	r.IsError = res.ExitCode != 0
	return r, out, nil
}

type pathIn struct {
	ID   string `json:"id" jsonschema:"the sandbox's id"`
	Path string `json:"path" jsonschema:"absolute path inside the sandbox"`
}

func (t *tools) read(ctx context.Context, id, path string) ([]byte, error) {
	rc, err := t.c.ReadFile(ctx, id, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxReadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxReadBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; read it in parts with run_command (head, tail, dd)", path, maxReadBytes)
	}
	return b, nil
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
	b, err := t.read(ctx, in.ID, in.Path)
	if err != nil {
		return nil, nil, err
	}
	return text("%s", b), nil, nil
}

type writeIn struct {
	ID      string `json:"id" jsonschema:"the sandbox's id"`
	Path    string `json:"path" jsonschema:"absolute path inside the sandbox"`
	Content string `json:"content" jsonschema:"the file's new content"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, any, error) {
	if dir := path.Dir(in.Path); path.IsAbs(in.Path) && dir != "/" {
		if _, err := t.c.Mkdir(ctx, in.ID, api.MkdirRequest{Path: dir, Parents: true}); err != nil {
			return nil, nil, err
		}
	}
	info, err := t.c.WriteFile(ctx, in.ID, in.Path, strings.NewReader(in.Content), nil)
	if err != nil {
		return nil, nil, err
	}
	return text("wrote %d bytes to %s", info.Size, info.Path), nil, nil
}

type snapshotIn struct {
	ID   string `json:"id" jsonschema:"the sandbox's id"`
	Name string `json:"name,omitempty" jsonschema:"a label for the snapshot"`
}

func (t *tools) snapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotIn) (*mcp.CallToolResult, idOut, error) {
	sn, err := t.c.Snapshot(ctx, in.ID, &api.SnapshotRequest{Name: in.Name})
	if err != nil {
		return nil, idOut{}, err
	}
	return text("snapshot %s of %s (%d bytes, source paused %.1f ms)", sn.ID, in.ID, sn.Bytes, sn.PausedMs), idOut{ID: sn.ID}, nil
}

type forkIn struct {
	SnapshotID string `json:"snapshot_id,omitempty" jsonschema:"fork this snapshot"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"or snapshot this sandbox and fork it"`
	Count      int    `json:"count,omitempty" jsonschema:"how many replicas (default 1)"`
}

type forkOut struct {
	Snapshot string   `json:"snapshot"`
	IDs      []string `json:"ids"`
}

func (t *tools) fork(ctx context.Context, _ *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, forkOut, error) {
	req := &api.ForkRequest{Count: max(in.Count, 1)}
	var res *api.ForkResult
	var err error
	switch {
	case in.SnapshotID != "" && in.SandboxID != "":
		return nil, forkOut{}, fmt.Errorf("give snapshot_id or sandbox_id, not both")
	case in.SnapshotID != "":
		res, err = t.c.Fork(ctx, in.SnapshotID, req)
	case in.SandboxID != "":
		res, err = t.c.ForkSandbox(ctx, in.SandboxID, req)
	default:
		return nil, forkOut{}, fmt.Errorf("give snapshot_id (a snapshot to fork) or sandbox_id (a sandbox to snapshot and fork)")
	}
	if err != nil {
		return nil, forkOut{}, err
	}
	out := forkOut{Snapshot: res.Snapshot.ID, IDs: []string{}}
	for _, sb := range res.Sandboxes {
		out.IDs = append(out.IDs, sb.ID)
	}
	for _, d := range res.Desktops {
		out.IDs = append(out.IDs, d.ID)
	}
	return text("forked %s into %s", res.Snapshot.ID, strings.Join(out.IDs, " ")), out, nil
}

type desktopIn struct {
	Width  int        `json:"width,omitempty" jsonschema:"screen width (default 1280)"`
	Height int        `json:"height,omitempty" jsonschema:"screen height (default 800)"`
	Apps   [][]string `json:"apps,omitempty" jsonschema:"commands to start, each an argv, e.g. [[\"xterm\"]]"`
}

func (t *tools) createDesktop(ctx context.Context, _ *mcp.CallToolRequest, in desktopIn) (*mcp.CallToolResult, idOut, error) {
	d, err := t.c.CreateDesktop(ctx, &api.DesktopSpec{Width: in.Width, Height: in.Height, Apps: in.Apps})
	if err != nil {
		return nil, idOut{}, err
	}
	return text("created desktop %s", d.ID), idOut{ID: d.ID}, nil
}

// withACI runs fn on a connection to a desktop's ACI.
func (t *tools) withACI(ctx context.Context, id string, fn func(*client.ACI) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := t.c.DialACI(ctx, id)
	if err != nil {
		return err
	}
	defer a.Close()
	return fn(a)
}

func (t *tools) screenshot(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
	var img []byte
	var reply *api.ACIReply
	err := t.withACI(ctx, in.ID, func(a *client.ACI) error {
		var err error
		reply, img, err = a.Screenshot(ctx, &api.ACIScreenshot{Format: "png"})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.ImageContent{Data: img, MIMEType: "image/png"},
		&mcp.TextContent{Text: fmt.Sprintf("%dx%d screenshot of desktop %s", reply.Width, reply.Height, in.ID)},
	}}, nil, nil
}

type actionIn struct {
	ID     string `json:"id" jsonschema:"the desktop's id"`
	Action string `json:"action" jsonschema:"click, double_click, move, type or key"`
	X      int    `json:"x,omitempty" jsonschema:"for click and move: the screen x"`
	Y      int    `json:"y,omitempty" jsonschema:"for click and move: the screen y"`
	Text   string `json:"text,omitempty" jsonschema:"for type: the text"`
	Keys   string `json:"keys,omitempty" jsonschema:"for key: a combo such as ctrl+s or Return"`
}

func (t *tools) desktopAction(ctx context.Context, _ *mcp.CallToolRequest, in actionIn) (*mcp.CallToolResult, any, error) {
	err := t.withACI(ctx, in.ID, func(a *client.ACI) error {
		switch in.Action {
		case "click":
			return a.Click(ctx, in.X, in.Y, 1)
		case "double_click":
			return a.Click(ctx, in.X, in.Y, 2)
		case "move":
			return a.Move(ctx, in.X, in.Y)
		case "type":
			return a.Type(ctx, in.Text)
		case "key":
			return a.Key(ctx, in.Keys)
		}
		return fmt.Errorf("action %q: want click, double_click, move, type or key", in.Action)
	})
	if err != nil {
		return nil, nil, err
	}
	return text("%s done on %s", in.Action, in.ID), nil, nil
}

// readResource serves tine://sandboxes/{id}/files/{path}.
func (t *tools) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	u, err := url.Parse(req.Params.URI)
	if err != nil || u.Scheme != "tine" || u.Host != "sandboxes" {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	id, file, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/files/")
	if !ok || id == "" {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	b, err := t.read(ctx, id, "/"+file)
	if client.ErrorCode(err) == api.CodeNotFound {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, err
	}
	c := &mcp.ResourceContents{URI: req.Params.URI, MIMEType: "text/plain", Text: string(b)}
	if !utf8Text(b) {
		c.MIMEType, c.Text, c.Blob = "application/octet-stream", "", b
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

func utf8Text(b []byte) bool {
	return bytes.IndexByte(b, 0) < 0 && strings.ToValidUTF8(string(b), "\uFFFD") == string(b)
}

type codeIn struct {
	ID             string `json:"id" jsonschema:"the sandbox's id"`
	SessionID      string `json:"session_id,omitempty" jsonschema:"a session of the sandbox to run in (default: start a new one)"`
	Code           string `json:"code" jsonschema:"Python source; the value of its last expression is returned"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"interrupt the cell after this long (default 60)"`
}

type codeOut struct {
	SessionID      string `json:"session_id"`
	Status         string `json:"status"`
	ExecutionCount int    `json:"execution_count"`
	Stdout         string `json:"stdout"`
	Stderr         string `json:"stderr"`
	Text           string `json:"text,omitempty"`
	Error          string `json:"error,omitempty"`
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in codeIn) (*mcp.CallToolResult, codeOut, error) {
	sess := t.c.Session(in.ID, in.SessionID)
	if in.SessionID == "" {
		var err error
		if sess, err = t.c.CreateSession(ctx, in.ID, nil); err != nil {
			return nil, codeOut{}, err
		}
	}
	timeout := in.TimeoutSeconds
	if timeout <= 0 {
		timeout = 60
	}
	ex, err := sess.RunCell(ctx, &api.CellRequest{Code: in.Code, TimeoutMs: timeout * 1000})
	if err != nil {
		return nil, codeOut{}, err
	}
	out := codeOut{SessionID: sess.ID, Status: ex.Status, ExecutionCount: ex.ExecutionCount, Stdout: ex.Stdout, Stderr: ex.Stderr, Text: ex.Text()}
	var b strings.Builder
	fmt.Fprintf(&b, "session %s, cell %d: %s\n", sess.ID, ex.ExecutionCount, ex.Status)
	if ex.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s", ex.Stdout)
	}
	if ex.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s", ex.Stderr)
	}
	if out.Text != "" {
		fmt.Fprintf(&b, "result: %s\n", out.Text)
	}
	if ex.Error != nil {
		out.Error = ex.Error.Name + ": " + ex.Error.Value
		fmt.Fprintf(&b, "%s", ex.Error.Traceback)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, IsError: ex.Error != nil}
	for _, r := range ex.Results {
		if png := r.PNG(); png != nil {
			res.Content = append(res.Content, &mcp.ImageContent{Data: png, MIMEType: "image/png"})
		}
	}
	return res, out, nil
}
