package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

// populated are the credentials populate made, to try on a copy.
type populated struct {
	key, revokedKey, token string
}

// populate puts rows in every table of s: keys (one revoked), sandboxes (one destroyed) with
// tokens and ports, webhooks, events and their deliveries (delivered, failed, waiting),
// settings, secrets (the last deleted, so that its counter is past the largest left),
// snapshots and audit entries.
func populate(t *testing.T, s *Store) populated {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	k, secret, err := s.CreateKey(ctx, "ci")
	must(err)
	rk, revoked, err := s.CreateE2BKey(ctx, "old")
	must(err)
	_, err = s.RevokeKey(ctx, rk.ID)
	must(err)
	tok := NewToken()
	now := time.Now()
	must(s.PutSandbox(ctx, Sandbox{ID: "sb1", Provider: "memory", APIKeyID: k.ID, Key: "user:1", Labels: map[string]string{"a": "b"},
		CreatedAt: now, Deadline: now.Add(time.Hour), OnTimeout: OnTimeoutPause, AutoResume: true, Timeout: time.Hour}, Hash(tok)))
	must(s.AddToken(ctx, "sb1", Hash(NewToken())))
	must(s.ExposePort(ctx, "sb1", 8080, true))
	must(s.ExposePort(ctx, "sb1", 9000, false))
	must(s.PutSandbox(ctx, Sandbox{ID: "sb2", Provider: "memory", CreatedAt: now}, Hash(NewToken())))
	_, err = s.MarkDestroyed(ctx, "sb2", End{Reason: EndTimeout})
	must(err)
	_, err = s.CreateWebhook(ctx, "http://127.0.0.1:1/all", nil)
	must(err)
	_, err = s.CreateWebhook(ctx, "http://127.0.0.1:1/only", []string{"sandbox.destroyed"})
	must(err)
	// Of three sandboxes: one sandbox's deliveries are claimed one at a time, in order.
	for i, typ := range []string{"sandbox.created", "sandbox.created", "sandbox.destroyed"} {
		_, err := s.AddEvent(ctx, typ, fmt.Sprint("sb", i+1), map[string]string{"x": "y"})
		must(err)
	}
	ds, err := s.ClaimDeliveries(ctx, time.Now().Add(time.Second), time.Minute, 10)
	must(err)
	if len(ds) < 3 {
		t.Fatalf("claimed %d deliveries", len(ds))
	}
	must(s.DeliverySucceeded(ctx, ds[0].ID))
	must(s.DeliveryFailed(ctx, ds[1].ID, "connection refused", now.Add(time.Minute)))
	_, err = s.Setting(ctx, "signing", 32)
	must(err)
	_, err = s.Lock(ctx, "key user:1") // held by a server that died
	must(err)
	_, err = s.CreateSecret(ctx, k.ID, "GITHUB_TOKEN", "ghp_x", map[string]string{"m": "1"})
	must(err)
	last, err := s.CreateSecret(ctx, k.ID, "NPM_TOKEN", "npm_x", nil)
	must(err)
	must(s.DeleteSecret(ctx, k.ID, last.ID))
	id, err := s.ReserveSnapshot(ctx, Snapshot{SandboxID: "sb1", APIKeyID: k.ID, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, SnapshotQuota{PerSandbox: -1, PerKey: -1})
	must(err)
	must(s.SetSnapshotID(ctx, id, "snap1"))
	must(s.AppendAudit(ctx, AuditEntry{Via: "key", KeyID: k.ID, API: "rest", Action: "sandbox.create", Target: "sb1", Result: "ok", Status: 201},
		AuditEntry{Via: "token", KeyOf: "sb1", API: "e2b", Action: "sandbox.exec", Target: "sb1", Result: "ok", Status: 200}))
	return populated{key: secret, revokedKey: revoked, token: tok}
}

// dump is every row of every table of s, in copy order, as the database returns them.
func dump(t *testing.T, s *Store) map[string][][]any {
	t.Helper()
	ctx := context.Background()
	out := map[string][][]any{}
	for _, c := range copyTables {
		rows, err := s.db.QueryContext(ctx, `SELECT * FROM `+c.name+` ORDER BY `+c.order)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[c.name] = append(out[c.name], vals)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// kinds are the stores a copy goes between, by name: a new one of each on every call.
var kinds = []struct {
	name string
	spec func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return t.TempDir() }},
	{"postgres", func(t *testing.T) string { return testenv.PostgresDB(t) }},
}

// eachCopy runs f for every pair of a source's and a target's kinds (sqlite→postgres,
// postgres→sqlite and the same kinds), with a new spec of each.
func eachCopy(t *testing.T, f func(t *testing.T, from, to string)) {
	for _, a := range kinds {
		for _, b := range kinds {
			t.Run(a.name+"→"+b.name, func(t *testing.T) { f(t, a.spec(t), b.spec(t)) })
		}
	}
}

func openAsIs(t *testing.T, spec string) *Store {
	t.Helper()
	s, err := OpenAsIs(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A copy holds every row as it was, and the target works as the source did after it: keys
// and tokens authenticate, and the next rows numbered by the database get the numbers the
// source would have given them.
func TestCopy(t *testing.T) {
	eachCopy(t, func(t *testing.T, from, to string) {
		ctx := context.Background()
		src := open(t, from)
		creds := populate(t, src)
		dst := open(t, to)
		stats, err := Copy(ctx, openAsIs(t, from), dst)
		if err != nil {
			t.Fatal(err)
		}
		want := dump(t, src)
		if got := dump(t, dst); !reflect.DeepEqual(got, want) {
			t.Fatalf("after the copy the target holds\n%v\nwant\n%v", got, want)
		}
		if len(stats) != len(copyTables) {
			t.Fatalf("stats = %v: want every table", stats)
		}
		for _, st := range stats {
			if st.Rows != len(want[st.Table]) || st.Rows == 0 {
				t.Errorf("stats say %d rows of %s, the source has %d (and none may be empty here)", st.Rows, st.Table, len(want[st.Table]))
			}
		}
		if k, err := dst.AuthenticateKey(ctx, creds.key); err != nil || k.Name != "ci" {
			t.Errorf("the key after the copy: %+v, %v", k, err)
		}
		if _, err := dst.AuthenticateKey(ctx, creds.revokedKey); !errors.Is(err, provider.CodeUnauthorized) {
			t.Errorf("the revoked key after the copy: %v", err)
		}
		if id, err := dst.SandboxForToken(ctx, creds.token); err != nil || id != "sb1" {
			t.Errorf("the sandbox token after the copy: %q, %v", id, err)
		}
		// The same inserts on both: the same numbers.
		for _, s := range []*Store{src, dst} {
			if _, err := s.AddEvent(ctx, "sandbox.paused", "sb1", nil); err != nil {
				t.Fatal(err)
			}
			k, _ := s.Keys(ctx)
			if _, err := s.CreateSecret(ctx, k[0].ID, "LATER", "v", nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range copyTables {
			if c.serial == "" {
				continue
			}
			q := `SELECT max(` + c.serial + `) FROM ` + c.name
			var a, b int64
			if err := src.db.QueryRowContext(ctx, q).Scan(&a); err != nil {
				t.Fatal(err)
			}
			if err := dst.db.QueryRowContext(ctx, q).Scan(&b); err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Errorf("after an insert on each, %s.%s is %d on the target, %d on the source", c.name, c.serial, b, a)
			}
		}
	})
}

// A target with any row is refused, and left as it was.
func TestCopyRefusesNonEmptyTarget(t *testing.T) {
	eachCopy(t, func(t *testing.T, from, to string) {
		ctx := context.Background()
		populate(t, open(t, from))
		dst := open(t, to)
		if _, err := dst.Setting(ctx, "x", 8); err != nil {
			t.Fatal(err)
		}
		before := dump(t, dst)
		_, err := Copy(ctx, openAsIs(t, from), dst)
		if !errors.Is(err, provider.CodeConflict) || !strings.Contains(err.Error(), "rows: 1 in settings") {
			t.Fatalf("copy into a store with a setting: %v; want a conflict naming settings", err)
		}
		if after := dump(t, dst); !reflect.DeepEqual(after, before) {
			t.Fatalf("a refused copy changed the target: %v", after)
		}
	})
}

// A source at another schema version is refused, saying how to migrate it.
func TestCopyRefusesOtherVersion(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		populate(t, s)
		q := `PRAGMA user_version = 6`
		if s.db.dialect == postgres {
			q = `UPDATE schema_version SET version = 6`
		}
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		dst := open(t, t.TempDir())
		_, err := Copy(ctx, openAsIs(t, spec), dst)
		if err == nil || !strings.Contains(err.Error(), "schema version 6") || !strings.Contains(err.Error(), "open it with this tupper first") {
			t.Fatalf("copy of a version-6 store: %v", err)
		}
		if v, _ := s.Version(ctx); v != 6 {
			t.Errorf("the source's version is %d after a refused copy, want 6 (nothing migrated)", v)
		}
	})
}

// OpenAsIs creates nothing: a missing SQLite store or an empty PostgreSQL database is an
// error.
func TestOpenAsIsCreatesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		if _, err := OpenAsIs(context.Background(), spec); !errors.Is(err, provider.CodeInvalidArgument) || !strings.Contains(err.Error(), "no") {
			t.Fatalf("OpenAsIs of an empty store: %v; want an invalid argument", err)
		}
	})
}

