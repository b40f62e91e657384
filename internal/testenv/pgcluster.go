package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// PostgresCluster is a PostgreSQL cluster of one test's own (PrivatePostgres), which the
// test may stop and start again without touching the cluster other tests share
// ($TUPPER_TEST_POSTGRES).
type PostgresCluster struct {
	// DSN is its superuser's URL, over its Unix socket.
	DSN  string
	Dir  string // data in Dir/data, socket in Dir/sock, log in Dir/postgres.log
	bin  string
	root bool // running as root: PostgreSQL's programs run as the postgres user
}

// PrivatePostgres makes a new cluster in a temporary directory and starts it, as
// scripts/postgres.sh does (its socket only, no TCP, trust on that socket); it is stopped
// and removed when t ends. It skips (fails under CI) when PostgreSQL is not installed.
func PrivatePostgres(t testing.TB) *PostgresCluster {
	t.Helper()
	bin := os.Getenv("PG_BIN")
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
		if len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); bin == "" || err != nil {
		Skip(t, "PostgreSQL's initdb is not installed (scripts/setup.sh --test installs postgresql)")
	}
	c := &PostgresCluster{bin: bin, root: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "tupper-pgc.")
	if err != nil {
		t.Fatal(err)
	}
	c.Dir = dir
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if c.root {
		u, err := user.Lookup("postgres")
		if err != nil {
			Skip(t, "there is no postgres user to run a cluster as (Debian's postgresql package makes it)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "sock")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			_ = c.pgctl("--mode", "immediate", "stop")
		}
		os.RemoveAll(dir)
	})
	if out, err := c.as("initdb", "--pgdata", filepath.Join(dir, "data"), "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--no-instructions").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	c.DSN = fmt.Sprintf("postgres://postgres@/postgres?host=%s&sslmode=disable", filepath.Join(dir, "sock"))
	c.Start(t)
	return c
}

func pgMajor(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// as is a command of the cluster's programs, as the postgres user when we are root.
func (c *PostgresCluster) as(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, prog)
	if c.root {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *PostgresCluster) pgctl(args ...string) error {
	cmd := c.as("pg_ctl", append([]string{"--pgdata", filepath.Join(c.Dir, "data"), "--silent", "--wait"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %v: %v: %s", args, err, out)
	}
	return nil
}

// Start starts the cluster and waits until it answers.
func (c *PostgresCluster) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-c listen_addresses='' -c unix_socket_directories='%s' -c fsync=off -c max_connections=100", filepath.Join(c.Dir, "sock"))
	if err := c.pgctl("--log", filepath.Join(c.Dir, "postgres.log"), "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "postgres.log"))
		t.Fatalf("%v; its log:\n%s", err, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", c.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for db.PingContext(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("the private PostgreSQL cluster in %s did not answer within 30 s", c.Dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the cluster with pg_ctl's mode (fast: clients are disconnected, open
// transactions rolled back; immediate: no shutdown at all), and waits until it has.
func (c *PostgresCluster) Stop(t testing.TB, mode string) {
	t.Helper()
	if err := c.pgctl("--mode", mode, "stop"); err != nil {
		t.Fatal(err)
	}
}
