package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

type result struct {
	stdout, stderr string
	code           int
}

// tupper runs the tupper binary tests use (internal/testenv) with TUPPER_HOME home. Its
// bench (`tupper bench`) runs the tupper-bench built from this checkout, which is put on
// PATH, and measures that tupper.
func tupper(t *testing.T, home string, args ...string) result {
	t.Helper()
	bench := testenv.Command(t, "./cmd/tupper-bench")
	cmd := exec.Command(testenv.TupperBinary(t), args...)
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=",
		"PATH="+filepath.Dir(bench)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	out, errOut, code := testenv.Run(t, cmd)
	return result{out, errOut, code}
}

func ms(v ...float64) samples {
	s := make(samples, len(v))
	for i, x := range v {
		s[i] = time.Duration(x * float64(time.Millisecond))
	}
	return s
}

func TestPercentile(t *testing.T) {
	var hundred samples
	for i := 100; i >= 1; i-- { // unsorted on purpose
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	orig := slices.Clone(hundred)
	for _, tc := range []struct {
		s    samples
		p    float64
		want time.Duration
	}{
		{hundred, 50, 50 * time.Millisecond},
		{hundred, 99, 99 * time.Millisecond},
		{hundred, 100, 100 * time.Millisecond},
		{hundred, 1, 1 * time.Millisecond},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(3, 1, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond}, // nearest rank: the 2nd of 4
		{ms(5, 1, 4, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 99, 20 * time.Millisecond},
		{nil, 50, 0},
	} {
		if got := tc.s.percentile(tc.p); got != tc.want {
			t.Errorf("p%v of %d samples = %v, want %v", tc.p, len(tc.s), got, tc.want)
		}
	}
	if !slices.Equal(hundred, orig) {
		t.Error("percentile sorted its receiver")
	}
	if s := hundred.stats(); s.n != 100 || s.p50 != 50*time.Millisecond || s.p99 != 99*time.Millisecond {
		t.Errorf("stats %+v", s)
	}
}

// repeat warms up once untimed, then times n calls, and stops at the first error.
func TestRepeat(t *testing.T) {
	var calls []bool
	if err := repeat(3, func(timed bool) error { calls = append(calls, timed); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []bool{false, true, true, true}) {
		t.Errorf("calls %v", calls)
	}
	boom := errors.New("boom")
	n := 0
	if err := repeat(5, func(bool) error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	}); err != boom || n != 2 {
		t.Errorf("repeat went on after an error: %v after %d calls", err, n)
	}
	s, err := measure(4, func() error { return nil })
	if err != nil || s.n != 4 {
		t.Errorf("measure: %+v %v", s, err)
	}
}

func TestVersus(t *testing.T) {
	fast := stats{p50: 2 * time.Millisecond, p99: 10 * time.Millisecond}
	slow := stats{p50: 50 * time.Millisecond, p99: 80 * time.Millisecond}
	if got, want := versus(fast, slow, "Docker API"), "25.0x faster than Docker API (p99 8.0x)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := versus(slow, fast, "tupper"), "25.0x slower than tupper (p99 8.0x)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var none *benchRow
	none.versus(slow, "x") // a row that was not measured takes no comparison
}

func TestServeURL(t *testing.T) {
	u, ok := serveURL("tupper: serving on http://127.0.0.1:40913 (provider local, state /tmp/x/tupper.db)")
	if !ok || u != "http://127.0.0.1:40913" {
		t.Errorf("got %q %v", u, ok)
	}
	for _, line := range []string{"tupper: no API keys yet: create one with `tupper keys create`", "serving on nothing", "",
		"tupper: another tupper server (pid 7, serving on http://127.0.0.1:1) is using the state directory /x"} {
		if u, ok := serveURL(line); ok {
			t.Errorf("%q gave %q", line, u)
		}
	}
}

func TestParseE2BBench(t *testing.T) {
	s, v, err := parseE2BBench([]byte("a warning first\n{\"sdk\":\"2.51.0\",\"ms\":[1.5,2,30.25]}\n"))
	if err != nil || v != "2.51.0" || !slices.Equal(s, ms(1.5, 2, 30.25)) {
		t.Errorf("got %v %q %v", s, v, err)
	}
	for _, out := range []string{"", "{}", `{"sdk":"1","ms":[]}`, "not json"} {
		if _, _, err := parseE2BBench([]byte(out)); err == nil {
			t.Errorf("%q parsed", out)
		}
	}
}

func TestParseAgentAge(t *testing.T) {
	age, err := parseAgentAge("12345.67 1234000\n")
	if err != nil || age != 5670*time.Millisecond {
		t.Errorf("got %v %v", age, err)
	}
	for _, out := range []string{"", "1.0", "x 2", "1.0 y", "1 2 3"} {
		if _, err := parseAgentAge(out); err == nil {
			t.Errorf("%q parsed", out)
		}
	}
}

func TestProcParsing(t *testing.T) {
	hybrid := "12:pids:/tupper/abc\n4:memory:/tupper/abc\n1:name=systemd:/x\n0::/unified/path\n"
	if got := memoryCgroup(hybrid); got != "/tupper/abc" {
		t.Errorf("hybrid: %q", got)
	}
	if got := memoryCgroup("0::/tupper/def\n"); got != "/tupper/def" {
		t.Errorf("unified: %q", got)
	}
	if got := memoryCgroup("3:cpu,memory:/a\n"); got != "/a" {
		t.Errorf("joint controllers: %q", got)
	}
	status := "Name:\tx\nRss:     1024 kB\nPss:      300 kB\nPss_Anon: 7 kB\n"
	if kbField(status, "Pss") != 300<<10 || kbField(status, "Rss") != 1<<20 || kbField(status, "Swap") != 0 {
		t.Errorf("kbField: %d %d", kbField(status, "Pss"), kbField(status, "Rss"))
	}
	ids := map[string]bool{"ip1rxwmypidtn12aogop": true}
	if !namesOne("runsc-gofer --bundle=/var/lib/tupper/sandboxes/ip1rxwmypidtn12aogop --x", ids) ||
		namesOne("runsc-gofer --bundle=/var/lib/tupper/sandboxes/ip1rxwmypidtn12aogopx", ids) ||
		namesOne("", ids) {
		t.Error("namesOne")
	}
	if !inSandboxCgroup("/tupper/ip1rxwmypidtn12aogop", ids) || inSandboxCgroup("/tupper/other", ids) || inSandboxCgroup("/user.slice", ids) {
		t.Error("inSandboxCgroup")
	}
}

func TestDensityRules(t *testing.T) {
	rep := func(n int, v float64) []float64 { return slices.Repeat([]float64{v}, n) }
	flat := ms(slices.Concat(rep(10, 10), rep(10, 19))...)
	if _, ok := doubledAt(flat, 10); ok {
		t.Error("doubled at less than twice the first median")
	}
	if _, ok := doubledAt(ms(slices.Concat(rep(10, 10), rep(9, 40))...), 10); ok {
		t.Error("doubled before two windows")
	}
	if at, ok := doubledAt(ms(slices.Concat(rep(10, 10), rep(10, 20))...), 10); !ok || at != 10 {
		t.Errorf("doubledAt = %d %v, want 10 true", at, ok)
	}
	if _, ok := doubledAt(append(slices.Clone(flat), ms(rep(5, 40)...)...), 10); ok {
		t.Error("doubled with half the last window slow")
	}
	if at, ok := doubledAt(append(slices.Clone(flat), ms(rep(6, 40)...)...), 10); !ok || at != 16 {
		t.Errorf("doubledAt = %d %v, want 16 true", at, ok)
	}
}

// A short run of every section with real sandboxes, so the bench cannot rot: it must finish,
// print every row it promises (docker's only when docker answers here) and leave no sandbox
// behind, its servers' pools included. Times are printed, never checked.
func TestBenchSmoke(t *testing.T) {
	home := testenv.LocalHome(t)
	if testing.Short() {
		t.Skip("-short: the bench smoke run takes a minute")
	}
	// --exec-n 20: enough for a p50 that the ratio below can be checked on.
	args := []string{"bench", "--cli", "--api", "--n", "1", "--exec-n", "20", "--idle", "1", "--pool", "1", "--concurrent", "2",
		"--e2b", filepath.Join(t.TempDir(), "none"), "--density-max", "2", "--density-runtimes", "runc",
		"--dormant", "2", "--dormant-runtimes", "runsc,crun", "--fork", "1", "--fork-runtimes", "runsc,runc"}
	// The stores section where the suite has a PostgreSQL cluster (scripts/test.sh starts one).
	pg := os.Getenv(testenv.PostgresEnv)
	if pg != "" {
		args = append(args, "--stores", "sqlite,postgres", "--postgres", pg)
	}
	r := tupper(t, home, args...)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("bench failed: exit %d", r.code)
	}
	dur := `[0-9.]+ (µs|ms|s)`
	want := []string{
		`create → first command +tupper SDK in process \(\w+\) +1 +` + dur,
		`exec true +tupper exec \(whole process\) +20 +` + dur,
		`start-up +tupper version \(whole process\) +20 +` + dur,
		`exec true +tupper API: POST /v1/sandboxes/\{id\}/run +20 +` + dur + ` +` + dur,
		`create → first command +tupper API, no pool: .* +1 +` + dur,
		`create → first command +tupper API, pool of 1: the same \([01] of 1 from the pool\) +1 +` + dur,
		`… → destroyed +tupper API, pool of 1: the same +1 +` + dur,
		`concurrent creates +tupper API, no pool: 2 POST /v1/sandboxes at once, each +2 +` + dur,
		`concurrent creates +tupper API, no pool: 2 at once, all done +` + dur,
		`idle density +runc: idle sandboxes live before create got 2x slower +≥ 2 +stopped at 2: --density-max 2 reached`,
		`memory per idle sandbox +runc, 2 sandboxes \(cgroups [0-9.]+ MiB`,
		`pause +runsc: saved to disk \(pause-frees-memory\) +2 +` + dur,
		`resume → first command +runsc +2 +` + dur,
		`dormant sandboxes +runsc +2 +stopped: --dormant 2 reached`,
		`host memory per dormant sandbox +runsc +-?[0-9.]+ MiB`,
		`disk per dormant sandbox +runsc +[0-9.]+ MiB`,
		`host CPU busy +runsc, 2 dormant +[0-9.]+%`,
		`pause +crun: memory dropped \(pause-cold\) +2 +` + dur,
		`resume → first command +crun +2 +` + dur,
		`dormant sandboxes +crun +2 +stopped: --dormant 2 reached`,
		`fork, one child \(per child\) +runsc, full fork +1 +` + dur + ` +` + dur + ` +[0-9.]+x (faster|slower) than a cold create`,
		`fork, ten children \(per child\) +runsc, full fork +1 +` + dur,
		`create → first command +runsc, cold \(no fork\) +1 +` + dur,
		`fork, one child \(per child\) +runc, filesystem fork +1 +` + dur,
		`fork, ten children \(per child\) +runc, filesystem fork +1 +` + dur,
	}
	if pg != "" {
		ratio := ` +PostgreSQL/SQLite p50 [0-9.]+, p99 [0-9.]+`
		want = append(want,
			`exec true +SQLite: POST /v1/sandboxes/\{id\}/run +20 +`+dur,
			`exec true +PostgreSQL: POST /v1/sandboxes/\{id\}/run +20 +`+dur+` +`+dur+ratio,
			`create → first command +SQLite: POST /v1/sandboxes, POST …/run true +1 +`+dur,
			`create → first command +PostgreSQL: POST /v1/sandboxes, POST …/run true +1 +`+dur+` +`+dur+ratio,
			`concurrent creates +PostgreSQL: 2 POST /v1/sandboxes at once, each +4 +`+dur+` +`+dur+ratio,
			`creates per second +SQLite: 2 at once, 2 bursts +[0-9.]+/s`,
			`creates per second +PostgreSQL: 2 at once, 2 bursts +[0-9.]+/s +PostgreSQL/SQLite [0-9.]+`,
		)
	}
	if strings.Contains(r.stderr, "reporting tupper alone") {
		t.Log("docker is not here: its rows are not expected")
	} else {
		want = append(want,
			`exec true +tupper API: POST .* faster than Docker API`,
			`exec true +Docker API: exec create, start \(attached\), inspect +20 +`+dur,
			`create → first command +Docker API: create, start, wait .* +1 +`+dur,
			`create → first command +docker run --rm true \(whole process\) +1 +`+dur,
			`write\+read 64 MiB +docker cp in and out .* +1 +`+dur,
		)
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("no line matches %s", re)
		}
	}
	checkExecRatio(t, r.stdout)
	if !strings.Contains(r.stderr, "E2B SDK: skipped: E2B's SDK is not installed in") {
		t.Errorf("the E2B part did not say why it was skipped: %s", r.stderr)
	}
	ls := tupper(t, home, "ls", "--json")
	var rows []json.RawMessage
	if err := json.Unmarshal([]byte(ls.stdout), &rows); err != nil || len(rows) != 0 {
		t.Errorf("bench left sandboxes: %s %v", ls.stdout, err)
	}
	left, _ := os.ReadDir(filepath.Join(home, "sandboxes"))
	for _, d := range left {
		var files []string
		filepath.WalkDir(filepath.Join(home, "sandboxes", d.Name()), func(path string, _ os.DirEntry, _ error) error {
			files = append(files, path)
			return nil
		})
		t.Errorf("bench left the sandbox directory %s: %v", d.Name(), files)
	}
}

