/**
 * Spawn and supervise one operator command with `node:child_process`.
 *
 * Lifecycle contract (exactly one of two outcomes, hooks never called
 * synchronously from `startProcess`):
 *   - "could not launch": `onSpawnError(err)` once; then nothing else, ever
 *     (no onSpawn, no onOutput, no onExit). `err.code` is an errno-style code:
 *     ENOENT (binary or cwd missing), EACCES (not executable / cwd not
 *     searchable), ENOTDIR (cwd is not a directory), EINVAL (bad spec, NUL in
 *     argv/env, empty argv), ENOTSUP (shell 'cmd' off Windows), or whatever
 *     libuv reported.
 *   - launched: `onSpawn(pid)` once, any number of `onOutput`, then `onExit`
 *     exactly once, after the process exited AND both stdout and stderr
 *     reached EOF, or after the drain deadline (`drainTimeoutMs`, default 2 s,
 *     counted from process exit while output is not paused) if some pipe is
 *     still held open (typically by a grandchild): such pipes are destroyed and
 *     reported with `outputComplete[stream] = false`.
 *
 * Process groups (POSIX): the child is spawned with `detached: true`, i.e.
 * setsid(), so its pid is also its process-group id. `signal`, `terminate`
 * and the timeout signal the whole group with `process.kill(-pgid, sig)`.
 * Descendants that call setsid/setpgid themselves escape the group.
 * On Windows there are no process groups: signals go to the direct child only
 * via `child.kill` (untested there).
 *
 * Environment: the child does NOT inherit the daemon's environment (it may
 * hold credentials). It gets a minimal safe base (`buildChildEnv`: PATH, HOME,
 * USER, LOGNAME, SHELL, LANG, LC_ALL, LC_CTYPE, TZ, TMPDIR copied from the
 * daemon when set; PATH defaults to a standard system path) with `spec.env`
 * merged over it. Pass an explicit value to override a base variable.
 *
 * Output: chunks passed to `onOutput` are at most 64 KiB (larger reads are
 * split); they are views of buffers the runner does not reuse, so they may be
 * retained. Backpressure: `pauseOutput()` stops reading both pipes (Node
 * buffers up to the stream high-water mark, then the child blocks in
 * write()); `resumeOutput()` resumes. Both may be called from inside
 * onOutput. While paused the drain deadline does not run, so a consumer that
 * never resumes never gets onExit.
 *
 * Hooks must not throw: they run inside stream/child event handlers, where an
 * exception becomes an uncaught exception.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { statSync } from "node:fs";
import type { Readable } from "node:stream";

export type SignalName = "SIGINT" | "SIGTERM" | "SIGKILL" | "SIGHUP" | "SIGQUIT" | "SIGUSR1" | "SIGUSR2";
export type ShellName = "sh" | "bash" | "zsh" | "powershell" | "cmd";
export type OutputStreamName = "stdout" | "stderr";

export type CommandSpec =
  | { kind: "argv"; argv: string[] }
  | { kind: "shell"; shell: ShellName; commandLine: string }
  | { kind: "script"; path: string; interpreter?: string; args?: string[] };

export interface ProcessOptions {
  cwd?: string;
  /** Merged over the safe base environment (see buildChildEnv). */
  env?: Record<string, string>;
  /** After this many ms: terminate() and report timedOut. Absent/0 = none. */
  timeoutMs?: number;
  /** true: stdin is a pipe (writeStdin/closeStdin); false: /dev/null. */
  stdinOpen: boolean;
  /** Grace between SIGTERM and SIGKILL in terminate(). Default 5000. */
  killGraceMs?: number;
  /** Max wait for pipe EOF after the process exited. Default 2000. */
  drainTimeoutMs?: number;
}

/** A pseudo-terminal for the command (`rvbox run -t`): its window size, and TERM. */
export interface TerminalOptions {
  rows: number;
  cols: number;
  term?: string;
}

export type ProcessSpec = CommandSpec & ProcessOptions & { terminal?: TerminalOptions };

export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  outputComplete: { stdout: boolean; stderr: boolean };
}

export type SpawnFailure = Error & { code: string };

