package main

import (
	"github.com/spf13/cobra"

	"github.com/tine-run/tine/client"
)

// daemonFlag adds --socket to a command that talks to the daemon and
// returns how to reach it: --socket, else TINE_HOST/TINE_SOCKET (see
// client.FromEnv), else the default socket.
func daemonFlag(cmd *cobra.Command) func() (*client.Client, error) {
	var socket string
	cmd.Flags().StringVar(&socket, "socket", "", "the daemon's unix socket (default: $TINE_SOCKET, or "+client.DefaultSocket+")")
	return func() (*client.Client, error) {
		if socket != "" {
			return client.NewUnix(socket), nil
		}
		return client.FromEnv()
	}
}
