// @tupper/mastra: a Tupper sandbox as a Mastra workspace (@mastra/core/workspace): TupperSandbox
// is the workspace's sandbox (commands, file uploads, port URLs) and TupperFilesystem its
// filesystem, so an agent's workspace tools (mastra_workspace_execute_command, read_file,
// write_file, edit_file, list_files, grep, …) all act on the same Tupper sandbox.
import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  IsDirectoryError,
  MastraFilesystem,
  MastraSandbox,
  NotDirectoryError,
  PermissionError,
  ProcessHandle,
  SandboxNotReadyError,
  SandboxProcessManager,
  SandboxUnsupportedFeatureError,
  StaleFileError,
  validateSandboxFileMode,
  type CommandResult,
  type CopyOptions,
  type ExecuteCommandOptions,
  type FileContent,
  type FileEntry,
  type FileStat,
  type FilesystemInfo,
  type ListOptions,
  type MastraFilesystemOptions,
  type MastraSandboxOptions,
  type ProcessInfo,
  type ProviderStatus,
  type ReadOptions,
  type RemoveOptions,
  type SandboxFileInput,
  type SandboxInfo,
  type SandboxNetworking,
  type SandboxStartResult,
  type SpawnProcessOptions,
  type WriteFilesOptions,
  type WriteOptions,
} from "@mastra/core/workspace";
import { TupperError, type Client, type CreateOptions, type FileInfo, type RunOptions, type Sandbox } from "@tupper/sdk";

export interface TupperSandboxOptions extends MastraSandboxOptions {
  /** The client that creates the sandbox on start; not needed with `sandbox`. */
  client?: Client;
  /**
   * How start creates the sandbox. With `create.key`, start is get-or-create: it connects to
   * the live sandbox with that key, or creates one.
   */
  create?: CreateOptions;
  /** An existing sandbox to use instead of creating one; destroy() still destroys it. */
  sandbox?: Sandbox;
  /** Mastra's id for this sandbox: by default `create.key`, the sandbox's id, or a new one. */
  id?: string;
  /** Per-command timeout in milliseconds when the caller gives none (the server's default is 120 s). */
  timeoutMs?: number;
}

/**
 * TupperSandbox runs a Mastra workspace's commands in one Tupper sandbox. start() creates it
 * (or, with `create.key`, finds the live one with that key), stop() pauses it where the
 * provider can pause, destroy() destroys it. Commands run with /bin/sh -c in the working
 * directory (/workspace unless `workingDirectory` says otherwise); background commands are
 * the sandbox's named processes (see TupperProcessManager).
 */
export class TupperSandbox extends MastraSandbox {
  readonly id: string;
  readonly name = "TupperSandbox";
  readonly provider = "tupper";
  status: ProviderStatus = "pending";
  readonly networking: SandboxNetworking;
  private readonly client: Client | undefined;
  private readonly createOptions: CreateOptions;
  private readonly timeoutMs: number | undefined;
  private box: Sandbox | undefined;

  constructor(opts: TupperSandboxOptions) {
    const { client, create, sandbox, id, timeoutMs, ...base } = opts;
    super({ name: "TupperSandbox", processes: new TupperProcessManager(), ...base });
    if (!client && !sandbox) throw new TupperError("invalid_argument", "TupperSandbox needs a client or a sandbox", 0);
    this.client = client;
    this.createOptions = create ?? {};
    this.box = sandbox;
    this.timeoutMs = timeoutMs;
    this.id = id ?? create?.key ?? sandbox?.id ?? `tupper-${Math.random().toString(36).slice(2, 10)}`;
    this.networking = { getPortUrl: (port) => this.portUrl(port) };
  }

  /** The Tupper sandbox; throws before start. */
  get sandbox(): Sandbox {
    if (!this.box) throw new SandboxNotReadyError(this.id);
    return this.box;
  }

  /** Creates the sandbox (get-or-create with a key), or resumes the one it has. */
  async start(): Promise<SandboxStartResult> {
    if (this.box) {
      const info = await this.box.refresh();
      if (info.state === "paused") await this.box.resume();
      return { outcome: "connected" };
    }
    const box = await this.client!.create(this.createOptions);
    this.box = box;
    return { outcome: box.info.created === false ? "connected" : "created" };
  }

