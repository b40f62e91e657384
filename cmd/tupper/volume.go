package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newVolumeCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Create, list, inspect and delete named volumes",
		Long: "A volume is named, persistent storage with a size limit: sandboxes mount it with\n" +
			"--volume NAME:/path[:ro] on run and create, several at once, and it outlives them\n" +
			"(docs/volumes.md). Providers without volumes say so (code unsupported).",
		Example: "  tupper volume create data --size 2048\n  tupper run --volume data:/data -- ls /data\n  tupper volume rm data",
	}

	var sizeMB int
	var createJSON bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			v, err := sandbox.CreateVolume(cmd.Context(), prov, args[0], sandbox.VolumeOptions{SizeMB: sizeMB})
			if err != nil {
				return err
			}
			if createJSON {
				return printJSON(cmd, v)
			}
			fmt.Fprintln(cmd.OutOrStdout(), v.Name)
			return nil
		},
	}
	create.Flags().IntVar(&sizeMB, "size", 0, "the size limit in MB (default 1024)")
	create.Flags().BoolVar(&createJSON, "json", false, "print JSON for scripts")

	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List volumes: name, size, used, created, the sandboxes that mount it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			list, err := sandbox.Volumes(cmd.Context(), prov)
			if err != nil {
				return err
			}
			if lsJSON {
				return printJSON(cmd, map[string]any{"volumes": list})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tUSED\tCREATED\tMOUNTED BY")
			for _, v := range list {
				by := strings.Join(v.MountedBy, ",")
				if by == "" {
					by = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Name, bytesHuman(int64(v.SizeMB)<<20), bytesHuman(v.UsedBytes), v.CreatedAt.Local().Format(time.DateTime), by)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON for scripts")

	inspect := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a volume as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			v, err := sandbox.InspectVolume(cmd.Context(), prov, args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd, v)
		},
	}

	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete volumes and their files; refused while a sandbox mounts one",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := sandbox.DeleteVolume(cmd.Context(), prov, name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{create, ls, inspect, rm} {
		pf.register(c)
		cmd.AddCommand(c)
	}
	return cmd
}
