/**
 * Run one command on a pseudo-terminal (`rvbox run -t`, protocol 1.1), with
 * the lifecycle contract of process-runner.ts's startProcess: `onSpawnError`
 * once, or `onSpawn`, any `onOutput`, then `onExit` once.
 *
 * The terminal is @lydell/node-pty (forkpty in a prebuilt addon; the choice
 * and its figures against util-linux `script` are in docs/ARCHITECTURE.md,
 * "Terminals"). The child is a session leader with the terminal as its
 * controlling tty, so its pid is its process group, as with startProcess.
 * Differences a terminal brings, each by design:
 *   - One output stream: everything the program writes to the terminal is
 *     `stdout` (a terminal merges stdout and stderr); `outputComplete` is
 *     true for both once the terminal's master reached EOF.
 *   - stdin bytes are keystrokes: Ctrl-C (0x03), Ctrl-Z, Ctrl-D reach the
 *     terminal's line discipline, which signals the foreground job or ends
 *     its input. `closeStdin` takes no more writes but does not hang up.
 *   - `terminate` hangs up (SIGHUP, as a closed terminal does; an
 *     interactive shell ignores SIGTERM) and sends SIGTERM, then SIGKILL to
 *     the group after the grace period.
 *   - `resize(rows, cols)` sets the window size (TIOCSWINSZ): the kernel
 *     sends SIGWINCH to the foreground process group.
 *   - A program that is not there is found before the fork (PATH lookup),
 *     so it is an `onSpawnError` ENOENT/EACCES as with startProcess, not a
 *     terminal that prints "execvp failed".
 * The addon is loaded on the first terminal, so an agent that never runs one
 * never loads it.
 */
import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { createRequire } from "node:module";
import { constants as osConstants } from "node:os";
import { delimiter, join } from "node:path";
import {
  buildChildEnv,
  checkCwd,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_KILL_GRACE_MS,
  epipe,
  failure,
  killGroupQuiet,
  MAX_OUTPUT_CHUNK_BYTES,
  nonNegativeMs,
  type ProcessHandle,
  type ProcessHooks,
  type ProcessSpec,
  type ProcessState,
  resolveCommand,
  type SignalName,
  type SpawnFailure,
  startProcess,
  type TerminalOptions,
} from "./process-runner.js";

/** TERM when the command names none. */
export const DEFAULT_TERM = "xterm-256color";

type NodePty = typeof import("@lydell/node-pty");
type Pty = import("@lydell/node-pty").IPty;

let addon: NodePty | Error | undefined;

/** The node-pty addon, loaded once on first use; an Error when this platform has none. */
export function loadNodePty(): NodePty | Error {
  if (addon === undefined) {
    try {
      addon = createRequire(import.meta.url)("@lydell/node-pty") as NodePty;
    } catch (err) {
      addon = err instanceof Error ? err : new Error(String(err));
    }
  }
  return addon;
}

const SIGNAL_NAMES = new Map<number, string>(Object.entries(osConstants.signals).map(([name, n]) => [n, name]));

/** `file` as execvp would find it on `path`, or the failure startProcess would report. */
export function findExecutable(file: string, path: string | undefined, cwd: string | undefined): string | SpawnFailure {
  const candidates = file.includes("/")
    ? [cwd && !file.startsWith("/") ? join(cwd, file) : file]
    : (path ?? "")
        .split(delimiter)
        .filter(Boolean)
        .map((d) => join(d, file));
  let denied = false;
  for (const c of candidates) {
    try {
      if (statSync(c).isDirectory()) {
        denied = true;
        continue;
      }
      accessSync(c, fsConstants.X_OK);
      return c;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EACCES") denied = true;
    }
  }
  return denied ? failure("EACCES", `not executable: ${file}`) : failure("ENOENT", `no such program: ${file}`);
}

/** Start `spec` on a terminal of `spec.terminal`'s size. Never throws: failures go to onSpawnError. */
export function startPtyProcess(spec: ProcessSpec & { terminal: TerminalOptions }, hooks: ProcessHooks = {}): ProcessHandle {
  const run = new PtyRun(spec, hooks);
  run.launch();
  return run.handle;
}

class PtyRun {
  state: ProcessState = "starting";
  pty: Pty | undefined;
  pid: number | undefined;
  stdinClosed: boolean;
  paused = false;
  timedOut = false;
  terminateRequested = false;
  killGraceMs = DEFAULT_KILL_GRACE_MS;
  timeoutTimer: NodeJS.Timeout | undefined;
  killTimer: NodeJS.Timeout | undefined;
  readonly handle: ProcessHandle;

  constructor(
    readonly spec: ProcessSpec & { terminal: TerminalOptions },
    readonly hooks: ProcessHooks,
  ) {
    this.stdinClosed = !spec.stdinOpen;
    const run = this;
    this.handle = {
      get pid() {
        return run.pid;
      },
      get state() {
        return run.state;
      },
      writeStdin: (data) => this.write(data),
      closeStdin: () => {
        this.stdinClosed = true;
      },
      signal: (sig: SignalName) => (this.state === "running" && this.pid !== undefined ? killGroupQuiet(this.pid, sig) : false),
      terminate: () => this.terminate(),
      pauseOutput: () => {
        if (this.paused) return;
        this.paused = true;
        this.pty?.pause();
      },
      resumeOutput: () => {
        if (!this.paused) return;
        this.paused = false;
        if (this.state === "running") this.pty?.resume();
      },
      resize: (rows, cols) => {
        if (this.state === "running") this.pty?.resize(cols, rows);
      },
    };
  }

