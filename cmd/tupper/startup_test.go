package main

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Every tupper command, the agent in every sandbox included, runs the package
// initialisation of everything linked into the one binary before it does anything: regular
// expressions compiled into package variables, registrations, tables. Its cost is paid by
// `tupper exec` and `tupper version` at each start and, as heap that stays, by each idle
// sandbox's agent (docs/performance.md, "Start-up"). What init allocates is deterministic,
// unlike its time, so the budgets are in bytes.
const (
	// initBudget bounds the bytes allocated by all package init of the binary. It was 0.87
	// MiB when set (0.40 MiB of it the Docker provider's client: moby's
	// distribution/reference regexps); a dependency with heavy init (a Kubernetes client's
	// scheme registration, say) must come in behind a function, not a package variable.
	// Prometheus' client_golang (issue 32) added 0.23 MiB that no function can defer: its
	// own init fills its default registry with Go and process collectors, and procfs, which
	// it imports, compiles its regexps (tupper's registry is built by serve alone).
	initBudget = 5 << 18 // 1.25 MiB
	// ownInitBudget bounds each of tupper's own packages, the generated protobuf code of
	// agent/spec (descriptors it must register) apart.
	ownInitBudget = 8 << 10
)

func TestInitCost(t *testing.T) {
	cmd := exec.Command(tupperBin(t), "version")
	cmd.Env = append(cmd.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tupper version: %v: %s", err, out)
	}
	total, pkgs := 0, 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		// init github.com/x/y @1.2 ms, 0.12 ms clock, 414552 bytes, 3600 allocs
		f := strings.Fields(sc.Text())
		if len(f) < 11 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		total += n
		pkgs++
		own := strings.HasPrefix(f[1], "github.com/tupper-dev/tupper/") && !strings.HasPrefix(f[1], "github.com/tupper-dev/tupper/agent/spec/")
		if own && n > ownInitBudget {
			t.Errorf("package %s allocates %d bytes in init (budget %d): compile or build it on first use", f[1], n, ownInitBudget)
		}
	}
	if pkgs == 0 {
		t.Fatalf("no init trace in tupper version's output: %s", out)
	}
	t.Logf("%d packages' init allocate %d bytes", pkgs, total)
	if total > initBudget {
		t.Errorf("package init allocates %d bytes in every tupper process (budget %d): see which with GODEBUG=inittrace=1 tupper version", total, initBudget)
	}
}
