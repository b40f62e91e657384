// @tupper/sdk: a typed client of tupper serve's REST API (/v1). It uses only fetch, so it
// runs in Node and in edge and browser runtimes alike; the terminal also needs a WebSocket
// that sends headers (Node 22's, or the ws package's passed in).
//
// The shapes on the wire are generated from the server's OpenAPI document into openapi.ts
// (npm run gen:types; never edit it by hand); the names below are the SDK's for them.
import type { components } from "./openapi.js";
import { openTerminal, type Terminal, type TerminalOptions } from "./terminal.js";

export * from "./terminal.js";
export type { components, paths, operations } from "./openapi.js";

/** The API's schemas (server/openapi.json), by name. */
export type Schemas = components["schemas"];

/** The codes of the API's errors (docs/errors.md). */
export type ErrorCode = Schemas["ErrorCode"];

/**
 * A failure the server reported: its code, message and HTTP status. Its message reads
 * "code: message", as Go's provider.Error renders an error that came over the API; the
 * server's message holds no code of its own.
 */
export class TupperError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  constructor(code: ErrorCode, message: string, status: number) {
    super(`${code}: ${message}`);
    this.name = "TupperError";
    this.code = code;
    this.status = status;
  }
}

export interface ClientOptions {
  /** The server's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** An account API key (ak_…) or a sandbox token (sbt_…). */
  apiKey: string;
  /** The fetch to use; the global one by default. */
  fetch?: typeof fetch;
}

/**
 * A sandbox's network: everything, nothing, or a policy. A policy allows (and denies, which
 * wins) exact names, wildcards (*.github.com), addresses and CIDRs; with learn, everything
 * passes and is recorded, so egressLearned() can say which allow list the work needs.
 */
export type Network =
  | { mode: "all" }
  | { mode: "none" }
  | ({ mode: "allow" } & Pick<Exclude<Schemas["Network"], string>, "allow" | "deny" | "learn">);

/** One destination a sandbox with a policy asked for or reached. */
export type EgressEntry = Schemas["EgressEntry"];

/** A page of a sandbox's egress record; read on from cursor while more. */
export type EgressLog = Schemas["EgressLog"];

/** The allow list that permits what a sandbox reached, and the destinations refused. */
export type EgressLearned = Schemas["EgressLearned"];

/**
 * What a new sandbox is made of (POST /v1/sandboxes): key (get-or-create), labels, env,
 * secrets (a value { value, hosts } is a bound secret: the sandbox holds only a placeholder,
 * which the server's egress proxy replaces with the value in HTTP(S) requests to those hosts;
 * docs/network.md), template, runtime, network, ports, size, timeoutMs (lifetime),
 * idleTimeoutMs, from (a snapshot id), trackChanges and volumes (made with /v1/volumes).
 */
export interface CreateOptions extends Omit<Schemas["CreateSandbox"], "network"> {
  network?: Network;
}

export type SandboxInfo = Schemas["Sandbox"];

export interface RunOptions extends Omit<Schemas["Run"], "command"> {
  /** Called with each piece of output as it arrives (the request then streams). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  signal?: AbortSignal;
}

export type RunResult = Schemas["RunResult"];

/** Options of runCode: language or contextId, env for this run, timeoutMs; callbacks stream. */
export interface RunCodeOptions extends Omit<Schemas["CodeRequest"], "code"> {
  /** Called with output, each displayed value and the cell's error as they come (the request then streams). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: CodeResult) => void;
  onError?: (error: CodeError) => void;
  signal?: AbortSignal;
}

/** A cell's outcome: its results (the final value has isMainResult), output, error and count. */
export type Execution = Schemas["Execution"];
/** A value a cell displayed: each format it has (images base64), chart data of a matplotlib figure. */
export type CodeResult = Schemas["CodeResult"];
/** The error a cell raised: a result of runCode, not a thrown error. */
export type CodeError = Schemas["CodeError"];
export type CodeContext = Schemas["CodeContext"];

/** ready: ready when the port accepts connections (or answers HTTP at path), or a line matches log (RE2). */
export type StartProcessOptions = Omit<Schemas["StartProcess"], "command">;

export type ProcessInfo = Schemas["Process"];
export type LogPage = Schemas["LogPage"];
export type WaitResult = Schemas["WaitResult"];
export type FileInfo = Schemas["FileInfo"];
export type Match = Schemas["Match"];
export type Changes = Schemas["Changes"];

/** The options of a git call; token is used for this call only, never stored in the sandbox or shown in output. */
export type GitOptions = Omit<Schemas["Git"], "url">;

type Query = Record<string, string | number | boolean | undefined>;

interface Request {
  method: string;
  path: string;
  query?: Query;
  json?: unknown;
  body?: Uint8Array | string;
  accept?: string;
  signal?: AbortSignal;
}

/** Client talks to one server with one credential. */
export class Client {
  readonly url: string;
  private readonly apiKey: string;
  private readonly fetch: typeof fetch;

