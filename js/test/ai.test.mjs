// @tupper/ai through the AI SDK: generateText with the SDK's own mock model (ai/test), which
// asks for real tool calls that the SDK validates against the tools' schemas and runs in a
// real sandbox.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { sandboxTools, toolDefinitions } from "@tupper/ai";
import { client, boxOptions, checkExchanges, url } from "./helpers.mjs";

const c = client();
const box = await c.create({ ...boxOptions, trackChanges: true });
after(() => box.destroy());

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that answers each step with the next scripted content. */
function scripted(steps) {
  let i = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      const content = steps[i++];
      assert.ok(content, "the agent asked the model for more steps than the script has");
      const calls = content.some((p) => p.type === "tool-call");
      return { content, finishReason: { unified: calls ? "tool-calls" : "stop", raw: undefined }, usage, warnings: [] };
    },
  });
  return model;
}

const call = (id, toolName, input) => ({ type: "tool-call", toolCallId: id, toolName, input: JSON.stringify(input) });

test("the tools are the Go tools package's", () => {
  const tools = sandboxTools({ client: c, sandbox: box });
  // tools.json is compared with the Go package's export by test/js's Go test.
  const exported = JSON.parse(readFileSync(new URL("../packages/ai/src/tools.json", import.meta.url), "utf8"));
  assert.deepEqual(Object.keys(tools), exported.map((d) => d.name));
  assert.ok(exported.length >= 15);
  for (const d of exported) {
    assert.equal(tools[d.name].description, d.description);
    assert.deepEqual(tools[d.name].inputSchema.jsonSchema, d.input_schema);
  }
  assert.deepEqual(toolDefinitions, exported);
});

test("an AI SDK agent runs its tool calls in the sandbox", async () => {
  const model = scripted([
    [call("1", "write_file", { path: "hello.py", content: "print('hello from', 6 * 7)\n" }), call("2", "run_command", { command: "python3 hello.py || echo no python; echo built > out.txt" })],
    [call("3", "edit_file", { path: "out.txt", find: "built", replace: "edited" }), call("5", "file_changes", {})],
    // The AI SDK runs one step's calls at once: these read what the step before wrote.
    [call("4", "read_file", { path: "out.txt" }), call("6", "edit_file", { path: "out.txt", find: "absent", replace: "x" }), call("7", "list_files", {})],
    [{ type: "text", text: "done" }],
  ]);
  const r = await generateText({ model, tools: sandboxTools({ client: c, sandbox: box }), prompt: "write and run hello.py", stopWhen: stepCountIs(10) });
  assert.equal(r.text, "done");
  const results = Object.fromEntries(r.steps.flatMap((s) => s.toolResults).map((t) => [t.toolCallId, t.output]));
  assert.equal(results["1"], "wrote hello.py");
  assert.match(results["2"], /^exit code: 0\n/);
  assert.match(results["4"], /^edited$/m);
  assert.match(results["5"], /added: .*hello\.py/);
  // A tool's failure reaches the model as the tool's error, with the API's code.
  const errs = r.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error");
  assert.equal(errs.length, 1, JSON.stringify(errs));
  assert.match(String(errs[0].error), /edit_not_found/);
  assert.match(results["7"], /file \d+ .*out\.txt/);
  assert.equal(await box.files.read("out.txt"), "edited\n");
});

test("processes and a second sandbox through the tools", async () => {
  const tools = sandboxTools({ client: c, create: boxOptions });
  const model = scripted([
    [call("a", "start_process", { command: "echo ready; sleep 30", name: "srv", ready_log: "ready" })],
    [call("b", "process_logs", { name: "srv" }), call("c", "create_sandbox", { network: "none" })],
    [call("d", "stop_process", { name: "srv" }), call("e", "list_sandboxes", {})],
    [{ type: "text", text: "ok" }],
  ]);
  const r = await generateText({ model, tools, prompt: "start a server", stopWhen: stepCountIs(10) });
  const results = Object.fromEntries(r.steps.flatMap((s) => s.toolResults).map((t) => [t.toolCallId, t.output]));
  assert.match(results["a"], /^process srv running/);
  assert.match(results["b"], /status: running\ncursor: \S+\nready\n/);
  const created = /created sandbox (\S+)/.exec(results["c"])?.[1];
  assert.ok(created, results["c"]);
  assert.equal(results["e"].split("\n").length, 2, results["e"]);
  assert.match(results["e"], /\(default\)/);
  for (const id of results["e"].split("\n").map((l) => l.split(" ")[0])) await (await c.get(id)).destroy();
});

test("run_code on a sandbox without the code interpreter tells the model which template has it", async () => {
  const model = scripted([[call("c", "run_code", { code: "1 + 1" })], [{ type: "text", text: "ok" }]]);
  const r = await generateText({ model, tools: sandboxTools({ client: c, sandbox: box }), prompt: "compute", stopWhen: stepCountIs(3) });
  const errors = r.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error").map((t) => String(t.error));
  assert.equal(errors.length, 1);
  assert.match(errors[0], /create_sandbox and template code-interpreter/);
});

test("pause_sandbox and resume_sandbox, keeping the memory and not", async (t) => {
  const b = await c.create(boxOptions);
  t.after(() => b.destroy());
  const caps = (await b.refresh()).capabilities;
  const cold = caps.includes("pause-cold");
  const model = scripted([
    [call("s", "start_process", { sandbox_id: b.id, command: "echo up; sleep 300", name: "bg", ready_log: "up" })],
    [call("p", "pause_sandbox", { sandbox_id: b.id })],
    [call("r", "resume_sandbox", { sandbox_id: b.id })],
    [call("q", "pause_sandbox", { sandbox_id: b.id, keep_memory: false })],
    [call("u", "resume_sandbox", { sandbox_id: b.id })],
    [call("x", "run_command", { sandbox_id: b.id, command: "pgrep -x sleep >/dev/null && echo kept || echo gone" })],
    [{ type: "text", text: "ok" }],
  ]);
  const r = await generateText({ model, tools: sandboxTools({ client: c }), prompt: "pause and resume", stopWhen: stepCountIs(10) });
  const results = Object.fromEntries(r.steps.flatMap((s) => s.toolResults).map((t) => [t.toolCallId, t.output]));
  const errors = Object.fromEntries(r.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error").map((t) => [t.toolCallId, String(t.error)]));
  assert.equal(results["p"], `paused sandbox ${b.id} with its memory: its processes continue after resume_sandbox`);
  assert.equal(results["r"], `resumed sandbox ${b.id}`);
  if (cold) {
    // The process from before the pause without memory is gone; the sandbox runs commands.
    assert.match(results["q"], /keeping only its files/);
    assert.equal(results["u"], `resumed sandbox ${b.id}`);
    assert.match(results["x"], /^exit code: 0\n[\s\S]*gone/);
  } else {
    // Refused before anything changed: the sandbox still runs, its process with it.
    assert.match(errors["q"], /unsupported/);
    assert.match(errors["u"], /already running|conflict/);
    assert.match(results["x"], /kept/);
  }
  assert.equal((await b.refresh()).state, "running");
});

test("every exchange above is in the served OpenAPI document", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  await checkExchanges(doc);
});
