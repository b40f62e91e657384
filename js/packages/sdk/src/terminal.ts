// The sandbox terminal: GET /v1/sandboxes/{id}/terminal upgraded to a WebSocket. Binary
// messages carry the terminal's bytes both ways; text messages carry JSON control (resize
// from the client; exit and error from the server). See docs/terminal.md.
import { TupperError, type Sandbox, type Schemas } from "./index.js";

/** The largest number of columns or rows the API accepts. */
export const maxTerminalSize = 1000;

/**
 * The part of a WebSocket the terminal uses: the WHATWG WebSocket (Node 22's global, Bun's,
 * Deno's) and the ws package's both have it.
 */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string | ArrayBuffer | Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "message" | "error" | "close", listener: (ev: any) => void): void;
}

/**
 * A WebSocket constructor that takes headers as `new WebSocket(url, { headers })`: Node 22's
 * global WebSocket and the ws package's both do; a browser's does not, and the server takes
 * its credential from the Authorization header only.
 */
export type WebSocketConstructor = new (url: string, init: { headers: Record<string, string> }) => WebSocketLike;

export interface TerminalOptions {
  /** Columns and rows, each 1..1000 (80×24 by default). */
  cols?: number;
  rows?: number;
  /** The WebSocket to use; the runtime's global one by default (Node 20 has none: pass ws's). */
  WebSocket?: WebSocketConstructor;
}

/** How the terminal's process ended: its exit code, or 128+n and the signal's name. */
export interface TerminalExit {
  exitCode: number;
  signal?: string;
}

/**
 * Terminal is an open terminal. Output arrives through onData (held until the first listener
 * comes); write sends typed input (a string is sent as UTF-8; "\x03" is Ctrl-C, "\x04" Ctrl-D);
 * resize changes the size (the process gets SIGWINCH). close() kills the shell. exited
 * settles when the WebSocket closes, with how the process ended when the server said so.
 */
export class Terminal {
  /** Settles when the terminal has closed: the exit, or undefined when it was closed first. */
  readonly exited: Promise<TerminalExit | undefined>;
  private readonly ws: WebSocketLike;
  private readonly dataListeners = new Set<(data: Uint8Array) => void>();
  private readonly errorListeners = new Set<(err: TupperError) => void>();
  private held: Uint8Array[] = [];
  private exit: TerminalExit | undefined;
  private closed = false;

  /** @internal Use Sandbox.terminal. */
  constructor(ws: WebSocketLike) {
    this.ws = ws;
    ws.addEventListener("message", (ev: { data: unknown }) => this.message(ev.data));
    this.exited = new Promise((resolve) => {
      ws.addEventListener("close", () => {
        this.closed = true;
        resolve(this.exit);
      });
    });
  }

  /** Calls fn with each piece of output; returns a function that stops the calls. */
  onData(fn: (data: Uint8Array) => void): () => void {
    this.dataListeners.add(fn);
    const held = this.held;
    this.held = [];
    for (const d of held) fn(d);
    return () => this.dataListeners.delete(fn);
  }

  /** Calls fn with each control message the server refused (the terminal goes on). */
  onError(fn: (err: TupperError) => void): () => void {
    this.errorListeners.add(fn);
    return () => this.errorListeners.delete(fn);
  }

  /** Sends typed input. Throws once the terminal has closed. */
  write(data: string | Uint8Array): void {
    this.open();
    this.ws.send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** Resizes the terminal; a size out of 1..1000 throws invalid_argument without sending. */
  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    this.open();
    const msg: Schemas["TerminalControl"] = { type: "resize", cols, rows };
    this.ws.send(JSON.stringify(msg));
  }

  /** Closes the terminal, which kills its shell, and waits until it is closed. Idempotent. */
  async close(): Promise<TerminalExit | undefined> {
    if (!this.closed) this.ws.close(1000, "closed by the client");
    return this.exited;
  }

  private open(): void {
    if (this.closed || this.ws.readyState !== 1) throw new TupperError("process_exited", "the terminal is closed", 0);
  }

  private message(data: unknown): void {
    if (typeof data === "string") {
      const c = JSON.parse(data) as Partial<Schemas["TerminalControl"]>;
      if (c.type === "exit") {
        this.exit = { exitCode: c.exitCode ?? 0 };
        if (c.signal) this.exit.signal = c.signal;
      } else if (c.type === "error") {
        const err = new TupperError(c.code ?? "internal", c.message ?? "", 0);
        for (const fn of this.errorListeners) fn(err);
      }
      return;
    }
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : undefined;
    if (!bytes) return;
    if (this.dataListeners.size === 0) this.held.push(bytes);
    for (const fn of this.dataListeners) fn(bytes);
  }
}

function checkSize(cols: number, rows: number): void {
  for (const n of [cols, rows]) {
    if (!Number.isInteger(n) || n < 1 || n > maxTerminalSize) {
      throw new TupperError("invalid_argument", `terminal size ${cols}x${rows} is out of range: want 1 to ${maxTerminalSize} each`, 0);
    }
  }
}

/** Opens box's terminal; see Sandbox.terminal. */
export async function openTerminal(box: Sandbox, opts: TerminalOptions): Promise<Terminal> {
  const cols = opts.cols ?? 80;
  const rows = opts.rows ?? 24;
  checkSize(cols, rows);
  const WS = opts.WebSocket ?? (globalThis as { WebSocket?: unknown }).WebSocket as WebSocketConstructor | undefined;
  if (!WS) throw new TupperError("unsupported", "this runtime has no WebSocket: pass options.WebSocket (e.g. the ws package's)", 0);
  const path = box.path("/terminal");
  const u = new URL(box.client.url + path);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  u.searchParams.set("cols", String(cols));
  u.searchParams.set("rows", String(rows));
  const ws = new WS(u.toString(), { headers: { Authorization: box.client.authorization() } });
  ws.binaryType = "arraybuffer";
  const term = new Terminal(ws);
  const opened = await new Promise<boolean>((resolve) => {
    ws.addEventListener("open", () => resolve(true));
    ws.addEventListener("error", () => resolve(false));
    ws.addEventListener("close", () => resolve(false));
  });
  if (opened) return term;
  // A failed handshake tells the WebSocket nothing of why: the same request without the
  // upgrade is answered with the API's error (size, sandbox, capability, credential).
  try {
    await box.client.request({ method: "GET", path, query: { cols, rows } });
  } catch (e) {
    if (!(e instanceof TupperError) || e.status !== 400 || !/WebSocket/.test(e.message)) throw e;
  }
  throw new TupperError("unavailable", "the terminal's WebSocket did not open though the server accepts the request: does this WebSocket send the Authorization header? (a browser's cannot)", 0);
}
