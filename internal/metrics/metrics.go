// Package metrics is the server's one seam to Prometheus: every measurement `tupper serve`
// exports goes through a *Metrics, and nothing else in the module imports client_golang.
//
// A nil *Metrics is valid and measures nothing, so a server built without metrics (tests,
// the bench's "off" mode) pays a nil check per call site. New builds the registry and its
// collectors when `tupper serve` starts, never at package init: commands that do not serve
// (`tupper version`, `tupper exec`, the in-sandbox agent) build nothing.
//
// Labels are low-cardinality by construction: route patterns, status classes, runtimes,
// template names, API dialects and fixed result words. No sandbox id, command, path or key
// ever becomes a label; TestNoSandboxIDInOutput checks it.
//
// # Concurrency
//
// Every method may be called from many goroutines at once.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The API dialects of exec latency (ObserveExec).
const (
	APIREST = "rest"
	APIE2B  = "e2b"
	APIMCP  = "mcp"
)

// The results of a webhook delivery attempt (CountDelivery).
const (
	DeliveryDelivered = "delivered" // the receiver answered 2xx
	DeliveryRetry     = "retry"     // it failed and will be tried again
	DeliveryGaveUp    = "gave_up"   // it failed for the last time
)

// Metrics holds the server's collectors in a registry of its own (not the process-wide
// default registry, which client_golang fills at init for whoever imports it).
type Metrics struct {
	reg *prometheus.Registry

	create   *prometheus.HistogramVec
	exec     *prometheus.HistogramVec
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	snapshot *prometheus.HistogramVec
	fork     *prometheus.HistogramVec
	egress   *prometheus.CounterVec
	delivery *prometheus.CounterVec
	store    *prometheus.HistogramVec
}

// Source answers the gauges read at scrape time, from the store and the provider. Each
// method may be called concurrently with anything else; an error drops that gauge from the
// scrape (the previous value is not repeated).
type Source interface {
	// SandboxStates counts the live sandboxes the server has, by state.
	SandboxStates(ctx context.Context) (map[string]int, error)
	// Pool reports the provider's warm pool; ok is false without one.
	Pool() (p PoolStats, ok bool)
	// Outbox reports the webhook deliveries not yet delivered nor given up, and when the
	// oldest one's event happened (zero when there is none).
	Outbox(ctx context.Context) (pending int, oldest time.Time, err error)
}

// PoolStats is a warm pool's state; Hits and Misses count since the provider started.
type PoolStats struct {
	Target, Ready int
	Hits, Misses  uint64
}

// Exponential-ish buckets for each kind of wait, in seconds.
var (
	createBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	execBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60}
	httpBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}
	storeBuckets  = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	copyBuckets   = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// New builds the registry: the server's metrics, Go's runtime metrics and the process's.
// The gauges read at scrape time come once Watch gives their Source.
func New() *Metrics {
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	count := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		create: hist("tupper_sandbox_create_seconds", "Time to create a sandbox through the server (any API), by runtime, template and whether the warm pool served it.",
			createBuckets, "runtime", "template", "pooled"),
		exec: hist("tupper_exec_seconds", "Time to run one command, from the request to its result, by API dialect (rest, e2b, mcp).",
			execBuckets, "api"),
		requests: count("tupper_http_requests_total", "HTTP requests served, by route pattern and status class (2xx, 4xx…).", "route", "code"),
		duration: hist("tupper_http_request_duration_seconds", "Time to serve an HTTP request, by route pattern (streams last as long as the stream).",
			httpBuckets, "route"),
		snapshot: hist("tupper_snapshot_seconds", "Time to take a snapshot, by kind (filesystem, full) and result (ok, error).",
			copyBuckets, "kind", "result"),
		fork: hist("tupper_fork_seconds", "Time to fork a sandbox into its children, by kind (filesystem, full) and result (ok, error).",
			copyBuckets, "kind", "result"),
		egress: count("tupper_egress_total", "Egress decisions of sandboxes with an egress policy, by kind (dns: a name asked, connect: a connection) and result (allowed, denied).",
			"kind", "result"),
		delivery: count("tupper_webhook_deliveries_total", "Webhook delivery attempts, by result (delivered, retry, gave_up).", "result"),
		store: hist("tupper_store_query_seconds", "Time of one store statement, by operation (exec, query, begin, commit) and database (sqlite, postgres).",
			storeBuckets, "op", "db"),
	}
	m.reg.MustRegister(m.create, m.exec, m.requests, m.duration, m.snapshot, m.fork, m.egress, m.delivery, m.store,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The counters of fixed label values start at zero, so a rate() has a series to work on
	// before the first event.
	for _, k := range []string{"dns", "connect"} {
		m.egress.WithLabelValues(k, "allowed")
		m.egress.WithLabelValues(k, "denied")
	}
	for _, r := range []string{DeliveryDelivered, DeliveryRetry, DeliveryGaveUp} {
		m.delivery.WithLabelValues(r)
	}
	return m
}

