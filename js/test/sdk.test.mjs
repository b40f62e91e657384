// The client against a real tupper serve with real sandboxes: every call, its errors, and
// (last) every exchange checked against the served OpenAPI document.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { TupperError } from "@tupper/sdk";
import { client, boxOptions, checkExchanges, url, apiKey } from "./helpers.mjs";

const c = client();
const box = await c.create({ ...boxOptions, key: "sdk-test", secrets: { API_TOKEN: "s3cr3t-value" }, env: { GREETING: "hi" }, trackChanges: true });
after(() => box.destroy());

test("run returns the result; secrets are redacted", async () => {
  const r = await box.run('echo "$GREETING $API_TOKEN"; echo oops >&2; exit 3');
  assert.equal(r.exitCode, 3);
  assert.equal(r.ok, false);
  assert.equal(r.stderr, "oops\n");
  assert.equal(r.stdout, "hi ***\n");
});

test("runCode needs the code interpreter: a sandbox without it is a clear error, before any stream", async () => {
  const noServer = (e) => e instanceof TupperError && e.code === "unavailable" && /code-interpreter template/.test(e.message);
  await assert.rejects(box.runCode("1 + 1"), noServer);
  await assert.rejects(box.runCode("1 + 1", { onStdout() {} }), noServer);
  await assert.rejects(box.runCode(""), (e) => e instanceof TupperError && e.code === "invalid_argument");
});

test("create with a key is get-or-create", async () => {
  assert.equal(box.info.created, true);
  assert.equal(box.info.labels.test, "js");
  const again = await c.create({ ...boxOptions, key: "sdk-test" });
  assert.equal(again.id, box.id);
  assert.equal(again.info.created, false);
  const listed = await c.list({ key: "sdk-test" });
  assert.deepEqual(listed.map((s) => s.id), [box.id]);
  assert.equal((await c.get(box.id)).info.state, "running");
});

// A get-or-create hit gives the server a new handle on the sandbox: it must still know the
// secrets set at creation (it once did not, and they came out in clear).
test("secrets stay redacted after a get-or-create hit", async () => {
  const b = await c.create({ ...boxOptions, key: "redact-after-hit", secrets: { API_TOKEN: "s3cr3t-value" } });
  try {
    const before = (await b.run('echo "$API_TOKEN"')).stdout;
    const again = await c.create({ ...boxOptions, key: "redact-after-hit" });
    assert.equal(again.id, b.id);
    const after = (await b.run('echo "$API_TOKEN"')).stdout;
    assert.deepEqual([before, after], ["***\n", "***\n"]);
  } finally {
    await b.destroy();
  }
  // Listed with all once it has ended, with why: destroyed by this client's key.
  const ended = (await c.list({ all: true })).find((s) => s.id === b.id);
  assert.equal(ended?.end?.reason, "destroyed");
  assert.match(ended?.end?.by ?? "", /^key_/);
  assert.ok(ended?.endedAt);
  assert.ok(!(await c.list()).some((s) => s.id === b.id));
});

test("run streams output as it comes", async () => {
  const chunks = [];
  const errs = [];
  const r = await box.run("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo done >&2", {
    onStdout: (t) => chunks.push(t),
    onStderr: (t) => errs.push(t),
  });
  assert.equal(r.exitCode, 0);
  assert.ok(chunks.length >= 2, `one chunk only: ${JSON.stringify(chunks)}`);
  assert.equal(chunks.join(""), "line1\nline2\nline3\n");
  assert.equal(errs.join(""), "done\n");
  assert.equal(r.stdout, "line1\nline2\nline3\n");
});

