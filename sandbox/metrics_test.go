package sandbox

import (
	"testing"
	"time"
)

func TestParseMetrics(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	v1 := "t1 1000000000 5000000\nt2 1200000000 55000000\nmemcur 104857600\nmemmax 1073741824\nmemfile 2048\n" +
		"cpumax -1 100000\nnproc 2\ndisk 5242880 24\nMemTotal: 24000000 kB\nMemAvailable: 12000000 kB\nCached: 100 kB\n"
	m := parseMetrics(v1, now)
	if m.CPUCount != 2 || m.CPUUsedPct != 12.5 || m.MemUsed != 104857600 || m.MemTotal != 1073741824 ||
		m.MemCache != 2048 || m.DiskTotal != 5368709120 || m.DiskUsed != 24576 || !m.At.Equal(now) {
		t.Errorf("cgroup v1 sample: %+v", m)
	}
	v2 := "t1 1000000000 1000000\nt2 1200000000 101000000\nmemcur 1000\nmemmax max\nmemfile 10\ncpumax 100000 100000\nnproc 8\ndisk 100 50\nMemTotal: 2000 kB\n"
	m = parseMetrics(v2, now)
	if m.CPUCount != 1 || m.CPUUsedPct != 50 || m.MemTotal != 2000*1024 || m.MemUsed != 1000 {
		t.Errorf("cgroup v2 sample: %+v", m)
	}
	if m := parseMetrics("", now); m.CPUCount != 1 || m.MemTotal != 0 {
		t.Errorf("empty sample: %+v", m)
	}
}