  fail(err: SpawnFailure): void {
    if (this.state !== "starting") return;
    this.state = "failed";
    this.stdinClosed = true;
    process.nextTick(() => this.hooks.onSpawnError?.(err));
  }

  write(data: Uint8Array): Promise<void> {
    if (this.stdinClosed || this.state !== "running" || !this.pty) return Promise.reject(epipe("stdin is closed"));
    // Bytes as they are (node-pty's typing says string; on POSIX its write is the master socket's, which takes a Buffer).
    (this.pty as unknown as { write(d: Buffer): void }).write(Buffer.from(data.buffer, data.byteOffset, data.length));
    return Promise.resolve();
  }

  terminate(): void {
    if (this.state !== "running" || this.terminateRequested || this.pid === undefined) return;
    this.terminateRequested = true;
    const pid = this.pid;
    killGroupQuiet(pid, "SIGHUP");
    killGroupQuiet(pid, "SIGTERM");
    this.killTimer = setTimeout(() => {
      this.killTimer = undefined;
      killGroupQuiet(pid, "SIGKILL");
    }, this.killGraceMs);
  }

  launch(): void {
    const grace = nonNegativeMs(this.spec.killGraceMs, DEFAULT_KILL_GRACE_MS, "killGraceMs");
    const timeout = nonNegativeMs(this.spec.timeoutMs, 0, "timeoutMs");
    // (drainTimeoutMs does not apply: a terminal's output ends with its master's EOF.)
    const drain = nonNegativeMs(this.spec.drainTimeoutMs, DEFAULT_DRAIN_TIMEOUT_MS, "drainTimeoutMs");
    for (const v of [grace, timeout, drain]) if (typeof v !== "number") return this.fail(v);
    this.killGraceMs = grace as number;
    const lib = loadNodePty();
    if (lib instanceof Error) return this.fail(failure("ENOTSUP", `no terminal support on this agent (@lydell/node-pty: ${lib.message})`));
    const resolved = resolveCommand(this.spec);
    if (resolved instanceof Error) return this.fail(resolved);
    const cwdErr = this.spec.cwd !== undefined ? checkCwd(this.spec.cwd) : null;
    if (cwdErr) return this.fail(cwdErr);
    const env = buildChildEnv(this.spec.env);
    env.TERM ??= this.spec.terminal.term || DEFAULT_TERM;
    const file = findExecutable(resolved.file, env.PATH, this.spec.cwd);
    if (typeof file !== "string") return this.fail(file);
    try {
      this.pty = lib.spawn(file, resolved.args, {
        name: env.TERM,
        cols: this.spec.terminal.cols,
        rows: this.spec.terminal.rows,
        cwd: this.spec.cwd,
        env,
        encoding: null,
      });
    } catch (err) {
      return this.fail(failure("EINVAL", err instanceof Error ? err.message : String(err), err));
    }
    this.started(timeout as number);
  }

  started(timeoutMs: number): void {
    const pty = this.pty!;
    this.state = "running";
    this.pid = pty.pid;
    pty.onData((d: string | Buffer) => this.output(typeof d === "string" ? Buffer.from(d) : d));
    pty.onExit(({ exitCode, signal }) => this.exited(exitCode, signal));
    if (timeoutMs > 0) {
      this.timeoutTimer = setTimeout(() => {
        this.timeoutTimer = undefined;
        if (this.state !== "running") return;
        this.timedOut = true;
        this.terminate();
      }, timeoutMs);
    }
    const pid = this.pid;
    process.nextTick(() => this.hooks.onSpawn?.(pid));
  }

  output(buf: Buffer): void {
    for (let off = 0; off < buf.length; off += MAX_OUTPUT_CHUNK_BYTES) {
      const len = Math.min(MAX_OUTPUT_CHUNK_BYTES, buf.length - off);
      this.hooks.onOutput?.("stdout", new Uint8Array(buf.buffer, buf.byteOffset + off, len));
    }
  }

  exited(code: number, signal: number | undefined): void {
    if (this.state !== "running") return;
    this.state = "exited";
    this.stdinClosed = true;
    if (this.timeoutTimer) clearTimeout(this.timeoutTimer);
    this.killTimer?.unref();
    // node-pty reports the exit once the master reached EOF; data events queued before it run first.
    setImmediate(() => {
      this.state = "finished";
      const sig = signal ? (SIGNAL_NAMES.get(signal) ?? `SIG${signal}`) : null;
      // Paused at the exit, node-pty may have closed the master before all was read: say so (R-O8).
      const complete = !this.paused;
      this.hooks.onExit?.({ exitCode: sig ? null : code, signal: sig, timedOut: this.timedOut, outputComplete: { stdout: complete, stderr: true } });
    });
  }
}

/** Start `spec` on a terminal when it asks for one, else with pipes (startProcess). */
export function startCommand(spec: ProcessSpec, hooks: ProcessHooks = {}): ProcessHandle {
  const terminal = spec.terminal;
  return terminal ? startPtyProcess({ ...spec, terminal }, hooks) : startProcess(spec, hooks);
}
