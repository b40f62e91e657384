package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/store"
)

// newStoreCmd is "tupper store": the server's store as a whole.
func newStoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Move the server's store between SQLite and PostgreSQL",
	}
	cmd.AddCommand(newStoreMigrateCmd())
	return cmd
}

// newStoreMigrateCmd is "tupper store migrate": store.Copy between two stores, with no server
// on either.
func newStoreMigrateCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate --from STORE --to STORE",
		Short: "Copy a whole store into an empty one (SQLite to PostgreSQL, or back)",
		Long: "migrate copies every table of the store --from names into the store --to names: API keys\n" +
			"(which keep working), sandboxes and their tokens and ports, events and webhooks with their\n" +
			"deliveries, settings, secrets and snapshots, keeping their ids. Each is a state directory,\n" +
			"sqlite:///path or a postgres:// URL. The target must be empty (it is created, or brought to\n" +
			"this tupper's schema); the source must be at this tupper's schema version (open it with\n" +
			"this tupper first, which migrates it). No server may run on either meanwhile. The copy is\n" +
			"one transaction: if it fails, the target stays empty. The source is left as it was.",
		Example: "  tupper store migrate --from sqlite:///var/lib/tupper/server.db --to postgres://tupper@db/tupper",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return migrateStore(cmd, from, to)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the store to copy: a state directory, sqlite:///path or a postgres:// URL")
	cmd.Flags().StringVar(&to, "to", "", "the empty store to copy it into, named the same ways")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func migrateStore(cmd *cobra.Command, from, to string) error {
	ctx := cmd.Context()
	fromPG, fromTarget, err := store.ParseSpec(from)
	if err != nil {
		return err
	}
	toPG, toTarget, err := store.ParseSpec(to)
	if err != nil {
		return err
	}
	if fromPG == toPG && fromTarget == toTarget {
		return provider.Errorf(provider.CodeInvalidArgument, "--from and --to both name %s: give another store to copy into", store.Redact(from))
	}
	src, err := store.OpenAsIs(ctx, from)
	if err != nil {
		return err
	}
	defer src.Close()
	// Held for the whole copy: a server that starts on either store meanwhile is refused.
	for _, spec := range []string{from, to} {
		lk, err := store.LockStore(spec)
		if err != nil {
			return err
		}
		defer lk.Unlock()
	}
	dst, err := openStore(cmd, to)
	if err != nil {
		return err
	}
	defer dst.Close()
	stats, err := store.Copy(ctx, src, dst)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, t := range stats {
		fmt.Fprintf(tw, "%s\t%d\n", t.Table, t.Rows)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	cmd.PrintErrf("tupper: copied %d rows from %s to %s\n", stats.Total(), src.Path(), dst.Path())
	return nil
}
