package e2b

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// metricsScript samples the sandbox's cgroup (v2, or v1's controllers, as the sandbox sees
// them), /proc and its root file system. CPU use (in ns) is measured over 200 ms.
const metricsScript = `c=/sys/fs/cgroup
first() { for f in "$@"; do if [ -r "$f" ]; then cat "$f"; return; fi; done; }
u() { if [ -r $c/cpu.stat ]; then sed -n 's/^usage_usec \(.*\)/\1000/p' $c/cpu.stat; else first $c/cpuacct/cpuacct.usage $c/cpu,cpuacct/cpuacct.usage; fi; }
echo "t1 $(date +%s%N) $(u)"
sleep 0.2
echo "t2 $(date +%s%N) $(u)"
echo "memcur $(first $c/memory.current $c/memory/memory.usage_in_bytes)"
echo "memmax $(first $c/memory.max $c/memory/memory.limit_in_bytes)"
echo "memfile $(sed -n 's/^file //p; s/^total_cache //p' $c/memory.stat $c/memory/memory.stat 2>/dev/null | head -n 1)"
if [ -r $c/cpu.max ]; then echo "cpumax $(cat $c/cpu.max)"; else echo "cpumax $(first $c/cpu/cpu.cfs_quota_us $c/cpu,cpuacct/cpu.cfs_quota_us) $(first $c/cpu/cpu.cfs_period_us $c/cpu,cpuacct/cpu.cfs_period_us)"; fi
echo "nproc $(nproc 2>/dev/null)"
df -kP / 2>/dev/null | tail -n 1 | { read -r fs total used rest; echo "disk $total $used"; }
grep -E '^(MemTotal|MemAvailable|Cached):' /proc/meminfo 2>/dev/null
`

// metrics is GET /sandboxes/{id}/metrics: one sample, measured now, when now is inside the
// start and end of the query (unix seconds). A paused sandbox, or one on a provider
// without a shell, has none.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	now := time.Now()
	inRange := true
	if v := q.Get("start"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "start must be unix seconds"))
			return
		}
		inRange = inRange && now.Unix() >= n
	}
	if v := q.Get("end"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "end must be unix seconds"))
			return
		}
		inRange = inRange && now.Unix() <= n+1
	}
	id := r.PathValue("sandboxID")
	box, err := s.lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []sandboxMetric{}
	if inRange && box.Info.State != provider.StatePaused && box.Sandbox.Capabilities.Has(provider.CapShell) {
		m, err := sample(r.Context(), box.Sandbox)
		if err != nil {
			writeError(w, e2bError(id, err))
			return
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// maxMetricsOutput bounds what sample reads of metricsScript's output (about 500 bytes).
// Sandbox code can write into the script's output (its stdout is a pipe any root process
// there can open through /proc), so the bound is what keeps the server's memory its own.
const maxMetricsOutput = 16 << 10

func sample(ctx context.Context, b *sandbox.Sandbox) (sandboxMetric, error) {
	res, err := b.Run(ctx, metricsScript, sandbox.RunOptions{Cwd: "/", Timeout: 10 * time.Second, MaxOutputBytes: maxMetricsOutput})
	if err != nil {
		return sandboxMetric{}, err
	}
	if res.Truncated {
		return sandboxMetric{}, provider.Errorf(provider.CodeProvider, "the sandbox's metrics are more than %d bytes: something in the sandbox wrote into them", maxMetricsOutput)
	}
	return parseMetrics(res.Stdout, time.Now()), nil
}

// parseMetrics reads metricsScript's output. Values a sandbox cannot show are 0.
func parseMetrics(out string, now time.Time) sandboxMetric {
	f := map[string][]int64{}
	raw := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		k := strings.TrimSuffix(fields[0], ":")
		raw[k] = fields[1:]
		for _, v := range fields[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				break
			}
			f[k] = append(f[k], n)
		}
	}
	get := func(k string, i int) int64 {
		if v := f[k]; len(v) > i {
			return v[i]
		}
		return 0
	}
	m := sandboxMetric{Timestamp: now.UTC().Truncate(time.Second), TimestampUnix: now.Unix()}

	m.CPUCount = int(get("nproc", 0))
	if c := raw["cpumax"]; len(c) == 2 && c[0] != "max" && c[0] != "-1" {
		quota, e1 := strconv.ParseFloat(c[0], 64)
		period, e2 := strconv.ParseFloat(c[1], 64)
		if e1 == nil && e2 == nil && period > 0 {
			m.CPUCount = int(math.Ceil(quota / period))
		}
	}
	m.CPUCount = max(m.CPUCount, 1)
	if wall := get("t2", 0) - get("t1", 0); wall > 0 && len(f["t1"]) > 1 && len(f["t2"]) > 1 {
		used := float64(get("t2", 1) - get("t1", 1))
		pct := used / float64(wall) / float64(m.CPUCount) * 100
		m.CPUUsedPct = math.Round(math.Min(math.Max(pct, 0), 100)*100) / 100
	}

	memTotal := get("MemTotal", 0) * 1024
	m.MemTotal = memTotal
	if v := get("memmax", 0); v > 0 && (memTotal == 0 || v < memTotal) {
		m.MemTotal = v
	}
	if v := get("memcur", 0); v > 0 {
		m.MemUsed = v
	} else if memTotal > 0 {
		m.MemUsed = memTotal - get("MemAvailable", 0)*1024
	}
	if v, ok := f["memfile"]; ok && len(v) > 0 {
		m.MemCache = v[0]
	} else {
		m.MemCache = get("Cached", 0) * 1024
	}
	m.DiskTotal = get("disk", 0) * 1024
	m.DiskUsed = get("disk", 1) * 1024
	return m
}
