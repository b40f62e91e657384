package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
)

// newUsageCmd is "tupper usage": a tupper server's usage ledger, summed, read through its API.
func newUsageCmd() *cobra.Command {
	var (
		pf              providerFlags
		from, to, group string
		asJSON, asCSV   bool
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show what a tupper server's sandboxes used: CPU, memory, disk, network, by key, template or label",
		Long: "usage sums a tupper server's usage ledger over the sandboxes that lived in a window\n" +
			"(--from, --to), by API key, template, runtime, node, sandbox or label (--by), largest CPU\n" +
			"use first: sandboxes, CPU-seconds, lifetimes, memory and disk peaks, network bytes\n" +
			"(docs/operations.md). The ledger is the server's: pass --url or set TUPPER_URL (the API\n" +
			"key is $TUPPER_API_KEY).",
		Example: "  tupper usage --from 24h --by key\n  tupper usage --by label:team --csv > usage.csv\n  tupper usage --from 2026-12-01T00:00:00Z --to 2026-12-08T00:00:00Z --by template --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pf.url == "" {
				return provider.Errorf(provider.CodeInvalidArgument, "the usage ledger is a tupper server's: pass --url or set TUPPER_URL")
			}
			if asJSON && asCSV {
				return provider.Errorf(provider.CodeInvalidArgument, "pick one of --json and --csv")
			}
			now := time.Now()
			f, err := auditTime(from, now)
			if err != nil {
				return err
			}
			t, err := auditTime(to, now)
			if err != nil {
				return err
			}
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := prov.(*remote.Provider).Usage(cmd.Context(), f, t, group)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, rep)
			}
			head := []string{"GROUP", "SANDBOXES", "RUNNING", "CPU_SECONDS", "SANDBOX_SECONDS", "MEM_PEAK_BYTES", "DISK_PEAK_BYTES", "NET_RX_BYTES", "NET_TX_BYTES"}
			if asCSV {
				w := csv.NewWriter(cmd.OutOrStdout())
				_ = w.Write(head)
				for _, g := range rep.Groups {
					_ = w.Write([]string{g.Group, strconv.Itoa(g.Sandboxes), strconv.Itoa(g.Running),
						strconv.FormatFloat(g.CPUSeconds, 'f', 3, 64), strconv.FormatFloat(g.SandboxSeconds, 'f', 3, 64),
						strconv.FormatInt(g.MemoryPeakBytes, 10), strconv.FormatInt(g.DiskPeakBytes, 10),
						strconv.FormatInt(g.NetRxBytes, 10), strconv.FormatInt(g.NetTxBytes, 10)})
				}
				w.Flush()
				return w.Error()
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tSANDBOXES\tRUNNING\tCPU\tLIFETIME\tMEM PEAK\tDISK PEAK\tNET IN\tNET OUT")
			for _, g := range rep.Groups {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fs\t%s\t%s\t%s\t%s\t%s\n", dash(g.Group), g.Sandboxes, g.Running, g.CPUSeconds,
					(time.Duration(g.SandboxSeconds) * time.Second).String(), bytesIEC(g.MemoryPeakBytes), bytesIEC(g.DiskPeakBytes),
					bytesIEC(g.NetRxBytes), bytesIEC(g.NetTxBytes))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&pf.url, "url", os.Getenv("TUPPER_URL"), "the tupper server (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
	fl.StringVar(&from, "from", "24h", "sandboxes still running at or after this time: RFC 3339, or a duration back from now (\"0\": from the start)")
	fl.StringVar(&to, "to", "", "sandboxes started before this time: RFC 3339, or a duration back from now")
	fl.StringVar(&group, "by", "", "group by key, template, runtime, node, sandbox or label:NAME (default: one total)")
	fl.BoolVar(&asJSON, "json", false, "print JSON (as GET /v1/usage) for scripts")
	fl.BoolVar(&asCSV, "csv", false, "print CSV, one line per group, figures in seconds and bytes")
	return cmd
}

// bytesIEC is n bytes in KiB, MiB, GiB … with one decimal.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