export interface ProcessHooks {
  onSpawn?(pid: number): void;
  onSpawnError?(err: SpawnFailure): void;
  onOutput?(stream: OutputStreamName, chunk: Uint8Array): void;
  onExit?(info: ExitInfo): void;
}

export type ProcessState = "starting" | "running" | "exited" | "finished" | "failed";

export interface ProcessHandle {
  /** Child pid (= its process-group id on POSIX) once spawned, else undefined. */
  readonly pid: number | undefined;
  readonly state: ProcessState;
  /** Resolves once the bytes were handed to the pipe; rejects with code 'EPIPE' if stdin is closed. */
  writeStdin(data: Uint8Array): Promise<void>;
  /** Close the child's stdin (EOF). Idempotent. */
  closeStdin(): void;
  /** Send `sig` to the process group. false if not running / no such group / not permitted. */
  signal(sig: SignalName): boolean;
  /** SIGTERM to the group, SIGKILL to the group after killGraceMs unless already finished. Idempotent. */
  terminate(): void;
  pauseOutput(): void;
  resumeOutput(): void;
  /** A terminal's command only: set the window size (the foreground process group gets SIGWINCH). */
  resize?(rows: number, cols: number): void;
}

export const MAX_OUTPUT_CHUNK_BYTES = 64 * 1024;
export const DEFAULT_KILL_GRACE_MS = 5000;
export const DEFAULT_DRAIN_TIMEOUT_MS = 2000;
export const DEFAULT_POSIX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const POSIX_BASE_ENV_KEYS = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];
const WINDOWS_BASE_ENV_KEYS = [
  "PATH",
  "PATHEXT",
  "SystemRoot",
  "SystemDrive",
  "windir",
  "ComSpec",
  "TEMP",
  "TMP",
  "USERPROFILE",
  "USERNAME",
  "HOMEDRIVE",
  "HOMEPATH",
  "APPDATA",
  "LOCALAPPDATA",
  "ProgramData",
  "ProgramFiles",
  "ProgramFiles(x86)",
  "NUMBER_OF_PROCESSORS",
  "PROCESSOR_ARCHITECTURE",
  "OS",
];

/** Names of the daemon variables copied into every child's environment. */
export function safeBaseEnvKeys(platform: NodeJS.Platform = process.platform): readonly string[] {
  return platform === "win32" ? WINDOWS_BASE_ENV_KEYS : POSIX_BASE_ENV_KEYS;
}

/**
 * The child environment: the safe base variables taken from `parent` (the
 * daemon's env) with `overrides` merged over them. Nothing else from the
 * daemon's environment is passed on.
 */
export function buildChildEnv(
  overrides: Record<string, string> | undefined,
  parent: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
): Record<string, string> {
  const env: Record<string, string> = {};
  const win = platform === "win32";
  for (const key of safeBaseEnvKeys(platform)) {
    // Windows env names are case-insensitive; find the daemon's spelling.
    const found = win ? Object.keys(parent).find((k) => k.toUpperCase() === key.toUpperCase()) : key;
    const value = found === undefined ? undefined : parent[found];
    if (value !== undefined) env[key] = value;
  }
  if (!win && env.PATH === undefined) env.PATH = DEFAULT_POSIX_PATH;
  if (overrides) {
    for (const [k, v] of Object.entries(overrides)) env[k] = v;
  }
  return env;
}

export function failure(code: string, message: string, cause?: unknown): SpawnFailure {
  const err = new Error(message, cause === undefined ? undefined : { cause }) as SpawnFailure;
  err.code = code;
  return err;
}

function asSpawnFailure(err: unknown, fallbackCode: string): SpawnFailure {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    if (typeof code === "string" && /^E[A-Z0-9]+$/.test(code)) return err as SpawnFailure;
    return failure(fallbackCode, err.message, err);
  }
  return failure(fallbackCode, String(err));
}

interface ResolvedCommand {
  file: string;
  args: string[];
  windowsVerbatimArguments?: boolean;
}

