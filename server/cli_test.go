//go:build linux

package server_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/server/servertest"
)

func tupper(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestCLIAgainstServer: `tupper keys` works on the store while the server runs (create prints
// only the key on stdout; revoke takes effect at once), and the CLI's sandbox commands work
// against the server with TUPPER_URL.
func TestCLIAgainstServer(t *testing.T) {
	home := t.TempDir()
	srv := serve(t, home, "memory")
	henv := stateEnv(t, home)
	key, errOut, err := tupper(t, henv, "keys", "create", "--name", "cli")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, errOut)
	}
	key = strings.TrimSuffix(key, "\n")
	if !strings.HasPrefix(key, "ak_") || strings.ContainsAny(key, " \n") {
		t.Fatalf("keys create printed %q on stdout; want only the key", key)
	}
	env := append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+key, "TUPPER_PROVIDER=")
	id, errOut, err := tupper(t, env, "create", "--label", "via=cli")
	if err != nil {
		t.Fatalf("create: %v: %s", err, errOut)
	}
	id = strings.TrimSpace(id)
	out, errOut, err := tupper(t, env, "exec", id, "--", "sh", "-c", "echo hello from $0")
	if err != nil || out != "hello from sh\n" {
		t.Fatalf("exec: %q %v %s", out, err, errOut)
	}
	out, _, err = tupper(t, env, "ls", "--json")
	var rows []struct{ ID string }
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("ls --json: %q %v", out, err)
	}
	snap, errOut, err := tupper(t, env, "snapshot", id, "--json")
	if err != nil || !strings.Contains(snap, `"id"`) {
		t.Fatalf("snapshot: %q %v %s", snap, err, errOut)
	}
	if _, errOut, err := tupper(t, env, "logs", id, "nope"); err == nil || !strings.Contains(errOut, "not_found") {
		t.Fatalf("logs of a missing process: %v %s", err, errOut)
	}
	var keys []struct{ ID, Prefix string }
	out, _, _ = tupper(t, henv, "keys", "list", "--json")
	if json.Unmarshal([]byte(out), &keys) != nil || len(keys) != 1 {
		t.Fatalf("keys list --json: %s", out)
	}
	// ls -a lists it once it has ended, with why: destroyed by this key.
	if _, errOut, err := tupper(t, env, "rm", id); err != nil {
		t.Fatalf("rm: %v %s", err, errOut)
	}
	out, errOut, err = tupper(t, env, "ls", "-a")
	if err != nil || !regexp.MustCompile(`(?m)^`+id+` +ended .* destroyed by `+keys[0].ID+`$`).MatchString(out) {
		t.Fatalf("ls -a: %q %v %s", out, err, errOut)
	}
	out, _, err = tupper(t, env, "ls", "-a", "--json")
	var ended []struct {
		ID  string
		End struct{ Reason, By string }
	}
	if err != nil || json.Unmarshal([]byte(out), &ended) != nil || len(ended) != 1 || ended[0].ID != id || ended[0].End.Reason != "destroyed" || ended[0].End.By != keys[0].ID {
		t.Fatalf("ls -a --json: %q %v", out, err)
	}
	if out, _, _ := tupper(t, env, "ls"); strings.Contains(out, id) {
		t.Fatalf("ls without -a lists the ended sandbox: %q", out)
	}
	// Revoked while the server runs: refused at once.
	out, _, _ = tupper(t, henv, "keys", "list", "--json")
	if json.Unmarshal([]byte(out), &keys) != nil || len(keys) != 1 || !strings.HasPrefix(key, keys[0].Prefix) {
		t.Fatalf("keys list --json: %s", out)
	}
	if strings.Contains(out, key) {
		t.Fatal("keys list shows the key itself")
	}
	if _, errOut, err := tupper(t, henv, "keys", "revoke", keys[0].ID); err != nil {
		t.Fatalf("revoke: %v %s", err, errOut)
	}
	if _, errOut, err := tupper(t, env, "ls"); err == nil || !strings.Contains(errOut, "revoked") {
		t.Fatalf("ls with a revoked key: %v %s", err, errOut)
	}
	if strings.Contains(srv.logs(), key) {
		t.Fatal("the server logged the key")
	}
}