// Watch adds the gauges src answers at each scrape (sandboxes by state, the warm pool, the
// webhook outbox). Call it once, when the server that src reads is built.
func (m *Metrics) Watch(src Source) {
	if m == nil {
		return
	}
	m.reg.MustRegister(newGauges(src))
}

// Handler serves the registry in Prometheus' text format (or OpenMetrics when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: m.reg})
}

// ObserveCreate records one successful create. template is the template's name, or
// "snapshot" for a sandbox made from a snapshot (whose id must not become a label).
func (m *Metrics) ObserveCreate(runtime, template string, pooled bool, d time.Duration) {
	if m == nil {
		return
	}
	m.create.WithLabelValues(runtime, template, strconv.FormatBool(pooled)).Observe(d.Seconds())
}

// ObserveExec records one command run through api (APIREST, APIE2B, APIMCP).
func (m *Metrics) ObserveExec(api string, d time.Duration) {
	if m == nil {
		return
	}
	m.exec.WithLabelValues(api).Observe(d.Seconds())
}

// ObserveRequest records one HTTP request by its route pattern (never its path).
func (m *Metrics) ObserveRequest(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, statusClass(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveSnapshot records one snapshot of kind that took d and failed when err is not nil.
func (m *Metrics) ObserveSnapshot(kind string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.snapshot.WithLabelValues(kind, result(err)).Observe(d.Seconds())
}

// ObserveFork records one fork (of any number of children) of kind.
func (m *Metrics) ObserveFork(kind string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.fork.WithLabelValues(kind, result(err)).Observe(d.Seconds())
}

// CountEgress counts one egress decision of kind ("dns" or "connect").
func (m *Metrics) CountEgress(kind string, allowed bool) {
	if m == nil {
		return
	}
	r := "denied"
	if allowed {
		r = "allowed"
	}
	m.egress.WithLabelValues(kind, r).Inc()
}

// CountDelivery counts one webhook delivery attempt by its result (DeliveryDelivered…).
func (m *Metrics) CountDelivery(result string) {
	if m == nil {
		return
	}
	m.delivery.WithLabelValues(result).Inc()
}

// ObserveStore records one store statement of op ("exec", "query", "begin", "commit") on db
// ("sqlite", "postgres").
func (m *Metrics) ObserveStore(op, db string, d time.Duration) {
	if m == nil {
		return
	}
	m.store.WithLabelValues(op, db).Observe(d.Seconds())
}

func statusClass(status int) string {
	switch {
	case status >= 100 && status < 600:
		return strconv.Itoa(status/100) + "xx"
	}
	return "other"
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// gauges is the collector of the values read at scrape time. Its descriptions are built
// by New, not at package init.
type gauges struct {
	src                                                    Source
	sandboxes, poolTarget, poolReady, poolHits, poolMisses *prometheus.Desc
	pending, oldest                                        *prometheus.Desc
}

func newGauges(src Source) *gauges {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &gauges{
		src:        src,
		sandboxes:  d("tupper_sandboxes", "Live sandboxes the server has, by state (running, paused…).", "state"),
		poolTarget: d("tupper_pool_target", "Sandboxes the warm pool keeps started (--pool)."),
		poolReady:  d("tupper_pool_ready", "Sandboxes in the warm pool now, ready to hand out."),
		poolHits:   d("tupper_pool_hits_total", "Creates the warm pool served."),
		poolMisses: d("tupper_pool_misses_total", "Creates the pool could have served but found empty."),
		pending:    d("tupper_webhook_outbox_pending", "Webhook deliveries not yet delivered nor given up."),
		oldest:     d("tupper_webhook_outbox_oldest_age_seconds", "Age of the event of the oldest webhook delivery not yet delivered nor given up (0: none)."),
	}
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.sandboxes, g.poolTarget, g.poolReady, g.poolHits, g.poolMisses, g.pending, g.oldest} {
		ch <- d
	}
}

// scrapeTimeout bounds the store queries of one scrape.
const scrapeTimeout = 5 * time.Second

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if states, err := g.src.SandboxStates(ctx); err == nil {
		for state, n := range states {
			ch <- prometheus.MustNewConstMetric(g.sandboxes, prometheus.GaugeValue, float64(n), state)
		}
	}
	if p, ok := g.src.Pool(); ok {
		ch <- prometheus.MustNewConstMetric(g.poolTarget, prometheus.GaugeValue, float64(p.Target))
		ch <- prometheus.MustNewConstMetric(g.poolReady, prometheus.GaugeValue, float64(p.Ready))
		ch <- prometheus.MustNewConstMetric(g.poolHits, prometheus.CounterValue, float64(p.Hits))
		ch <- prometheus.MustNewConstMetric(g.poolMisses, prometheus.CounterValue, float64(p.Misses))
	}
	if n, oldest, err := g.src.Outbox(ctx); err == nil {
		age := 0.0
		if !oldest.IsZero() {
			age = max(0, time.Since(oldest).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(g.pending, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, age)
	}
}