/** Map a CommandSpec to the executable and its arguments (exported for tests). */
export function resolveCommand(spec: CommandSpec, platform: NodeJS.Platform = process.platform): ResolvedCommand | SpawnFailure {
  const win = platform === "win32";
  switch (spec.kind) {
    case "argv": {
      const [file, ...args] = spec.argv;
      if (typeof file !== "string" || file === "") return failure("EINVAL", "argv must start with a non-empty program name");
      return { file, args };
    }
    case "shell": {
      const line = spec.commandLine;
      if (typeof line !== "string") return failure("EINVAL", "commandLine must be a string");
      switch (spec.shell) {
        case "sh":
          return { file: win ? "sh" : "/bin/sh", args: ["-c", line] };
        case "bash":
          return { file: "bash", args: ["-c", line] };
        case "zsh":
          return { file: "zsh", args: ["-c", line] };
        case "powershell":
          return {
            file: win ? "powershell.exe" : "pwsh",
            args: ["-NoLogo", "-NoProfile", "-NonInteractive", "-Command", line],
          };
        case "cmd":
          if (!win) return failure("ENOTSUP", "shell 'cmd' is only available on Windows");
          return { file: "cmd.exe", args: ["/d", "/s", "/c", `"${line}"`], windowsVerbatimArguments: true };
        default:
          return failure("EINVAL", `unknown shell ${String((spec as { shell: unknown }).shell)}`);
      }
    }
    case "script": {
      if (typeof spec.path !== "string" || spec.path === "") return failure("EINVAL", "script path must be non-empty");
      const args = spec.args ?? [];
      if (spec.interpreter !== undefined) {
        if (spec.interpreter === "") return failure("EINVAL", "interpreter must be non-empty");
        return { file: spec.interpreter, args: [spec.path, ...args] };
      }
      return { file: spec.path, args };
    }
    default:
      return failure("EINVAL", `unknown command kind ${String((spec as { kind: unknown }).kind)}`);
  }
}

export function checkCwd(cwd: string): SpawnFailure | null {
  try {
    if (!statSync(cwd).isDirectory()) return failure("ENOTDIR", `cwd is not a directory: ${cwd}`);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "ENOENT";
    return failure(code, `cwd is not usable (${code}): ${cwd}`, err);
  }
}

export function nonNegativeMs(value: number | undefined, fallback: number, name: string): number | SpawnFailure {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    return failure("EINVAL", `${name} must be a finite number >= 0, got ${String(value)}`);
  }
  return value;
}

export function epipe(message: string, cause?: unknown): Error & { code: "EPIPE" } {
  const err = new Error(message, cause === undefined ? undefined : { cause }) as Error & { code: "EPIPE" };
  err.code = "EPIPE";
  return err;
}

/** Send `sig` to process group `pgid`; true if sent, false on ESRCH/EPERM. */
export function killGroupQuiet(pgid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ESRCH" || code === "EPERM") return false;
    throw err;
  }
}

/**
 * Kill a process group left behind, e.g. by a daemon that crashed while
 * supervising it (its pgid was recorded at spawn). Returns true if the signal
 * was delivered, false if the group no longer exists (ESRCH). Throws on
 * EPERM and refuses pgids that would hit the caller itself (<= 1, or the
 * daemon's own pid). POSIX only.
 */
export function killProcessGroup(pgid: number, sig: SignalName = "SIGKILL"): boolean {
  if (!Number.isSafeInteger(pgid) || pgid <= 1) throw new RangeError(`refusing to signal process group ${pgid}`);
  if (pgid === process.pid) throw new RangeError("refusing to signal the daemon’s own process group");
  if (process.platform === "win32") throw new Error("killProcessGroup is not supported on Windows");
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ESRCH") return false;
    throw err;
  }
}

/**
 * Start one command. Never throws for a bad spec or launch failure: those are
 * reported through `onSpawnError` (asynchronously).
 */