// TestSnapshotCLIAgainstServer: `tupper snapshot ls` (and --json), `inspect` and `rm` go
// through the server as `tupper snapshot ID` does, `tupper inspect ID` shows a sandbox, and
// `tupper template ls`, `inspect` and `rm` show the server's templates, not this machine's.
func TestSnapshotCLIAgainstServer(t *testing.T) {
	home := localServeHome(t, "listing snapshots needs a provider that lists them: ")
	srv := serve(t, home, "local")
	henv := stateEnv(t, home)
	key, errOut, err := tupper(t, henv, "keys", "create")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, errOut)
	}
	env := append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+strings.TrimSpace(key), "TUPPER_PROVIDER=")
	id, errOut, err := tupper(t, env, "create", "--label", "via=cli", "--network", "none")
	if err != nil {
		t.Fatalf("create: %v: %s", err, errOut)
	}
	id = strings.TrimSpace(id)
	defer tupper(t, env, "rm", id)
	out, errOut, err := tupper(t, env, "inspect", id)
	var sb struct {
		ID, Provider, State string
		Labels              map[string]string
	}
	if err != nil || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != id || sb.Provider != "remote" || sb.State != "running" || sb.Labels["via"] != "cli" {
		t.Errorf("inspect: %q %v %s", out, err, errOut)
	}
	if _, errOut, err := tupper(t, env, "inspect", "sb-nope"); err == nil || !strings.Contains(errOut, "not_found") {
		t.Errorf("inspect of no sandbox: %v %s", err, errOut)
	}
	snap, errOut, err := tupper(t, env, "snapshot", id)
	snap = strings.TrimSpace(snap)
	if err != nil || snap == "" {
		t.Fatalf("snapshot: %q %v %s", snap, err, errOut)
	}
	out, errOut, err = tupper(t, env, "snapshot", "ls", "--json")
	var list struct {
		Snapshots []struct{ ID, Name, Kind, SandboxID string }
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Snapshots) != 1 ||
		list.Snapshots[0].ID != snap || list.Snapshots[0].SandboxID != id || list.Snapshots[0].Kind != "filesystem" {
		t.Fatalf("snapshot ls --json: %q %v %s", out, err, errOut)
	}
	if out, errOut, err := tupper(t, env, "snapshot", "ls"); err != nil || !strings.HasPrefix(out, "ID") || !strings.Contains(out, snap) {
		t.Errorf("snapshot ls: %q %v %s", out, err, errOut)
	}
	out, errOut, err = tupper(t, env, "snapshot", "inspect", snap)
	var one struct{ ID, SandboxID string }
	if err != nil || json.Unmarshal([]byte(out), &one) != nil || one.ID != snap || one.SandboxID != id {
		t.Errorf("snapshot inspect: %q %v %s", out, err, errOut)
	}
	if _, errOut, err := tupper(t, env, "snapshot", "rm", snap); err != nil {
		t.Fatalf("snapshot rm: %v %s", err, errOut)
	}
	if out, _, err := tupper(t, env, "snapshot", "ls", "--json"); err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Snapshots) != 0 {
		t.Errorf("snapshot ls --json after rm: %q %v", out, err)
	}
	if _, errOut, err := tupper(t, env, "snapshot", "rm", snap); err == nil || !strings.Contains(errOut, "not_found") {
		t.Errorf("snapshot rm again: %v %s", err, errOut)
	}

	// The server's templates: its home is not this command's (TUPPER_HOME points elsewhere),
	// and only the server's store holds "served-only".
	lp, err := local.New(local.Config{Home: home, AgentPath: servertest.Binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	servertest.BusyboxTemplate(t, lp, "served-only")
	tenv := append(env, "TUPPER_HOME="+t.TempDir())
	out, errOut, err = tupper(t, tenv, "template", "ls", "--json")
	var tl struct {
		Templates []struct {
			Name    string
			Builtin bool
		}
	}
	names := map[string]bool{}
	if err == nil && json.Unmarshal([]byte(out), &tl) == nil {
		for _, tp := range tl.Templates {
			names[tp.Name] = true
		}
	}
	if !names["host"] || !names["served-only"] {
		t.Errorf("template ls --json: %q %v %s, want host and served-only", out, err, errOut)
	}
	if out, errOut, err := tupper(t, tenv, "template", "ls"); err != nil || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "host") || strings.Contains(out, "store:") {
		t.Errorf("template ls: %q %v %s", out, err, errOut)
	}
	out, errOut, err = tupper(t, tenv, "template", "inspect", "served-only")
	var ti struct {
		Name   string
		Layers int
	}
	if err != nil || json.Unmarshal([]byte(out), &ti) != nil || ti.Name != "served-only" || ti.Layers == 0 {
		t.Errorf("template inspect served-only: %q %v %s", out, err, errOut)
	}
	if _, errOut, err := tupper(t, tenv, "template", "inspect", "no-such-template"); err == nil || !strings.Contains(errOut, "not_found") {
		t.Errorf("template inspect of none: %v %s", err, errOut)
	}
	if _, errOut, err := tupper(t, tenv, "template", "rm", "host"); err == nil || !strings.Contains(errOut, "invalid_argument") {
		t.Errorf("template rm host: %v %s", err, errOut)
	}
	if out, errOut, err := tupper(t, tenv, "template", "rm", "served-only"); err != nil || out != "served-only\n" {
		t.Errorf("template rm served-only: %q %v %s", out, err, errOut)
	}
	if _, errOut, err := tupper(t, tenv, "template", "inspect", "served-only"); err == nil || !strings.Contains(errOut, "not_found") {
		t.Errorf("template inspect after rm: %v %s", err, errOut)
	}
}

