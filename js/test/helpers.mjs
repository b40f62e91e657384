// Shared by the tests: the server the Go test started (TUPPER_URL, TUPPER_API_KEY), and a
// fetch that records every exchange so openapi.test.mjs can check each one against the
// OpenAPI document the server serves.
import assert from "node:assert/strict";
import { Client } from "@tupper/sdk";

export const url = process.env.TUPPER_URL;
export const apiKey = process.env.TUPPER_API_KEY;
if (!url || !apiKey) throw new Error("TUPPER_URL and TUPPER_API_KEY must be set (test/js's Go test sets them)");

/** Each exchange: { method, path, query, requestBody, status, contentType, responseBody }. */
export const exchanges = [];

async function recordingFetch(input, init = {}) {
  const u = new URL(String(input));
  const ex = { method: init.method ?? "GET", path: u.pathname, query: [...u.searchParams.keys()] };
  if (typeof init.body === "string") ex.requestBody = JSON.parse(init.body);
  const res = await fetch(input, init);
  ex.status = res.status;
  ex.contentType = (res.headers.get("content-type") ?? "").split(";")[0];
  if (ex.contentType === "application/json") {
    ex.responseBody = await res.clone().json();
  }
  exchanges.push(ex);
  return res;
}

export function client(key = apiKey) {
  return new Client({ url, apiKey: key, fetch: recordingFetch });
}

/** Options for every sandbox a test makes: no network, gone in ten minutes at worst. */
export const boxOptions = { network: { mode: "none" }, timeoutMs: 600_000, labels: { test: "js" } };

/** Checks every recorded exchange against the served OpenAPI document. */
export async function checkExchanges(doc, list = exchanges) {
  assert.ok(list.length > 0, "no exchanges were recorded");
  const routes = Object.entries(doc.paths).flatMap(([p, ops]) =>
    Object.entries(ops).map(([m, op]) => ({ re: new RegExp("^" + p.replace(/\{[^}]+\}/g, "[^/]+") + "$"), method: m.toUpperCase(), op, p })),
  );
  const seen = new Set();
  for (const ex of list) {
    const r = routes.find((r) => r.method === ex.method && r.re.test(ex.path));
    assert.ok(r, `${ex.method} ${ex.path}: no such route in /v1/openapi.json`);
    seen.add(`${r.method} ${r.p}`);
    const params = new Set((r.op.parameters ?? []).filter((x) => x.in === "query").map((x) => x.name));
    for (const q of ex.query) assert.ok(params.has(q), `${ex.method} ${r.p}: query parameter ${q} is not in the document`);
    if (ex.requestBody !== undefined) {
      const schema = r.op.requestBody?.content?.["application/json"]?.schema;
      assert.ok(schema, `${ex.method} ${r.p}: sends JSON the document does not describe`);
      conforms(doc, schema, ex.requestBody, `${ex.method} ${r.p} request`);
    }
    if (ex.responseBody !== undefined) {
      const resp = r.op.responses[String(ex.status)] ?? r.op.responses.default;
      const schema = resp?.content?.["application/json"]?.schema;
      assert.ok(schema, `${ex.method} ${r.p} ${ex.status}: a JSON answer the document does not describe`);
      conforms(doc, schema, ex.responseBody, `${ex.method} ${r.p} ${ex.status} response`);
    }
  }
  return seen;
}

/** Asserts that value has only the properties schema names, recursively, with their types. */
function conforms(doc, schema, value, where) {
  if (schema.$ref) schema = doc.components.schemas[schema.$ref.split("/").pop()];
  if (value === null || value === undefined) return;
  const type = schema.type;
  if (type === "object") {
    assert.equal(typeof value, "object", `${where}: not an object`);
    const props = schema.properties ?? {};
    for (const [k, v] of Object.entries(value)) {
      if (props[k]) conforms(doc, props[k], v, `${where}.${k}`);
      else if (typeof schema.additionalProperties === "object") conforms(doc, schema.additionalProperties, v, `${where}.${k}`);
      else assert.notEqual(schema.additionalProperties, false, `${where}: field ${k} is not in the document`);
    }
    for (const k of schema.required ?? []) assert.ok(k in value, `${where}: required field ${k} is missing`);
  } else if (type === "array") {
    assert.ok(Array.isArray(value), `${where}: not an array`);
    value.forEach((v, i) => conforms(doc, schema.items ?? {}, v, `${where}[${i}]`));
  } else if (type === "string") {
    assert.equal(typeof value, "string", `${where}: not a string`);
    if (schema.enum) assert.ok(schema.enum.includes(value), `${where}: ${value} is not one of ${schema.enum}`);
  } else if (type === "integer") {
    assert.ok(Number.isInteger(value), `${where}: not an integer`);
  } else if (type === "number") {
    assert.equal(typeof value, "number", `${where}: not a number`);
  } else if (type === "boolean") {
    assert.equal(typeof value, "boolean", `${where}: not a boolean`);
  }
}