// minExecRatio is how many times faster than the runtime's own exec (`crun exec`, `runc
// exec`: a whole process that joins the sandbox's namespaces and cgroups) the SDK's exec
// round trip into the same sandbox must be, at p50, in the bench smoke test. Quiet, the
// ratio is about 8 (the target; docs/performance.md); a loaded machine slows both sides, and
// a CI machine's load read between 6 and 9. A ratio, not a time, so that the check does not
// depend on the machine's speed; 4 leaves a loaded machine room and still fails when the
// round trip gets twice as slow as it is, as it did once (issue 28).
const minExecRatio = 4.0

// checkExecRatio finds the SDK's exec row and its comparison with the runtime's exec in the
// bench's output and fails below minExecRatio.
func checkExecRatio(t *testing.T, stdout string) {
	t.Helper()
	ratio, rt, ok := execRatio(stdout)
	if !ok {
		t.Errorf("no comparison of the SDK's exec with the runtime's own exec")
		return
	}
	t.Logf("SDK exec is %.1fx faster than %s exec at p50 (at least %.0fx wanted)", ratio, rt, minExecRatio)
	if ratio < minExecRatio {
		t.Errorf("the SDK's exec round trip is only %.1fx faster than %s exec into the same sandbox (want at least %.0fx): the hot path got slower", ratio, rt, minExecRatio)
	}
}