  /** Pauses the sandbox when its provider can pause; otherwise it keeps running. */
  async stop(): Promise<void> {
    if (this.box?.info.capabilities?.includes("pause")) await this.box.pause();
  }

  /** Destroys the sandbox and everything in it. */
  async destroy(): Promise<void> {
    if (!this.box) return;
    try {
      await this.box.destroy();
    } catch (e) {
      if (!(e instanceof TupperError && e.code === "not_found")) throw e;
    }
  }

  /**
   * Runs command (with args shell-quoted after it) and returns its result; a non-zero exit is
   * a result. The sandbox's environment overlay (setEnv) and options.env are set for it.
   */
  async executeCommand(command: string, args: string[] = [], options: ExecuteCommandOptions = {}): Promise<CommandResult> {
    await this.ensureRunning();
    const line = [command, ...args.map(shellQuote)].join(" ");
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.getEnv(), ...(options.env ?? {}) })) {
      if (v !== undefined) env[k] = v;
    }
    const run: RunOptions = { env };
    const cwd = options.cwd ?? this.workingDirectory;
    if (cwd) run.cwd = cwd;
    const timeout = options.timeout ?? this.timeoutMs;
    if (timeout) run.timeoutMs = timeout;
    if (options.onStdout) run.onStdout = options.onStdout;
    if (options.onStderr) run.onStderr = options.onStderr;
    if (options.abortSignal) run.signal = options.abortSignal;
    const r = await this.sandbox.run(line, run);
    return {
      success: r.exitCode === 0 && !r.timedOut,
      exitCode: r.exitCode,
      stdout: r.stdout,
      stderr: r.stderr,
      executionTimeMs: r.durationMs,
      timedOut: r.timedOut,
      killed: r.aborted ?? false,
      command,
      args,
    };
  }

  /** Writes files into the sandbox, making their directories; mode is permission bits. */
  async writeFiles(files: SandboxFileInput[], options: WriteFilesOptions = {}): Promise<void> {
    for (const f of files) if (f.mode !== undefined) validateSandboxFileMode(f.mode);
    await this.ensureRunning();
    for (const f of files) {
      options.abortSignal?.throwIfAborted();
      const content = typeof f.content === "string" ? f.content : new Uint8Array(f.content);
      await this.sandbox.files.write(f.path, content, f.mode === undefined ? {} : { mode: f.mode.toString(8).padStart(4, "0") });
    }
  }

  getInstructions(): string {
    return `Commands run in a Tupper sandbox (Linux) with /bin/sh -c. Working directory: "${this.workingDirectory ?? "/workspace"}"; relative file paths are below /workspace.`;
  }

  async getInfo(): Promise<SandboxInfo> {
    const info: SandboxInfo = { id: this.id, name: this.name, provider: this.provider, status: this.status, createdAt: new Date() };
    if (this.box) {
      const i = this.box.info;
      info.createdAt = new Date(i.createdAt);
      if (i.deadline) info.timeoutAt = new Date(i.deadline);
      info.metadata = { sandboxId: i.id, state: i.state, labels: i.labels, template: i.template, runtime: i.runtime, capabilities: i.capabilities };
    }
    return info;
  }

  private async portUrl(port: number): Promise<string | null> {
    if (!this.box || this.status !== "running") return null;
    return this.box.expose(port);
  }
}

/**
 * TupperProcessManager runs a workspace's background commands as the sandbox's named
 * processes (the server's /processes): a handle's pid is the process's name. Their output is
 * followed line by line; they have no stdin.
 */
export class TupperProcessManager extends SandboxProcessManager<TupperSandbox> {
  private next = 0;

