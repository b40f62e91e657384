// Drives tupper's MCP server with the official TypeScript MCP client, the way an agent app
// does, and checks what comes back. Run by mcpserver/client_test.go:
//
//   node client.mjs stdio <tupper binary> [args…]   # spawns `tupper mcp …`
//   node client.mjs http <url> [bearer token]       # streamable HTTP, e.g. tupper serve's /mcp
//
// It prints one line per check and exits non-zero on the first failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, ...rest] = process.argv.slice(2);

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

function check(cond, msg) {
  if (!cond) fail(msg);
  console.log(`ok: ${msg}`);
}

function text(result) {
  return (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({ command: target, args: rest, env: { ...process.env }, stderr: "inherit" });
} else if (mode === "http") {
  const headers = rest[0] ? { Authorization: `Bearer ${rest[0]}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
} else {
  fail(`usage: node client.mjs stdio <binary> [args…] | http <url> [token]; got mode ${mode}`);
}

const client = new Client({ name: "tupper-mcp-client-test", version: "1.0.0" });
await client.connect(transport);
check(client.getServerVersion()?.name === "tupper", `connected over ${mode} to ${JSON.stringify(client.getServerVersion())}`);

const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
const want = [
  "create_sandbox", "destroy_sandbox", "edit_file", "expose_port", "file_changes", "fork", "git_clone",
  "git_commit", "git_diff", "git_status", "list_files", "list_sandboxes", "pause_sandbox", "process_logs",
  "read_file", "resume_sandbox", "run_code", "run_command", "search_files", "snapshot", "start_process", "stop_process",
  "write_file",
];
check(JSON.stringify(names) === JSON.stringify(want), `tools/list has the ${want.length} tools`);
const run = tools.find((t) => t.name === "run_command");
check(run.inputSchema.additionalProperties === false && run.inputSchema.required.includes("command"), "run_command has a closed schema");

const call = (name, args) => client.callTool({ name, arguments: args });

let res = await call("run_command", { command: "echo hello from $(uname -s)" });
check(!res.isError && text(res).includes("hello from") && res.structuredContent?.exit_code === 0, `run_command: ${JSON.stringify(text(res))}`);

if (process.env.EXPECT_SANDBOX_ENV) {
  // The server's own options (tupper mcp -e NAME=VALUE) reach its sandboxes.
  const [name, value] = process.env.EXPECT_SANDBOX_ENV.split("=");
  res = await call("run_command", { command: `printf %s "$${name}"` });
  check(!res.isError && text(res).includes(value), `${name} in the sandbox: ${JSON.stringify(text(res))}`);
}

// run_code needs the code-interpreter template's server, which this sandbox lacks: a clear error.
res = await call("run_code", { code: "1 + 1" });
check(res.isError && text(res).includes("template code-interpreter"), `run_code without the server: ${JSON.stringify(text(res))}`);

res = await call("run_command", { command: "echo oops >&2; exit 7" });
check(res.isError === true && text(res).includes("exit code: 7") && text(res).includes("oops"), "a failing command is an isError result");

const content = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n";
res = await call("write_file", { path: "app/main.go", content });
check(!res.isError, `write_file: ${text(res)}`);
res = await call("read_file", { path: "app/main.go" });
check(!res.isError && text(res) === content, "read_file returns what write_file wrote");

res = await call("edit_file", { path: "app/main.go", find: "println(\"hi\")", replace: "println(\"edited\")" });
check(!res.isError, `edit_file: ${text(res)}`);
res = await call("read_file", { path: "/workspace/app/main.go" });
check(text(res).includes("println(\"edited\")") && !text(res).includes("println(\"hi\")"), "read_file sees the edit");

res = await call("edit_file", { path: "app/main.go", find: "no such text", replace: "x" });
check(res.isError === true && text(res).includes("edit_not_found"), "an edit that matches nothing is an isError result");

let protocolError = null;
try {
  await call("run_command", { command: "true", unexpected: 1 });
} catch (e) {
  protocolError = e;
}
check(protocolError && String(protocolError.message).includes("unexpected"), `malformed arguments are a protocol error: ${protocolError?.message}`);

if (mode === "http") {
  // End the session (HTTP DELETE), as a well-behaved client does: the server destroys its
  // default sandbox.
  await transport.terminateSession();
}
await client.close();
console.log("PASS");
