package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/client"
)

func newSessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Stateful Python sessions in live sandboxes: run cells, keep state (needs tine serve)",
		Long: `A session is a Python interpreter in a live sandbox whose state (variables,
imports, open files, working directory) persists from cell to cell, as in a
Jupyter kernel. It runs behind the sandbox's walls and goes with the sandbox.
A session is named by its id (SID), or ID/SID with its sandbox's id.
A session created --forkable can be forked live (tine session fork) into new
sandboxes that each hold a copy of its state.`,
	}
	cmd.AddCommand(newSessionCreateCommand(), newSessionRunCommand(), newSessionAttachCommand(),
		newSessionLsCommand(), newSessionRmCommand(), newSessionForkCommand())
	return cmd
}

func newSessionCreateCommand() *cobra.Command {
	var spec api.SessionSpec
	var env []string
	cmd := &cobra.Command{Use: "create [flags] ID", Short: "Start a session in a live sandbox; prints the session's id", Args: cobra.ExactArgs(1)}
	cmd.Flags().StringVarP(&spec.Workdir, "workdir", "w", "", "the interpreter's first working directory (default: the sandbox's)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE, or KEY to pass this shell's value (repeatable)")
	cmd.Flags().BoolVar(&spec.Forkable, "forkable", false, "make a session that tine session fork can fork live: its interpreter has no Landlock domain and may call setns (each fork walls itself in fully; docs/security.md)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		spec.Env = envFromFlags(env)
		c, err := dial()
		if err != nil {
			return err
		}
		s, err := c.CreateSession(cmd.Context(), args[0], &spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), s.ID)
		return nil
	}
	return cmd
}

func newSessionRunCommand() *cobra.Command {
	var code, file, timeout string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run [flags] SID (-c CODE | -f FILE)",
		Short: "Run one cell in a session, its output streamed",
		Long: `run sends one cell to a session and streams what it prints; the value of its
last expression and its display() results follow (text/plain; other MIME
types are named), an exception's traceback goes to stderr. Exit status: 0
when the cell ran to its end, 1 when it raised, was interrupted or timed out,
3 when the session died in it. Ctrl-C interrupts the cell.`,
		Example: `  tine session run $sid -c 'x = 41'
  tine session run $sid -c 'x + 1'
  tine session run $sid -f analysis.py --timeout 30s`,
		Args: cobra.ExactArgs(1),
	}
	fl := cmd.Flags()
	fl.StringVarP(&code, "code", "c", "", "the cell's code")
	fl.StringVarP(&file, "file", "f", "", "read the cell's code from FILE (- for stdin)")
	fl.StringVar(&timeout, "timeout", "", "interrupt the cell after this long, e.g. 30s")
	fl.BoolVar(&asJSON, "json", false, "print the whole result as JSON instead")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if (code == "") == (file == "") {
			return usageError{"session run: give the cell with exactly one of -c CODE or -f FILE"}
		}
		if file != "" {
			var b []byte
			var err error
			if file == "-" {
				b, err = io.ReadAll(cmd.InOrStdin())
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			code = string(b)
		}
		req := &api.CellRequest{Code: code}
		if timeout != "" {
			d, err := parseDuration("timeout", timeout)
			if err != nil {
				return err
			}
			req.TimeoutMs = max(1, d.Milliseconds())
		}
		s, err := dialSession(cmd.Context(), dial, args[0])
		if err != nil {
			return err
		}
		var ex *api.Execution
		if asJSON {
			if ex, err = s.RunCell(cmd.Context(), req); err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.Encode(ex)
		} else {
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, os.Interrupt)
			defer signal.Stop(sigs)
			if ex, err = runInteractively(cmd.Context(), s, req, cmd.OutOrStdout(), cmd.ErrOrStderr(), sigs); err != nil {
				return err
			}
		}
		return cellExit(ex)
	}
	return cmd
}

// cellExit is run's exit status for ex.
func cellExit(ex *api.Execution) error {
	switch {
	case ex.SessionDead != "":
		return exitError{3}
	case ex.Status != api.ExecOK:
		return exitError{1}
	}
	return nil
}

// runInteractively streams a cell to out and errOut; a signal on sigs
// (the caller's Ctrl-C) interrupts it.
func runInteractively(ctx context.Context, s *client.Session, req *api.CellRequest, out, errOut io.Writer, sigs <-chan os.Signal) (*api.Execution, error) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-sigs:
				s.Interrupt(context.Background())
			case <-done:
				return
			}
		}
	}()
	ex, err := s.RunStream(ctx, req, func(e api.SessionEvent) {
		switch e.Type {
		case api.EventStdout:
			io.WriteString(out, e.Text)
		case api.EventStderr:
			io.WriteString(errOut, e.Text)
		case api.EventResult:
			printResult(out, e.Result)
		case api.EventError:
			io.WriteString(errOut, e.Error.Traceback)
		}
	})
	if err != nil {
		return nil, err
	}
	if ex.SessionDead != "" {
		fmt.Fprintf(errOut, "tine: the session died: %s\n", ex.SessionDead)
	}
	return ex, nil
}

// printResult prints a result's text/plain, and names its other types.
func printResult(w io.Writer, r *api.Result) {
	var others []string
	for mime, v := range r.Data {
		if mime == "text/plain" {
			continue
		}
		s, _ := v.(string)
		others = append(others, fmt.Sprintf("%s, %d bytes", mime, len(s)))
	}
	text := r.Text()
	if len(others) > 0 {
		text += " [" + strings.Join(others, "; ") + "]"
	}
	fmt.Fprintln(w, text)
}

func newSessionAttachCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attach SID",
		Short: "A prompt that sends cells to a session",
		Long: `attach reads cells at a prompt and runs each in the session, as run does. A
cell is one line; a line ending with ':' or '\' opens a block that an empty
line ends. Ctrl-C interrupts the running cell; Ctrl-D leaves (the session
goes on).`,
		Args: cobra.ExactArgs(1),
	}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		s, err := dialSession(cmd.Context(), dial, args[0])
		if err != nil {
			return err
		}
		info, err := s.Info(cmd.Context())
		if err != nil {
			return err
		}
		out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
		// Ctrl-C interrupts a running cell; at the prompt it is dropped,
		// not the end of attach.
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, os.Interrupt)
		defer signal.Stop(sigs)
		in := bufio.NewScanner(cmd.InOrStdin())
		in.Buffer(make([]byte, 1<<20), 16<<20)
		n := info.ExecutionCount + 1
		for {
			fmt.Fprintf(out, "In [%d]: ", n)
			code, ok := readCell(in, out)
			if !ok {
				fmt.Fprintln(out)
				return nil
			}
			if strings.TrimSpace(code) == "" {
				continue
			}
			for len(sigs) > 0 {
				<-sigs // pressed at the prompt
			}
			ex, err := runInteractively(cmd.Context(), s, &api.CellRequest{Code: code}, out, errOut, sigs)
			if err != nil {
				return err
			}
			n = ex.ExecutionCount + 1
			if ex.SessionDead != "" {
				return exitError{3}
			}
		}
	}
	return cmd
}

// readCell reads one cell at the prompt (see attach); ok is false at end
// of input.
func readCell(in *bufio.Scanner, out io.Writer) (string, bool) {
	if !in.Scan() {
		return "", false
	}
	line := in.Text()
	if !strings.HasSuffix(line, ":") && !strings.HasSuffix(line, "\\") {
		return line, true
	}
	lines := []string{line}
	for {
		fmt.Fprint(out, "   ...: ")
		if !in.Scan() || in.Text() == "" {
			return strings.Join(lines, "\n"), true
		}
		lines = append(lines, in.Text())
	}
}

func newSessionLsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ls [ID]", Short: "List the sessions of a sandbox, or of every sandbox", Args: cobra.MaximumNArgs(1)}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		var ids []string
		if len(args) == 1 {
			ids = args
		} else {
			boxes, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			for _, b := range boxes {
				ids = append(ids, b.ID)
			}
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SESSION\tSANDBOX\tSTATE\tCELLS\tQUEUED\tPID\tCREATED")
		for _, id := range ids {
			list, err := c.Sessions(cmd.Context(), id)
			if err != nil {
				if len(args) == 0 && client.ErrorCode(err) == api.CodeNotFound {
					continue // gone meanwhile
				}
				return err
			}
			for _, s := range list {
				state := string(s.State)
				if s.DeadReason != "" {
					state += " (" + s.DeadReason + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.ID, s.SandboxID, state, s.ExecutionCount, s.Queued, s.Pid, s.CreatedAt.Local().Format(time.DateTime))
			}
		}
		return tw.Flush()
	}
	return cmd
}

func newSessionRmCommand() *cobra.Command {
	return newDeleteCommand("rm SID...", "End sessions", func(ctx context.Context, c *client.Client, sid string) error {
		s, err := resolveSession(ctx, c, sid)
		if err != nil {
			return err
		}
		return s.Delete(ctx)
	})
}

func newSessionForkCommand() *cobra.Command {
	var count int
	cmd := &cobra.Command{Use: "fork [flags] SID", Short: "Fork a --forkable session live into new sandboxes; prints each child's ID/SID", Args: cobra.ExactArgs(1),
		Long: `Fork a session created with --forkable, between cells, into N new sandboxes,
each holding a session whose state (variables, imports, working directory,
open files re-opened by path) is the session's now; the session goes on. Each
child is a sandbox like any other (exec, files, more sessions), with its own
namespaces, writable layer and /tmp, made from a snapshot of the parent's
files, and dies with the parent: the parent cannot be deleted while its forks
live. A session holding threads, sockets or child processes is refused, and so
is a 17th fork of one interpreter (restart it, or fork a new forkable session).`}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many children")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		s, err := dialSession(cmd.Context(), dial, args[0])
		if err != nil {
			return err
		}
		kids, _, err := s.Fork(cmd.Context(), count)
		if err != nil {
			return err
		}
		for _, k := range kids {
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s\n", k.SandboxID, k.ID)
		}
		return nil
	}
	return cmd
}

// dialSession connects to the daemon and resolves the session named name
// (resolveSession).
func dialSession(ctx context.Context, dial func() (*client.Client, error), name string) (*client.Session, error) {
	c, err := dial()
	if err != nil {
		return nil, err
	}
	return resolveSession(ctx, c, name)
}

// resolveSession finds a session named SID (looked up in every sandbox)
// or ID/SID.
func resolveSession(ctx context.Context, c *client.Client, name string) (*client.Session, error) {
	if sb, sid, ok := strings.Cut(name, "/"); ok {
		return c.Session(sb, sid), nil
	}
	boxes, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range boxes {
		list, err := c.Sessions(ctx, b.ID)
		if err != nil {
			continue
		}
		for _, s := range list {
			if s.ID == name {
				return c.Session(b.ID, s.ID), nil
			}
		}
	}
	return nil, fmt.Errorf("no session %q in any sandbox (list them with tine session ls)", name)
}
