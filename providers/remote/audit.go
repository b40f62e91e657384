package remote

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/server/api"
)

// AuditFilter selects entries of a server's audit log. Zero fields select everything.
type AuditFilter struct {
	From, To time.Time // at or after From, before To
	KeyID    string
	Action   string // an action, or a prefix ending in "*"
	Target   string
	After    int64 // the last id of the previous page
	Limit    int   // 0: the server's page (1000)
}

// Audit returns one page of the server's audit log, oldest first (GET /v1/audit): page on
// with After set to the last entry's ID until a page is empty.
func (p *Provider) Audit(ctx context.Context, f AuditFilter) ([]api.AuditEntry, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.From.IsZero() {
		q.Set("from", f.From.UTC().Format(time.RFC3339Nano))
	}
	if !f.To.IsZero() {
		q.Set("to", f.To.UTC().Format(time.RFC3339Nano))
	}
	set("key", f.KeyID)
	set("action", f.Action)
	set("target", f.Target)
	if f.After > 0 {
		q.Set("after", strconv.FormatInt(f.After, 10))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out api.AuditList
	if err := p.call(ctx, http.MethodGet, "/v1/audit?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}
