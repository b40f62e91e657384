package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/store"
)

func newServeCmd() *cobra.Command {
	var (
		addr, home, domain, baseURL, provName string
		storeSpec                             string
		runtimeName                           string
		quiet, allowPrivateWebhooks           bool
		bootImages, noMirror                  bool
		pool                                  int
		allowPrivate                          []string
		snapExpiry                            time.Duration
		snapsPerSandbox, snapsPerKey          int
		buildContextMiB                       int64
		volumesGiB                            int
		concurrentBuilds                      int
		auditRetention, usageInterval         time.Duration
	)
	// Prometheus metrics (docs/operations.md).
	var (
		metricsAddr string
		withMetrics bool
	)
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT]",
		Short: "Serve sandboxes over HTTP (the REST API under /v1)",
		Long: "serve runs the tupper server: the REST API under /v1 (OpenAPI at /v1/openapi.json),\n" +
			"events and signed webhooks, and preview URLs, over a provider on this host. Its state\n" +
			"(API keys, sandbox records, events, webhooks) is an SQLite database in $TUPPER_HOME\n" +
			"(default /var/lib/tupper), or the PostgreSQL database --store names ($TUPPER_STORE).\n" +
			"Every request needs an API key: create one with\n" +
			"`tupper keys create`, also while the server runs.\n\n" +
			"It listens on " + server.DefaultAddr + " (loopback only) unless told otherwise; put TLS in\n" +
			"front of it before serving beyond this machine. Prometheus metrics are served with no key\n" +
			"on " + defaultMetricsAddr + "/metrics (--metrics-addr), and /healthz and /readyz are\n" +
			"Kubernetes' probes (docs/operations.md).",
		Example: "  tupper serve\n  key=$(tupper keys create)\n  curl -H \"Authorization: Bearer $key\" -X POST http://127.0.0.1:7423/v1/sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			errw := cmd.ErrOrStderr()
			level := slog.LevelInfo
			if quiet {
				level = slog.LevelWarn
			}
			logger := slog.New(slog.NewTextHandler(errw, &slog.HandlerOptions{Level: level}))
			if provName == "remote" {
				return fmt.Errorf("--provider remote would serve another server's sandboxes; pick a provider on this host (local, docker)")
			}
			// First of all: a second server on this SQLite store stops here, before it
			// starts a pool or touches the first one's records. On PostgreSQL, servers
			// share the store, and this is where this one joins them.
			spec := store.Spec(storeSpec, home)
			claim, err := store.LockServer(spec)
			if err != nil {
				return err
			}
			defer claim.Unlock()
			allow, err := parseAllowPrivate(allowPrivate)
			if err != nil {
				return err
			}
			pf := providerFlags{name: provName}
			var prov provider.Provider
			if pool > 0 || len(allow) > 0 || noMirror || runtimeName != "" || bootImages {
				prov, err = pf.resolveLocal(ctx, localOptions{pool: pool, allowPrivate: allow, noTemplateMirror: noMirror, runtime: runtimeName, bootImages: bootImages},
					"--pool, --runtime, --allow-private, --no-template-mirror and --boot-images")
				if c, ok := prov.(io.Closer); ok {
					defer c.Close() // destroys the pool's unused sandboxes
				}
			} else {
				prov, err = pf.resolve(ctx)
			}
			if err != nil {
				return err
			}
			if buildContextMiB <= 0 || concurrentBuilds <= 0 {
				return fmt.Errorf("--build-context-mib and --concurrent-builds must be at least 1")
			}
			if volumesGiB < 0 {
				return fmt.Errorf("--volumes-gib must be 0 (no bound) or more")
			}
			// Built here, not at init: commands that do not serve build no registry.
			var m *metrics.Metrics
			if withMetrics {
				m = metrics.New()
			}
			st, err := openStore(cmd, spec)
			if err != nil {
				return err
			}
			defer st.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w (pick another with --addr)", addr, err)
			}
			defer ln.Close()
			if baseURL == "" {
				if baseURL, err = listenURL(ln.Addr()); err != nil {
					return err
				}
			}
			srv, err := server.New(ctx, server.Config{Provider: prov, Store: st, Claim: claim, Logger: logger, Domain: domain, BaseURL: baseURL, Version: version,
				AllowPrivateWebhooks: allowPrivateWebhooks,
				// The flags' 0 is "none"; the Config's is "the default".
				SnapshotExpiry:       noneIfZero(snapExpiry),
				Metrics:              m,
				SnapshotsPerSandbox:  noneIfZero(snapsPerSandbox),
				SnapshotsPerKey:      noneIfZero(snapsPerKey),
				VolumesTotalMB:       noneIfZero(volumesGiB << 10),
				MaxBuildContextBytes: buildContextMiB << 20,
				ConcurrentBuilds:     concurrentBuilds,
				AuditRetention:       noneIfZero(auditRetention),
				UsageInterval:        usageInterval,
			})
			if err != nil {
				return err
			}
			defer srv.Close()
			if withMetrics && metricsAddr != "off" {
				explicit := cmd.Flags().Changed("metrics-addr") || os.Getenv("TUPPER_METRICS_ADDR") != ""
				mln, err := listenMetrics(metricsAddr, explicit, errw)
				if err != nil {
					return err
				}
				if mln != nil {
					ms := &http.Server{Handler: metricsMux(srv.MetricsHandler()), ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
					defer ms.Close()
					go func() { _ = ms.Serve(mln) }()
					fmt.Fprintf(errw, "tupper: metrics on http://%s/metrics (no API key)\n", mln.Addr())
					if ip := mln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
						fmt.Fprintln(errw, "tupper: warning: metrics are served without a key beyond loopback; firewall --metrics-addr to your Prometheus")
					}
				}
			}
			if err := claim.Serving("http://" + ln.Addr().String()); err != nil {
				return err
			}
			fmt.Fprintf(errw, "tupper: serving on http://%s (provider %s, state %s)\n", ln.Addr(), prov.Name(), st.Path())
			if prov.Name() == memoryProvider { // in a build with the memory provider (-tags tupper_memory)
				fmt.Fprintln(errw, "tupper: warning: the memory provider isolates nothing and forgets its sandboxes when the server stops")
			}
			if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
				if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
					fmt.Fprintln(errw, "tupper: warning: listening beyond loopback without TLS; put a TLS proxy in front")
				}
			}
			if keys, err := st.Keys(ctx); err == nil && len(keys) == 0 {
				fmt.Fprintln(errw, "tupper: no API keys yet: create one with `tupper keys create`")
			}
			hs := srv.HTTPServer()
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			done := make(chan struct{})
			go func() { srv.Run(rctx); close(done) }()
			go func() {
				<-rctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = hs.Shutdown(sctx)
			}()
			err = hs.Serve(ln)
			stop()
			<-done
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", envOr("TUPPER_ADDR", server.DefaultAddr), "address to listen on ($TUPPER_ADDR)")
	fl.StringVar(&home, "home", store.Home(), "state directory ($TUPPER_HOME)")
	fl.StringVar(&storeSpec, "store", "", store.SpecFlagUsage)
	fl.StringVar(&provName, "provider", os.Getenv("TUPPER_PROVIDER"), "provider of the sandboxes (default: $TUPPER_PROVIDER, else the platform default: local on Linux)")
	fl.StringVar(&domain, "domain", os.Getenv("TUPPER_DOMAIN"), "serve previews on {port}-{id}.DOMAIN too ($TUPPER_DOMAIN)")
	fl.StringVar(&baseURL, "base-url", os.Getenv("TUPPER_BASE_URL"), "public URL of the server for the links it hands out (default: http://ADDR of --addr; required when --addr is all addresses)")
	fl.BoolVar(&quiet, "quiet", false, "log warnings and errors only, not every request")
	fl.StringArrayVar(&allowPrivate, "allow-private", nil, allowPrivateUsage)
	fl.BoolVar(&noMirror, "no-template-mirror", false, noTemplateMirrorUsage)
	fl.StringVar(&runtimeName, "runtime", "", "default OCI runtime of the local provider: crun, runc or runsc (default: crun when it works here, else runc; see tupper doctor)")
	fl.BoolVar(&allowPrivateWebhooks, "allow-private-webhooks", false, "let webhooks post to loopback and private addresses (a receiver on this machine or network); link-local and metadata addresses stay refused")
	fl.DurationVar(&snapExpiry, "snapshot-expiry", server.DefaultSnapshotExpiry, "snapshots made through the server expire and are deleted after this, the longest a request may ask (0: they are kept until they expire as asked, or for ever)")
	fl.IntVar(&snapsPerSandbox, "snapshots-per-sandbox", server.DefaultSnapshotsPerSandbox, "most unexpired snapshots of one sandbox (0: no bound)")
	fl.IntVar(&snapsPerKey, "snapshots-per-key", server.DefaultSnapshotsPerKey, "most unexpired snapshots made with one API key (0: no bound)")
	fl.IntVar(&volumesGiB, "volumes-gib", server.DefaultVolumesTotalMB>>10, "the most GiB the server's volumes may declare together, the host disk they can take as they fill (0: no bound)")
	fl.Int64Var(&buildContextMiB, "build-context-mib", 1024, "largest template build context a request may send, in MiB; it may unpack to four times that")
	fl.IntVar(&concurrentBuilds, "concurrent-builds", 1, "template builds that run at once; the others wait in a queue")
	fl.DurationVar(&usageInterval, "usage-interval", 10*time.Second, "how often the server samples every sandbox's CPU, memory, disk and network into the usage ledger (docs/operations.md)")
	fl.DurationVar(&auditRetention, "audit-retention", server.DefaultAuditRetention, "the audit log keeps an entry this long, then the server deletes it (0: for ever)")
	fl.BoolVar(&bootImages, "boot-images", false, "restore runsc sandboxes with network none from a checkpoint of their template booted once, instead of booting each (local provider; see docs/local.md)")
	fl.StringVar(&metricsAddr, "metrics-addr", envOr("TUPPER_METRICS_ADDR", defaultMetricsAddr), "serve Prometheus metrics at /metrics on this address, with no API key ($TUPPER_METRICS_ADDR; off: only at /metrics of --addr, with a key)")
	fl.BoolVar(&withMetrics, "metrics", true, "collect Prometheus metrics (false: none, on either listener)")
	fl.IntVar(&pool, "pool", 0, "keep this many sandboxes started for creates of the default shape with network none (local provider; see docs/local.md)")
	return cmd
}

