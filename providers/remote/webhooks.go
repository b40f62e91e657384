package remote

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tupper-dev/tupper/server/api"
)

// Webhooks, CreateWebhook and DeleteWebhook are the server's own webhooks (/v1/webhooks),
// which no other provider has: they are methods of this client, not of the provider
// contract.

// Webhooks lists the server's webhooks (GET /v1/webhooks), without their secrets.
func (p *Provider) Webhooks(ctx context.Context) ([]api.Webhook, error) {
	return list(ctx, p, "/v1/webhooks", "webhooks", func(w api.Webhook) api.Webhook { return w })
}

// CreateWebhook registers target to receive events of the given types (none: every type)
// (POST /v1/webhooks). The answer holds the secret that signs its deliveries, which the
// server shows only now.
func (p *Provider) CreateWebhook(ctx context.Context, target string, events []string) (api.Webhook, error) {
	var out api.Webhook
	err := p.call(ctx, http.MethodPost, "/v1/webhooks", api.WebhookRequest{URL: target, Events: events}, &out)
	return out, err
}

// DeleteWebhook removes a webhook (DELETE /v1/webhooks/{id}); CodeNotFound when there is
// none.
func (p *Provider) DeleteWebhook(ctx context.Context, id string) error {
	return p.call(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), nil, nil)
}
