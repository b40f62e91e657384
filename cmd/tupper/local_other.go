//go:build !linux

// The local provider exists on Linux only: here its flags and commands say so.

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

const needsLinux = "runs on Linux only; use --provider docker (the default here)"

// localConfig refuses: the flags that configure the local provider have nothing to configure.
func localConfig(_ localOptions, flags string) (any, error) {
	return nil, fmt.Errorf("%s configure the local provider, which %s", flags, needsLinux)
}

// localDoctorLines are none off Linux: there is no local provider to pick a runtime for.
func localDoctorLines(context.Context) []string { return nil }

// newAgentCmd is `tupper agent`, which runs inside Linux sandboxes only.
func newAgentCmd() *cobra.Command {
	return linuxOnlyCmd("agent", "the in-sandbox agent")
}

// newTemplateCmd is `tupper template`: the local provider's template store. With the Docker
// provider a template is any image the engine has or can pull.
func newTemplateCmd() *cobra.Command {
	c := linuxOnlyCmd("template", "the local provider's templates")
	c.Long = "Templates are the local provider's, which " + needsLinux + ".\nWith the Docker provider any image is a template: --template python:3.12-slim."
	return c
}

func linuxOnlyCmd(name, what string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              what + " (Linux only)",
		Hidden:             name == "agent",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("tupper %s: %s %s", name, what, needsLinux)
		},
	}
}