// A copy that fails halfway leaves the target empty (counters too: a copy after it works).
func TestCopyFailureLeavesTargetEmpty(t *testing.T) {
	eachCopy(t, func(t *testing.T, from, to string) {
		ctx := context.Background()
		populate(t, open(t, from))
		dst := open(t, to)
		boom := errors.New("boom")
		_, err := copyStore(ctx, openAsIs(t, from), dst, func(table string) error {
			if table == "deliveries" {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) {
			t.Fatalf("copy failing after deliveries: %v", err)
		}
		for table, rows := range dump(t, dst) {
			t.Errorf("a failed copy left %d rows in %s", len(rows), table)
		}
		if _, err := Copy(ctx, openAsIs(t, from), dst); err != nil {
			t.Fatalf("a copy after a failed one: %v", err)
		}
	})
}

// copyTables is the whole schema: every table of the database's catalogue, and every column
// the database numbers, on both databases. A table a migration adds fails here until Copy
// copies it.
func TestCopyTablesAreTheSchema(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		var names []string
		var serials []string
		for _, c := range copyTables {
			names = append(names, c.name)
			if c.serial != "" {
				serials = append(serials, c.name+"."+c.serial)
			}
		}
		slices.Sort(names)
		got, err := s.tables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, names) {
			t.Errorf("the database's tables are %v; Copy copies %v", got, names)
		}
		var numbered []string
		if s.db.dialect == postgres {
			rows, err := s.db.QueryContext(ctx, `SELECT table_name || '.' || column_name FROM information_schema.columns
				WHERE table_schema = current_schema() AND (is_identity = 'YES' OR column_default LIKE 'nextval%')`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				numbered = append(numbered, n)
			}
			rows.Close()
		} else {
			for _, table := range got {
				var sql string
				if err := s.db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = ?`, table).Scan(&sql); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(strings.ToUpper(sql), "AUTOINCREMENT") {
					continue
				}
				var col string
				if err := s.db.QueryRowContext(ctx, `SELECT name FROM pragma_table_info(?) WHERE pk = 1`, table).Scan(&col); err != nil {
					t.Fatal(err)
				}
				numbered = append(numbered, table+"."+col)
			}
		}
		slices.Sort(numbered)
		slices.Sort(serials)
		if !slices.Equal(numbered, serials) {
			t.Errorf("the database numbers %v; Copy carries the counters of %v", numbered, serials)
		}
	})
}
