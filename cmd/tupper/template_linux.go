package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
	"github.com/tupper-dev/tupper/template"
)

// templateUsers names the sandboxes and snapshots of the local provider in home that use a
// template, which `template rm` refuses to remove without --force.
func templateUsers(home string) func(ctx context.Context, name string) ([]string, error) {
	return func(ctx context.Context, name string) ([]string, error) {
		p, err := local.New(local.Config{Home: home})
		if err != nil {
			return nil, err
		}
		return p.TemplateUsers(ctx, name)
	}
}

// newTemplateCmd is "tupper template": the templates in the local provider's store, under
// the same home ($TUPPER_HOME, default /var/lib/tupper).
func newTemplateCmd() *cobra.Command {
	var home string
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Import, build, list, inspect and remove sandbox templates",
		Long: "template manages the templates of the local provider whose state is in --home\n" +
			"($TUPPER_HOME, default /var/lib/tupper): images imported from a registry, a docker\n" +
			"save archive, an OCI layout or a root filesystem tarball, stored as shared layers.\n" +
			"The built-in template host (the host's own /usr) is always there. See docs/templates.md.",
	}
	cmd.PersistentFlags().StringVar(&home, "home", store.Home(), "state directory ($TUPPER_HOME)")
	var server providerFlags // ls, inspect and rm with --url: a server's templates
	open := func() (*template.Store, error) { return template.Open(home) }

	var (
		opts   template.ImportOptions
		format string
	)
	imp := &cobra.Command{
		Use:   "import NAME REF|FILE",
		Short: "Import an image as template NAME, with progress on stderr",
		Long: "import makes template NAME from an image: a registry reference (credentials from the\n" +
			"Docker configuration, the platform of this host picked from an index), or a file or\n" +
			"directory: a docker save archive, an OCI image layout (directory or tar), or a tar of a\n" +
			"root filesystem (plain, gzip, zstd or bzip2). Layers already in the store are not\n" +
			"fetched again. Registries are reached over HTTPS, loopback ones over HTTP too.",
		Example: "  tupper template import py python:3.12-slim\n" +
			"  tupper template import app localhost:5000/team/app@sha256:…\n" +
			"  docker save app:1 -o app.tar && tupper template import app ./app.tar\n" +
			"  tupper template import base ./rootfs.tar.zst",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := open()
			if err != nil {
				return templateErr(err)
			}
			src := template.SourceOf(args[1])
			if format != "" {
				if src.Path == "" {
					src = template.Source{Path: args[1]}
				}
				src.Format = template.Format(format)
			}
			pr := &importProgress{w: cmd.ErrOrStderr()}
			opts.Progress = pr.report
			start := time.Now()
			t, err := st.Import(cmd.Context(), args[0], src, opts)
			pr.end()
			if err != nil {
				return templateErr(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tupper: imported %s (%d layers, %d fetched, %s) in %s\n", t.Name, len(t.Layers), pr.fetched, bytesHuman(pr.bytes), time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(cmd.OutOrStdout(), t.Name)
			return nil
		},
	}
	imp.Flags().StringVar(&opts.Platform, "platform", "", "os/arch[/variant] to pick from an index (default: this host's)")
	imp.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP and unverified TLS to a registry that is not on loopback")
	imp.Flags().StringVar(&format, "format", "", "what FILE is: docker-archive, oci-layout or rootfs (default: look at it)")
	imp.Flags().StringArrayVar(&opts.Tags, "tag", nil, "another name for the template (repeatable)")
	imp.Flags().Int64Var(&opts.Limits.MaxBytes, "max-bytes", 0, "refuse an image larger than this unpacked (default 32 GiB)")
	imp.Flags().Int64Var(&opts.Limits.MaxFiles, "max-files", 0, "refuse an image of more files than this (default 2,000,000)")

	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List templates: name, tags, layers, size, source, created; and the store's disk use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if server.url != "" {
				return serverTemplates(cmd, &server, lsJSON)
			}
			lp, err := local.New(local.Config{Home: home})
			if err != nil {
				return templateErr(err)
			}
			all, err := lp.Templates(cmd.Context())
			if err != nil {
				return templateErr(err)
			}
			st, err := open()
			if err != nil {
				return templateErr(err)
			}
			u, err := st.Usage()
			if err != nil {
				return templateErr(err)
			}
			var rows []templateRow
			for _, t := range all {
				rows = append(rows, templateRow{Name: t.Name, Builtin: t.Builtin, Tags: t.Tags, Layers: t.Layers, Size: t.Size, Source: t.Source, Created: t.Created})
			}
			if lsJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"templates": rows, "store": map[string]any{"layers": u.Layers, "bytes": u.Bytes, "unreferenced": u.Unreferenced}})
			}
			printTemplateRows(cmd, rows)
			fmt.Fprintf(cmd.OutOrStdout(), "\nstore: %d layers, %s (shared layers counted once); %s in layers no template uses\n", u.Layers, bytesHuman(u.Bytes), bytesHuman(u.Unreferenced))
			return nil
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON for scripts")

	inspect := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a template's record and its layers as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if server.url != "" {
				prov, err := server.resolveExisting(cmd.Context())
				if err != nil {
					return templateErr(err)
				}
				t, err := sandbox.InspectTemplate(cmd.Context(), prov, args[0])
				if err != nil {
					return templateErr(err)
				}
				return printJSON(cmd, api.TemplateOf(t))
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if args[0] == local.TemplateHost {
				lp, err := local.New(local.Config{Home: home})
				if err != nil {
					return templateErr(err)
				}
				t, err := lp.Template(cmd.Context(), args[0])
				if err != nil {
					return templateErr(err)
				}
				return enc.Encode(templateRow{Name: t.Name, Builtin: t.Builtin, Source: t.Source})
			}
			st, err := open()
			if err != nil {
				return templateErr(err)
			}
			t, err := st.Get(args[0])
			if err != nil {
				return templateErr(err)
			}
			out := struct {
				*template.Template
				Size       int64             `json:"size"`
				LayerInfos []*template.Layer `json:"layerInfo"`
			}{Template: t}
			for _, d := range t.Layers {
				l, err := st.Layer(d)
				if err != nil {
					return templateErr(err)
				}
				out.Size += l.Size
				out.LayerInfos = append(out.LayerInfos, l)
			}
			return enc.Encode(out)
		},
	}

	var force bool
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template, and the layers no other template uses",
		Long: "rm removes template NAME (or the template tagged NAME) and then the layers no template\n" +
			"uses any more. A template in use by a sandbox or snapshot is refused unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if server.url != "" {
				prov, err := server.resolveExisting(cmd.Context())
				if err != nil {
					return templateErr(err)
				}
				if err := sandbox.DeleteTemplate(cmd.Context(), prov, args[0], force); err != nil {
					return templateErr(err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), args[0])
				return nil
			}
			if args[0] == local.TemplateHost {
				return templateErr(provider.Errorf(provider.CodeInvalidArgument, "template %q is built in and cannot be removed", local.TemplateHost))
			}
			st, err := open()
			if err != nil {
				return templateErr(err)
			}
			t, err := st.Remove(cmd.Context(), args[0], template.RemoveOptions{InUse: templateUsers(home), Force: force})
			if err != nil {
				return templateErr(err)
			}
			p, err := st.Prune(cmd.Context())
			if err != nil {
				return templateErr(err)
			}
			if _, err := pruneBootImages(cmd.Context(), home); err != nil {
				return templateErr(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tupper: removed %s; freed %s in %d layers\n", t.Name, bytesHuman(p.Bytes), p.Layers)
			fmt.Fprintln(cmd.OutOrStdout(), t.Name)
			return nil
		},
	}
	rm.Flags().BoolVar(&force, "force", false, "remove the template even while sandboxes or snapshots use it")

	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove the layers no template uses, what failed imports left, and stale boot images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := open()
			if err != nil {
				return templateErr(err)
			}
			p, err := st.Prune(cmd.Context())
			if err != nil {
				return templateErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "freed %s in %d layers\n", bytesHuman(p.Bytes), p.Layers)
			n, err := pruneBootImages(cmd.Context(), home)
			if err != nil {
				return templateErr(err)
			}
			if n > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %d stale boot images\n", n)
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{ls, inspect, rm} {
		c.Flags().StringVar(&server.url, "url", os.Getenv("TUPPER_URL"),
			"a tupper server whose templates to use instead of this machine's (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
	}
	cmd.AddCommand(imp, newTemplateBuildCmd(&home), ls, inspect, rm, prune)
	return cmd
}