// TestWebhookCLIAgainstServer: `tupper webhook create`, `ls` (and --json) and `rm` manage the
// server's webhooks; create prints the secret on stdout only; without a server it says so.
func TestWebhookCLIAgainstServer(t *testing.T) {
	home := t.TempDir()
	srv := serve(t, home, "memory")
	henv := append(stateEnv(t, home), "TUPPER_URL=")
	if _, errOut, err := tupper(t, henv, "webhook", "ls"); err == nil || !strings.Contains(errOut, "pass --url") {
		t.Errorf("webhook ls without a server: %v %s", err, errOut)
	}
	key, errOut, err := tupper(t, henv, "keys", "create")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, errOut)
	}
	env := append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+strings.TrimSpace(key), "TUPPER_PROVIDER=")
	secret, errOut, err := tupper(t, env, "webhook", "create", "http://127.0.0.1:9/hook", "--event", "sandbox.created")
	if err != nil || strings.TrimSpace(secret) == "" || strings.ContainsAny(strings.TrimSpace(secret), " \n") || !strings.Contains(errOut, "created webhook wh") {
		t.Fatalf("webhook create: %q %v %s", secret, err, errOut)
	}
	out, errOut, err := tupper(t, env, "webhook", "ls", "--json")
	var list struct {
		Webhooks []struct {
			ID, URL, Secret string
			Events          []string
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Webhooks) != 1 || list.Webhooks[0].URL != "http://127.0.0.1:9/hook" ||
		len(list.Webhooks[0].Events) != 1 || list.Webhooks[0].Secret != "" {
		t.Fatalf("webhook ls --json: %q %v %s", out, err, errOut)
	}
	id := list.Webhooks[0].ID
	if out, errOut, err := tupper(t, env, "webhook", "ls"); err != nil || !strings.Contains(out, id) || strings.Contains(out, strings.TrimSpace(secret)) {
		t.Errorf("webhook ls: %q %v %s", out, err, errOut)
	}
	if _, errOut, err := tupper(t, env, "webhook", "rm", id); err != nil {
		t.Fatalf("webhook rm: %v %s", err, errOut)
	}
	if out, _, err := tupper(t, env, "webhook", "ls", "--json"); err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Webhooks) != 0 {
		t.Errorf("webhook ls --json after rm: %q %v", out, err)
	}
	if _, errOut, err := tupper(t, env, "webhook", "rm", id); err == nil || !strings.Contains(errOut, "not_found") {
		t.Errorf("webhook rm again: %v %s", err, errOut)
	}
}
