// @tupper/ai: the sandbox tools for the AI SDK. Their names, descriptions and argument
// schemas are the Go tools package's (tools.json is its export, checked by test/js), so an
// agent sees the same tools through MCP, Go and here.
import { jsonSchema, tool, type Tool } from "ai";
import { Client, Sandbox, TupperError, type CreateOptions, type SandboxInfo } from "@tupper/sdk";
import definitions from "./tools.json" with { type: "json" };

/** A tool definition as the Go tools package exports it. */
export interface Definition {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  read_only: boolean;
  destructive: boolean;
}

/** The tool definitions, in the Go package's order. */
export const toolDefinitions: readonly Definition[] = definitions as Definition[];

export interface SandboxToolsOptions {
  client: Client;
  /** The session's default sandbox; created on first use (with create) when absent. */
  sandbox?: Sandbox;
  /** Options of every sandbox the tools create. */
  create?: CreateOptions;
}

type Args = Record<string, unknown>;
type Handler = (s: Session, a: Args) => Promise<string>;

/** Session holds the sandboxes one set of tools works on. */
class Session {
  private default?: Promise<Sandbox>;
  private readonly boxes = new Map<string, Sandbox>();
  constructor(readonly opts: SandboxToolsOptions) {
    if (opts.sandbox) {
      this.default = Promise.resolve(opts.sandbox);
      this.boxes.set(opts.sandbox.id, opts.sandbox);
    }
  }
  async box(a: Args): Promise<Sandbox> {
    const id = a["sandbox_id"];
    if (typeof id === "string" && id) {
      const b = this.boxes.get(id) ?? (await this.opts.client.get(id));
      this.boxes.set(id, b);
      return b;
    }
    this.default ??= this.create({}).catch((e: unknown) => {
      this.default = undefined;
      throw e;
    });
    return this.default;
  }
  async fork(b: Sandbox, n: number): Promise<Sandbox[]> {
    const kids = await b.fork({ n });
    for (const k of kids) this.boxes.set(k.id, k);
    return kids;
  }
  async create(extra: CreateOptions): Promise<Sandbox> {
    const b = await this.opts.client.create({ ...this.opts.create, ...extra });
    this.boxes.set(b.id, b);
    return b;
  }
  async destroy(id: string): Promise<void> {
    const b = this.boxes.get(id) ?? (await this.opts.client.get(id));
    await b.destroy();
    this.boxes.delete(id);
    if (this.default && (await this.default.catch(() => undefined))?.id === id) this.default = undefined;
  }
  async list(): Promise<{ info: SandboxInfo; isDefault: boolean }[]> {
    const def = this.default ? (await this.default.catch(() => undefined))?.id : undefined;
    return Promise.all([...this.boxes.values()].map(async (b) => ({ info: await b.refresh(), isDefault: b.id === def })));
  }
}

const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === "number" ? v : undefined);
const bool = (v: unknown): boolean | undefined => (typeof v === "boolean" ? v : undefined);

function runText(r: { exitCode: number; stdout: string; stderr: string; timedOut?: boolean }): string {
  let out = `exit code: ${r.exitCode}${r.timedOut ? " (timed out)" : ""}\n`;
  if (r.stdout) out += `stdout:\n${r.stdout}\n`;
  if (r.stderr) out += `stderr:\n${r.stderr}\n`;
  return out;
}

