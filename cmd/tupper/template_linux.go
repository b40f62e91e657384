package main

import (
	"context"
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

// newTemplateCmd is "tupper template": the templates of the local provider whose state is
// in --home ($TUPPER_HOME, default /var/lib/tupper), or (ls, inspect and rm with --url) a
// server's.
func newTemplateCmd() *cobra.Command {
	t := &templateCmd{}
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Import, build, list, inspect and remove sandbox templates",
		Long: "template manages the templates of the local provider whose state is in --home\n" +
			"($TUPPER_HOME, default /var/lib/tupper): images imported from a registry, a docker\n" +
			"save archive, an OCI layout or a root filesystem tarball, stored as shared layers.\n" +
			"The built-in template host (the host's own /usr) is always there. See docs/templates.md.",
	}
	cmd.PersistentFlags().StringVar(&t.home, "home", store.Home(), "state directory ($TUPPER_HOME)")
	ls, inspect, rm := t.lsCmd(), t.inspectCmd(), t.rmCmd()
	for _, c := range []*cobra.Command{ls, inspect, rm} {
		c.Flags().StringVar(&t.server.url, "url", os.Getenv("TUPPER_URL"),
			"a tupper server whose templates to use instead of this machine's (default: $TUPPER_URL; the API key is $TUPPER_API_KEY)")
	}
	cmd.AddCommand(t.importCmd(), newTemplateBuildCmd(&t.home), ls, inspect, rm, t.pruneCmd())
	return cmd
}

// templateCmd is what the subcommands of tupper template share.
type templateCmd struct {
	home   string        // the local provider's state: its template store is home/store
	server providerFlags // ls, inspect and rm with --url: a server's templates
}

// provider is the provider whose templates the command manages: the server's with --url,
// else the local provider with its state in home, opened through the registry and not
// probed (its templates are files; no sandbox is made).
func (t *templateCmd) provider(ctx context.Context) (provider.Provider, error) {
	if t.server.url != "" {
		return t.server.resolveExisting(ctx)
	}
	return provider.Open("local", local.Config{Home: t.home})
}

// store is the local provider's template store, for what only it holds: a template's layers
// and the store's disk use, and what import and prune change.
func (t *templateCmd) store() (*template.Store, error) { return template.Open(t.home) }

func (t *templateCmd) importCmd() *cobra.Command {
	var (
		opts   template.ImportOptions
		format string
	)
	c := &cobra.Command{
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
			src := template.SourceOf(args[1])
			if format != "" {
				if src.Path == "" {
					src = template.Source{Path: args[1]}
				}
				src.Format = template.Format(format)
			}
			return templateErr(t.importImage(cmd, args[0], src, opts))
		},
	}
	f := c.Flags()
	f.StringVar(&opts.Platform, "platform", "", "os/arch[/variant] to pick from an index (default: this host's)")
	f.BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP and unverified TLS to a registry that is not on loopback")
	f.StringVar(&format, "format", "", "what FILE is: docker-archive, oci-layout or rootfs (default: look at it)")
	f.StringArrayVar(&opts.Tags, "tag", nil, "another name for the template (repeatable)")
	f.Int64Var(&opts.Limits.MaxBytes, "max-bytes", 0, "refuse an image larger than this unpacked (default 32 GiB)")
	f.Int64Var(&opts.Limits.MaxFiles, "max-files", 0, "refuse an image of more files than this (default 2,000,000)")
	return c
}

// importImage imports src as template name, each layer reported on stderr as it lands.
func (t *templateCmd) importImage(cmd *cobra.Command, name string, src template.Source, opts template.ImportOptions) error {
	st, err := t.store()
	if err != nil {
		return err
	}
	pr := &importProgress{w: cmd.ErrOrStderr()}
	opts.Progress = pr.report
	start := time.Now()
	tpl, err := st.Import(cmd.Context(), name, src, opts)
	pr.end()
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "tupper: imported %s (%d layers, %d fetched, %s) in %s\n", tpl.Name, len(tpl.Layers), pr.fetched, bytesHuman(pr.bytes), time.Since(start).Round(time.Millisecond))
	fmt.Fprintln(cmd.OutOrStdout(), tpl.Name)
	return nil
}

func (t *templateCmd) lsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List templates: name, tags, layers, size, source, created; and the store's disk use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return templateErr(t.list(cmd, asJSON))
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return c
}

