// Run the operator CLI in-process with captured stdout/stderr.
import { Readable, Writable } from "node:stream";
import { runOperatorCli, type OperatorIO, type TerminateSignal, type TuiLaunch } from "../../shells/operator/cli.js";

export interface CliResult {
  code: number;
  stdout: string;
  stdoutBytes: Buffer;
  stderr: string;
}

export function collector(): { stream: Writable; bytes: () => Buffer } {
  const parts: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _enc, cb) {
      parts.push(typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk));
      cb();
    },
  });
  return { stream, bytes: () => Buffer.concat(parts) };
}

export interface RunOpts {
  env?: Record<string, string | undefined>;
  stdin?: string | Buffer | Readable;
  /** Fire the CLI's interrupt handler after this many ms. */
  interruptAfterMs?: number;
  /** Deliver SIGTERM or SIGHUP to the CLI's handler (if it subscribed) after `ms`, and again after `againMs` if set. */
  terminate?: { signal: TerminateSignal; ms: number; againMs?: number };
  /** Set when the CLI subscribed to SIGTERM/SIGHUP (only --cancel-on-interrupt does). */
  subscribed?: { terminate: boolean };
  tui?: (l: TuiLaunch) => Promise<number>;
}

export async function cli(argv: string[], o: RunOpts = {}): Promise<CliResult & { tuiLaunch?: TuiLaunch }> {
  const out = collector();
  const err = collector();
  const stdin =
    o.stdin instanceof Readable ? o.stdin : Readable.from(o.stdin === undefined ? [] : [typeof o.stdin === "string" ? Buffer.from(o.stdin) : o.stdin]);
  let launched: TuiLaunch | undefined;
  const handlers = new Set<() => void>();
  const terminators = new Set<(s: TerminateSignal) => void>();
  const io: Partial<OperatorIO> = {
    stdout: out.stream,
    stderr: err.stream,
    stdin,
    env: o.env ?? {},
    onInterrupt: (cb) => {
      handlers.add(cb);
      return () => handlers.delete(cb);
    },
    onTerminate: (cb) => {
      if (o.subscribed) o.subscribed.terminate = true;
      terminators.add(cb);
      return () => terminators.delete(cb);
    },
    runTui:
      o.tui ??
      (async (l) => {
        launched = l;
        return 0;
      }),
  };
  const timer = o.interruptAfterMs !== undefined ? setTimeout(() => handlers.forEach((h) => h()), o.interruptAfterMs) : null;
  const t = o.terminate;
  const termTimers = t
    ? [t.ms, ...(t.againMs !== undefined ? [t.againMs] : [])].map((ms) => setTimeout(() => terminators.forEach((h) => h(t.signal)), ms))
    : [];
  try {
    const code = await runOperatorCli(argv, io);
    const stdoutBytes = out.bytes();
    return { code, stdout: stdoutBytes.toString("utf8"), stdoutBytes, stderr: err.bytes().toString("utf8"), tuiLaunch: launched };
  } finally {
    if (timer) clearTimeout(timer);
    for (const tt of termTimers) clearTimeout(tt);
  }
}
