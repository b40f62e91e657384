package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

// The metrics section: what Prometheus metrics cost on the hot path. Two servers of the
// same binary, one collecting metrics (the default) and one started with --metrics=false,
// are timed in turn, round by round, on the API section's exec and create → first command.

func (b *bencher) metricsSection(ctx context.Context, rt string) error {
	type side struct {
		name string
		api  *tupperAPI
	}
	var sides []*side
	for _, on := range []bool{true, false} {
		home, err := os.MkdirTemp("", "tupper-bench-metrics-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(home)
		if err := os.Chmod(home, 0o711); err != nil { // the sandboxes' roots traverse it
			return err
		}
		key, err := benchKey(ctx, home)
		if err != nil {
			return err
		}
		name, flag := "metrics on", "--metrics=true"
		if !on {
			name, flag = "metrics off", "--metrics=false"
		}
		srv, err := b.startServe(ctx, home, "", 0, flag)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer srv.stop()
		sides = append(sides, &side{name: name, api: &tupperAPI{url: srv.url, key: key, c: &http.Client{Timeout: time.Minute}}})
	}

	// 1. Exec round trip of true in a running sandbox of each server, in turn.
	execs, err := b.execInTurn(ctx, []*tupperAPI{sides[0].api, sides[1].api})
	if err != nil {
		return err
	}

	// 2. Create → first command on each, in turn, round by round.
	firsts := make([]samples, len(sides))
	err = repeat(b.o.n, func(timed bool) error {
		for i, s := range sides {
			t1, _, _, err := apiCycle(ctx, s.api)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if timed {
				firsts[i] = append(firsts[i], t1)
			}
			if settle > 0 {
				time.Sleep(settle)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	on := b.add("exec true", "tupper API, metrics on: POST /v1/sandboxes/{id}/run", execs[0])
	b.add("exec true", "tupper API, metrics off (--metrics=false): the same", execs[1])
	on.vs = append(on.vs, ratio(execs[0], execs[1], "on/off"))
	cf := b.add("create → first command", "tupper API, metrics on, no pool: POST /v1/sandboxes, POST …/run true", firsts[0].stats())
	b.add("create → first command", "tupper API, metrics off: the same", firsts[1].stats())
	cf.vs = append(cf.vs, ratio(firsts[0].stats(), firsts[1].stats(), "on/off"))
	return b.flush(fmt.Sprintf("The cost of Prometheus metrics: tupper serve (%s, no pool) with and without them, one keep-alive client each, in turn", rt))
}
