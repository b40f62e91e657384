package main

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/server/api"
)

// newAuditCmd is "tupper audit": a tupper server's audit log, read through its API.
func newAuditCmd() *cobra.Command {
	var (
		pf                  providerFlags
		from, to            string
		key, action, target string
		limit               int
		asJSON              bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show a tupper server's audit log: who changed what, when, from where",
		Long: "audit prints the calls that changed something on a tupper server, oldest first: the\n" +
			"time, the API key's id (never the key), the client's address, the API, the action,\n" +
			"its target and its result (docs/operations.md). The log is the server's: pass --url or\n" +
			"set TUPPER_URL (the API key is $TUPPER_API_KEY).",
		Example: "  tupper audit --from 1h\n  tupper audit --action 'sandbox.*' --key key_1a2b3c\n  tupper audit --from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pf.url == "" {
				return provider.Errorf(provider.CodeInvalidArgument, "the audit log is a tupper server's: pass --url or set TUPPER_URL")
			}
			now := time.Now()
			f := remote.AuditFilter{KeyID: key, Action: action, Target: target}
			var err error
			if f.From, err = auditTime(from, now); err != nil {
				return err
			}
			if f.To, err = auditTime(to, now); err != nil {
				return err
			}
			if limit < 0 {
				return provider.Errorf(provider.CodeInvalidArgument, "--limit must be 0 (no bound) or more")
			}
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			p := prov.(*remote.Provider)
			entries := []api.AuditEntry{}
			for limit == 0 || len(entries) < limit {
				if limit > 0 {
					f.Limit = min(limit-len(entries), 1000)
				}
				page, err := p.Audit(cmd.Context(), f)
				if err != nil {
					return err
				}
				if len(page) == 0 {
					break
				}
				entries = append(entries, page...)
				f.After = page[len(page)-1].ID
			}
			if asJSON {
				return printJSON(cmd, api.AuditList{Entries: entries})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tKEY\tVIA\tSOURCE\tAPI\tACTION\tTARGET\tRESULT")
			for _, e := range entries {
				result := e.Result
				if e.Status != 0 {
					result += " (" + strconv.Itoa(e.Status) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05.000"),
					dash(e.KeyID), e.Via, dash(e.Source), e.API, e.Action, dash(e.Target), result)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pf.url, "url", os.Getenv("TUPPER_URL"), "the tupper server (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
	fl.StringVar(&from, "from", "24h", "entries at or after this time: RFC 3339, or a duration back from now (\"0\": from the start)")
	fl.StringVar(&to, "to", "", "entries before this time: RFC 3339, or a duration back from now")
	fl.StringVar(&key, "key", "", "only this API key's calls (its id, key_…)")
	fl.StringVar(&action, "action", "", "only this action (sandbox.exec), or those with a prefix ending in * ('sandbox.*')")
	fl.StringVar(&target, "target", "", "only calls on this sandbox, template, key … id")
	fl.IntVar(&limit, "limit", 0, "print at most this many entries, the oldest (0: every one)")
	fl.BoolVar(&asJSON, "json", false, "print JSON ({\"entries\": […]}, as GET /v1/audit) for scripts")
	return cmd
}

// auditTime reads a --from or --to: "" (none), "0" (none), an RFC 3339 time, or a duration
// back from now.
func auditTime(v string, now time.Time) (time.Time, error) {
	if v == "" || v == "0" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, provider.Errorf(provider.CodeInvalidArgument, "%q is neither an RFC 3339 time nor a duration back from now (1h, 30m)", v)
	}
	return now.Add(-d), nil
}