  constructor(opts: ClientOptions) {
    this.url = opts.url.replace(/\/+$/, "");
    this.apiKey = opts.apiKey;
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The Authorization header this client sends (the terminal's WebSocket sends it too). */
  authorization(): string {
    return `Bearer ${this.apiKey}`;
  }

  /** Sends one request and returns the response, or throws the API's error. */
  async request(req: Request): Promise<Response> {
    const u = new URL(this.url + req.path);
    for (const [k, v] of Object.entries(req.query ?? {})) {
      if (v !== undefined) u.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = { Authorization: this.authorization() };
    let body: BodyInit | undefined;
    if (req.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(req.json);
    } else if (req.body !== undefined) {
      headers["Content-Type"] = "application/octet-stream";
      body = req.body as BodyInit;
    }
    if (req.accept) headers["Accept"] = req.accept;
    const init: RequestInit = { method: req.method, headers };
    if (body !== undefined) init.body = body;
    if (req.signal) init.signal = req.signal;
    const res = await this.fetch(u, init);
    if (!res.ok) throw await errorOf(res);
    return res;
  }

  async json<T>(req: Request): Promise<T> {
    const res = await this.request(req);
    return (await res.json()) as T;
  }

  /** Creates a sandbox (or, with a key, returns the live one that has it). */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const info = await this.json<SandboxInfo>({ method: "POST", path: "/v1/sandboxes", json: opts });
    return new Sandbox(this, info);
  }

  /** Returns a handle on an existing sandbox. */
  async get(id: string): Promise<Sandbox> {
    const info = await this.json<SandboxInfo>({ method: "GET", path: `/v1/sandboxes/${enc(id)}` });
    return new Sandbox(this, info);
  }

  /**
   * Lists the sandboxes, optionally only those with a key or with labels ("k=v"). With `all`,
   * also the latest 100 that ended, each with `endedAt` and why it ended (`end`).
   */
  async list(filter: { key?: string; label?: string; all?: boolean } = {}): Promise<SandboxInfo[]> {
    const out = await this.json<Schemas["SandboxList"]>({ method: "GET", path: "/v1/sandboxes", query: filter });
    return out.sandboxes;
  }
}

/** Sandbox is one sandbox: commands, processes, files, git, changes and snapshots. */
export class Sandbox {
  readonly client: Client;
  readonly id: string;
  info: SandboxInfo;
  readonly files: Files;
  readonly git: Git;
  readonly processes: Processes;

  constructor(client: Client, info: SandboxInfo) {
    this.client = client;
    this.id = info.id;
    this.info = info;
    this.files = new Files(this);
    this.git = new Git(this);
    this.processes = new Processes(this);
  }

  /** path is the API path of a route below this sandbox. */
  path(sub: string): string {
    return `/v1/sandboxes/${enc(this.id)}${sub}`;
  }

  /** Refreshes and returns the sandbox's information. */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.client.json<SandboxInfo>({ method: "GET", path: this.path("") });
    return this.info;
  }

  /**
   * Runs a shell command (/bin/sh -c, cwd the template's working directory, else /workspace) and returns its result. With onStdout
   * or onStderr the output streams to them as it arrives. A non-zero exit is a result, not an
   * error.
   */
  async run(command: string, opts: RunOptions = {}): Promise<RunResult> {
    const { onStdout, onStderr, signal, ...rest } = opts;
    const json = { command, ...rest };
    if (!onStdout && !onStderr) {
      const req: Request = { method: "POST", path: this.path("/run"), json };
      if (signal) req.signal = signal;
      return this.client.json<RunResult>(req);
    }
    const req: Request = { method: "POST", path: this.path("/run"), json, accept: "application/x-ndjson" };
    if (signal) req.signal = signal;
    const res = await this.client.request(req);
    let result: RunResult | undefined;
    for await (const ev of ndjson(res)) {
      const { type, ...fields } = ev;
      if (type === "stdout") onStdout?.(String(fields["text"]));
      else if (type === "stderr") onStderr?.(String(fields["text"]));
      else if (type === "result") result = fields as unknown as RunResult;
      else if (type === "error") throw new TupperError(fields["code"] as ErrorCode, String(fields["message"]), res.status);
    }
    if (!result) throw new TupperError("internal", "the run stream ended without a result", res.status);
    return result;
  }

  /**
   * Runs a cell of Python (or language "javascript", or in contextId) in the sandbox's code
   * interpreter (a sandbox of the code-interpreter template); variables stay for the next
   * cell. An error the cell raised is the Execution's error; a run that cannot be made
   * (no such context, no code-interpreter server, past timeoutMs) throws.
   */
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    const { onStdout, onStderr, onResult, onError, signal, ...rest } = opts;
    const json = { code, ...rest };
    if (!onStdout && !onStderr && !onResult && !onError) {
      const req: Request = { method: "POST", path: this.path("/code"), json };
      if (signal) req.signal = signal;
      return this.client.json<Execution>(req);
    }
    const req: Request = { method: "POST", path: this.path("/code"), json, accept: "application/x-ndjson" };
    if (signal) req.signal = signal;
    const res = await this.client.request(req);
    const ex: Execution = { results: [], stdout: [], stderr: [], executionCount: 0 };
    for await (const ev of ndjson(res)) {
      const { type, ...fields } = ev;
      if (type === "stdout") {
        ex.stdout.push(String(fields["text"]));
        onStdout?.(String(fields["text"]));
      } else if (type === "stderr") {
        ex.stderr.push(String(fields["text"]));
        onStderr?.(String(fields["text"]));
      } else if (type === "result") {
        ex.results.push(fields as unknown as CodeResult);
        onResult?.(fields as unknown as CodeResult);
      } else if (type === "error") {
        ex.error = fields as unknown as CodeError;
        onError?.(ex.error);
      } else if (type === "end") {
        ex.executionCount = Number(fields["executionCount"]);
        return ex;
      } else if (type === "failure") throw new TupperError(fields["code"] as ErrorCode, String(fields["message"]), res.status);
    }
    throw new TupperError("internal", "the code stream ended without its end", res.status);
  }

