package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/store"
)

// newKeysCmd is "tupper keys": the server's account API keys, read and written in its store
// directly (safe while the server runs).
func newKeysCmd() *cobra.Command {
	var home, spec string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke the server's API keys",
		Long: "keys manages the API keys of the tupper server whose state is in --home ($TUPPER_HOME,\n" +
			"default /var/lib/tupper), or in the store --store names ($TUPPER_STORE: a PostgreSQL\n" +
			"database). It works while the server runs. Keys are stored only as hashes: a new key\n" +
			"is shown once.",
	}
	cmd.PersistentFlags().StringVar(&home, "home", store.Home(), "state directory of the server ($TUPPER_HOME)")
	cmd.PersistentFlags().StringVar(&spec, "store", "", store.SpecFlagUsage)

	var name string
	var createJSON, createE2B bool
	create := &cobra.Command{
		Use:     "create",
		Short:   "Create an API key and print it (only the key, on stdout)",
		Example: "  export TUPPER_API_KEY=$(tupper keys create --name ci)\n  export E2B_API_KEY=$(tupper keys create --e2b --name agents)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore(cmd, store.Spec(spec, home))
			if err != nil {
				return err
			}
			defer st.Close()
			create := st.CreateKey
			if createE2B {
				create = st.CreateE2BKey
			}
			k, secret, err := create(cmd.Context(), name)
			recordKeyChange(cmd, st, "key.create", k.ID, err)
			if err != nil {
				return err
			}
			if createJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"id": k.ID, "key": secret, "name": k.Name, "prefix": k.Prefix, "createdAt": k.CreatedAt})
			}
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			cmd.PrintErrf("tupper: created key %s; it is shown only now\n", k.ID)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name to tell the key apart")
	create.Flags().BoolVar(&createJSON, "json", false, "print JSON (id, key, prefix) for scripts")
	create.Flags().BoolVar(&createE2B, "e2b", false, "make the key e2b_ and 40 hex digits, the form E2B's SDKs accept as E2B_API_KEY")

	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List API keys (prefix, created, revoked)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore(cmd, store.Spec(spec, home))
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := st.Keys(cmd.Context())
			if err != nil {
				return err
			}
			if listJSON {
				if keys == nil {
					keys = []store.APIKey{}
				}
				return printJSON(cmd, keys)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tCREATED\tREVOKED")
			for _, k := range keys {
				revoked := "-"
				if k.Revoked() {
					revoked = k.RevokedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.CreatedAt.Local().Format(time.DateTime), revoked)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print JSON for scripts")

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key (by its id, or its prefix when unique); it stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore(cmd, store.Spec(spec, home))
			if err != nil {
				return err
			}
			defer st.Close()
			k, err := st.RevokeKey(cmd.Context(), args[0])
			target := k.ID
			if target == "" {
				target = args[0]
			}
			recordKeyChange(cmd, st, "key.revoke", target, err)
			if err != nil {
				return err
			}
			cmd.PrintErrf("tupper: revoked key %s (%s…)\n", k.ID, k.Prefix)
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// recordKeyChange adds a change of the keys to the server's audit log, as the API's calls
// are: made on the server's host ("local", the CLI), with its result. A failure to record
// it is a warning: the change is made.
func recordKeyChange(cmd *cobra.Command, st *store.Store, action, keyID string, err error) {
	result := "ok"
	if err != nil {
		result = string(provider.CodeOf(err))
	}
	e := store.AuditEntry{Via: "local", Source: "local", API: "cli", Action: action, Target: keyID, Result: result}
	if aerr := st.AppendAudit(context.WithoutCancel(cmd.Context()), e); aerr != nil {
		cmd.PrintErrf("tupper: warning: recording %s in the audit log: %v\n", action, aerr)
	}
}

// openStore opens the store spec names (store.Spec of a --store flag and --home), as
// `tupper serve` and `tupper keys` do, and warns on stderr when other users could read its
// secrets before (see store.Exposed).
func openStore(cmd *cobra.Command, spec string) (*store.Store, error) {
	st, err := store.OpenURL(cmd.Context(), spec)
	if err != nil {
		return nil, err
	}
	if why := st.Exposed(); why != "" {
		cmd.PrintErrf("tupper: warning: %s. The keys that sign URLs and E2B envd tokens are replaced: "+
			"URLs and tokens handed out before stop working once the server (re)starts. The store "+
			"holds webhook secrets too: replace the webhooks.\n", why)
	}
	return st, nil
}