test("files", async () => {
  await box.files.write("dir/a.txt", "one\ntwo\n");
  assert.equal(await box.files.read("dir/a.txt"), "one\ntwo\n");
  assert.equal(await box.files.read("/workspace/dir/a.txt"), "one\ntwo\n");
  await box.files.edit("dir/a.txt", "two", "TWO");
  assert.equal(await box.files.read("dir/a.txt"), "one\nTWO\n");
  await assert.rejects(box.files.edit("dir/a.txt", "absent", "x"), (e) => e instanceof TupperError && e.code === "edit_not_found" && e.status === 422);
  const bytes = new Uint8Array([0, 1, 2, 255]);
  await box.files.write("dir/b.bin", bytes, { mode: "0755" });
  assert.deepEqual(await box.files.readBytes("dir/b.bin"), bytes);
  assert.deepEqual(await box.files.readBytes("dir/b.bin", { offset: 1, length: 2 }), new Uint8Array([1, 2]));
  const st = await box.files.stat("dir/b.bin");
  assert.equal(st.type, "file");
  assert.equal(st.size, 4);
  assert.equal(st.mode & 0o777, 0o755);
  assert.deepEqual((await box.files.list("dir")).map((e) => e.path.split("/").pop()).sort(), ["a.txt", "b.bin"]);
  assert.deepEqual((await box.files.list("dir", { glob: "*.txt" })).length, 1);
  await box.files.mkdir("dir/sub");
  await box.files.rename("dir/a.txt", "dir/sub/c.txt");
  assert.equal(await box.files.exists("dir/a.txt"), false);
  assert.equal(await box.files.exists("dir/sub/c.txt"), true);
  const m = await box.files.search("TWO", { path: "dir" });
  assert.equal(m.length, 1);
  assert.equal(m[0].line, 2);
  await box.files.remove("dir", { recursive: true });
  assert.equal(await box.files.exists("dir"), false);
  await assert.rejects(box.files.read("nope.txt"), (e) => e instanceof TupperError && e.code === "not_found" && e.status === 404);
});

test("changes since creation and since a mark", async () => {
  await box.files.write("kept.txt", "v1\n");
  const all = await box.changes();
  assert.ok(all.added.includes("/workspace/kept.txt"), JSON.stringify(all));
  const mark = await box.mark("before-edit");
  assert.equal(mark, "before-edit");
  await box.files.write("kept.txt", "v2\n");
  const since = await box.changes(mark);
  assert.deepEqual(since.added, []);
  assert.deepEqual(since.modified, ["/workspace/kept.txt"]);
  assert.match(since.patch, /-v1\n\+v2/);
});

test("background processes and their logs", async () => {
  const p = await box.processes.start("echo started; sleep 0.5; echo finished; exit 4", { name: "job", ready: { log: "started" } });
  assert.equal(p.name, "job");
  assert.equal((await box.processes.list()).some((q) => q.name === "job"), true);
  const w = await box.processes.wait("job", { timeoutMs: 30_000 });
  assert.deepEqual([w.status, w.exitCode], ["exited", 4]);
  const page = await box.processes.logs("job");
  assert.equal(page.text, "started\nfinished\n");
  const rest = await box.processes.logs("job", { after: page.nextCursor });
  assert.equal(rest.text, "");
  const lines = [];
  for await (const l of box.processes.lines("job")) lines.push(l.text);
  assert.deepEqual(lines, ["started", "finished"]);
  await assert.rejects(box.processes.get("nope"), (e) => e.code === "not_found");
});

test("git", async () => {
  await box.run("mkdir -p repo && cd repo && git init -q -b main && echo a > f && git add f && git -c user.email=t@t -c user.name=t commit -qm first");
  await box.files.write("repo/f", "b\n");
  const d = await box.git.diff({ dir: "repo" });
  assert.match(d.stdout, /-a\n\+b/);
  const s = await box.git.status({ dir: "repo" });
  assert.match(s.stdout, /modified:\s+f/);
  const cm = await box.git.commit("second", { dir: "repo", all: true, author: "T <t@t>" });
  assert.equal(cm.exitCode, 0, cm.output);
  assert.equal((await box.run("git -C repo log --format=%s")).stdout, "second\nfirst\n");
  const co = await box.git.checkout("feature", { dir: "repo", create: true });
  assert.equal(co.exitCode, 0, co.output);
});

test("snapshot, and a sandbox from it", async () => {
  await box.files.write("snap.txt", "saved\n");
  const id = await box.snapshot();
  const fork = await c.create({ ...boxOptions, from: id });
  try {
    assert.notEqual(fork.id, box.id);
    assert.equal(await fork.files.read("snap.txt"), "saved\n");
  } finally {
    await fork.destroy();
  }
  await assert.rejects(c.get(fork.id), (e) => e.code === "not_found");
});

