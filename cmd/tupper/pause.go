package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newPauseCmd() *cobra.Command {
	var (
		pf         providerFlags
		dropMemory bool
	)
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a sandbox",
		Long: "pause stops every process of sandbox ID until `tupper resume ID`. By default their\n" +
			"memory is kept: frozen in place, or saved to disk where the sandbox has the\n" +
			"pause-frees-memory capability (runsc with network none), and resume continues them.\n" +
			"With --drop-memory the processes end and their memory is released; the sandbox keeps\n" +
			"its files, id, labels, deadline and network, and resume boots it again on those\n" +
			"files (the pause-cold capability). Pausing a paused sandbox changes nothing.",
		Example: "  tupper pause $id --drop-memory && tupper resume $id",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withSandbox(cmd.Context(), &pf, args[0], func(box *sandbox.Sandbox) error {
				return box.PauseWith(cmd.Context(), sandbox.PauseOptions{DropMemory: dropMemory})
			})
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&dropMemory, "drop-memory", false, "end the processes and release their memory; resume boots the sandbox again on its files")
	return cmd
}

func newResumeCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused sandbox",
		Long: "resume continues a sandbox that `tupper pause` paused, or boots again one paused with\n" +
			"--drop-memory. Resuming a running sandbox changes nothing.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withSandbox(cmd.Context(), &pf, args[0], func(box *sandbox.Sandbox) error {
				return box.Resume(cmd.Context())
			})
		},
	}
	pf.register(cmd)
	return cmd
}

// withSandbox connects to sandbox id with the provider pf names and runs f on it.
func withSandbox(ctx context.Context, pf *providerFlags, id string, f func(*sandbox.Sandbox) error) error {
	prov, err := pf.resolveExisting(ctx)
	if err != nil {
		return err
	}
	box, err := sandbox.Connect(ctx, prov, id, sandbox.ConnectOptions{SkipRecoverSecrets: true})
	if err != nil {
		return err
	}
	defer box.Close()
	return f(box)
}
