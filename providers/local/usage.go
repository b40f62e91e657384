//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// UsageOf counts what sandbox id has used, from the host: its cgroup's CPU time and memory
// peak (cgroup v2's cpu.stat and memory.peak, else v1's cpuacct.usage and
// memory.max_usage_in_bytes), its disk's tmpfs use, and its host-side veth's byte counters
// (what the host receives there, the sandbox sent); and its memory now, its limits and its
// disk's size. A few small file reads: nothing runs in the sandbox. A runsc sandbox revived
// after a limit (revive.go) starts a new cgroup, whose counters start again from 0.
func (p *Provider) UsageOf(ctx context.Context, id string) (provider.Usage, error) {
	rec, err := p.lay.readRecord(id)
	if err != nil {
		return provider.Usage{}, err
	}
	u := provider.Usage{At: time.Now()}
	// cgroup v2 first; v1 otherwise, its controllers' own hierarchies (a handful of opens,
	// not one per hierarchy: this runs for every sandbox at every sample).
	v2 := filepath.Join("/sys/fs/cgroup/tupper", id)
	if n := cgroupCounter(filepath.Join(v2, "cpu.stat"), "usage_usec"); n > 0 {
		u.CPUUsec = n
		u.MemPeak = readInt(filepath.Join(v2, "memory.peak"))
		u.MemUsed = readInt(filepath.Join(v2, "memory.current"))
	} else {
		for _, c := range []string{"cpuacct", "cpu,cpuacct"} {
			if n := readInt(filepath.Join("/sys/fs/cgroup", c, "tupper", id, "cpuacct.usage")); n > 0 {
				u.CPUUsec = n / 1000
				break
			}
		}
		u.MemPeak = readInt(filepath.Join("/sys/fs/cgroup/memory/tupper", id, "memory.max_usage_in_bytes"))
		u.MemUsed = readInt(filepath.Join("/sys/fs/cgroup/memory/tupper", id, "memory.usage_in_bytes"))
	}
	u.MemLimit, u.CPUs = int64(rec.MemoryMB)<<20, rec.CPU
	if rec.HolderPID != 0 && holderAlive(rec) {
		if d, err := p.diskDir(rec); err == nil {
			var st unix.Statfs_t
			if unix.Statfs(d, &st) == nil {
				u.DiskUsed = int64(st.Blocks-st.Bfree) * int64(st.Bsize)
				u.DiskTotal = int64(st.Blocks) * int64(st.Bsize)
			}
		}
	}
	if rec.HostVeth != "" && validVeth(rec.HostVeth) {
		stats := filepath.Join("/sys/class/net", rec.HostVeth, "statistics")
		u.NetTx = readInt(filepath.Join(stats, "rx_bytes"))
		u.NetRx = readInt(filepath.Join(stats, "tx_bytes"))
	}
	return u, nil
}

// validVeth keeps a record's interface name from leading the path out of /sys/class/net.
func validVeth(name string) bool {
	return name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// readInt is the integer a one-line cgroup or sysfs file holds, or 0.
func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}