// list prints the provider's templates, through the SDK; for the local provider the store's
// disk use too (a server's disk is not this machine's).
func (t *templateCmd) list(cmd *cobra.Command, asJSON bool) error {
	prov, err := t.provider(cmd.Context())
	if err != nil {
		return err
	}
	all, err := sandbox.Templates(cmd.Context(), prov)
	if err != nil {
		return err
	}
	rows := make([]templateRow, 0, len(all))
	for _, in := range all {
		rows = append(rows, templateRow{Name: in.Name, Builtin: in.Builtin, Tags: in.Tags, Layers: in.Layers, Size: in.Size, Source: in.Source, Created: in.Created})
	}
	if t.server.url != "" {
		if asJSON {
			return printJSON(cmd, map[string]any{"templates": rows})
		}
		return printTemplateRows(cmd, rows)
	}
	st, err := t.store()
	if err != nil {
		return err
	}
	u, err := st.Usage()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd, map[string]any{"templates": rows, "store": map[string]any{"layers": u.Layers, "bytes": u.Bytes, "unreferenced": u.Unreferenced}})
	}
	printTemplateRows(cmd, rows)
	fmt.Fprintf(cmd.OutOrStdout(), "\nstore: %d layers, %s (shared layers counted once); %s in layers no template uses\n", u.Layers, bytesHuman(u.Bytes), bytesHuman(u.Unreferenced))
	return nil
}

func (t *templateCmd) inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a template's record and its layers as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return templateErr(t.inspect(cmd, args[0]))
		},
	}
}

// inspect prints template name: a server's as its API has it, the built-in host as the
// provider describes it, another as the store records it, with its layers.
func (t *templateCmd) inspect(cmd *cobra.Command, name string) error {
	if t.server.url != "" || name == local.TemplateHost {
		prov, err := t.provider(cmd.Context())
		if err != nil {
			return err
		}
		info, err := sandbox.InspectTemplate(cmd.Context(), prov, name)
		if err != nil {
			return err
		}
		if t.server.url != "" {
			return printJSON(cmd, api.TemplateOf(info))
		}
		return printJSON(cmd, templateRow{Name: info.Name, Builtin: info.Builtin, Source: info.Source})
	}
	st, err := t.store()
	if err != nil {
		return err
	}
	tpl, err := st.Get(name)
	if err != nil {
		return err
	}
	out := struct {
		*template.Template
		Size       int64             `json:"size"`
		LayerInfos []*template.Layer `json:"layerInfo"`
	}{Template: tpl}
	for _, d := range tpl.Layers {
		l, err := st.Layer(d)
		if err != nil {
			return err
		}
		out.Size += l.Size
		out.LayerInfos = append(out.LayerInfos, l)
	}
	return printJSON(cmd, out)
}

func (t *templateCmd) rmCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template, and the layers no other template uses",
		Long: "rm removes template NAME (or the template tagged NAME) and then the layers no template\n" +
			"uses any more. A template in use by a sandbox or snapshot is refused unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return templateErr(t.remove(cmd, args[0], force))
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove the template even while sandboxes or snapshots use it")
	return c
}

// remove deletes template name through the SDK; for the local provider it says what the
// store freed, the layers no other template used (the provider prunes them, and the
// template's boot images).
func (t *templateCmd) remove(cmd *cobra.Command, name string, force bool) error {
	ctx := cmd.Context()
	prov, err := t.provider(ctx)
	if err != nil {
		return err
	}
	if t.server.url != "" {
		if err := sandbox.DeleteTemplate(ctx, prov, name, force); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), name)
		return nil
	}
	info, err := sandbox.InspectTemplate(ctx, prov, name) // the name of the template a tag names
	if err != nil {
		return err
	}
	st, err := t.store()
	if err != nil {
		return err
	}
	before, err := st.Usage()
	if err != nil {
		return err
	}
	if err := sandbox.DeleteTemplate(ctx, prov, name, force); err != nil {
		return err
	}
	after, err := st.Usage()
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "tupper: removed %s; freed %s in %d layers\n", info.Name, bytesHuman(before.Bytes-after.Bytes), before.Layers-after.Layers)
	fmt.Fprintln(cmd.OutOrStdout(), info.Name)
	return nil
}

func (t *templateCmd) pruneCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Remove the layers no template uses, what failed imports left, and stale boot images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return templateErr(t.prune(cmd))
		},
	}
}

// prune removes the store's unused layers, then the local provider's boot images no create
// would use again.
func (t *templateCmd) prune(cmd *cobra.Command) error {
	st, err := t.store()
	if err != nil {
		return err
	}
	p, err := st.Prune(cmd.Context())
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "freed %s in %d layers\n", bytesHuman(p.Bytes), p.Layers)
	prov, err := t.provider(cmd.Context())
	if err != nil {
		return err
	}
	n, err := pruneBootImages(cmd.Context(), prov)
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "removed %d stale boot images\n", n)
	}
	return nil
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
// templates: one without an op, or with one of the SDK's template calls.
func templateErr(err error) error {
	var pe *provider.Error
	if errors.As(err, &pe) && (pe.Op == "" || strings.Contains(pe.Op, "template")) {
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
