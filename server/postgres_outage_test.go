//go:build linux

package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// A PostgreSQL that goes away under load (pg_ctl stop -m fast), then comes back: while it is
// gone requests fail with 503 unavailable naming PostgreSQL, never a panic, and the server
// stays up; once it is back the server recovers by itself, and every sandbox it acknowledged
// is there, whole, and it leads the store again. The store's password is never
// in the server's output or in an answer.
// PostgreSQL only (TUPPER_TEST_STORE=postgres), on a cluster of the test's own, since it
// stops it.
func TestPostgresGoesAway(t *testing.T) {
	if !testenv.PostgresStore() {
		t.Skip(testenv.StoreEnv + " is not postgres: this test is about a PostgreSQL store")
	}
	pg := testenv.PrivatePostgres(t)
	const password = "Outage-pw-7f3a9c" // trust auth does not check it: it is here to be looked for
	admin, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE tupper_outage LOGIN PASSWORD '` + password + `'`,
		`CREATE DATABASE tupper_outage OWNER tupper_outage`,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	admin.Close()
	dsn := (&url.URL{Scheme: "postgres", User: url.UserPassword("tupper_outage", password), Path: "/tupper_outage",
		RawQuery: url.Values{"host": {pg.Dir + "/sock"}, "sslmode": {"disable"}}.Encode()}).String()

	home := t.TempDir()
	var (
		outMu sync.Mutex
		out   bytes.Buffer // every answer's body, and the key command's output
	)
	kc := exec.Command(servertest.Binary(t), "keys", "create", "--store", dsn)
	kc.Env = append(os.Environ(), "TUPPER_HOME="+home)
	kc.Stderr = &out
	keyOut, err := kc.Output()
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, out.String())
	}
	out.Write(keyOut)
	key := strings.TrimSpace(string(keyOut))

	cmd := exec.Command(servertest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--home", home, "--store", dsn, "--provider", "memory")
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home)
	srv := startChild(t, cmd)
	if err := srv.waitServing(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		code int
		body []byte
	}
	do := func(method, path string, in any) (answer, error) {
		var body io.Reader
		if in != nil {
			b, _ := json.Marshal(in)
			body = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, srv.url+path, body)
		req.Header.Set("Authorization", "Bearer "+key)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		outMu.Lock()
		out.Write(data)
		out.WriteByte('\n')
		outMu.Unlock()
		return answer{resp.StatusCode, data}, nil
	}
	create := func(label string) (string, answer, error) {
		a, err := do("POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"n": label}})
		var sb struct{ ID string }
		if err == nil && a.code == http.StatusCreated {
			err = json.Unmarshal(a.body, &sb)
		}
		return sb.ID, a, err
	}

	var (
		mu    sync.Mutex
		acked []string // sandboxes whose create was answered 201
		bad   []string // answers neither a success nor 503 unavailable naming PostgreSQL
		n503  int
	)
	record := func(what string, a answer, err error, okCode int) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", what, err))
		case a.code == okCode:
		case a.code == http.StatusServiceUnavailable:
			var e struct{ Code, Message string }
			if json.Unmarshal(a.body, &e) != nil || e.Code != "unavailable" || !strings.Contains(e.Message, "PostgreSQL") {
				bad = append(bad, fmt.Sprintf("%s: 503 %s", what, a.body))
			}
			n503++
		default:
			bad = append(bad, fmt.Sprintf("%s: %d %s", what, a.code, a.body))
		}
	}
	for i := range 3 {
		id, a, err := create(fmt.Sprint("before-", i))
		if err != nil || a.code != http.StatusCreated {
			t.Fatalf("create before the outage: %v %d %s", err, a.code, a.body)
		}
		acked = append(acked, id)
	}

	// Load: creates and lists from a few clients, through the outage and after it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	workers(&wg, stop, 4, func(w, i int) bool {
		id, a, err := create(fmt.Sprintf("load-%d-%d", w, i))
		record("create", a, err, http.StatusCreated)
		if err == nil && a.code == http.StatusCreated {
			mu.Lock()
			acked = append(acked, id)
			mu.Unlock()
		}
		a, err = do("GET", "/v1/sandboxes", nil)
		record("list", a, err, http.StatusOK)
		time.Sleep(10 * time.Millisecond)
		return true
	})
	time.Sleep(300 * time.Millisecond)
	pg.Stop(t, "fast")
	time.Sleep(2 * time.Second) // requests while PostgreSQL is gone
	mu.Lock()
	during := n503
	mu.Unlock()
	if during == 0 {
		t.Errorf("no request failed with 503 while PostgreSQL was stopped")
	}
	select {
	case <-srv.exited:
		t.Fatalf("the server stopped when PostgreSQL did: %s", srv.logs())
	default:
	}

	pg.Start(t)
	back := time.Now()
	deadline := back.Add(10 * time.Second)
	for {
		a, err := do("GET", "/v1/sandboxes", nil)
		if err == nil && a.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not recover within 10 s of PostgreSQL's return: %v %d %s\n%s", err, a.code, a.body, srv.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("recovered %v after PostgreSQL was back; %d answers were 503 during the outage", time.Since(back).Round(time.Millisecond), during)
	id, a, err := create("after")
	if err != nil || a.code != http.StatusCreated {
		t.Fatalf("create after the outage: %v %d %s", err, a.code, a.body)
	}
	time.Sleep(500 * time.Millisecond) // load after the return too
	close(stop)
	wg.Wait()
	acked = append(acked, id)

	// The server takes its locks again (PostgreSQL's restart dropped their session; it
	// checks every second): it leads the store again, and a second server joins beside it
	// without taking the lead.
	leads := func(c *child) bool {
		return strings.Contains(storeLeader(t, dsn), fmt.Sprintf("pid %d,", c.cmd.Process.Pid))
	}
	for deadline := time.Now().Add(10 * time.Second); !leads(srv); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server does not lead its store again after PostgreSQL came back (leader: %q)", storeLeader(t, dsn))
		}
	}
	second := exec.Command(servertest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--home", home, "--store", dsn, "--provider", "memory")
	second.Env = append(os.Environ(), "TUPPER_HOME="+home)
	sc := startChild(t, second)
	if err := sc.waitServing(60 * time.Second); err != nil {
		t.Errorf("a second server after the outage: %v", err)
	} else if time.Sleep(1500 * time.Millisecond); !leads(srv) || leads(sc) {
		t.Errorf("after a second server joined, the leader is %q; want the first (pid %d)", storeLeader(t, dsn), srv.cmd.Process.Pid)
	}
	if strings.Contains(sc.logs(), password) {
		t.Errorf("the second server's output holds the store's password:\n%s", sc.logs())
	}

	mu.Lock()
	for _, b := range bad {
		t.Errorf("an answer under the outage: %s", b)
	}
	mu.Unlock()
	if strings.Contains(srv.logs(), "panic") {
		t.Errorf("the server panicked:\n%s", srv.logs())
	}

	// Nothing acknowledged is lost, and every sandbox listed is whole: its record answers, and
	// it has its sandbox.created event.
	a, err = do("GET", "/v1/sandboxes", nil)
	var list struct{ Sandboxes []struct{ ID string } }
	if err != nil || a.code != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		t.Fatalf("list: %v %d %s", err, a.code, a.body)
	}
	listed := map[string]bool{}
	for _, sb := range list.Sandboxes {
		listed[sb.ID] = true
	}
	for _, id := range acked {
		if !listed[id] {
			t.Errorf("sandbox %s was acknowledged, and is not listed after the outage", id)
		}
	}
	a, err = do("GET", "/v1/events?type=sandbox.created&limit=1000", nil)
	var evs struct{ Events []store.Event }
	if err != nil || a.code != http.StatusOK || json.Unmarshal(a.body, &evs) != nil {
		t.Fatalf("events: %v %d %s", err, a.code, a.body)
	}
	created := map[string]bool{}
	for _, e := range evs.Events {
		created[e.SandboxID] = true
	}
	var noEvent []string
	for id := range listed {
		if a, err := do("GET", "/v1/sandboxes/"+id, nil); err != nil || a.code != http.StatusOK {
			t.Errorf("listed sandbox %s: %v %d %s", id, err, a.code, a.body)
		}
		if !created[id] {
			noEvent = append(noEvent, id)
		}
	}
	t.Logf("%d sandboxes acknowledged, %d listed", len(acked), len(listed))
	// A sandbox's record and its sandbox.created event are one transaction: none is listed
	// without it, whenever PostgreSQL went away.
	if len(noEvent) > 0 {
		t.Errorf("sandboxes %v are recorded without their sandbox.created event", noEvent)
	}

	outMu.Lock()
	defer outMu.Unlock()
	if strings.Contains(out.String(), password) {
		t.Errorf("an answer holds the store's password:\n%s", out.String())
	}
	if strings.Contains(srv.logs(), password) {
		t.Errorf("the server's output holds the store's password:\n%s", srv.logs())
	}
}

// storeLeader is the application_name ("tupper, pid N, serving on …") of the server leading
// the PostgreSQL store dsn names (the session holding its leader lock: see store.ServerLock),
// or "" when none leads.
func storeLeader(t *testing.T, dsn string) string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	err = db.QueryRow(`SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.classid::bigint = $1 AND l.objid = 0 AND l.objsubid = 2 AND l.granted
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, store.PGInstancesLockSpace).Scan(&name)
	if err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	return name
}
