package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/server/api"
)

// statsRow is one sandbox's line of tupper stats: its latest reading.
type statsRow struct {
	ID string `json:"id"`
	api.MetricsSample
}

// newStatsCmd is "tupper stats": a live table of sandboxes' resource use, as docker stats.
func newStatsCmd() *cobra.Command {
	var (
		pf       providerFlags
		noStream bool
		asJSON   bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats [ID...]",
		Short: "Show a live table of sandboxes' CPU, memory, disk and network use",
		Long: "stats shows each sandbox's resource use (every sandbox when no ID is given), refreshed\n" +
			"every --interval until interrupted, as docker stats does; --no-stream prints once.\n" +
			"With a server (--url) it shows the server's latest reading of each (GET\n" +
			"/v1/sandboxes/{id}/metrics, taken every tupper serve --usage-interval); on this\n" +
			"machine it reads the local provider's counters itself (CPU % over the last interval).",
		Example: "  tupper stats\n  tupper stats --no-stream --json sb_1a2b3c\n  tupper stats --url http://127.0.0.1:7423",
		RunE: func(cmd *cobra.Command, ids []string) error {
			if asJSON && !noStream {
				noStream = true // a stream of JSON documents is no table; one is what scripts read
			}
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			rem, _ := prov.(*remote.Provider)
			rep, _ := prov.(provider.UsageReporter)
			if rem == nil && rep == nil {
				return provider.Errorf(provider.CodeUnsupported, "provider %s cannot count a sandbox's use from outside it: use a server (--url) or the local provider", prov.Name())
			}
			prev := map[string]provider.Usage{}
			read := func() ([]statsRow, error) {
				list := ids
				if len(list) == 0 {
					infos, err := prov.List(ctx, provider.ListFilter{})
					if err != nil {
						return nil, err
					}
					for _, in := range infos {
						list = append(list, in.ID)
					}
				}
				rows := make([]statsRow, 0, len(list))
				for _, id := range list {
					if rem != nil {
						ms, err := rem.MetricsSeries(ctx, id, time.Now().Add(-time.Minute))
						if err != nil {
							return nil, err
						}
						row := statsRow{ID: id}
						if len(ms) > 0 {
							row.MetricsSample = ms[len(ms)-1]
						}
						rows = append(rows, row)
						continue
					}
					u, err := rep.UsageOf(ctx, id)
					if err != nil {
						return nil, fmt.Errorf("sandbox %s: %w", id, err)
					}
					rows = append(rows, statsRow{ID: id, MetricsSample: sampleOf(u, prev[id])})
					prev[id] = u
				}
				return rows, nil
			}
			if rem == nil { // a first reading, for CPU % over the interval
				if _, err := read(); err != nil {
					return err
				}
				if err := sleepCtx(ctx, min(interval, time.Second)); err != nil {
					return err
				}
			}
			for {
				rows, err := read()
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, rows)
				}
				out := cmd.OutOrStdout()
				if !noStream {
					fmt.Fprint(out, "\033[H\033[2J") // the terminal's home and clear, as docker stats
				}
				printStats(out, rows)
				if noStream {
					return nil
				}
				if err := sleepCtx(ctx, interval); err != nil {
					return nil // interrupted: done
				}
			}
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&noStream, "no-stream", false, "print the table once instead of refreshing it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON once (implies --no-stream), for scripts")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often the table is refreshed")
	return cmd
}

// sampleOf is reading u as a metrics sample, with its CPU use since prev (none: 0).
func sampleOf(u, prev provider.Usage) api.MetricsSample {
	m := api.MetricsSample{Time: u.At.UTC(), CPUs: u.CPUs, CPUSeconds: float64(u.CPUUsec) / 1e6, MemUsedBytes: u.MemUsed,
		MemLimitBytes: u.MemLimit, MemPeakBytes: u.MemPeak, DiskUsedBytes: u.DiskUsed, DiskTotalBytes: u.DiskTotal,
		NetRxBytes: u.NetRx, NetTxBytes: u.NetTx}
	if wall := u.At.Sub(prev.At); !prev.At.IsZero() && wall > 0 && u.CPUs > 0 && u.CPUUsec >= prev.CPUUsec {
		pct := float64(u.CPUUsec-prev.CPUUsec) / float64(wall.Microseconds()) / u.CPUs * 100
		m.CPUUsedPct = float64(int64(min(pct, 100)*100)) / 100
	}
	return m
}

func printStats(w io.Writer, rows []statsRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCPU %\tCPU TIME\tMEM USAGE / LIMIT\tMEM %\tMEM PEAK\tDISK USAGE / SIZE\tNET I/O")
	for _, r := range rows {
		if r.Time.IsZero() {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\n", r.ID)
			continue
		}
		memPct := "-"
		if r.MemLimitBytes > 0 {
			memPct = fmt.Sprintf("%.2f%%", float64(r.MemUsedBytes)/float64(r.MemLimitBytes)*100)
		}
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.1fs\t%s / %s\t%s\t%s\t%s / %s\t%s / %s\n", r.ID, r.CPUUsedPct, r.CPUSeconds,
			bytesIEC(r.MemUsedBytes), bytesIEC(r.MemLimitBytes), memPct, bytesIEC(r.MemPeakBytes),
			bytesIEC(r.DiskUsedBytes), bytesIEC(r.DiskTotalBytes), bytesIEC(r.NetRxBytes), bytesIEC(r.NetTxBytes))
	}
	tw.Flush()
}

// sleepCtx sleeps d, or until ctx is done (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