export function startProcess(spec: ProcessSpec, hooks: ProcessHooks = {}): ProcessHandle {
  let state: ProcessState = "starting";
  let child: ChildProcess | undefined;
  let pid: number | undefined;
  let paused = false;
  let timedOut = false;
  let terminateRequested = false;
  let stdinClosed = !spec.stdinOpen;
  let exitCode: number | null = null;
  let exitSignal: string | null = null;
  let timeoutTimer: NodeJS.Timeout | undefined;
  let drainTimer: NodeJS.Timeout | undefined;
  let killTimer: NodeJS.Timeout | undefined;
  const streams: Record<OutputStreamName, { ended: boolean; done: boolean; stream: Readable | null }> = {
    stdout: { ended: false, done: false, stream: null },
    stderr: { ended: false, done: false, stream: null },
  };

  const fail = (err: SpawnFailure): void => {
    if (state !== "starting") return;
    state = "failed";
    stdinClosed = true;
    process.nextTick(() => hooks.onSpawnError?.(err));
  };

  const signalGroup = (sig: NodeJS.Signals): boolean => {
    if (pid === undefined || !child) return false;
    if (process.platform === "win32") return child.kill(sig);
    return killGroupQuiet(pid, sig);
  };

  const finish = (): void => {
    if (state === "finished" || state === "failed") return;
    state = "finished";
    if (timeoutTimer) clearTimeout(timeoutTimer);
    if (drainTimer) clearTimeout(drainTimer);
    // A pending SIGKILL escalation stays armed (group members may survive the
    // leader) but must not keep the daemon alive.
    killTimer?.unref();
    stdinClosed = true;
    child?.stdin?.destroy();
    const outputComplete = { stdout: streams.stdout.ended, stderr: streams.stderr.ended };
    for (const name of ["stdout", "stderr"] as const) {
      const s = streams[name];
      if (!s.done) {
        s.done = true;
        s.stream?.destroy();
      }
    }
    hooks.onExit?.({ exitCode, signal: exitSignal, timedOut, outputComplete });
  };

  const tryFinish = (): void => {
    if (state === "exited" && streams.stdout.done && streams.stderr.done) finish();
  };

  /** Read what `name` has buffered and hand it to onOutput, unless paused. */
  const pump = (name: OutputStreamName): void => {
    const stream = streams[name].stream;
    if (!stream || state === "finished" || state === "failed") return;
    while (!paused) {
      const buf = stream.read() as Buffer | null;
      if (buf === null) return;
      for (let off = 0; off < buf.length; off += MAX_OUTPUT_CHUNK_BYTES) {
        if (paused) {
          // paused from inside onOutput: keep the rest for resumeOutput()
          stream.unshift(buf.subarray(off));
          return;
        }
        const len = Math.min(MAX_OUTPUT_CHUNK_BYTES, buf.length - off);
        hooks.onOutput?.(name, new Uint8Array(buf.buffer, buf.byteOffset + off, len));
      }
    }
  };

  const armDrain = (): void => {
    if (state !== "exited" || paused || drainTimer) return;
    drainTimer = setTimeout(() => {
      drainTimer = undefined;
      if (state === "exited" && !paused) finish();
    }, drainTimeoutMs);
  };

  const handle: ProcessHandle = {
    get pid() {
      return pid;
    },
    get state() {
      return state;
    },
    writeStdin(data: Uint8Array): Promise<void> {
      const stdin = child?.stdin;
      if (stdinClosed || !stdin || stdin.destroyed || stdin.writableEnded || !stdin.writable) {
        return Promise.reject(epipe("stdin is closed"));
      }
      return new Promise<void>((resolve, reject) => {
        stdin.write(data, (err) => {
          if (err) reject(epipe(`writing to stdin failed: ${err.message}`, err));
          else resolve();
        });
      });
    },
    closeStdin(): void {
      if (stdinClosed) return;
      stdinClosed = true;
      const stdin = child?.stdin;
      if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.end();
    },
    signal(sig: SignalName): boolean {
      if (state !== "running" && state !== "exited") return false;
      return signalGroup(sig);
    },
    terminate(): void {
      if (state !== "running" && state !== "exited") return;
      if (terminateRequested) return;
      terminateRequested = true;
      signalGroup("SIGTERM");
      killTimer = setTimeout(() => {
        killTimer = undefined;
        signalGroup("SIGKILL");
      }, killGraceMs);
      if (state === "exited") killTimer.unref();
    },
    pauseOutput(): void {
      if (paused) return;
      paused = true;
      if (drainTimer) {
        clearTimeout(drainTimer);
        drainTimer = undefined;
      }
    },
    resumeOutput(): void {
      if (!paused) return;
      paused = false;
      if (state === "finished" || state === "failed") return;
      pump("stdout");
      pump("stderr");
      armDrain();
    },
  };

  // ---- validate and launch ----
  const killGraceOrErr = nonNegativeMs(spec.killGraceMs, DEFAULT_KILL_GRACE_MS, "killGraceMs");
  const drainOrErr = nonNegativeMs(spec.drainTimeoutMs, DEFAULT_DRAIN_TIMEOUT_MS, "drainTimeoutMs");
  const timeoutOrErr = nonNegativeMs(spec.timeoutMs, 0, "timeoutMs");
  for (const v of [killGraceOrErr, drainOrErr, timeoutOrErr]) {
    if (typeof v !== "number") {
      fail(v);
      return handle;
    }
  }
  const killGraceMs = killGraceOrErr as number;
  const drainTimeoutMs = drainOrErr as number;
  const timeoutMs = timeoutOrErr as number;

  const resolved = resolveCommand(spec);
  if (resolved instanceof Error) {
    fail(resolved);
    return handle;
  }
  if (spec.cwd !== undefined) {
    const cwdErr = checkCwd(spec.cwd);
    if (cwdErr) {
      fail(cwdErr);
      return handle;
    }
  }

  const options: SpawnOptions = {
    cwd: spec.cwd,
    env: buildChildEnv(spec.env),
    stdio: [spec.stdinOpen ? "pipe" : "ignore", "pipe", "pipe"],
    detached: true,
    windowsHide: true,
    shell: false,
  };
  if (resolved.windowsVerbatimArguments) options.windowsVerbatimArguments = true;

  try {
    child = spawn(resolved.file, resolved.args, options);
  } catch (err) {
    // Synchronous failures: invalid arguments (NUL bytes), and libuv errors
    // other than EACCES/EAGAIN/EMFILE/ENFILE/ENOENT (e.g. ENOTDIR, E2BIG).
    fail(asSpawnFailure(err, "EINVAL"));
    return handle;
  }
  const proc = child;

  proc.on("error", (err) => {
    // Before 'spawn': a launch failure. After: only kill/IPC failures, which
    // we do not use (signals go through process.kill); ignore them.
    if (state === "starting") fail(asSpawnFailure(err, "ENOENT"));
  });

  proc.stdin?.on("error", () => {
    // EPIPE etc. surface through the write callback; swallow the event so it
    // is never an unhandled 'error'.
  });

  for (const name of ["stdout", "stderr"] as const) {
    const stream = proc[name];
    const s = streams[name];
    s.stream = stream;
    if (!stream) {
      s.done = true;
      continue;
    }
    // Pull mode ('readable' + read()) rather than 'data': ChildProcess resumes
    // flowing stdio streams when the child exits (flushStdio), which would
    // defeat pauseOutput(); resume() has no effect while a 'readable'
    // listener is attached.
    stream.on("readable", () => pump(name));
    stream.on("end", () => {
      s.ended = true;
      s.done = true;
      tryFinish();
    });
    stream.on("close", () => {
      s.done = true;
      tryFinish();
    });
    stream.on("error", () => {
      s.done = true;
      tryFinish();
    });
  }

  proc.once("spawn", () => {
    if (state !== "starting") return;
    state = "running";
    pid = proc.pid;
    if (timeoutMs > 0) {
      timeoutTimer = setTimeout(() => {
        timeoutTimer = undefined;
        if (state !== "running") return;
        timedOut = true;
        handle.terminate();
      }, timeoutMs);
    }
    if (pid !== undefined) hooks.onSpawn?.(pid);
  });

  proc.once("exit", (code, sig) => {
    if (state !== "running") return;
    state = "exited";
    exitCode = code;
    exitSignal = sig;
    if (timeoutTimer) {
      clearTimeout(timeoutTimer);
      timeoutTimer = undefined;
    }
    if (killTimer) killTimer.unref();
    tryFinish();
    armDrain();
  });

  return handle;
}
