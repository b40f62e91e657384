// @tupper/mastra through Mastra (needs Node 22; test/js runs this file with it): the
// sandbox's and the filesystem's methods against a real server, then a Mastra agent whose
// model is Mastra's own scripted test model issuing real workspace tool calls that Mastra
// runs through TupperSandbox and TupperFilesystem, in a real sandbox.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { Agent } from "@mastra/core/agent";
import {
  Workspace,
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  IsDirectoryError,
  NotDirectoryError,
  StaleFileError,
} from "@mastra/core/workspace";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { TupperSandbox, TupperFilesystem, shellQuote } from "@tupper/mastra";
import { client, boxOptions, checkExchanges, url } from "./helpers.mjs";

// Mastra reports usage to its makers' telemetry service unless told not to (it reads this when
// it sends): the tests send nothing beyond loopback.
process.env.MASTRA_TELEMETRY_DISABLED = "1";

const c = client();
const sandbox = new TupperSandbox({ client: c, create: { ...boxOptions, key: "mastra-test" }, env: { OVERLAY: "from-setenv" } });
const fs = new TupperFilesystem({ sandbox });
after(() => sandbox._destroy());

test("start is get-or-create by key; stop and start again", async () => {
  await sandbox._start();
  assert.equal(sandbox.status, "running");
  assert.equal(sandbox.id, "mastra-test");
  const again = new TupperSandbox({ client: c, create: { ...boxOptions, key: "mastra-test" } });
  assert.deepEqual(await again.start(), { outcome: "connected" });
  assert.equal(again.sandbox.id, sandbox.sandbox.id);
  const other = new TupperSandbox({ client: c, create: boxOptions });
  try {
    assert.deepEqual(await other.start(), { outcome: "created" });
    assert.notEqual(other.sandbox.id, sandbox.sandbox.id);
  } finally {
    await other._destroy();
  }
  assert.equal(other.status, "destroyed");
  await assert.rejects(c.get(other.sandbox.id), (e) => e.code === "not_found");
  // stop pauses where the provider can pause; start resumes.
  await sandbox._stop();
  assert.equal(sandbox.status, "stopped");
  const pausable = sandbox.sandbox.info.capabilities.includes("pause");
  assert.equal((await c.get(sandbox.sandbox.id)).info.state, pausable ? "paused" : "running");
  await sandbox._start();
  assert.equal(sandbox.status, "running");
  assert.equal((await sandbox.executeCommand("echo back")).stdout, "back\n");
  const info = await sandbox.getInfo();
  assert.equal(info.metadata.sandboxId, sandbox.sandbox.id);
  assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()));
});

test("executeCommand: result, quoting, environment, directory, streaming, timeout", async () => {
  const r = await sandbox.executeCommand("printf '%s|' ", ["a b", "it's", "$HOME", ""]);
  assert.equal(r.stdout, "a b|it's|$HOME||");
  assert.equal(r.success, true);
  assert.equal(shellQuote("plain-word"), "plain-word");
  const f = await sandbox.executeCommand("echo out; echo err >&2; exit 3");
  assert.deepEqual([f.success, f.exitCode, f.stdout, f.stderr], [false, 3, "out\n", "err\n"]);
  const env = await sandbox.executeCommand('echo "$OVERLAY $MINE"; pwd', [], { env: { MINE: "per-call" }, cwd: "/tmp" });
  assert.equal(env.stdout, "from-setenv per-call\n/tmp\n");
  sandbox.setEnv((e) => ({ ...e, OVERLAY: "changed" }));
  assert.equal((await sandbox.executeCommand('echo "$OVERLAY"; pwd')).stdout, "changed\n/workspace\n");
  const chunks = [];
  const s = await sandbox.executeCommand("for i in 1 2 3; do echo n$i; sleep 0.2; done", [], { onStdout: (t) => chunks.push(t) });
  assert.equal(chunks.join(""), "n1\nn2\nn3\n");
  assert.ok(chunks.length >= 2, `one chunk only: ${JSON.stringify(chunks)}`);
  assert.equal(s.stdout, "n1\nn2\nn3\n");
  const slow = await sandbox.executeCommand("sleep 30", [], { timeout: 500 });
  assert.equal(slow.timedOut, true);
  assert.equal(slow.success, false);
  assert.ok(slow.executionTimeMs < 20_000, `took ${slow.executionTimeMs} ms`);
});