  async spawn(command: string, options: SpawnProcessOptions = {}): Promise<ProcessHandle> {
    const box = this.sandbox.sandbox;
    const name = `mastra-${Date.now().toString(36)}-${this.next++}`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.env, ...(options.env ?? {}) })) if (v !== undefined) env[k] = v;
    const cwd = options.cwd ?? this.sandbox.workingDirectory;
    await box.processes.start(command, cwd ? { name, env, cwd } : { name, env });
    const handle = new TupperProcessHandle(box, name, options);
    this._tracked.set(name, handle);
    return handle;
  }

  async list(): Promise<ProcessInfo[]> {
    return [...this._tracked.values()].map((h) => {
      const info: ProcessInfo = { pid: h.pid, running: h.exitCode === undefined };
      if (h.command !== undefined) info.command = h.command;
      if (h.exitCode !== undefined) info.exitCode = h.exitCode;
      return info;
    });
  }
}

/** A background process in the sandbox; see TupperProcessManager. */
class TupperProcessHandle extends ProcessHandle {
  readonly pid: string;
  exitCode: number | undefined = undefined;
  private readonly box: Sandbox;
  private readonly started = Date.now();
  /** Settles (never rejects) once the output has been passed on. */
  private readonly following: Promise<void>;

  constructor(box: Sandbox, name: string, options: SpawnProcessOptions) {
    super(options);
    this.box = box;
    this.pid = name;
    this.following = this.follow();
    if (options.timeout) {
      const t = setTimeout(() => void this.kill().catch(() => {}), options.timeout);
      (t as { unref?: () => void }).unref?.();
      void this.following.finally(() => clearTimeout(t));
    }
  }

  /**
   * Passes the output on, line by line, until the process exits. A failure to follow (the
   * sandbox went away) ends the output, noted on stderr, rather than rejecting where no one
   * may be waiting.
   */
  private async follow(): Promise<void> {
    try {
      for await (const l of this.box.processes.lines(this.pid)) {
        if (l.stream === "stderr") this.emitStderr(l.text + "\n");
        else this.emitStdout(l.text + "\n");
      }
    } catch (e) {
      this.emitStderr(`[following the output of ${this.pid} failed: ${e instanceof Error ? e.message : String(e)}]\n`);
    }
  }

  async kill(): Promise<boolean> {
    try {
      await this.box.processes.stop(this.pid);
      return true;
    } catch (e) {
      if (e instanceof TupperError && e.code === "not_found") return false;
      throw e;
    }
  }

  async sendStdin(): Promise<void> {
    throw new SandboxUnsupportedFeatureError("a Tupper sandbox's background processes have no stdin");
  }

  async wait(): Promise<CommandResult> {
    for (;;) {
      const w = await this.box.processes.wait(this.pid, { timeoutMs: 60_000 });
      if (w.status === "exited") {
        this.exitCode = w.exitCode ?? -1;
        break;
      }
    }
    await this.following;
    return {
      success: this.exitCode === 0,
      exitCode: this.exitCode,
      stdout: this.stdout,
      stderr: this.stderr,
      executionTimeMs: Date.now() - this.started,
    };
  }
}

export interface TupperFilesystemOptions extends MastraFilesystemOptions {
  /** The sandbox whose files these are: a TupperSandbox (started on first use) or a Sandbox. */
  sandbox: TupperSandbox | Sandbox;
  id?: string;
  readOnly?: boolean;
}

/**
 * TupperFilesystem is a Tupper sandbox's files as a Mastra workspace filesystem. Paths are the
 * sandbox's: absolute as they are, relative below /workspace, the directory commands run in.
 */