  /** The sandbox's code contexts, the default ones included. */
  async codeContexts(): Promise<CodeContext[]> {
    const list = await this.client.json<Schemas["CodeContextList"]>({ method: "GET", path: this.path("/code/contexts") });
    return list.contexts;
  }

  /** Starts a new code context (a kernel of its own) for runCode's contextId. */
  async createCodeContext(opts: Schemas["CodeContextRequest"] = {}): Promise<CodeContext> {
    return this.client.json<CodeContext>({ method: "POST", path: this.path("/code/contexts"), json: opts });
  }

  /** Gives a code context a new kernel: its variables are gone. */
  async restartCodeContext(id: string): Promise<void> {
    await this.client.request({ method: "POST", path: this.path(`/code/contexts/${enc(id)}/restart`) });
  }

  /** Stops a code context's kernel and forgets it. */
  async removeCodeContext(id: string): Promise<void> {
    await this.client.request({ method: "DELETE", path: this.path(`/code/contexts/${enc(id)}`) });
  }

  /** Destroys the sandbox and everything in it. */
  async destroy(): Promise<void> {
    await this.client.request({ method: "DELETE", path: this.path("") });
  }

  /**
   * Pauses the sandbox. By default its memory is kept: its processes continue on resume.
   * With `{ keepMemory: false }` only its files are kept: its processes end, its memory is
   * released, and resume starts it again from its files (where the provider declares
   * "pause-cold"; otherwise unsupported, before anything changes).
   */
  async pause(opts: Schemas["PauseRequest"] = {}): Promise<void> {
    const req: Request = { method: "POST", path: this.path("/pause") };
    if (opts.keepMemory === false) req.json = { keepMemory: false };
    await this.client.request(req);
  }

