package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

// sandboxJSON is a sandbox as `tupper inspect` prints it: `tupper ls --json`'s row and the
// rest the provider says of it.
type sandboxJSON struct {
	ID           string            `json:"id"`
	Provider     string            `json:"provider"`
	Key          string            `json:"key,omitempty"`
	Labels       map[string]string `json:"labels"`
	State        string            `json:"state"`
	CreatedAt    time.Time         `json:"createdAt"`
	Deadline     time.Time         `json:"deadline,omitzero"`
	Template     string            `json:"template,omitempty"`
	Runtime      string            `json:"runtime,omitempty"`
	Capabilities []string          `json:"capabilities"`
}

func newInspectCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox as JSON: state, labels, template, runtime, deadline, capabilities",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			box, err := sandbox.Connect(ctx, prov, args[0], sandbox.ConnectOptions{SkipRecoverSecrets: true})
			if err != nil {
				return err
			}
			defer box.Close()
			in, err := box.Info(ctx)
			if err != nil {
				return err
			}
			caps := []string{}
			for _, c := range box.Capabilities.List() {
				caps = append(caps, string(c))
			}
			return printJSON(cmd, sandboxJSON{
				ID: in.ID, Provider: box.Provider, Key: in.Key, Labels: in.Labels, State: string(in.State),
				CreatedAt: in.CreatedAt.UTC(), Deadline: in.Deadline.UTC(), Template: in.Template, Runtime: in.Runtime,
				Capabilities: caps,
			})
		},
	}
	pf.register(cmd)
	return cmd
}