const handlers: Record<string, Handler> = {
  async create_sandbox(s, a) {
    const opts: CreateOptions = {};
    const env = a["env"];
    if (env && typeof env === "object") opts.env = env as Record<string, string>;
    const from = str(a["from_snapshot"]);
    if (from) opts.from = from;
    const tmpl = str(a["template"]);
    if (tmpl) opts.template = tmpl;
    const vols = a["volumes"];
    if (Array.isArray(vols) && vols.length > 0) {
      // NAME:/path or NAME:/path:ro, as the Go tools; the server checks names and paths.
      opts.volumes = vols.map((v) => {
        const [name, path, mode, ...rest] = String(v).split(":");
        if (!name || !path || rest.length > 0 || (mode !== undefined && mode !== "ro" && mode !== "rw")) throw new Error(`@tupper/ai: volume ${JSON.stringify(v)}: want NAME:/path or NAME:/path:ro`);
        return { name, path, ...(mode === "ro" && { readOnly: true }) };
      });
    }
    const net = str(a["network"]);
    if (net === "all" || net === "none") opts.network = { mode: net };
    const list = (v: unknown): string[] | undefined => (Array.isArray(v) && v.length > 0 ? v.map(String) : undefined);
    const allow = list(a["allow"]), deny = list(a["deny"]);
    if (allow || deny) {
      // A policy narrows a session whose network is all; it never widens one set to none
      // or to a policy of its own (as the Go tools).
      const base = s.opts.create?.network;
      if (base && base.mode !== "all") throw new Error(`@tupper/ai: this session's sandboxes have network ${base.mode}; allow and deny cannot change it`);
      opts.network = { mode: "allow", ...(allow && { allow }), ...(deny && { deny }) };
    }
    const b = await s.create(opts);
    return `created sandbox ${b.id}`;
  },
  async list_sandboxes(s) {
    const all = await s.list();
    if (all.length === 0) return "no sandboxes yet; the first tool call creates the default one";
    return all.map(({ info, isDefault }) => `${info.id} ${info.state} created ${info.createdAt}${isDefault ? " (default)" : ""}`).join("\n");
  },
  async destroy_sandbox(s, a) {
    const id = String(a["sandbox_id"]);
    await s.destroy(id);
    return `destroyed sandbox ${id}`;
  },
  async pause_sandbox(s, a) {
    const b = await s.box(a);
    const keep = a["keep_memory"] !== false;
    await b.pause({ keepMemory: keep });
    return keep
      ? `paused sandbox ${b.id} with its memory: its processes continue after resume_sandbox`
      : `paused sandbox ${b.id} keeping only its files: its processes ended, and resume_sandbox starts it again`;
  },
  async resume_sandbox(s, a) {
    const b = await s.box(a);
    await b.resume();
    return `resumed sandbox ${b.id}`;
  },
  async run_command(s, a) {
    const b = await s.box(a);
    const opts: { cwd?: string; timeoutMs?: number } = {};
    const cwd = str(a["cwd"]);
    if (cwd) opts.cwd = cwd;
    const t = num(a["timeout_ms"]);
    if (t) opts.timeoutMs = t;
    return runText(await b.run(String(a["command"]), opts));
  },
  async run_code(s, a) {
    const b = await s.box(a);
    const opts: { language?: string; timeoutMs?: number } = {};
    const lang = str(a["language"]);
    if (lang && lang !== "python") opts.language = lang;
    opts.timeoutMs = num(a["timeout_ms"]) ?? 120000;
    let ex;
    try {
      ex = await b.runCode(String(a["code"]), opts);
    } catch (e) {
      if (e instanceof TupperError && (e.code === "unavailable" || e.code === "unsupported"))
        throw new Error(`sandbox ${b.id} has no code interpreter: create one with create_sandbox and template code-interpreter, then pass its sandbox_id (${e.message})`);
      throw e;
    }
    let out = "";
    if (ex.stdout.length) out += `stdout:\n${ex.stdout.join("")}\n`;
    if (ex.stderr.length) out += `stderr:\n${ex.stderr.join("")}\n`;
    const images = ex.results.filter((r) => r.png || r.jpeg).length;
    for (const r of ex.results) if (r.text) out += `${r.isMainResult ? "result" : "display"}:\n${r.text}\n`;
    if (images) out += `${images} image(s) made (not shown here)\n`;
    if (ex.error) out += `error: ${ex.error.name}: ${ex.error.value}\n${ex.error.traceback}\n`;
    return out || "(no output)";
  },
  async start_process(s, a) {
    const b = await s.box(a);
    const opts: Parameters<Sandbox["processes"]["start"]>[1] = {};
    const name = str(a["name"]), cwd = str(a["cwd"]), log = str(a["ready_log"]);
    const port = num(a["ready_port"]), rt = num(a["ready_timeout_ms"]);
    if (name) opts.name = name;
    if (cwd) opts.cwd = cwd;
    if (port) opts.ready = { port };
    else if (log) opts.ready = { log };
    if (rt) opts.readyTimeoutMs = rt;
    const p = await b.processes.start(String(a["command"]), opts);
    return `process ${p.name} ${p.status}${p.pid ? ` (pid ${p.pid})` : ""}${p.url ? ` at ${p.url}` : ""}`;
  },
  async process_logs(s, a) {
    const b = await s.box(a);
    const name = String(a["name"]);
    const opts: { after?: string; maxBytes?: number } = {};
    const c = str(a["cursor"]), m = num(a["max_bytes"]);
    if (c) opts.after = c;
    opts.maxBytes = m ?? 16384;
    const [page, p] = await Promise.all([b.processes.logs(name, opts), b.processes.get(name)]);
    return `status: ${p.status}\ncursor: ${page.nextCursor}${page.truncated ? " (more to read)" : ""}\n${page.text}`;
  },
  async stop_process(s, a) {
    const b = await s.box(a);
    await b.processes.stop(String(a["name"]), { graceMs: 5000 });
    return `stopped ${String(a["name"])}`;
  },
  async read_file(s, a) {
    const b = await s.box(a);
    let text = await b.files.read(String(a["path"]));
    const start = num(a["start_line"]), end = num(a["end_line"]);
    if (start || end) {
      const lines = text.split("\n");
      text = lines.slice((start ?? 1) - 1, end ?? lines.length).join("\n");
    }
    return text.length > 65536 ? text.slice(0, 65536) + "\n[cut at 64 KiB; read a range of lines]" : text;
  },
  async write_file(s, a) {
    const b = await s.box(a);
    await b.files.write(String(a["path"]), String(a["content"]));
    return `wrote ${String(a["path"])}`;
  },
  async edit_file(s, a) {
    const b = await s.box(a);
    await b.files.edit(String(a["path"]), String(a["find"]), String(a["replace"] ?? ""));
    return `edited ${String(a["path"])}`;
  },
  async list_files(s, a) {
    const b = await s.box(a);
    const opts: { recursive?: boolean; glob?: string } = {};
    const r = bool(a["recursive"]), g = str(a["glob"]);
    if (r !== undefined) opts.recursive = r;
    if (g) opts.glob = g;
    const es = await b.files.list(str(a["path"]) ?? "", opts);
    return es.map((e) => `${e.type} ${e.size} ${e.path}${e.type === "dir" ? "/" : ""}`).join("\n") || "(empty)";
  },
  async search_files(s, a) {
    const b = await s.box(a);
    const opts: { path?: string; glob?: string; maxMatches?: number } = {};
    const p = str(a["path"]), g = str(a["glob"]), m = num(a["max_matches"]);
    if (p) opts.path = p;
    if (g) opts.glob = g;
    if (m) opts.maxMatches = m;
    const ms = await b.files.search(String(a["query"]), opts);
    return ms.map((m) => `${m.path}:${m.line}: ${m.text}`).join("\n") || "no matches";
  },
  async file_changes(s, a) {
    const c = await (await s.box(a)).changes();
    const list = (label: string, xs: string[]) => (xs.length ? `${label}: ${xs.join(", ")}\n` : "");
    return (list("added", c.added) + list("modified", c.modified) + list("removed", c.removed) + c.patch) || "no changes";
  },
  async git_clone(s, a) {
    const b = await s.box(a);
    const opts: { dir?: string; branch?: string; depth?: number } = {};
    const d = str(a["dir"]), br = str(a["branch"]), dp = num(a["depth"]);
    if (d) opts.dir = d;
    if (br) opts.branch = br;
    if (dp) opts.depth = dp;
    return runText(await b.git.clone(String(a["url"]), opts));
  },
  async git_status(s, a) {
    const d = str(a["dir"]);
    return runText(await (await s.box(a)).git.status(d ? { dir: d } : {}));
  },
  async git_diff(s, a) {
    const d = str(a["dir"]);
    return runText(await (await s.box(a)).git.diff(d ? { dir: d } : {}));
  },
  async git_commit(s, a) {
    const d = str(a["dir"]);
    const opts: { dir?: string; all: boolean } = { all: bool(a["all"]) ?? true };
    if (d) opts.dir = d;
    return runText(await (await s.box(a)).git.commit(String(a["message"]), opts));
  },
  async fork(s, a) {
    const b = await s.box(a);
    const kids = await s.fork(b, num(a["n"]) ?? 1);
    return `forked ${b.id} into ${kids.map((k) => k.id).join(", ")}; pass one as sandbox_id to use it`;
  },
  async snapshot(s, a) {
    return `snapshot ${await (await s.box(a)).snapshot()}`;
  },
  async expose_port(s, a) {
    return (await s.box(a)).expose(Number(a["port"]));
  },
};

/**
 * Returns the sandbox tools for generateText/streamText, keyed by name. Every tool works on
 * the session's default sandbox unless given a sandbox_id.
 */
export function sandboxTools(opts: SandboxToolsOptions): Record<string, Tool> {
  const s = new Session(opts);
  const out: Record<string, Tool> = {};
  for (const d of toolDefinitions) {
    const h = handlers[d.name];
    if (!h) throw new Error(`@tupper/ai: no handler for tool ${d.name}`);
    out[d.name] = tool({
      description: d.description,
      inputSchema: jsonSchema<Args>(d.input_schema as Parameters<typeof jsonSchema>[0]),
      execute: (args: Args) => h(s, args),
    });
  }
  return out;
}