// defaultMetricsAddr is where the metrics listen unless told otherwise: loopback, on the
// port after the API's (server.DefaultAddr).
const defaultMetricsAddr = "127.0.0.1:7424"

// listenMetrics listens on addr for the metrics. A default address already in use (a
// second server on this machine) is a warning and no metrics listener, since the main
// listener still serves /metrics with a key; an address the operator chose must work.
func listenMetrics(addr string, explicit bool, errw io.Writer) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if explicit || !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("metrics: listen on %s: %w (pick another with --metrics-addr, or off)", addr, err)
	}
	fmt.Fprintf(errw, "tupper: warning: %s is in use, so no metrics listener; /metrics of the main address serves them with an API key (or set --metrics-addr)\n", addr)
	return nil, nil
}

// metricsMux serves h at /metrics and nothing else.
func metricsMux(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return mux
}

// listenURL is the server's URL when no --base-url says it: http:// and the address it
// listens on. A server on every address (0.0.0.0, [::]) has no such URL.
func listenURL(a net.Addr) (string, error) {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("listening on every address (%s): say the URL clients reach the server on with --base-url (or $TUPPER_BASE_URL), for the links it hands out", a)
	}
	return "http://" + a.String(), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// noneIfZero turns a flag's 0 ("none") into the negative value server.Config takes for it.
func noneIfZero[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
