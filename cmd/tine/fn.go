package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/zygote"
)

func newFnCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fn",
		Short: "Warm functions: a zygote forked per request (needs tine serve)",
		Long: `A warm function keeps a sandbox up with the function's runtime loaded:
for runtime python, a zygote that imported the entry and its preload list
once and forks a child per request; for runtime exec, a fresh process of
a program per request. Each request runs in a cgroup of its own with the
spec's limits and, for python, a private /tmp. See docs/functions.md.`,
	}
	cmd.AddCommand(newFnUpCommand(), newFnCallCommand(), newFnLsCommand(), newFnRmCommand())
	return cmd
}

func newFnUpCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up SPEC.toml",
		Short: "Register (or replace) a function from its TOML spec and warm it",
		Args:  cobra.ExactArgs(1),
	}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		src, err := os.ReadFile(args[0])
		if err != nil {
			return usageError{fmt.Sprintf("read the spec: %v", err)}
		}
		abs, _ := filepath.Abs(args[0])
		spec, err := zygote.ParseSpec(src, filepath.Dir(abs))
		if err != nil {
			return usageError{fmt.Sprintf("%s: %v", args[0], err)}
		}
		c, err := dial()
		if err != nil {
			return err
		}
		f, err := c.PutFunction(cmd.Context(), spec)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (warmed in %.1f ms)\n", f.Spec.Name, f.State, f.WarmMs)
		return nil
	}
	return cmd
}

// payloadFlag reads --data: JSON text, or @FILE, or @- for stdin.
func payloadFlag(data string) ([]byte, error) {
	if data == "" {
		return nil, nil
	}
	if name, ok := strings.CutPrefix(data, "@"); ok {
		if name == "-" {
			return io.ReadAll(os.Stdin)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--data %s: %v", data, err)}
		}
		return b, nil
	}
	return []byte(data), nil
}

func newFnCallCommand() *cobra.Command {
	var data string
	var raw, full bool
	cmd := &cobra.Command{
		Use:   "call NAME",
		Short: "Call a function once and print its result",
		Long: `Call a function once. The payload is --data (JSON, @FILE, or @- for stdin;
with --raw it is passed as bytes). Prints the result; the request's stdout
and stderr go to tine's. --json prints the whole answer, with status and
phase timings. The exit code is 0 for status ok, 1 otherwise.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVarP(&data, "data", "d", "", "payload: JSON text, @FILE or @- (stdin)")
	cmd.Flags().BoolVar(&raw, "raw", false, "send the payload as raw bytes (the handler gets bytes)")
	cmd.Flags().BoolVar(&full, "json", false, "print the whole answer as JSON")
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		payload, err := payloadFlag(data)
		if err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		var inv *api.Invocation
		if raw {
			inv, err = c.InvokeRaw(cmd.Context(), args[0], payload)
		} else {
			inv, err = c.Invoke(cmd.Context(), args[0], payload)
		}
		if err != nil {
			return err
		}
		return printInvocation(cmd, inv, full)
	}
	return cmd
}

// printInvocation prints an answer; a status other than ok is exit code 1.
func printInvocation(cmd *cobra.Command, inv *api.Invocation, full bool) error {
	out := cmd.OutOrStdout()
	if full {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.Encode(inv)
	} else {
		fmt.Fprint(cmd.ErrOrStderr(), inv.Stderr)
		fmt.Fprint(out, inv.Stdout)
		switch {
		case inv.ResultBase64 != "":
			b, _ := base64.StdEncoding.DecodeString(inv.ResultBase64)
			out.Write(b)
		case len(inv.Result) > 0:
			fmt.Fprintln(out, string(inv.Result))
		}
	}
	if inv.Status != api.StatusOK {
		msg := inv.Status
		if e := inv.Error; e != nil {
			msg = fmt.Sprintf("%s: %s: %s", inv.Status, e.Type, e.Message)
			if e.Traceback != "" && !full {
				fmt.Fprint(cmd.ErrOrStderr(), e.Traceback)
			}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "tine: %s\n", msg)
		return exitError{code: 1}
	}
	return nil
}

func newFnLsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ls", Short: "List the registered functions", Args: cobra.NoArgs}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		fns, err := c.Functions(cmd.Context())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tRUNTIME\tSTATE\tCALLS\tWARM_MS")
		for _, f := range fns {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\n", f.Spec.Name, f.Spec.Runtime, f.State, f.Calls, f.WarmMs)
		}
		return tw.Flush()
	}
	return cmd
}

func newFnRmCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "rm NAME...", Short: "Unregister functions and free their sandboxes", Args: cobra.MinimumNArgs(1)}
	dial := daemonFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		c, err := dial()
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := c.DeleteFunction(cmd.Context(), n); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), n)
		}
		return nil
	}
	return cmd
}

func newScriptCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "script",
		Short: "The runtime pool: register Python scripts by content, call them by digest",
	}
	put := &cobra.Command{Use: "put FILE", Short: "Register a script; prints its sha256 digest", Args: cobra.ExactArgs(1)}
	dialPut := daemonFlag(put)
	put.RunE = func(cmd *cobra.Command, args []string) error {
		src, err := os.ReadFile(args[0])
		if err != nil {
			return usageError{fmt.Sprintf("read the script: %v", err)}
		}
		c, err := dialPut()
		if err != nil {
			return err
		}
		s, err := c.PutScript(cmd.Context(), src)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), s.Digest)
		return nil
	}
	var data string
	var full bool
	call := &cobra.Command{Use: "call DIGEST", Short: "Call a registered script's handler(event) through the pool", Args: cobra.ExactArgs(1)}
	call.Flags().StringVarP(&data, "data", "d", "", "payload: JSON text, @FILE or @- (stdin)")
	call.Flags().BoolVar(&full, "json", false, "print the whole answer as JSON")
	dialCall := daemonFlag(call)
	call.RunE = func(cmd *cobra.Command, args []string) error {
		payload, err := payloadFlag(data)
		if err != nil {
			return err
		}
		c, err := dialCall()
		if err != nil {
			return err
		}
		inv, err := c.InvokeScript(cmd.Context(), args[0], payload)
		if err != nil {
			return err
		}
		return printInvocation(cmd, inv, full)
	}
	cmd.AddCommand(put, call)
	return cmd
}
