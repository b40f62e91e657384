// The client's terminal against a real server and a real sandbox's PTY. test/js runs this file
// twice: on Node 22 with its global WebSocket, and on Node 20 (which has none) with the ws
// package's passed in.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, TupperError } from "@tupper/sdk";
import { client, boxOptions, checkExchanges, url } from "./helpers.mjs";

const major = Number(process.versions.node.split(".")[0]);
const globalWS = typeof globalThis.WebSocket === "function";
if (major >= 22) assert.ok(globalWS, "Node 22 has a global WebSocket");
/** The WebSocket option: none where the runtime has one, else the ws package's. */
const ws = globalWS ? {} : { WebSocket: (await import("ws")).WebSocket };

const c = client();
const box = await c.create({ ...boxOptions, secrets: { TERM_SECRET: "hush-hush-value" } });
after(() => box.destroy());

/** Collects a terminal's output as text and waits for text matching re. */
function reader(term) {
  const dec = new TextDecoder();
  let text = "";
  const waiters = [];
  term.onData((d) => {
    text += dec.decode(d, { stream: true });
    for (const w of [...waiters]) if (w.re.test(text)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(text); }
  });
  return {
    get text() { return text; },
    until(re, ms = 30_000) {
      if (re.test(text)) return Promise.resolve(text);
      return new Promise((resolve, reject) => {
        const w = { re, resolve };
        waiters.push(w);
        setTimeout(() => reject(new Error(`no ${re} in the terminal's output after ${ms} ms: ${JSON.stringify(text.slice(-500))}`)), ms).unref();
      });
    },
  };
}

test(`a shell on a PTY: size, resize, input, output, exit (${globalWS ? "global WebSocket" : "ws package"})`, async () => {
  const term = await box.terminal({ cols: 100, rows: 30, ...ws });
  const out = reader(term);
  term.write("tty; stty size\n");
  await out.until(/\/dev\/pts\/\d+\r?\n(.*\r?\n)?30 100\r?\n/);
  term.resize(120, 40);
  term.write("stty size\n");
  await out.until(/40 120\r?\n/);
  term.write(new TextEncoder().encode('echo "[$TERM_SECRET]"\n'));
  await out.until(/\[\*\*\*\]/);
  assert.doesNotMatch(out.text, /hush-hush-value/);
  term.write("exit 7\n");
  assert.deepEqual(await term.exited, { exitCode: 7 });
  assert.throws(() => term.write("x"), (e) => e instanceof TupperError && e.code === "process_exited");
  assert.deepEqual(await term.close(), { exitCode: 7 });
});

test("close kills the shell; a refused control message is reported and the terminal goes on", async () => {
  const term = await box.terminal(ws);
  const out = reader(term);
  const errors = [];
  term.onError((e) => errors.push(e));
  // Past the client's own check, as a client in another language might send it.
  term["ws"].send(JSON.stringify({ type: "resize", cols: 0, rows: 5 }));
  term.write("echo $$ > /tmp/term.pid; echo started\n");
  await out.until(/[\r\n]started\r?\n/);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "invalid_argument");
  assert.throws(() => term.resize(1001, 5), (e) => e instanceof TupperError && e.code === "invalid_argument");
  assert.equal(await term.close(), undefined);
  assert.equal(await term.close(), undefined);
  // The server kills the shell once the WebSocket has closed: wait for it to be gone.
  const deadline = Date.now() + 20_000;
  for (;;) {
    const r = await box.run("kill -0 $(cat /tmp/term.pid) 2>/dev/null");
    if (r.exitCode !== 0) break;
    assert.ok(Date.now() < deadline, "the shell outlived the closed terminal");
    await new Promise((r) => setTimeout(r, 200));
  }
});

test("errors carry the API's codes", async () => {
  await assert.rejects(box.terminal({ cols: 0, ...ws }), (e) => e instanceof TupperError && e.code === "invalid_argument");
  const gone = await c.create(boxOptions);
  await gone.destroy();
  await assert.rejects(gone.terminal(ws), (e) => e instanceof TupperError && e.code === "not_found" && e.status === 404);
  // The handshake fails without a status; the client asks the server why.
  const wrong = new Sandbox(client("ak_wrong"), box.info);
  await assert.rejects(wrong.terminal(ws), (e) => e instanceof TupperError && e.code === "unauthorized" && e.status === 401);
  // A sandbox token opens that sandbox's terminal.
  const own = await client(box.info.token).get(box.id);
  const term = await own.terminal(ws);
  const out = reader(term);
  term.write("echo via-token\n");
  await out.until(/[\r\n]via-token\r?\n/);
  await term.close();
  if (!globalWS) {
    await assert.rejects(box.terminal(), (e) => e instanceof TupperError && e.code === "unsupported");
  }
});

test("every exchange above is in the served OpenAPI document", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  const seen = await checkExchanges(doc);
  // The failed open was explained by the same request without the upgrade: cols and rows
  // are the document's query parameters.
  assert.ok(seen.has("GET /v1/sandboxes/{id}/terminal"), [...seen].join(", "));
});
