package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tine-run/tine/internal/envd"
)

func newEnvdCommand() *cobra.Command {
	var socket string
	var detach bool
	var home string
	var ready bool
	cmd := &cobra.Command{
		Use:   "envd [--socket PATH] [--detach]",
		Short: "Serve E2B's envd API on a unix socket (inside an E2B sandbox of tine serve --e2b)",
		Long: `envd serves the process and filesystem services of E2B's in-sandbox agent
(Connect-RPC, JSON) and its /files, /health, /envs and /init routes on a
unix socket, reporting envd version ` + envd.Version + `. tine serve --e2b starts it
inside every E2B sandbox (with --ready, on an exec stream it holds for the
sandbox's life) and proxies the SDKs' sandbox traffic to it. With --ready it
prints a line once the socket accepts connections; with --detach it instead
hands the socket to a child in its own session and exits then.`,
		Hidden: true,
		Args:   noArgs,
		RunE: func(*cobra.Command, []string) error {
			if os.Getenv(inheritedEnv) == "1" {
				os.Unsetenv(inheritedEnv) // not for the commands envd runs
				f := os.NewFile(3, "envd listener")
				ln, err := net.FileListener(f)
				if err != nil {
					return fmt.Errorf("inherited listener: %w", err)
				}
				f.Close()
				return envd.Serve(ln, home)
			}
			// The home exists before the ready line: the daemon's first
			// request after it may be a code context's session started
			// there (envd.Serve makes it again, falling back when it cannot).
			if home != "" {
				os.MkdirAll(home, 0o755)
			}
			ln, err := envd.Listen(socket)
			if err != nil {
				return err
			}
			if detach {
				return detachEnvd(ln, home)
			}
			if ready {
				fmt.Println(envd.ReadyLine)
			}
			return envd.Serve(ln, home)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", envd.Socket, "unix socket to serve on")
	cmd.Flags().StringVar(&home, "home", "", "default working directory and HOME of the commands (made if missing; default envd's $HOME)")
	cmd.Flags().BoolVar(&ready, "ready", false, `print "`+envd.ReadyLine+`" on stdout once the socket accepts connections`)
	cmd.Flags().BoolVar(&detach, "detach", false, "serve from a child in its own session and exit once listening")
	return cmd
}

// inheritedEnv tells the detached child its listener is descriptor 3.
const inheritedEnv = "TINE_ENVD_INHERITED"

// detachEnvd hands the bound listener to a child in its own session, so
// the socket accepts connections from the moment this process exits.
func detachEnvd(ln net.Listener, home string) error {
	f, err := ln.(*net.UnixListener).File()
	if err != nil {
		return fmt.Errorf("listener descriptor: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	c := exec.Command(self, "envd", "--socket", ln.Addr().String(), "--home", home)
	c.Env = append(os.Environ(), inheritedEnv+"=1")
	c.Stdin, c.Stdout, c.Stderr = null, null, null
	c.ExtraFiles = []*os.File{f}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start envd: %w", err)
	}
	return c.Process.Release()
}
