package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/mcpserver"
)

// newMCPCmd is `tupper mcp`: the sandbox tools over MCP on stdin and stdout, for agent apps
// (Claude Desktop, Cursor, VS Code, …) that start MCP servers as subprocesses.
func newMCPCmd() *cobra.Command {
	var (
		f       createFlags
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools over MCP on stdin and stdout",
		Long: `mcp serves Tupper's sandbox tools (run_command, read_file, edit_file, …) to an MCP client
over stdin and stdout. Tools that get no sandbox_id share one default sandbox, created on
first use and destroyed when the client disconnects.

The sandboxes it creates take run's and create's options (--template, --network, --allow,
--deny, --egress-proxy, --env, --secret, --size, --volume, …): an operator's choice, which
create_sandbox can narrow (network none, an allow list) but never widen.

Configure an agent app to start "tupper mcp"; see docs/mcp.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			create, err := f.options()
			if err != nil {
				return err
			}
			prov, err := f.resolve(ctx)
			if err != nil {
				return err
			}
			var log *slog.Logger
			if verbose {
				log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			}
			opts := mcpserver.Options{
				Provider: prov,
				Version:  version,
				Logger:   log,
			}
			opts.Session.Create = create
			return mcpserver.Serve(ctx, opts, os.Stdin, os.Stdout)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&verbose, "verbose", false, "log the server's diagnostics to stderr")
	return cmd
}
