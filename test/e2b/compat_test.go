//go:build linux

// Package e2b_test runs E2B's own JS SDK, unmodified, against a real tupper server: one
// project per SDK version (v251: npm e2b 2.51.0, which uses the v2 paths; v245: 2.45.0, the
// v1 paths and a client-side check of the key's form), each running compat.mjs.
package e2b_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestE2BSDK needs root and runc (real sandboxes: the memory provider has no envd data
// plane), node and npm, and the npm registry for `npm ci` the first time.
func TestE2BSDK(t *testing.T) {
	servertest.RequireLocal(t, "E2B compatibility runs real sandboxes")
	node := testenv.RequireBinary(t, "node")
	if testing.Short() {
		t.Skip("-short: the E2B SDK runs take a minute")
	}

	// A domain, so that getHost(port) names {port}-{id}.e2b-compat.test, which the script
	// reaches by sending that Host to the server.
	prov := servertest.Provider(t, 5)
	if sandbox.CanBuildTemplates(prov) != nil {
		testenv.Skip(t, "E2B compatibility builds templates, and provider "+prov.Name()+" does not")
	}
	// The template SDK's builds start from this one: imported from a local tarball, no mirror
	// or registry needed.
	servertest.BusyboxTemplate(t, prov, "bb")
	// A reap every second: the lifecycle step waits for a sandbox paused at its timeout.
	srv := servertest.Start(t, prov, "", func(c *server.Config) { c.Domain = "e2b-compat.test"; c.ReapInterval = time.Second })
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "e2b-compat")
	if err != nil {
		t.Fatal(err)
	}
	noDial(t, unreachedProxy)
	for _, project := range []string{"v251", "v245"} {
		t.Run(project, func(t *testing.T) {
			dir, err := filepath.Abs(project)
			if err != nil {
				t.Fatal(err)
			}
			testenv.NPMProject(t, dir)
			env := []string{"E2B_API_URL=" + srv.URL, "E2B_SANDBOX_URL=" + srv.URL, "E2B_API_KEY=" + key, "E2B_VOLUME_API_URL=" + srv.URL, "TUPPER_TEST_TEMPLATE=bb",
				// The script's build contexts and the template SDK's own, removed with the test.
				"TMPDIR=" + t.TempDir()}
			out, err := command(t, 5*time.Minute, dir, env, node, "run.mjs")
			if err != nil {
				t.Fatalf("e2b SDK %s against tupper serve: %v\n%s", project, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// command runs name in dir with env added to the test's environment (minus any E2B_
// variables of the developer's shell, so nothing can reach E2B's cloud).
func command(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !bytes.HasPrefix([]byte(kv), []byte("E2B_")) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// unreachedProxy is the egress proxy address compat.mjs gives a sandbox that never connects
// anywhere through it (the tunnel itself is providers/local's TestSocksEgress, in a lab of
// its own), and the address its deny-list steps probe through the sandbox's own proxy, which
// refuses it. It is a public address, as an egress proxy's must be, so nothing may leave for
// it: noDial makes that a fact.
const unreachedProxy = "11.22.33.44"

// noDial refuses, on this host, every packet for addr — sent by the host itself (an egress
// proxy dialling out) or forwarded for a sandbox — in a chain of its own, and fails the test
// at its end if the chain counted any: the test's traffic goes nowhere but loopback and the
// sandboxes, and this proves it for the one outside address the script names.
func noDial(t *testing.T, addr string) {
	ipt := testenv.RequireBinary(t, "iptables")
	chain := fmt.Sprintf("TUPPER-E2B-NODIAL-%d", os.Getpid())
	run := func(args ...string) (string, error) {
		out, err := exec.Command(ipt, append([]string{"-w", "5"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("iptables %v: %v: %s", args, err, out)
		}
		return string(out), nil
	}
	steps := [][]string{
		{"-N", chain},
		{"-A", chain, "-d", addr, "-j", "REJECT"},
		{"-I", "OUTPUT", "1", "-j", chain},
		{"-I", "FORWARD", "1", "-j", chain},
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		out, err := run("-L", chain, "-n", "-v", "-x")
		run("-D", "OUTPUT", "-j", chain)
		run("-D", "FORWARD", "-j", chain)
		run("-F", chain)
		run("-X", chain)
		if err != nil {
			t.Errorf("reading the no-dial chain: %v", err)
			return
		}
		packets, err := rejected(out)
		if err != nil {
			t.Errorf("%v in:\n%s", err, out)
		} else if packets != 0 {
			t.Errorf("%d packets left this host for %s, which nothing may dial:\n%s", packets, addr, out)
		}
	})
}

// rejected reads the packet count of the REJECT rule from `iptables -L CHAIN -n -v -x`.
func rejected(listing string) (int, error) {
	m := regexp.MustCompile(`(?m)^\s*(\d+)\s+\d+\s+REJECT\b`).FindStringSubmatch(listing)
	if m == nil {
		return 0, fmt.Errorf("no REJECT rule")
	}
	return strconv.Atoi(m[1])
}