  async resume(): Promise<void> {
    await this.client.request({ method: "POST", path: this.path("/resume") });
  }

  /**
   * Changes the sandbox's network while it runs (a sandbox created with a policy: its lists,
   * or none); connections to destinations no longer allowed are cut.
   */
  async setNetwork(network: Network): Promise<void> {
    await this.client.request({ method: "PUT", path: this.path("/network"), json: network });
  }

  /** The sandbox's network now (after any setNetwork): its mode and, with a policy, its lists. */
  async network(): Promise<Network> {
    return this.client.json<Network>({ method: "GET", path: this.path("/network") });
  }

  /** Reads the sandbox's egress record from after (the start when omitted), a page at a time. */
  async egress(opts: { after?: string } = {}): Promise<EgressLog> {
    return this.client.json<EgressLog>({ method: "GET", path: this.path("/egress"), query: { after: opts.after || undefined } });
  }

  /**
   * Sums up the whole egress record: the allow list that permits what the sandbox reached
   * (learn mode's output) and the destinations its policy refused, first refused first.
   */
  async egressLearned(): Promise<EgressLearned> {
    return this.client.json<EgressLearned>({ method: "GET", path: this.path("/egress/learned") });
  }

  /** Sets the sandbox's lifetime from now. */
  async setTimeout(timeoutMs: number): Promise<void> {
    const json: Schemas["Timeout"] = { timeoutMs };
    await this.client.request({ method: "POST", path: this.path("/timeout"), json });
  }

  /** Saves the sandbox's files as a snapshot; create({ from: id }) starts a sandbox from it. */
  async snapshot(opts: Pick<Schemas["SnapshotRequest"], "expiresInMs"> = {}): Promise<string> {
    const out = await this.client.json<Schemas["Snapshot"]>({ method: "POST", path: this.path("/snapshot"), json: opts });
    return out.id;
  }

  /**
   * Copies the running sandbox into n new ones (1 when omitted), each with its own token:
   * memory and processes included where the sandbox can take a full snapshot (runsc), its
   * files elsewhere. The original keeps running; each copy is independent.
   */
  async fork(opts: Omit<Schemas["Fork"], "network"> = {}): Promise<Sandbox[]> {
    const out = await this.client.json<Schemas["SandboxList"]>({ method: "POST", path: this.path("/fork"), json: opts });
    return out.sandboxes.map((info) => new Sandbox(this.client, info));
  }

  /** Sets a named mark for changes(since). */
  async mark(name?: string): Promise<string> {
    const out = await this.client.json<Schemas["Marked"]>({ method: "POST", path: this.path("/files/mark"), json: name ? { name } : {} });
    return out.name;
  }

  /** What changed under /workspace since creation, or since a mark. */
  async changes(since?: string): Promise<Changes> {
    return this.client.json<Changes>({ method: "GET", path: this.path("/files/changes"), query: { since } });
  }

