package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
)

// newWebhookCmd is "tupper webhook": a tupper server's webhooks, which only a server has, so
// every subcommand needs --url (or $TUPPER_URL).
func newWebhookCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Create, list and delete a tupper server's webhooks",
		Long: "A webhook receives the server's lifecycle events as signed POSTs (docs/webhooks.md).\n" +
			"Webhooks are a server's: pass --url or set TUPPER_URL (the API key is $TUPPER_API_KEY).",
		Example: "  tupper webhook create https://hooks.example.com/tupper --event sandbox.created\n  tupper webhook ls\n  tupper webhook rm wh_…",
	}
	server := func(cmd *cobra.Command) (*remote.Provider, error) {
		if pf.url == "" {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "webhooks are a tupper server's: pass --url or set TUPPER_URL")
		}
		prov, err := pf.resolveExisting(cmd.Context())
		if err != nil {
			return nil, err
		}
		return prov.(*remote.Provider), nil
	}

	var (
		events     []string
		createJSON bool
	)
	create := &cobra.Command{
		Use:   "create URL",
		Short: "Register URL for the server's events and print its signing secret (shown only now)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := server(cmd)
			if err != nil {
				return err
			}
			h, err := p.CreateWebhook(cmd.Context(), args[0], events)
			if err != nil {
				return err
			}
			if createJSON {
				return printJSON(cmd, h)
			}
			fmt.Fprintln(cmd.OutOrStdout(), h.Secret)
			cmd.PrintErrf("tupper: created webhook %s; its secret is shown only now\n", h.ID)
			return nil
		},
	}
	create.Flags().StringArrayVar(&events, "event", nil, "an event type to send (repeatable; default: every type)")
	create.Flags().BoolVar(&createJSON, "json", false, "print JSON (id, url, events, secret) for scripts")

	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List webhooks: id, URL, events, created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := server(cmd)
			if err != nil {
				return err
			}
			list, err := p.Webhooks(cmd.Context())
			if err != nil {
				return err
			}
			if lsJSON {
				return printJSON(cmd, map[string]any{"webhooks": list})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tURL\tEVENTS\tCREATED")
			for _, h := range list {
				ev := strings.Join(h.Events, ",")
				if ev == "" {
					ev = "all"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.ID, h.URL, ev, h.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON for scripts")

	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete webhooks; deliveries not yet made are dropped",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := server(cmd)
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := p.DeleteWebhook(cmd.Context(), id); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{create, ls, rm} {
		c.Flags().StringVar(&pf.url, "url", os.Getenv("TUPPER_URL"), "the tupper server (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
		cmd.AddCommand(c)
	}
	return cmd
}
