package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// childEnv names the environment variable that makes the test binary a child process of
// TestOpenManyProcesses: its value is the child's orders, in JSON.
const childEnv = "TUPPER_STORE_TEST_CHILD"

type childOrders struct {
	Dirs     []string      // a fresh store directory per round
	Start    time.Time     // when round 0 begins, in every child at once
	Interval time.Duration // between rounds
}

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(child(v))
	}
	os.Exit(m.Run())
}

// child opens each store of its orders at the round's time, as `tupper serve` and `tupper
// keys create` do, and prints "ROUND SETTING" per round, or "ROUND error: …".
func child(orders string) int {
	var o childOrders
	if err := json.Unmarshal([]byte(orders), &o); err != nil {
		fmt.Println("orders:", err)
		return 2
	}
	ctx := context.Background()
	code := 0
	for r, dir := range o.Dirs {
		time.Sleep(time.Until(o.Start.Add(time.Duration(r) * o.Interval)))
		err := func() error {
			s, err := Open(ctx, dir)
			if err != nil {
				return err
			}
			defer s.Close()
			if _, _, err := s.CreateKey(ctx, "child"); err != nil {
				return err
			}
			v, err := s.Setting(ctx, "url-signing-key", 32)
			if err != nil {
				return err
			}
			fmt.Println(r, hex.EncodeToString(v))
			return nil
		}()
		if err != nil {
			fmt.Printf("%d error: %v\n", r, err)
			code = 1
		}
	}
	return code
}

// Several processes open a new store at the same moment, round after round: none fails
// (SQLite's "database is locked" when two of them turned the new database to WAL at once),
// each one's key is there, and they all read the same server secret.
func TestOpenManyProcesses(t *testing.T) {
	const procs, rounds = 8, 100
	base := t.TempDir()
	o := childOrders{Start: time.Now().Add(time.Second), Interval: 40 * time.Millisecond}
	for r := range rounds {
		o.Dirs = append(o.Dirs, filepath.Join(base, fmt.Sprint(r), "state"))
	}
	orders, _ := json.Marshal(o)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int]map[string]bool{} // round → settings read
	)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(orders))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			mu.Lock()
			defer mu.Unlock()
			sc := bufio.NewScanner(&out)
			for sc.Scan() {
				var r int
				var rest string
				if _, err := fmt.Sscanf(sc.Text(), "%d %s", &r, &rest); err != nil {
					t.Errorf("child %d: %s", i, sc.Text())
					continue
				}
				if rest == "error:" {
					t.Errorf("child %d, round %d: %s", i, r, sc.Text())
					continue
				}
				if seen[r] == nil {
					seen[r] = map[string]bool{}
				}
				seen[r][rest] = true
			}
			if err != nil {
				t.Errorf("child %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for r, dir := range o.Dirs {
		if len(seen[r]) != 1 {
			t.Errorf("round %d: the children read %d different secrets", r, len(seen[r]))
		}
		s := open(t, dir)
		keys, err := s.Keys(context.Background())
		if err != nil || len(keys) != procs {
			t.Errorf("round %d: %d keys, %v; want %d", r, len(keys), err, procs)
		}
		s.Close()
	}
}