  /**
   * Opens an interactive terminal: a login shell on a PTY in the sandbox, over a WebSocket
   * (see Terminal). It resolves once the terminal is open; a bad size, an unknown sandbox or a
   * provider without terminals rejects with the API's error.
   */
  async terminal(opts: TerminalOptions = {}): Promise<Terminal> {
    return openTerminal(this, opts);
  }

  /** Exposes a port and returns the URL it is reachable at. */
  async expose(port: number): Promise<string> {
    const out = await this.client.json<Schemas["Port"]>({ method: "POST", path: this.path(`/ports/${port}/expose`), json: {} });
    return out.url;
  }
}

/** Files are the sandbox's files; relative paths are below /workspace. */
export class Files {
  constructor(private readonly box: Sandbox) {}

  /** Reads a text file (up to 16 MiB). */
  async read(path: string): Promise<string> {
    const out = await this.box.client.json<Schemas["FileContent"]>({ method: "POST", path: this.box.path("/files/read"), json: { path } });
    return out.encoding === "base64" ? new TextDecoder().decode(fromBase64(out.content)) : out.content;
  }

  /** Reads a file's bytes. */
  async readBytes(path: string, opts: { offset?: number; length?: number } = {}): Promise<Uint8Array> {
    const res = await this.box.client.request({ method: "GET", path: this.box.path("/files/content"), query: { path, ...opts } });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** Creates or replaces a file, making its parent directories. mode is octal, e.g. "0755". */
  async write(path: string, content: string | Uint8Array, opts: Pick<Schemas["WriteFile"], "mode"> = {}): Promise<void> {
    if (typeof content === "string") {
      await this.box.client.request({ method: "POST", path: this.box.path("/files/write"), json: { path, content, ...opts } });
      return;
    }
    await this.box.client.request({ method: "PUT", path: this.box.path("/files/content"), query: { path, mode: opts.mode }, body: content });
  }

  /** Replaces the one occurrence of find; errors edit_not_found or edit_not_unique otherwise. */
  async edit(path: string, find: string, replace: string): Promise<void> {
    await this.box.client.request({ method: "POST", path: this.box.path("/files/edit"), json: { path, find, replace } });
  }

  async list(path = "", opts: { recursive?: boolean; glob?: string } = {}): Promise<FileInfo[]> {
    const out = await this.box.client.json<Schemas["FileList"]>({ method: "GET", path: this.box.path("/files/list"), query: { path, ...opts } });
    return out.entries ?? [];
  }

  async stat(path: string): Promise<FileInfo> {
    return this.box.client.json<FileInfo>({ method: "GET", path: this.box.path("/files/stat"), query: { path } });
  }

  async exists(path: string): Promise<boolean> {
    const out = await this.box.client.json<Schemas["Exists"]>({ method: "GET", path: this.box.path("/files/exists"), query: { path } });
    return out.exists;
  }

  async remove(path: string, opts: Omit<Schemas["Remove"], "path"> = {}): Promise<void> {
    await this.box.client.request({ method: "POST", path: this.box.path("/files/remove"), json: { path, ...opts } });
  }

  async mkdir(path: string): Promise<void> {
    await this.box.client.request({ method: "POST", path: this.box.path("/files/mkdir"), json: { path } });
  }

  async rename(from: string, to: string): Promise<void> {
    await this.box.client.request({ method: "POST", path: this.box.path("/files/rename"), json: { from, to } });
  }

  /** Lines containing a literal string, below path. */
  async search(query: string, opts: Omit<Schemas["Search"], "query"> = {}): Promise<Match[]> {
    const out = await this.box.client.json<Schemas["Matches"]>({ method: "POST", path: this.box.path("/files/search"), json: { query, ...opts } });
    return out.matches ?? [];
  }
}

/** Git runs git in the sandbox; tokens are used for one call and never kept. */
export class Git {
  constructor(private readonly box: Sandbox) {}
  private call(op: string, opts: Schemas["Git"]): Promise<RunResult> {
    return this.box.client.json<RunResult>({ method: "POST", path: this.box.path(`/git/${op}`), json: opts });
  }
  clone(url: string, opts: GitOptions = {}) { return this.call("clone", { url, ...opts }); }
  status(opts: GitOptions = {}) { return this.call("status", opts); }
  diff(opts: GitOptions = {}) { return this.call("diff", opts); }
  commit(message: string, opts: GitOptions = {}) { return this.call("commit", { message, ...opts }); }
  push(opts: GitOptions = {}) { return this.call("push", opts); }
  checkout(branch: string, opts: GitOptions = {}) { return this.call("checkout", { branch, ...opts }); }
}

/** Processes are the sandbox's named background processes. */
export class Processes {
  constructor(private readonly box: Sandbox) {}
  private p(name: string, sub = ""): string {
    return this.box.path(`/processes/${enc(name)}${sub}`);
  }