// execRatio is how many times faster than the runtime's exec the bench's output says the
// SDK's exec was at p50 (below 1: slower), and which runtime.
func execRatio(stdout string) (ratio float64, runtime string, ok bool) {
	m := regexp.MustCompile(`(?m)^exec true +tupper SDK in process +[0-9]+ .*?([0-9.]+)x (faster|slower) than (\w+) exec`).FindStringSubmatch(stdout)
	if m == nil {
		return 0, "", false
	}
	ratio, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, "", false
	}
	if m[2] == "slower" {
		ratio = 1 / ratio
	}
	return ratio, m[3], true
}

func TestExecRatio(t *testing.T) {
	out := "OPERATION  WHAT  N  P50  P99  COMPARED\n" +
		"exec true  tupper SDK in process  20  2.5 ms  28.7 ms  9.2x faster than crun exec (p99 2.6x)\n" +
		"exec true  tupper exec (whole process)  20  12.2 ms  42.6 ms  1.9x faster than crun exec (p99 1.7x)\n"
	if r, rt, ok := execRatio(out); !ok || r != 9.2 || rt != "crun" {
		t.Errorf("got %v %q %v", r, rt, ok)
	}
	if r, _, ok := execRatio("exec true  tupper SDK in process  20  9 ms  9 ms  2.0x slower than runc exec (p99 1.0x)\n"); !ok || r != 0.5 {
		t.Errorf("slower: got %v %v", r, ok)
	}
	// The whole-process row compares with the runtime too; it must not be taken for the SDK's.
	if _, _, ok := execRatio("exec true  tupper SDK in process  20  2.5 ms  28.7 ms\nexec true  tupper exec (whole process)  20  12.2 ms  42.6 ms  1.9x faster than crun exec\n"); ok {
		t.Error("took another row's comparison")
	}
}

func TestParseStores(t *testing.T) {
	for flag, want := range map[string][]string{"": nil, "postgres,sqlite": {"sqlite", "postgres"}, " postgres ": {"postgres"}, "sqlite,sqlite": {"sqlite"}} {
		if got, err := parseStores(flag); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseStores(%q) = %v, %v; want %v", flag, got, err, want)
		}
	}
	for _, flag := range []string{"mysql", "sqlite,", "sqlite,postgres,x"} {
		if _, err := parseStores(flag); err == nil || !strings.Contains(err.Error(), "name sqlite, postgres or both") {
			t.Errorf("parseStores(%q): %v", flag, err)
		}
	}
}

func TestRatio(t *testing.T) {
	pg := stats{p50: 110 * time.Millisecond, p99: 300 * time.Millisecond}
	lite := stats{p50: 100 * time.Millisecond, p99: 200 * time.Millisecond}
	if got, want := ratio(pg, lite, "PostgreSQL/SQLite"), "PostgreSQL/SQLite p50 1.10, p99 1.50"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
