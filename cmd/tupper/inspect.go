package main

import (
	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func newInspectCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox as JSON: state, labels, template, runtime, deadline, capabilities",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withSandbox(ctx, &pf, args[0], func(box *sandbox.Sandbox) error {
				in, err := box.Info(ctx)
				if err != nil {
					return err
				}
				caps := []string{}
				for _, c := range box.Capabilities.List() {
					caps = append(caps, string(c))
				}
				// The server's JSON of a sandbox, whichever provider answered.
				return printJSON(cmd, api.Sandbox{
					ID: in.ID, Provider: box.Provider, Key: in.Key, Labels: in.Labels, State: string(in.State),
					CreatedAt: in.CreatedAt.UTC(), Deadline: in.Deadline.UTC(), Template: in.Template, Runtime: in.Runtime,
					Workdir: in.Workdir, Capabilities: caps, Restarts: api.RestartsOf(in.Restarts),
				})
			})
		},
	}
	pf.register(cmd)
	return cmd
}
