package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tine-run/tine/api"
)

type execFlags struct {
	tty              bool
	workdir, timeout string
	env              []string
}

func newExecCommand() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a live sandbox, with its stdio attached",
		Long: `exec runs a command in a live sandbox of the daemon, streaming this
terminal's stdin to it and its stdout and stderr back, and exits with its exit
code (127 when not found, 124 on --timeout, 128+N when killed by signal N).
Signals tine receives are passed to the command; with -t it gets a terminal
the size of this one.`,
		Example: `  tine exec $id -- ls -la /
  echo hi | tine exec $id -- cat
  tine exec -t $id -- /bin/bash`,
		Args: func(_ *cobra.Command, args []string) error {
			if _, argv := splitExecArgs(args); len(argv) == 0 {
				return usageError{"exec: want a sandbox id and a command; usage: tine exec [flags] ID -- CMD [ARGS...]"}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a pseudo-terminal")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory (default: the sandbox's)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE, or KEY to pass this shell's value (repeatable)")
	fl.StringVar(&f.timeout, "timeout", "", "kill the command after this long, e.g. 30s (exit 124)")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, argv := splitExecArgs(args)
		req := &api.ExecRequest{Argv: argv, Env: envFromFlags(f.env), Workdir: f.workdir, TTY: f.tty}
		if f.timeout != "" {
			d, err := parseDuration("timeout", f.timeout)
			if err != nil {
				return err
			}
			req.TimeoutMs = max(1, d.Milliseconds())
		}
		c, err := dial()
		if err != nil {
			return err
		}
		stdinFD := int(os.Stdin.Fd())
		if f.tty && term.IsTerminal(stdinFD) {
			if w, h, err := term.GetSize(stdinFD); err == nil {
				req.Cols, req.Rows = uint16(w), uint16(h)
			}
		}
		// Catch signals before the command exists, so none is lost.
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
			syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
		defer signal.Stop(sigs)

		st, err := c.ExecStream(cmd.Context(), id, req)
		if err != nil {
			return err
		}
		defer st.Close()
		if f.tty && term.IsTerminal(stdinFD) {
			if old, err := term.MakeRaw(stdinFD); err == nil {
				defer term.Restore(stdinFD, old)
			}
		}
		go func() {
			for sig := range sigs {
				if sig == syscall.SIGWINCH {
					if w, h, err := term.GetSize(stdinFD); err == nil {
						st.Resize(uint16(w), uint16(h))
					}
					continue
				}
				st.Signal(sig.(syscall.Signal))
			}
		}()
		go func() {
			io.Copy(st.Stdin, os.Stdin)
			st.Stdin.Close()
		}()
		var out sync.WaitGroup
		out.Go(func() { io.Copy(os.Stdout, st.Stdout) })
		out.Go(func() { io.Copy(os.Stderr, st.Stderr) })
		out.Wait()
		exit, err := st.Wait()
		if err != nil {
			return err
		}
		if exit.Reason == "timeout" {
			fmt.Fprintf(os.Stderr, "tine: %s: timed out after %s; killed\n", argv[0], f.timeout)
		}
		if exit.ExitCode != 0 {
			return exitError{exit.ExitCode}
		}
		return nil
	}
	return cmd
}

// splitExecArgs splits ID [--] CMD ARGS...: flags stop at the id, so cobra
// hands the "--" on.
func splitExecArgs(args []string) (id string, argv []string) {
	if len(args) == 0 {
		return "", nil
	}
	argv = args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	return args[0], argv
}