// serverTemplates is `template ls` against a server: its templates, through the SDK
// (providers/remote), with no store line (the server's disk is not this machine's).
func serverTemplates(cmd *cobra.Command, pf *providerFlags, asJSON bool) error {
	prov, err := pf.resolveExisting(cmd.Context())
	if err != nil {
		return templateErr(err)
	}
	all, err := sandbox.Templates(cmd.Context(), prov)
	if err != nil {
		return templateErr(err)
	}
	rows := make([]templateRow, 0, len(all))
	for _, t := range all {
		rows = append(rows, templateRow{Name: t.Name, Builtin: t.Builtin, Tags: t.Tags, Layers: t.Layers, Size: t.Size, Source: t.Source, Created: t.Created})
	}
	if asJSON {
		return printJSON(cmd, map[string]any{"templates": rows})
	}
	return printTemplateRows(cmd, rows)
}

// printTemplateRows prints `template ls`'s table.
func printTemplateRows(cmd *cobra.Command, rows []templateRow) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTAGS\tLAYERS\tSIZE\tSOURCE\tCREATED")
	for _, r := range rows {
		if r.Layers == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t-\n", r.Name, r.Source)
			continue
		}
		tags := strings.Join(r.Tags, ",")
		if tags == "" {
			tags = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, tags, r.Layers, bytesHuman(r.Size), r.Source, r.Created.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// templateRow is a line of `template ls`.
type templateRow struct {
	Name    string    `json:"name"`
	Builtin bool      `json:"builtin,omitempty"`
	Tags    []string  `json:"tags,omitempty"`
	Layers  int       `json:"layers"`
	Size    int64     `json:"size"`
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created,omitzero"`
}

// templateErr marks a template command's error so that the hint printed with it speaks of
// templates.
func templateErr(err error) error {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Op == "" {
		c := *pe
		c.Op = "template"
		return &c
	}
	return err
}

// importProgress prints each layer as it lands, and a bar while one is fetched when stderr
// is a terminal.
type importProgress struct {
	w              io.Writer
	bar            *progress
	seen           int64
	fetched, bytes int64
}

func (p *importProgress) report(r template.Progress) {
	if r.Cached {
		fmt.Fprintf(p.w, "layer %d/%d %s: in the store\n", r.Layer, r.Layers, shortDigest(r.DiffID))
		return
	}
	if r.Done {
		p.end()
		p.fetched++
		p.bytes += r.Bytes
		fmt.Fprintf(p.w, "layer %d/%d %s: %s\n", r.Layer, r.Layers, shortDigest(r.DiffID), bytesHuman(r.Bytes))
		return
	}
	if p.bar == nil && r.Bytes == 0 {
		p.bar, p.seen = newProgress(fmt.Sprintf("layer %d/%d", r.Layer, r.Layers), max(r.Total, 0)), 0
	}
	if p.bar != nil {
		p.bar.add(r.Bytes - p.seen)
	}
	p.seen = r.Bytes
}

func (p *importProgress) end() {
	p.bar.finish()
	p.bar, p.seen = nil, 0
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	if d == "" {
		return "(root filesystem)"
	}
	return d
}