test("a network policy: refusals recorded, summed up, and the network changed live", async () => {
  // Only a refused name is asked: an allowed one would be forwarded to the host's resolver.
  const p = await c.create({ ...boxOptions, network: { mode: "allow", allow: ["allowed.invalid"] } });
  try {
    await p.run("getent hosts denied.invalid || true");
    let refused;
    for (let i = 0; i < 100 && !refused; i++) {
      const log = await p.egress();
      assert.equal(typeof log.cursor, "string");
      refused = log.entries.find((e) => e.name === "denied.invalid" && !e.allowed && e.kind === "dns");
      if (!refused) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(refused, "the refusal of denied.invalid is not in the egress record");
    const sum = await p.egressLearned();
    assert.deepEqual(sum, { allow: [], denied: ["denied.invalid"] });
    assert.deepEqual(await p.network(), { mode: "allow", allow: ["allowed.invalid"] });
    // Changed to none while it runs: the name allowed until now is refused too.
    await p.setNetwork({ mode: "none" });
    assert.deepEqual(await p.network(), { mode: "none" });
    await p.run("getent hosts allowed.invalid || true");
    let denied = [];
    for (let i = 0; i < 100 && denied.length < 2; i++) {
      ({ denied } = await p.egressLearned());
      if (denied.length < 2) await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(denied, ["denied.invalid", "allowed.invalid"]);
  } finally {
    await p.destroy();
  }
});

test("a sandbox's token reaches that sandbox only", async () => {
  const tc = client(box.info.token);
  const same = await tc.get(box.id);
  assert.equal((await same.run("echo via-token")).stdout, "via-token\n");
  await assert.rejects(tc.create(boxOptions), (e) => e instanceof TupperError && (e.code === "forbidden" || e.code === "unauthorized"));
});

test("errors carry the API's codes", async () => {
  await assert.rejects(client("ak_wrong").list(), (e) => e instanceof TupperError && e.code === "unauthorized" && e.status === 401);
  await assert.rejects(c.get("sb-does-not-exist"), (e) => e instanceof TupperError && e.code === "not_found" && e.status === 404);
  await assert.rejects(box.run(""), (e) => e instanceof TupperError && e.code === "invalid_argument" && e.status === 400);
});

test("an error shows its code once, as Go's provider.Error does: code: message", async () => {
  // The server's message is the error's without its code; TupperError puts the code before
  // it. It was "not_found: not_found: …".
  const res = await fetch(url + "/v1/sandboxes/sb-does-not-exist", { headers: { Authorization: `Bearer ${apiKey}` } });
  const body = await res.json();
  assert.equal(body.code, "not_found");
  assert.doesNotMatch(body.message, /not_found/);
  const err = await c.get("sb-does-not-exist").then(() => null, (e) => e);
  assert.ok(err instanceof TupperError);
  assert.equal(err.message, `not_found: ${body.message}`);
  await assert.rejects(box.files.read("nope.txt"), (e) => e instanceof TupperError && e.message.split("not_found").length === 2);
});

test("every exchange above is in the served OpenAPI document", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  // The check itself rejects what the document does not describe.
  const ok = { method: "POST", path: "/v1/sandboxes/x/files/edit", query: [], requestBody: { path: "a", find: "b", replace: "c" } };
  await checkExchanges(doc, [ok]);
  await assert.rejects(checkExchanges(doc, [{ ...ok, requestBody: { ...ok.requestBody, replaceAll: true } }]), /field replaceAll is not in the document/);
  await assert.rejects(checkExchanges(doc, [{ ...ok, path: "/v1/sandboxes/x/files/patch" }]), /no such route/);
  await assert.rejects(checkExchanges(doc, [{ ...ok, query: ["force"] }]), /query parameter force/);
  await assert.rejects(checkExchanges(doc, [{ method: "GET", path: "/v1/sandboxes/x", query: [], status: 200, responseBody: { id: "x", provider: "p", labels: {}, state: "gone", createdAt: "" } }]), /gone is not one of/);
  const seen = await checkExchanges(doc);
  for (const r of ["POST /v1/sandboxes", "POST /v1/sandboxes/{id}/run", "POST /v1/sandboxes/{id}/files/edit", "GET /v1/sandboxes/{id}/processes/{name}/lines", "POST /v1/sandboxes/{id}/git/commit", "POST /v1/sandboxes/{id}/snapshot"]) {
    assert.ok(seen.has(r), `${r} was not exercised`);
  }
});