export class TupperFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name = "TupperFilesystem";
  readonly provider = "tupper";
  readonly readOnly: boolean;
  status: ProviderStatus = "pending";
  private readonly source: TupperSandbox | Sandbox;

  constructor(opts: TupperFilesystemOptions) {
    const { sandbox, id, readOnly, ...base } = opts;
    super({ name: "TupperFilesystem", ...base });
    this.source = sandbox;
    this.readOnly = readOnly ?? false;
    this.id = id ?? `${sandbox.id}-fs`;
  }

  /** Starts the TupperSandbox it was given, if that has not started. */
  async init(): Promise<void> {
    if (this.source instanceof TupperSandbox) await this.source.ensureRunning();
  }

  getInstructions(): string {
    return `Files of a Tupper sandbox: absolute paths as they are in the sandbox, relative paths below /workspace (where commands run).${this.readOnly ? " Read-only." : ""}`;
  }

  getInfo(): FilesystemInfo {
    return { id: this.id, name: this.name, provider: this.provider, status: this.status, readOnly: this.readOnly };
  }

  private async box(): Promise<Sandbox> {
    await this.ensureReady();
    if (this.source instanceof TupperSandbox) {
      await this.source.ensureRunning();
      return this.source.sandbox;
    }
    return this.source;
  }

  private writable(op: string, path: string): void {
    if (this.readOnly) throw new PermissionError(path, op);
  }

  /** The file's information, or undefined when nothing is at path. */
  private async info(path: string): Promise<FileInfo | undefined> {
    const box = await this.box();
    try {
      return await box.files.stat(path);
    } catch (e) {
      if (e instanceof TupperError && e.code === "not_found") return undefined;
      throw fsError(e, path, "stat");
    }
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<string | Buffer> {
    const info = await this.info(path);
    if (!info) throw new FileNotFoundError(path);
    if (info.type === "dir") throw new IsDirectoryError(path);
    const box = await this.box();
    const bytes = Buffer.from(await box.files.readBytes(path).catch((e) => Promise.reject(fsError(e, path, "read"))));
    return options.encoding ? bytes.toString(options.encoding) : bytes;
  }

  async writeFile(path: string, content: FileContent, options: WriteOptions = {}): Promise<void> {
    this.writable("write", path);
    const box = await this.box();
    if (options.recursive === false) await this.requireDir(parent(path));
    const info = await this.info(path);
    if (info && options.overwrite === false) throw new FileExistsError(path);
    if (info?.type === "dir") throw new IsDirectoryError(path);
    if (info && options.expectedMtime) {
      const now = new Date(info.modifiedAt);
      if (now.getTime() !== options.expectedMtime.getTime()) throw new StaleFileError(path, options.expectedMtime, now);
    }
    await box.files.write(path, bytesOf(content)).catch((e) => Promise.reject(fsError(e, path, "write")));
  }

  /** Appends by reading the file and writing it back: not atomic against other writers. */
  async appendFile(path: string, content: FileContent): Promise<void> {
    this.writable("append", path);
    const info = await this.info(path);
    if (info?.type === "dir") throw new IsDirectoryError(path);
    const before = info ? ((await this.readFile(path)) as Buffer) : Buffer.alloc(0);
    const box = await this.box();
    await box.files.write(path, Buffer.concat([before, Buffer.from(bytesOf(content))])).catch((e) => Promise.reject(fsError(e, path, "write")));
  }

  async deleteFile(path: string, options: RemoveOptions = {}): Promise<void> {
    this.writable("delete", path);
    const info = await this.info(path);
    if (!info) {
      if (options.force) return;
      throw new FileNotFoundError(path);
    }
    if (info.type === "dir") throw new IsDirectoryError(path);
    const box = await this.box();
    await box.files.remove(path).catch((e) => Promise.reject(fsError(e, path, "delete")));
  }

  /** Copies a file, or with recursive a directory (cp -R in the sandbox). */
  async copyFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.writable("copy", dest);
    const from = await this.info(src);
    if (!from) throw new FileNotFoundError(src);
    if (options.overwrite === false && (await this.info(dest))) throw new FileExistsError(dest);
    const box = await this.box();
    if (from.type === "dir") {
      if (!options.recursive) throw new IsDirectoryError(src);
      const r = await box.run(`rm -rf -- ${shellQuote(dest)} && cp -R -- ${shellQuote(src)} ${shellQuote(dest)}`);
      if (r.exitCode !== 0) throw new PermissionError(dest, `copy: ${r.stderr.trim()}`);
      return;
    }
    const bytes = await box.files.readBytes(src).catch((e) => Promise.reject(fsError(e, src, "read")));
    await box.files.write(dest, bytes, { mode: (from.mode & 0o777).toString(8).padStart(4, "0") }).catch((e) => Promise.reject(fsError(e, dest, "write")));
  }

  async moveFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.writable("move", dest);
    if (!(await this.info(src))) throw new FileNotFoundError(src);
    const to = await this.info(dest);
    if (to && options.overwrite === false) throw new FileExistsError(dest);
    const box = await this.box();
    await box.files.rename(src, dest).catch((e) => Promise.reject(fsError(e, src, "move")));
  }

  async mkdir(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    this.writable("mkdir", path);
    const info = await this.info(path);
    if (info) {
      if (info.type !== "dir" || !options.recursive) throw new FileExistsError(path);
      return;
    }
    if (!options.recursive) await this.requireDir(parent(path));
    const box = await this.box();
    await box.files.mkdir(path).catch((e) => Promise.reject(fsError(e, path, "mkdir")));
  }

  async rmdir(path: string, options: RemoveOptions = {}): Promise<void> {
    this.writable("rmdir", path);
    const info = await this.info(path);
    if (!info) {
      if (options.force) return;
      throw new DirectoryNotFoundError(path);
    }
    if (info.type !== "dir") throw new NotDirectoryError(path);
    const box = await this.box();
    if (!options.recursive && (await box.files.list(path)).length > 0) throw new DirectoryNotEmptyError(path);
    await box.files.remove(path, { recursive: true }).catch((e) => Promise.reject(fsError(e, path, "rmdir")));
  }

  /**
   * Lists a directory in one request, recursive or not. Entries below the first level are
   * named by their path from the listed directory ("sub/file.txt").
   */
  async readdir(path: string, options: ListOptions = {}): Promise<FileEntry[]> {
    const root = (await this.requireDir(path)).path.replace(/\/+$/, "");
    const box = await this.box();
    const list = await box.files.list(path, { recursive: options.recursive ?? false }).catch((e) => Promise.reject(fsError(e, path, "list")));
    const exts = options.extension === undefined ? undefined : [options.extension].flat().map((e) => (e.startsWith(".") ? e : "." + e));
    const maxDepth = options.maxDepth ?? Infinity;
    const out: FileEntry[] = [];
    for (const f of list) {
      const name = f.path.startsWith(root + "/") ? f.path.slice(root.length + 1) : f.path.split("/").pop()!;
      if (name.split("/").length - 1 > maxDepth) continue;
      const type = f.type === "dir" ? "directory" : "file";
      if (exts && type === "file" && !exts.some((e) => name.endsWith(e))) continue;
      const e: FileEntry = { name, type };
      if (type === "file") e.size = f.size;
      if (f.type === "symlink") e.isSymlink = true;
      out.push(e);
    }
    return out;
  }

  async exists(path: string): Promise<boolean> {
    const box = await this.box();
    return box.files.exists(path).catch((e) => Promise.reject(fsError(e, path, "stat")));
  }

  async stat(path: string): Promise<FileStat> {
    const info = await this.info(path);
    if (!info) throw new FileNotFoundError(path);
    const modifiedAt = new Date(info.modifiedAt);
    return {
      name: info.path.split("/").pop() ?? "",
      path: info.path,
      type: info.type === "dir" ? "directory" : "file",
      size: info.type === "dir" ? 0 : info.size,
      // The API reports no creation time.
      createdAt: modifiedAt,
      modifiedAt,
    };
  }

  private async requireDir(path: string): Promise<FileInfo> {
    const info = await this.info(path);
    if (!info) throw new DirectoryNotFoundError(path);
    if (info.type !== "dir") throw new NotDirectoryError(path);
    return info;
  }
}

/** Mastra's error for a failed call about path, or the failure itself when it is not about the file. */
function fsError(e: unknown, path: string, op: string): unknown {
  if (!(e instanceof TupperError)) return e;
  switch (e.code) {
    case "not_found":
      return new FileNotFoundError(path);
    case "forbidden":
      return new PermissionError(path, op);
    default:
      return e;
  }
}

function bytesOf(content: FileContent): string | Uint8Array {
  return typeof content === "string" ? content : new Uint8Array(content);
}

function parent(path: string): string {
  const i = path.replace(/\/+$/, "").lastIndexOf("/");
  if (i < 0) return ".";
  return i === 0 ? "/" : path.slice(0, i);
}

/** Quotes s for /bin/sh as one word. */
export function shellQuote(s: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s)) return s;
  return "'" + s.replace(/'/g, `'\\''`) + "'";
}
