package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/store"
)

// emit stores an event (queuing its webhook deliveries in the same transaction) and wakes
// the dispatcher. A failure to store is logged: the request that caused the event has
// already happened.
func (s *Server) emit(ctx context.Context, typ, sandboxID string, data any) {
	if _, err := s.st.AddEvent(context.WithoutCancel(ctx), typ, sandboxID, data); err != nil {
		s.log.Error("storing an event", "type", typ, "sandbox", sandboxID, "err", err)
		return
	}
	s.wakeDispatcher()
}

// eventStored is told of an event the lifecycle stored with the record it is about
// (lifecycle.Config.Stored): the dispatcher has a delivery to make.
func (s *Server) eventStored(context.Context, store.Event) { s.wakeDispatcher() }

// wakeDispatcher tells the webhook dispatcher that deliveries may be due.
func (s *Server) wakeDispatcher() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func eventFilter(r *http.Request) (store.EventFilter, error) {
	q := r.URL.Query()
	f := store.EventFilter{SandboxID: q.Get("sandbox"), Type: q.Get("type"), After: q.Get("after")}
	since, err := queryTime(r, "since")
	if err != nil {
		return f, err
	}
	f.Since = since
	limit, err := queryInt(r, "limit", 0)
	if err != nil {
		return f, err
	}
	if limit < 0 || limit > 1000 {
		return f, badRequest("limit must be between 1 and 1000")
	}
	f.Limit = int(limit)
	return f, nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, _ *caller) {
	f, err := eventFilter(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.writeEvents(w, r, f)
}

// sandboxEvents lists one sandbox's events; its own token may read them.
func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request, _ *caller) {
	f, err := eventFilter(r)
	if err != nil {
		writeError(w, err)
		return
	}
	f.SandboxID = r.PathValue("id")
	s.writeEvents(w, r, f)
}

func (s *Server) writeEvents(w http.ResponseWriter, r *http.Request, f store.EventFilter) {
	evs, err := s.st.Events(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.WebhookRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeError(w, badRequest("url must be an absolute http or https URL"))
		return
	}
	if u.User != nil {
		writeError(w, badRequest("url must not hold credentials; verify deliveries with the signature"))
		return
	}
	if err := checkWebhookURL(u, s.cfg.AllowPrivateWebhooks); err != nil {
		writeError(w, err)
		return
	}
	for _, e := range req.Events {
		if !slices.Contains(EventTypes, e) {
			writeError(w, badRequest("event type %q is not one of %v", e, EventTypes))
			return
		}
	}
	h, err := s.st.CreateWebhook(r.Context(), req.URL, req.Events)
	if err != nil {
		writeError(w, err)
		return
	}
	audit.SetTarget(r.Context(), h.ID)
	writeJSON(w, http.StatusCreated, api.Webhook{ID: h.ID, URL: h.URL, Events: h.Events, Secret: h.Secret, CreatedAt: h.CreatedAt})
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, _ *caller) {
	hs, err := s.st.Webhooks(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.Webhook, 0, len(hs))
	for _, h := range hs {
		out = append(out, api.Webhook{ID: h.ID, URL: h.URL, Events: h.Events, CreatedAt: h.CreatedAt})
	}
	writeJSON(w, http.StatusOK, api.WebhookList{Webhooks: out})
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, _ *caller) {
	if err := s.st.DeleteWebhook(r.Context(), r.PathValue("webhook")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Sign returns the X-Webhook-Signature value of a delivery: "sha256=" and the hex
// HMAC-SHA256, keyed with the webhook's secret, of "<timestamp>.<body>".
func Sign(secret string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.", timestamp)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// deliveryLease is how long a claimed delivery stays claimed; a server that dies mid-delivery
// retries it after this.
const deliveryLease = 30 * time.Second

// releaseInterval is how often a server on a shared store releases the deliveries that
// servers which died had in flight.
const releaseInterval = 2 * time.Second

// deliverLoop sends due deliveries until ctx ends. Every server on a store delivers: each
// claims its own.
func (s *Server) deliverLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var release <-chan time.Time
	if s.st.Shared() {
		rt := time.NewTicker(releaseInterval)
		defer rt.Stop()
		release = rt.C
	}
	for {
		s.deliverDue(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		case <-release:
			if n, err := s.st.ReleaseClaims(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("releasing the deliveries of servers that died", "err", err)
			} else if n > 0 {
				s.log.Info("resending webhook deliveries a server that died left in flight", "count", n)
			}
		}
	}
}

func (s *Server) deliverDue(ctx context.Context) {
	for ctx.Err() == nil {
		ds, err := s.st.ClaimDeliveries(ctx, time.Now(), deliveryLease, 16)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("claiming webhook deliveries", "err", err)
			}
			return
		}
		if len(ds) == 0 {
			return
		}
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.deliver(ctx, d)
			}()
		}
		wg.Wait()
	}
}

func (s *Server) deliver(ctx context.Context, d store.Delivery) {
	body, _ := json.Marshal(d.Event)
	ts := time.Now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		s.cfg.Metrics.CountDelivery(metrics.DeliveryGaveUp)
		_ = s.st.DeliveryFailed(context.WithoutCancel(ctx), d.ID, "bad url", time.Time{})
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tupper-webhooks/1")
	req.Header.Set("X-Webhook-Id", d.Event.ID)
	req.Header.Set("X-Webhook-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Webhook-Signature", Sign(d.Webhook.Secret, ts, body))
	resp, err := s.webhooks.Do(req)
	var msg string
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			s.cfg.Metrics.CountDelivery(metrics.DeliveryDelivered)
			if err := s.st.DeliverySucceeded(context.WithoutCancel(ctx), d.ID); err != nil {
				s.log.Error("recording a delivery", "webhook", d.Webhook.ID, "err", err)
			}
			return
		}
		msg = fmt.Sprintf("status %d", resp.StatusCode)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			msg += ": " + errWebhookRedirect.Error()
		}
	} else {
		if ctx.Err() != nil {
			return // shutting down: the lease runs out and it is retried after the restart
		}
		msg = provider.StripCredentials(err.Error())
	}
	attempt := d.Attempts + 1
	next := time.Time{}
	result := metrics.DeliveryGaveUp
	if attempt < s.cfg.WebhookMaxAttempts {
		next = time.Now().Add(backoff(s.cfg.WebhookBackoff, attempt))
		result = metrics.DeliveryRetry
	}
	s.cfg.Metrics.CountDelivery(result)
	s.log.Warn("webhook delivery failed", "webhook", d.Webhook.ID, "event", d.Event.ID, "attempt", attempt, "err", msg)
	if err := s.st.DeliveryFailed(context.WithoutCancel(ctx), d.ID, msg, next); err != nil {
		s.log.Error("recording a delivery", "webhook", d.Webhook.ID, "err", err)
	}
}

// backoff is base·2^(attempt-1), at most an hour.
func backoff(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}
