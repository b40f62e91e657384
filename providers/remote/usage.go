package remote

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/tupper-dev/tupper/server/api"
)

// Usage sums the server's usage ledger over the sandboxes that lived during [from, to) (zero:
// no bound), by groupBy: "" (one group), key, template, runtime, node, sandbox or
// label:NAME (GET /v1/usage).
func (p *Provider) Usage(ctx context.Context, from, to time.Time, groupBy string) (api.UsageReport, error) {
	q := url.Values{}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339Nano))
	}
	if !to.IsZero() {
		q.Set("to", to.UTC().Format(time.RFC3339Nano))
	}
	if groupBy != "" {
		q.Set("groupBy", groupBy)
	}
	var out api.UsageReport
	err := p.call(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), nil, &out)
	return out, err
}

// MetricsSeries returns the server's readings of sandbox id at or after from (zero: all it
// keeps), oldest first (GET /v1/sandboxes/{id}/metrics).
func (p *Provider) MetricsSeries(ctx context.Context, id string, from time.Time) ([]api.MetricsSample, error) {
	q := url.Values{}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339Nano))
	}
	var out api.MetricsSeries
	if err := p.call(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/metrics?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return out.Samples, nil
}
