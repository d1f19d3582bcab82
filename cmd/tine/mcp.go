package main

import (
	"context"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/tine-run/tine/client"
	tinemcp "github.com/tine-run/tine/internal/mcp"
)

func newMCPCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve tine to an agent as an MCP server on stdio",
		Long: `mcp serves the Model Context Protocol on stdin and stdout, as a client of
the daemon (found through TINE_SOCKET, or TINE_HOST and TINE_TOKEN for TCP, as
the other commands find it). Tools: create_sandbox, destroy_sandbox,
list_sandboxes, run_command, read_file, write_file, snapshot, fork,
create_desktop, screenshot, desktop_action. Resources:
tine://sandboxes/{id}/files/{path}. tine serve --e2b serves the same at
/v1/mcp (streamable HTTP, behind the E2B API key).`,
		Example: `  claude mcp add tine -- tine mcp`,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return tinemcp.NewServer(c).Run(ctx, &mcp.StdioTransport{})
		},
	}
}

func newMCPHandler(c *client.Client) http.Handler { return tinemcp.Handler(c) }
