// @tupper/deepagents: a Tupper sandbox as the backend of a deep agent (npm deepagents).
// deepagents' BaseSandbox builds ls, read, write, edit, grep and glob on the three methods
// here: execute, uploadFiles and downloadFiles.
import { BaseSandbox, type ExecuteResponse, type FileDownloadResponse, type FileOperationError, type FileUploadResponse } from "deepagents";
import { TupperError, type Client, type CreateOptions, type Sandbox } from "@tupper/sdk";

export interface TupperBackendOptions {
  /** Per-command timeout in milliseconds (the server's default is 120 s). */
  timeoutMs?: number;
}

/** TupperBackend runs a deep agent's shell and file tools in one Tupper sandbox. */
export class TupperBackend extends BaseSandbox {
  readonly id: string;
  readonly sandbox: Sandbox;
  private readonly timeoutMs: number | undefined;

  constructor(sandbox: Sandbox, opts: TupperBackendOptions = {}) {
    super();
    this.sandbox = sandbox;
    this.id = sandbox.id;
    this.timeoutMs = opts.timeoutMs;
  }

  /** Creates a sandbox (get-or-create with opts.key) and returns its backend. */
  static async create(client: Client, create: CreateOptions = {}, opts: TupperBackendOptions = {}): Promise<TupperBackend> {
    return new TupperBackend(await client.create(create), opts);
  }

  async execute(command: string): Promise<ExecuteResponse> {
    const r = await this.sandbox.run(command, this.timeoutMs ? { timeoutMs: this.timeoutMs } : {});
    return { output: r.output, exitCode: r.timedOut ? null : r.exitCode, truncated: r.truncated };
  }

  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    return Promise.all(
      files.map(async ([path, content]): Promise<FileUploadResponse> => {
        try {
          await this.sandbox.files.write(path, content);
          return { path, error: null };
        } catch (e) {
          return { path, error: fileError(e) };
        }
      }),
    );
  }

  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    return Promise.all(
      paths.map(async (path): Promise<FileDownloadResponse> => {
        try {
          const info = await this.sandbox.files.stat(path);
          if (info.type === "dir") return { path, content: null, error: "is_directory" };
          return { path, content: await this.sandbox.files.readBytes(path), error: null };
        } catch (e) {
          return { path, content: null, error: fileError(e) };
        }
      }),
    );
  }

  /** Destroys the sandbox. */
  async close(): Promise<void> {
    await this.sandbox.destroy();
  }
}

/** The deepagents file error for a failure, or the failure itself when it is not about the file. */
function fileError(e: unknown): FileOperationError {
  if (!(e instanceof TupperError)) throw e;
  switch (e.code) {
    case "not_found":
      return "file_not_found";
    case "forbidden":
      return "permission_denied";
    case "invalid_argument":
      return "invalid_path";
    default:
      throw e;
  }
}
