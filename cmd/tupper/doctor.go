package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/docker"
)

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Say which providers work on this machine and what the others need",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ok := 0
			for _, name := range provider.List() {
				r, _ := provider.Lookup(name)
				status, avail := checkProvider(ctx, r)
				if avail {
					ok++
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-8s %s\n", name, status)
			}
			def := provider.PlatformDefault(runtime.GOOS)
			if def == "" {
				def = "none on " + runtime.GOOS + " yet (name a provider with --provider)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "platform default: %s\n", def)
			for _, line := range localDoctorLines(ctx) {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			// The engine's architecture is only known once it answers; the usual one is
			// this machine's.
			fmt.Fprintf(cmd.OutOrStdout(), "agent of docker containers: %s\n", docker.AgentSource(runtime.GOARCH))
			if ok == 0 {
				return fmt.Errorf("no provider is available")
			}
			return nil
		},
	}
}

func checkProvider(ctx context.Context, r provider.Registration) (string, bool) {
	p, err := provider.Resolve(ctx, provider.ResolveOptions{Name: r.Name})
	if err != nil {
		// The line starts with the provider's name: say it once.
		return "unavailable: " + strings.TrimPrefix(provider.MessageOf(err), r.Name+": "), false
	}
	return "available, capabilities: " + provider.CapabilitiesOf(p).String(), true
}