  /** Starts a background command and returns once it is ready (see opts.ready). */
  async start(command: string, opts: StartProcessOptions = {}): Promise<ProcessInfo> {
    return this.box.client.json<ProcessInfo>({ method: "POST", path: this.box.path("/processes"), json: { command, ...opts } });
  }

  async list(): Promise<ProcessInfo[]> {
    const out = await this.box.client.json<Schemas["ProcessList"]>({ method: "GET", path: this.box.path("/processes") });
    return out.processes ?? [];
  }

  async get(name: string): Promise<ProcessInfo> {
    return this.box.client.json<ProcessInfo>({ method: "GET", path: this.p(name) });
  }

  /** A page of output after cursor; pass nextCursor back to read only what is new. */
  async logs(name: string, opts: { after?: string; maxBytes?: number } = {}): Promise<LogPage> {
    return this.box.client.json<LogPage>({ method: "GET", path: this.p(name, "/logs"), query: opts });
  }

  /** Streams the output line by line until the process exits. */
  async *lines(name: string, opts: { after?: string; signal?: AbortSignal } = {}): AsyncGenerator<{ text: string; stream?: string; cursor?: string }> {
    const req: Request = { method: "GET", path: this.p(name, "/lines"), query: { after: opts.after }, accept: "application/x-ndjson" };
    if (opts.signal) req.signal = opts.signal;
    const res = await this.box.client.request(req);
    for await (const ev of ndjson(res)) {
      if (ev["type"] === "error") throw new TupperError(ev["code"] as ErrorCode, String(ev["message"]), res.status);
      if (typeof ev["text"] === "string") yield ev as { text: string; stream?: string; cursor?: string };
    }
  }

  async stop(name: string, opts: Schemas["Stop"] = {}): Promise<void> {
    await this.box.client.request({ method: "POST", path: this.p(name, "/stop"), json: opts });
  }

  async restart(name: string): Promise<ProcessInfo> {
    return this.box.client.json<ProcessInfo>({ method: "POST", path: this.p(name, "/restart") });
  }

  /** Waits for the process to exit, or until timeoutMs (then status is "running"). */
  async wait(name: string, opts: Schemas["Wait"] = {}): Promise<WaitResult> {
    return this.box.client.json<WaitResult>({ method: "POST", path: this.p(name, "/wait"), json: opts });
  }
}

async function errorOf(res: Response): Promise<TupperError> {
  const text = await res.text();
  try {
    const e = JSON.parse(text) as Partial<Schemas["Error"]>;
    if (e.code) return new TupperError(e.code, e.message ?? "", res.status);
  } catch {
    // not the API's JSON error: described below
  }
  return new TupperError(res.status >= 500 ? "internal" : "invalid_argument", `HTTP ${res.status}: ${text.slice(0, 200)}`, res.status);
}

/** The objects of an application/x-ndjson body, one per line. */
async function* ndjson(res: Response): AsyncGenerator<Record<string, unknown>> {
  if (!res.body) return;
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (value) buf += dec.decode(value, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line) as Record<string, unknown>;
    }
    if (done) break;
  }
  if (buf.trim()) yield JSON.parse(buf) as Record<string, unknown>;
}

function enc(s: string): string {
  return encodeURIComponent(s);
}

function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