test("writeFiles and the port URL", async () => {
  await sandbox.writeFiles([{ path: "up/a.sh", content: "echo run\n", mode: 0o750 }, { path: "/workspace/up/b.bin", content: Buffer.from([0, 1, 255]) }]);
  assert.equal((await sandbox.executeCommand("stat -c %a up/a.sh && sh up/a.sh && od -An -tu1 up/b.bin")).stdout.replace(/\s+/g, " ").trim(), "750 run 0 1 255");
  await assert.rejects(sandbox.writeFiles([{ path: "up/c", content: "x", mode: 0o4755 }]), /mode/i);
  const u = await sandbox.networking.getPortUrl(8080);
  assert.match(u, /^https?:\/\//);
});

test("background processes: output, exit code, list, kill", async () => {
  const streamed = [];
  const h = await sandbox.processes.spawn("echo a; echo b >&2; sleep 0.3; echo c; exit 5", { onStdout: (t) => streamed.push(t) });
  assert.match(h.pid, /^mastra-/);
  assert.equal((await sandbox.sandbox.processes.get(h.pid)).command, "echo a; echo b >&2; sleep 0.3; echo c; exit 5");
  const r = await h.wait();
  assert.deepEqual([r.exitCode, r.success, r.stdout, r.stderr], [5, false, "a\nc\n", "b\n"]);
  assert.equal(streamed.join(""), "a\nc\n");
  assert.deepEqual((await sandbox.processes.list()).find((p) => p.pid === h.pid), { pid: h.pid, command: h.command, running: false, exitCode: 5 });
  const env = await sandbox.processes.spawn('echo "$OVERLAY $MINE"; pwd', { env: { MINE: "mine" }, cwd: "/tmp" });
  assert.equal((await env.wait()).stdout, "changed mine\n/tmp\n");
  const long = await sandbox.processes.spawn("sleep 300");
  assert.equal((await sandbox.processes.list()).find((p) => p.pid === long.pid).running, true);
  await assert.rejects(long.sendStdin("x"), /stdin/);
  assert.equal(await sandbox.processes.kill(long.pid), true);
  const killed = await long.wait();
  assert.notEqual(killed.exitCode, 0);
  assert.equal((await sandbox.sandbox.processes.get(long.pid)).status, "exited");
});

test("the filesystem's methods and Mastra's errors", async () => {
  await fs.init();
  await fs.writeFile("fs/a.txt", "one\n");
  assert.equal(await fs.readFile("fs/a.txt", { encoding: "utf-8" }), "one\n");
  const buf = await fs.readFile("/workspace/fs/a.txt");
  assert.ok(Buffer.isBuffer(buf));
  assert.equal(buf.toString(), "one\n");
  await assert.rejects(fs.readFile("fs/missing"), FileNotFoundError);
  await assert.rejects(fs.readFile("fs"), IsDirectoryError);
  await assert.rejects(fs.writeFile("fs/a.txt", "two\n", { overwrite: false }), FileExistsError);
  await assert.rejects(fs.writeFile("nodir/x.txt", "x", { recursive: false }), DirectoryNotFoundError);
  await assert.rejects(fs.writeFile("fs/a.txt", "two\n", { expectedMtime: new Date(0) }), StaleFileError);
  const st = await fs.stat("fs/a.txt");
  assert.deepEqual([st.name, st.path, st.type, st.size], ["a.txt", "/workspace/fs/a.txt", "file", 4]);
  await fs.writeFile("fs/a.txt", "two\n", { expectedMtime: st.modifiedAt });
  await fs.appendFile("fs/a.txt", Buffer.from("three\n"));
  assert.equal(await fs.readFile("fs/a.txt", { encoding: "utf-8" }), "two\nthree\n");
  await assert.rejects(fs.stat("fs/none"), FileNotFoundError);
  assert.equal((await fs.stat("fs")).type, "directory");

  await fs.mkdir("fs/sub/deep", { recursive: true });
  await assert.rejects(fs.mkdir("fs/x/y"), DirectoryNotFoundError);
  await assert.rejects(fs.mkdir("fs/a.txt"), FileExistsError);
  await fs.writeFile("fs/sub/deep/c.md", "# c\n");
  await fs.copyFile("fs/a.txt", "fs/sub/b.txt");
  await assert.rejects(fs.copyFile("fs/a.txt", "fs/sub/b.txt", { overwrite: false }), FileExistsError);
  await assert.rejects(fs.copyFile("fs/sub", "fs/sub2"), IsDirectoryError);
  await fs.copyFile("fs/sub", "fs/sub2", { recursive: true });
  assert.equal(await fs.readFile("fs/sub2/deep/c.md", { encoding: "utf-8" }), "# c\n");
  await fs.moveFile("fs/sub2/b.txt", "fs/moved.txt");
  assert.equal(await fs.exists("fs/sub2/b.txt"), false);
  assert.equal(await fs.exists("fs/moved.txt"), true);
  await assert.rejects(fs.moveFile("fs/nothing", "fs/x"), FileNotFoundError);

  const top = await fs.readdir("fs");
  assert.deepEqual(top.map((e) => `${e.name}:${e.type}`).sort(), ["a.txt:file", "moved.txt:file", "sub2:directory", "sub:directory"]);
  assert.equal(top.find((e) => e.name === "a.txt").size, 10);
  const all = await fs.readdir("/workspace/fs/sub", { recursive: true });
  assert.deepEqual(all.map((e) => e.name).sort(), ["b.txt", "deep", "deep/c.md"]);
  assert.deepEqual((await fs.readdir("fs/sub", { recursive: true, extension: ".md" })).filter((e) => e.type === "file").map((e) => e.name), ["deep/c.md"]);
  await assert.rejects(fs.readdir("fs/a.txt"), NotDirectoryError);
  await assert.rejects(fs.readdir("fs/none"), DirectoryNotFoundError);

  await assert.rejects(fs.deleteFile("fs/sub"), IsDirectoryError);
  await assert.rejects(fs.deleteFile("fs/none"), FileNotFoundError);
  await fs.deleteFile("fs/none", { force: true });
  await fs.deleteFile("fs/moved.txt");
  await assert.rejects(fs.rmdir("fs/sub"), DirectoryNotEmptyError);
  await assert.rejects(fs.rmdir("fs/a.txt"), NotDirectoryError);
  await fs.rmdir("fs/sub", { recursive: true });
  await fs.rmdir("fs/none", { force: true });
  assert.equal(await fs.exists("fs/sub"), false);

  const ro = new TupperFilesystem({ sandbox: sandbox.sandbox, readOnly: true });
  await assert.rejects(ro.writeFile("fs/ro.txt", "x"), /ro\.txt/);
  assert.equal(await ro.readFile("fs/a.txt", { encoding: "utf-8" }), "two\nthree\n");
});

const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/** The background process id in the last tool result of a prompt. */
function pidIn(prompt) {
  const ids = JSON.stringify(prompt).match(/PID: (mastra-[\w-]+)/g);
  assert.ok(ids, "no process id in the prompt");
  return ids.at(-1).slice("PID: ".length);
}

/**
 * Mastra's scripted model: each step answers with the next scripted tool calls, or text; a
 * step may be a function of the prompt so far.
 */
function scripted(steps) {
  let i = 0;
  return new MastraLanguageModelV2Mock({
    doGenerate: async ({ prompt }) => {
      let step = steps[i++];
      if (typeof step === "function") step = step(prompt);
      assert.ok(step, "the agent asked the model for more steps than the script has");
      if (typeof step === "string") return { content: [{ type: "text", text: step }], finishReason: "stop", usage, warnings: [] };
      const content = step.map(([id, toolName, input]) => ({ type: "tool-call", toolCallId: id, toolName, input: JSON.stringify(input) }));
      return { content, finishReason: "tool-calls", usage, warnings: [] };
    },
  });
}

test("a Mastra agent works in the sandbox", async () => {
  const workspace = new Workspace({ sandbox, filesystem: fs });
  await workspace.init();
  const model = scripted([
    [["w", "mastra_workspace_write_file", { path: "notes.txt", content: "alpha\nbeta\n" }]],
    [["r", "mastra_workspace_read_file", { path: "notes.txt" }]],
    [["e", "mastra_workspace_edit_file", { path: "notes.txt", old_string: "beta", new_string: "gamma" }]],
    [["x", "mastra_workspace_execute_command", { command: "tr a-z A-Z < notes.txt; uname -n" }]],
    [["l", "mastra_workspace_list_files", { path: "." }], ["g", "mastra_workspace_grep", { pattern: "gam+a", path: "." }], ["s", "mastra_workspace_file_stat", { path: "notes.txt" }]],
    [["b", "mastra_workspace_execute_command", { command: "echo bg-start; sleep 300", background: true }]],
    // The model reads the process's id from the result before.
    (prompt) => [["o", "mastra_workspace_get_process_output", { pid: pidIn(prompt), wait: false }], ["k", "mastra_workspace_kill_process", { pid: pidIn(prompt) }]],
    "finished",
  ]);
  const agent = new Agent({ id: "tupper-agent", name: "tupper-agent", instructions: "Work in the sandbox.", model, workspace });
  const out = await agent.generate("write notes", { maxSteps: 10 });
  assert.equal(out.text, "finished");
  const results = Object.fromEntries(out.steps.flatMap((s) => s.toolResults).map((r) => [r.payload?.toolCallId ?? r.toolCallId, r.payload?.result ?? r.result]));
  assert.deepEqual(Object.keys(results).sort(), ["b", "e", "g", "k", "l", "o", "r", "s", "w", "x"]);
  const pid = String(results["b"]).match(/PID: (mastra-[\w-]+)/)?.[1];
  assert.ok(pid, String(results["b"]));
  assert.match(String(results["k"]), new RegExp(pid));
  assert.equal((await sandbox.sandbox.processes.get(pid)).status, "exited");
  assert.equal((await sandbox.sandbox.processes.logs(pid)).text, "bg-start\n");
  assert.match(String(results["x"]), /ALPHA\nGAMMA/);
  assert.match(String(results["r"]), /beta/);
  assert.match(String(results["l"]), /notes\.txt/);
  assert.match(String(results["g"]), /notes\.txt/);
  assert.match(String(results["s"]), /file/);
  // The file is in the sandbox, and the command ran there (its host name is the sandbox's).
  assert.equal(await sandbox.sandbox.files.read("notes.txt"), "alpha\ngamma\n");
  const host = String(results["x"]).trim().split("\n").at(-1);
  assert.equal(host, (await sandbox.sandbox.run("uname -n")).stdout.trim());
  assert.notEqual(host, hostname());
});

test("every exchange above is in the served OpenAPI document", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  const seen = await checkExchanges(doc);
  for (const r of ["POST /v1/sandboxes", "POST /v1/sandboxes/{id}/run", "GET /v1/sandboxes/{id}/files/stat", "GET /v1/sandboxes/{id}/files/list", "POST /v1/sandboxes/{id}/ports/{port}/expose"]) {
    assert.ok(seen.has(r), `${r} was not exercised`);
  }
});
