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
		pf       providerFlags
		template string
		network  string
		verbose  bool
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools over MCP on stdin and stdout",
		Long: `mcp serves Tupper's sandbox tools (run_command, read_file, edit_file, …) to an MCP client
over stdin and stdout. Tools that get no sandbox_id share one default sandbox, created on
first use and destroyed when the client disconnects.

Configure an agent app to start "tupper mcp"; see docs/mcp.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			net, err := parseNetwork(network)
			if err != nil {
				return err
			}
			prov, err := pf.resolve(ctx)
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
			opts.Session.Create.Template = template
			opts.Session.Create.Network = net
			return mcpserver.Serve(ctx, opts, os.Stdin, os.Stdout)
		},
	}
	pf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&template, "template", "", "template of the sandboxes (local default: host)")
	fl.StringVar(&network, "network", "all", "network of the sandboxes: all or none (with none, create_sandbox cannot ask for more)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log the server's diagnostics to stderr")
	return cmd
}
