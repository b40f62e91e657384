//go:build linux

package server_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
)

// cgroupCPU is sandbox id's CPU time as its cgroup counts it (cgroup v2's cpu.stat, else
// v1's cpuacct.usage), read by the test from the host: what the ledger must agree with.
func cgroupCPU(t *testing.T, id string) time.Duration {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/tupper", id, "cpu.stat")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond
			}
		}
	}
	for _, d := range []string{"cpuacct", "cpu,cpuacct"} {
		if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", d, "tupper", id, "cpuacct.usage")); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(n)
		}
	}
	t.Fatalf("sandbox %s has no CPU counter in /sys/fs/cgroup", id)
	return 0
}

// near reports whether got is within 3 % of want.
func near(got, want float64) bool { return got >= want*0.97 && got <= want*1.03 }

// TestUsageLedgerLocal: sandboxes under runc and crun burn 2 s of CPU each; the ledger
// sampled by `tupper serve` agrees with their cgroups' counters within 3 %, the sample
// survives kill -9 of the server, and after a destroy through the next server each line is
// closed with its end reason, the last counters read before the destroy, its template,
// runtime and node; GET /v1/usage sums them by key, runtime and label.
func TestUsageLedgerLocal(t *testing.T) {
	home := localServeHome(t, "the usage ledger of real sandboxes needs the local provider: ")
	key := newKey(t, home)
	start := func() *child {
		c := startServeArgs(t, home, []string{"--provider", "local", "--usage-interval", "300ms"})
		if err := c.waitServing(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := start()
	// Each burns 2 s of CPU as its cgroup counts it (mounted read-only at /sys/fs/cgroup in
	// the sandbox under runc and crun), in microseconds.
	const burn = `u() { if [ -r /sys/fs/cgroup/cpu.stat ]; then sed -n 's/^usage_usec //p' /sys/fs/cgroup/cpu.stat; else echo $(( $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage) / 1000 )); fi; }
while [ "$(u)" -lt 2000000 ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; done`
	ids := map[string]string{} // runtime → sandbox
	tokens := map[string]string{}
	for _, rt := range []string{"runc", "crun"} {
		var sb api.Sandbox
		if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{"runtime": rt, "network": map[string]string{"mode": "none"},
			"labels": map[string]string{"team": "t-" + rt}}, &sb); code != 201 {
			t.Fatalf("create under %s: %d: %s", rt, code, a.logs())
		}
		ids[rt] = sb.ID
		tokens[rt] = sb.Token
		var res api.RunResult
		if code := call(t, "POST", a.url+"/v1/sandboxes/"+sb.ID+"/run", key, map[string]any{"command": burn, "timeoutMs": 120000}, &res); code != 200 || res.ExitCode != 0 {
			t.Fatalf("burn under %s: %d %+v", rt, code, res)
		}
	}
	// The sampler writes what the cgroups count; the sandboxes are idle now.
	st, err := store.OpenURL(context.Background(), testenv.StoreSpec(t, home))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ledger := func() map[string]store.UsageRecord {
		t.Helper()
		lines, err := st.Usage(context.Background(), store.UsageFilter{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.UsageRecord{}
		for _, l := range lines {
			out[l.SandboxID] = l
		}
		return out
	}
	for rt, id := range ids {
		var got, want float64
		for deadline := time.Now().Add(20 * time.Second); ; {
			want = cgroupCPU(t, id).Seconds()
			got = float64(ledger()[id].CPUUsec) / 1e6
			if near(got, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if want < 2 || !near(got, want) {
			t.Errorf("%s: the ledger says %.3f CPU-seconds, the cgroup %.3f (at least 2 burnt)", rt, got, want)
		}
	}
	sampled := ledger()
	// The same readings as a time series, from the server that took them; the sandbox's
	// token may read its own.
	for rt, id := range ids {
		var ser api.MetricsSeries
		if code := call(t, "GET", a.url+"/v1/sandboxes/"+id+"/metrics", tokens[rt], nil, &ser); code != 200 || len(ser.Samples) < 2 {
			t.Fatalf("%s: GET …/metrics: %d, %d samples", rt, code, len(ser.Samples))
		}
		last, busy := ser.Samples[len(ser.Samples)-1], 0.0
		for _, m := range ser.Samples {
			busy = max(busy, m.CPUUsedPct)
		}
		if busy < 20 || !near(last.CPUSeconds, float64(sampled[id].CPUUsec)/1e6) || last.MemLimitBytes <= 0 || last.MemUsedBytes <= 0 ||
			last.DiskTotalBytes <= 0 || last.CPUs <= 0 || last.Time.IsZero() {
			t.Errorf("%s: series %+v (busiest %.1f %%); want the burn in it", rt, ser.Samples, busy)
		}
		// E2B's GET /sandboxes/{id}/metrics answers with the same readings, its field names.
		var e2b []struct {
			TimestampUnix       int64
			CPUCount            int
			CPUUsedPct          float64
			MemUsed, MemTotal   int64
			DiskUsed, DiskTotal int64
		}
		if code := call(t, "GET", a.url+"/sandboxes/"+id+"/metrics", key, nil, &e2b); code != 200 || len(e2b) < len(ser.Samples) || len(e2b) > len(ser.Samples)+2 ||
			e2b[0].TimestampUnix != ser.Samples[0].Time.Unix() || e2b[0].CPUCount < 1 || e2b[0].MemTotal != ser.Samples[0].MemLimitBytes || e2b[0].DiskTotal <= 0 {
			t.Errorf("%s: E2B's metrics: %d %+v; want the series (%d samples)", rt, code, e2b, len(ser.Samples))
		}
		var none api.MetricsSeries
		if code := call(t, "GET", a.url+"/v1/sandboxes/"+id+"/metrics?from="+time.Now().Add(time.Hour).Format(time.RFC3339), key, nil, &none); code != 200 || len(none.Samples) != 0 {
			t.Errorf("%s: metrics from an hour ahead: %d %+v", rt, code, none)
		}
	}
	// tupper stats: through the server (its latest readings), and on this machine (the
	// local provider's counters, read by the CLI itself).
	for name, env := range map[string][]string{
		"--url": append(stateEnv(t, home), "TUPPER_URL="+a.url, "TUPPER_API_KEY="+key),
		"local": append(stateEnv(t, home), "TUPPER_PROVIDER=local"),
	} {
		out, errOut, err := tupper(t, env, "stats", "--no-stream", "--json", ids["runc"], ids["crun"])
		var rows []struct {
			ID string
			api.MetricsSample
		}
		if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
			t.Fatalf("tupper stats --json (%s): %v: %s %s", name, err, out, errOut)
		}
		for i, rt := range []string{"runc", "crun"} {
			if r := rows[i]; r.ID != ids[rt] || r.CPUSeconds < 1.9 || r.MemUsedBytes <= 0 || r.MemLimitBytes <= 0 || r.DiskTotalBytes <= 0 {
				t.Errorf("tupper stats (%s): %+v", name, r)
			}
		}
		out, errOut, err = tupper(t, env, "stats", "--no-stream")
		if err != nil || !strings.Contains(out, "MEM USAGE / LIMIT") || !strings.Contains(out, ids["runc"]) || !strings.Contains(out, ids["crun"]) {
			t.Errorf("tupper stats --no-stream (%s): %v: %s %s", name, err, out, errOut)
		}
	}
	// A sandbox's token reads its own metrics, never the ledger (every key's sandboxes) nor
	// another sandbox's metrics.
	if code := call(t, "GET", a.url+"/v1/usage", tokens["runc"], nil, nil); code != 403 {
		t.Errorf("GET /v1/usage with a sandbox token: %d; want 403", code)
	}
	if code := call(t, "GET", a.url+"/v1/sandboxes/"+ids["crun"]+"/metrics", tokens["runc"], nil, nil); code != 403 {
		t.Errorf("another sandbox's metrics with a sandbox token: %d; want 403", code)
	}
	if code := call(t, "GET", a.url+"/v1/sandboxes/sbnosuchsandbox/metrics", key, nil, nil); code != 404 {
		t.Errorf("metrics of a sandbox that never was: %d; want 404", code)
	}
	a.kill()

	b := start()
	before := ledger()
	for rt, id := range ids {
		if l := before[id]; l.CPUUsec < sampled[id].CPUUsec || l.CPUUsec == 0 || !l.EndedAt.IsZero() {
			t.Errorf("%s: after kill -9 of the server, its line is %+v; want the samples kept (%d µs), not ended", rt, l, sampled[id].CPUUsec)
		}
	}
	last := map[string]float64{}
	for rt, id := range ids {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var ser api.MetricsSeries
			if call(t, "GET", b.url+"/v1/sandboxes/"+id+"/metrics", key, nil, &ser) == 200 && len(ser.Samples) > 0 {
				break // the new server samples it too
			}
		}
		last[rt] = cgroupCPU(t, id).Seconds()
		if code := call(t, "DELETE", b.url+"/v1/sandboxes/"+id, key, nil, nil); code != 204 {
			t.Fatalf("delete under %s: %d", rt, code)
		}
	}
	after := ledger()
	host, _ := os.Hostname()
	for rt, id := range ids {
		l := after[id]
		if got := float64(l.CPUUsec) / 1e6; !near(got, last[rt]) {
			t.Errorf("%s: the ledger's last figure %.3f CPU-seconds, the cgroup's before the destroy %.3f", rt, got, last[rt])
		}
		if l.EndedAt.IsZero() || l.EndReason != store.EndDestroyed || l.Runtime != rt || l.Template == "" || l.Node != host ||
			l.Labels["team"] != "t-"+rt || l.APIKeyID == "" || l.MemPeak <= 0 || l.DiskPeak <= 0 || l.StartedAt.IsZero() {
			t.Errorf("%s: the line after the destroy: %+v", rt, l)
		}
	}

	// An ended sandbox's series stays a while on the server that sampled it.
	for rt, id := range ids {
		var ser api.MetricsSeries
		if code := call(t, "GET", b.url+"/v1/sandboxes/"+id+"/metrics", key, nil, &ser); code != 200 || len(ser.Samples) == 0 {
			t.Errorf("%s: metrics after the end: %d, %d samples", rt, code, len(ser.Samples))
		}
	}

	var rep api.UsageReport
	if code := call(t, "GET", b.url+"/v1/usage?groupBy=label:team", key, nil, &rep); code != 200 || len(rep.Groups) != 2 {
		t.Fatalf("GET /v1/usage?groupBy=label:team: %d %+v", code, rep)
	}
	for _, g := range rep.Groups {
		rt := strings.TrimPrefix(g.Group, "t-")
		if g.Sandboxes != 1 || g.Running != 0 || !near(g.CPUSeconds, float64(after[ids[rt]].CPUUsec)/1e6) || g.SandboxSeconds <= 0 {
			t.Errorf("group %s: %+v", g.Group, g)
		}
	}
	if code := call(t, "GET", b.url+"/v1/usage?groupBy=key&from="+time.Now().Add(time.Hour).Format(time.RFC3339), key, nil, &rep); code != 200 || len(rep.Groups) != 0 {
		t.Errorf("GET /v1/usage from an hour ahead: %d %+v; want no group", code, rep)
	}
	if code := call(t, "GET", b.url+"/v1/usage?groupBy=colour", key, nil, nil); code != 400 {
		t.Errorf("GET /v1/usage?groupBy=colour: %d; want 400", code)
	}

	// tupper usage prints the same, as JSON, CSV and a table.
	env := append(stateEnv(t, home), "TUPPER_URL="+b.url, "TUPPER_API_KEY="+key)
	out, errOut, err := tupper(t, env, "usage", "--by", "runtime", "--json")
	var cli api.UsageReport
	if err != nil || json.Unmarshal([]byte(out), &cli) != nil || len(cli.Groups) != 2 || cli.GroupBy != "runtime" {
		t.Errorf("tupper usage --by runtime --json: %v: %s %s", err, out, errOut)
	}
	for _, g := range cli.Groups {
		if !near(g.CPUSeconds, float64(after[ids[g.Group]].CPUUsec)/1e6) {
			t.Errorf("tupper usage: group %s: %+v", g.Group, g)
		}
	}
	out, errOut, err = tupper(t, env, "usage", "--by", "label:team", "--csv")
	rows, cerr := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || cerr != nil || len(rows) != 3 || rows[0][0] != "GROUP" || rows[0][3] != "CPU_SECONDS" || !strings.HasPrefix(rows[1][0], "t-") {
		t.Errorf("tupper usage --csv: %v %v: %s %s", err, cerr, out, errOut)
	}
	if out, errOut, err = tupper(t, env, "usage"); err != nil || !strings.Contains(out, "total") || !strings.Contains(out, "CPU") {
		t.Errorf("tupper usage: %v: %s %s", err, out, errOut)
	}
	if _, errOut, err := tupper(t, stateEnv(t, home), "usage"); err == nil || !strings.Contains(errOut, "pass --url") {
		t.Errorf("tupper usage without a server: %v %s", err, errOut)
	}
}
