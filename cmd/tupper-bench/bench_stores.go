package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx", for the run's database

	"github.com/tupper-dev/tupper/internal/pgdsn"
	"github.com/tupper-dev/tupper/store"
)

// The stores section (--stores): the API section's store-bound operations on one tupper serve
// per store, side by side in one run, round by round, and the ratio of PostgreSQL to SQLite.
// The pool, Docker and E2B stay in the API section: the store does not change them.

// storeNames are the stores --stores may name, in the order the section measures them.
var storeNames = []string{"sqlite", "postgres"}

// parseStores turns --stores into store names in storeNames' order; nil when empty.
func parseStores(flag string) ([]string, error) {
	if flag == "" {
		return nil, nil
	}
	want := map[string]bool{}
	for _, s := range strings.Split(flag, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(storeNames, s) {
			return nil, fmt.Errorf("--stores %s: %q is not a store: name sqlite, postgres or both", flag, s)
		}
		want[s] = true
	}
	var out []string
	for _, s := range storeNames {
		if want[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

// storeSide is one store's server in the stores section and what was measured on it.
type storeSide struct {
	name        string
	api         *tupperAPI
	first, full samples
	exec        stats
	lat         samples       // each of the concurrent creates, over every burst
	all         time.Duration // the bursts, summed
	created     int
}

// title is how the table names the store.
func (s *storeSide) title() string {
	if s.name == "postgres" {
		return "PostgreSQL"
	}
	return "SQLite"
}

func (b *bencher) storesSection(ctx context.Context, rt string) error {
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	var sides []*storeSide
	for _, name := range b.o.stores {
		home, err := os.MkdirTemp("", "tupper-bench-store-")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { os.RemoveAll(home) })
		if err := os.Chmod(home, 0o711); err != nil { // the sandboxes' roots traverse it
			return err
		}
		spec := home
		if name == "postgres" {
			dsn, drop, err := b.postgresDatabase(ctx)
			if err != nil {
				return err
			}
			cleanups = append(cleanups, drop)
			spec = dsn
		}
		key, err := benchKey(ctx, spec)
		if err != nil {
			return fmt.Errorf("%s store: %w", name, err)
		}
		srv, err := b.startServe(ctx, home, spec, 0)
		if err != nil {
			return fmt.Errorf("%s store: %w", name, err)
		}
		cleanups = append(cleanups, srv.stop)
		sides = append(sides, &storeSide{name: name, api: &tupperAPI{url: srv.url, key: key, c: &http.Client{Timeout: time.Minute}}})
	}

	// 1. Exec round trip of true in a running sandbox of each server, in turn.
	var apis []*tupperAPI
	for _, s := range sides {
		apis = append(apis, s.api)
	}
	execs, err := b.execInTurn(ctx, apis)
	if err != nil {
		return err
	}
	for i, s := range sides {
		s.exec = execs[i]
	}

	// 2. Create → first command → destroyed on each, in turn, round by round.
	err = repeat(b.o.n, func(timed bool) error {
		for _, s := range sides {
			t1, t2, _, err := apiCycle(ctx, s.api)
			if err != nil {
				return fmt.Errorf("%s store: %w", s.name, err)
			}
			if timed {
				s.first, s.full = append(s.first, t1), append(s.full, t2)
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

	// 3. --concurrent creates at once: two bursts each, in the order A B B A, so that neither
	// store always follows the other's teardown.
	if n := b.o.concurrent; n > 0 {
		order := append([]*storeSide{}, sides...)
		for i := len(sides) - 1; i >= 0; i-- {
			order = append(order, sides[i])
		}
		for _, s := range order {
			lat, all, err := burst(ctx, s.api, n)
			if err != nil {
				return fmt.Errorf("%s store: %w", s.name, err)
			}
			s.lat, s.all, s.created = append(s.lat, lat...), s.all+all, s.created+n
			time.Sleep(time.Second) // the teardown of the burst ends before the next starts
		}
	}

	base := sides[0]
	for _, s := range sides {
		r := b.add("exec true", s.title()+": POST /v1/sandboxes/{id}/run", s.exec)
		if s != base {
			r.vs = append(r.vs, ratio(s.exec, base.exec, s.title()+"/"+base.title()))
		}
	}
	for _, s := range sides {
		r := b.add("create → first command", s.title()+": POST /v1/sandboxes, POST …/run true", s.first.stats())
		if s != base {
			r.vs = append(r.vs, ratio(s.first.stats(), base.first.stats(), s.title()+"/"+base.title()))
		}
	}
	for _, s := range sides {
		r := b.add("… → destroyed", s.title()+": the same, then DELETE", s.full.stats())
		if s != base {
			r.vs = append(r.vs, ratio(s.full.stats(), base.full.stats(), s.title()+"/"+base.title()))
		}
	}
	if n := b.o.concurrent; n > 0 {
		for _, s := range sides {
			r := b.add("concurrent creates", fmt.Sprintf("%s: %d POST /v1/sandboxes at once, each", s.title(), n), s.lat.stats())
			if s != base {
				r.vs = append(r.vs, ratio(s.lat.stats(), base.lat.stats(), s.title()+"/"+base.title()))
			}
		}
		rate := func(s *storeSide) float64 { return float64(s.created) / s.all.Seconds() }
		for _, s := range sides {
			var notes []string
			if s != base {
				notes = append(notes, fmt.Sprintf("%s/%s %.2f", s.title(), base.title(), rate(s)/rate(base)))
			}
			b.figure("creates per second", fmt.Sprintf("%s: %d at once, %d bursts", s.title(), n, s.created/n),
				fmt.Sprintf("%.1f/s", rate(s)), notes...)
		}
	}
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.title()
	}
	return b.flush(fmt.Sprintf("HTTP API: tupper serve (%s, no pool) on each store: %s, one keep-alive client each, in turn",
		rt, strings.Join(names, ", ")))
}

// execInTurn times --exec-n exec round trips of true in a running sandbox of each server
// of apis, in turn, and destroys the sandboxes after.
func (b *bencher) execInTurn(ctx context.Context, apis []*tupperAPI) ([]stats, error) {
	var fs []func() error
	for _, api := range apis {
		id, err := api.create(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", api.url, err)
		}
		defer api.destroy(context.WithoutCancel(ctx), id)
		fs = append(fs, func() error {
			_, err := api.run(ctx, id, "true")
			return err
		})
	}
	return measureEach(b.o.execN, fs...)
}

// ratio is this over other at p50 and p99 (above 1: this is slower), named name.
func ratio(this, other stats, name string) string {
	if other.p50 <= 0 || other.p99 <= 0 {
		return ""
	}
	return fmt.Sprintf("%s p50 %.2f, p99 %.2f", name, float64(this.p50)/float64(other.p50), float64(this.p99)/float64(other.p99))
}

// benchKey makes an API key in the store spec names (creating its tables).
func benchKey(ctx context.Context, spec string) (string, error) {
	st, err := store.OpenURL(ctx, spec)
	if err != nil {
		return "", err
	}
	defer st.Close()
	_, key, err := st.CreateKey(ctx, "bench")
	return key, err
}

// postgresDatabase creates a new database for the run on the cluster of --postgres, else on
// a private cluster it starts with scripts/postgres.sh, and returns its URL and what drops it
// (and stops that cluster).
func (b *bencher) postgresDatabase(ctx context.Context) (string, func(), error) {
	admin, stop := b.o.postgres, func() {}
	if admin == "" {
		var err error
		if admin, stop, err = b.startPostgres(ctx); err != nil {
			return "", nil, err
		}
	}
	name := fmt.Sprintf("tupper_bench_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	dsn, err := pgdsn.WithDatabase(admin, name)
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("--postgres: %w", err)
	}
	db, err := sql.Open("pgx", admin)
	if err == nil {
		_, err = db.ExecContext(ctx, "CREATE DATABASE "+name)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		stop()
		return "", nil, fmt.Errorf("creating the run's database on %s: %v", store.Redact(admin), err)
	}
	return dsn, func() {
		if _, err := db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			b.note("dropping the run's database %s: %v", name, err)
		}
		db.Close()
		stop()
	}, nil
}

// postgresScript starts and stops a private cluster; the bench runs from the repository's root.
const postgresScript = "scripts/postgres.sh"

// startPostgres starts a private cluster in a temporary directory and returns its superuser
// URL and what stops it.
func (b *bencher) startPostgres(ctx context.Context) (string, func(), error) {
	if _, err := os.Stat(postgresScript); err != nil {
		return "", nil, errors.New("the postgres store needs a cluster: give one with --postgres URL, or run from the repository's root, where " +
			postgresScript + " starts a private one")
	}
	dir, err := os.MkdirTemp("", "tupper-bench-pg-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, "bash", postgresScript, "start", dir)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	stop := func() {
		if err := exec.Command("bash", postgresScript, "stop", dir).Run(); err != nil {
			b.note("stopping the private PostgreSQL cluster in %s: %v", dir, err)
		}
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("%s start: %v: %s", postgresScript, err, strings.TrimSpace(errb.String()))
	}
	b.note("a private PostgreSQL cluster in %s (%s)", dir, postgresScript)
	return strings.TrimSpace(string(out)), stop, nil
}
