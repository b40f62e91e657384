// @tupper/deepagents through deepagents: a deep agent whose model is langchain's scripted
// fakeModel issues real tool calls (execute, write_file, read_file, edit_file, ls, grep)
// that deepagents runs on TupperBackend, in a real sandbox.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createDeepAgent } from "deepagents";
import { fakeModel, AIMessage, HumanMessage } from "langchain";
import { TupperBackend } from "@tupper/deepagents";
import { client, boxOptions, checkExchanges, url } from "./helpers.mjs";

const c = client();
const backend = await TupperBackend.create(c, boxOptions);
after(() => backend.close());

test("the backend's own methods", async () => {
  const up = await backend.uploadFiles([["up/a.bin", new Uint8Array([1, 2, 3])], ["/proc/nope/x", new Uint8Array([1])]]);
  assert.equal(up[0].error, null);
  assert.notEqual(up[1].error, null);
  const down = await backend.downloadFiles(["up/a.bin", "up/missing", "up"]);
  assert.deepEqual(down[0].content, new Uint8Array([1, 2, 3]));
  assert.deepEqual([down[1].error, down[2].error], ["file_not_found", "is_directory"]);
  const r = await backend.execute("echo out; echo err >&2; exit 2");
  assert.equal(r.exitCode, 2);
  assert.match(r.output, /out/);
  assert.match(r.output, /err/);
});

test("a deep agent works in the sandbox", async () => {
  const model = fakeModel()
    .respondWithTools([{ name: "write_file", args: { file_path: "/workspace/notes.txt", content: "alpha\nbeta\n" }, id: "w" }])
    .respondWithTools([{ name: "edit_file", args: { file_path: "/workspace/notes.txt", old_string: "beta", new_string: "gamma" }, id: "e" }])
    .respondWithTools([{ name: "execute", args: { command: "cat /workspace/notes.txt | tr a-z A-Z" }, id: "x" }])
    .respondWithTools([{ name: "read_file", args: { file_path: "/workspace/notes.txt" }, id: "r" }, { name: "ls", args: { path: "/workspace" }, id: "l" }, { name: "grep", args: { pattern: "gamma", path: "/workspace" }, id: "g" }])
    .respond(new AIMessage("finished"));
  const agent = createDeepAgent({ model, backend });
  const out = await agent.invoke({ messages: [new HumanMessage("write notes")] }, { recursionLimit: 50 });
  const tool = Object.fromEntries(out.messages.filter((m) => m.type === "tool").map((m) => [m.tool_call_id, m.text]));
  assert.equal(out.messages.at(-1).content, "finished");
  assert.match(tool["x"], /ALPHA\nGAMMA/);
  assert.match(tool["r"], /alpha/);
  assert.match(tool["r"], /gamma/);
  assert.match(tool["l"], /notes\.txt/);
  assert.match(tool["g"], /notes\.txt/);
  // The file is in the sandbox, not in the agent's state.
  assert.equal(await backend.sandbox.files.read("notes.txt"), "alpha\ngamma\n");
});

test("every exchange above is in the served OpenAPI document", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  await checkExchanges(doc);
});
