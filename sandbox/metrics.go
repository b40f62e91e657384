package sandbox

import (
	"bufio"
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Metrics is one sample of a sandbox's resource use.
type Metrics = provider.Metrics

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

// maxMetricsOutput bounds what Metrics reads of metricsScript's output (about 500 bytes).
// Sandbox code can write into the script's output (its stdout is a pipe any root process
// there can open through /proc), so the bound is what keeps the caller's memory its own.
const maxMetricsOutput = 16 << 10

// Metrics measures the sandbox's resource use now: through the provider's
// provider.MetricsReporter, else with metricsScript run in the sandbox (CodeUnsupported
// without the "shell" capability).
func (b *Sandbox) Metrics(ctx context.Context) (Metrics, error) {
	const op = "metrics"
	if r, ok := b.inst.(provider.MetricsReporter); ok {
		m, err := r.Metrics(ctx)
		return m, wrapProvider(err, op)
	}
	if !b.Capabilities.Has(provider.CapShell) {
		return Metrics{}, errorf(CodeUnsupported, op, "provider %s cannot measure a sandbox's resource use", b.Provider)
	}
	res, err := b.Run(ctx, metricsScript, RunOptions{Cwd: "/", Timeout: 10 * time.Second, MaxOutputBytes: maxMetricsOutput})
	if err != nil {
		return Metrics{}, err
	}
	if res.Truncated {
		return Metrics{}, errorf(CodeProvider, op, "the sandbox's metrics are more than %d bytes: something in the sandbox wrote into them", maxMetricsOutput)
	}
	return parseMetrics(res.Stdout, time.Now()), nil
}

// parseMetrics reads metricsScript's output. Values a sandbox cannot show are 0.
func parseMetrics(out string, now time.Time) Metrics {
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
	m := Metrics{At: now}

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
