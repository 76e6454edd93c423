/**
 * An operator's view of one command (a row of `rvbox ls`, the TUI's command
 * list and output header), built only from what the server has made durable:
 * the committed view (ServerCommand.committed) and the fields fixed at
 * submission. A crash may take back the server's working state (`state` may
 * be one group commit ahead of `committed`); what a reader was shown, never.
 *
 * The control API (shells/server/control-service.ts toCommand) answers with
 * the same fields; client/model.ts converts its messages to this shape, the
 * simulator's TUI source builds it from a simulated server with `commandView`.
 * Times are milliseconds since the Unix epoch; counters are numbers.
 */
import { CommandLifecycle, ShellType, type ExecutionSpec } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Lifecycle } from "./items.js";

export interface CommandInfo {
  uuid: string;
  clientId: string;
  state: Lifecycle;
  revision: number;
  exitCode: number | null;
  signalName: string;
  reason: string;
  terminalSource: "agent" | "server" | "";
  createdAt: number | null;
  queueExpiry: number | null;
  /** When its process started (agent's clock); null if it never ran. */
  startedAt: number | null;
  /** When it ended; null while active. */
  endedAt: number | null;
  /** endedAt - startedAt once both are known (how long the process ran); null otherwise. */
  durationMs: number | null;
  /** A one-line summary of what runs: `sh: echo hi`, `argv: ls -l`, `script (120 B, /bin/sh)`. */
  program: string;
  cwd: string;
  stdinOpen: boolean;
  timeoutMs: number;
  storedThrough: number;
  retainedBytes: number;
  retentionMarkers: number;
  attempts: number;
  stdinAckedThrough: number;
  /** An operator closed its stdin (CloseStdin taken). */
  stdinCloseRequested: boolean;
  /** `run -t` (protocol 1.1): the terminal it was submitted with, "COLSxROWS TERM"; absent for every other command. */
  terminal?: string;
}

/** "120x40 xterm-256color": a command's terminal as the CLI shows it. */
export function terminalText(spec: ExecutionSpec | undefined): string | undefined {
  const t = spec?.terminal;
  if (!t) return undefined;
  return `${t.size ? `${t.size.cols}x${t.size.rows}` : "?"}${t.term ? ` ${t.term}` : ""}`;
}

/**
 * The parts of a server command a reader may use (a structural subset of
 * core/server ServerCommand): `committed`, and what never changes after the
 * submission or only counts what is durable.
 */
export interface CommittedCommand {
  uuid: string;
  clientId: string;
  spec: ExecutionSpec;
  createdAt: number;
  queueExpiry: number;
  exit: { terminalSource: "agent" | "server" | "" };
  dispatch: { attempts: number };
  output: { storedOutputBytes: number; retention: readonly unknown[] };
  stdin: { ackedThrough: number; closeRequested: boolean };
  committed: {
    state: CommandLifecycle;
    revision: number;
    exitCode: number | null;
    signalName: string;
    reason: string;
    storedThrough: number;
    startedTime: number;
    endedTime: number;
  };
}

export function lifecycleName(s: CommandLifecycle | number): Lifecycle {
  const n = CommandLifecycle[s as CommandLifecycle];
  if (n === undefined || n === "UNSPECIFIED") return "unknown";
  return n.toLowerCase() as Lifecycle;
}

export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

export function programSummary(spec: ExecutionSpec | undefined): string {
  const p = spec?.program;
  switch (p?.case) {
    case "argv":
      return `argv: ${p.value.argv.map(shellQuote).join(" ")}`;
    case "shell": {
      const sh = ShellType[p.value.shell]?.toLowerCase() ?? "sh";
      return `${sh === "unspecified" ? "sh" : sh}: ${p.value.commandLine}`;
    }
    case "script":
      return `script (${Number(p.value.sizeBytes)} B${p.value.interpreter ? `, ${p.value.interpreter}` : ""}${p.value.args.length ? ` ${p.value.args.join(" ")}` : ""})`;
    default:
      return "(no program)";
  }
}

/** Start, end and the duration between them (wall clock, ms). */
export function times(startedAt: number | null, endedAt: number | null): Pick<CommandInfo, "startedAt" | "endedAt" | "durationMs"> {
  return { startedAt, endedAt, durationMs: startedAt !== null && endedAt !== null ? Math.max(0, endedAt - startedAt) : null };
}

/** A change of any of these changes the view (a cache key for readers that rebuild rows per frame). */
export function commandViewKey(c: CommittedCommand): string {
  const k = c.committed;
  return `${k.state}|${k.revision}|${k.storedThrough}|${k.exitCode}|${k.signalName}|${k.reason}|${k.startedTime}|${k.endedTime}|${c.dispatch.attempts}|${c.output.storedOutputBytes}|${c.output.retention.length}|${c.stdin.ackedThrough}|${c.stdin.closeRequested}|${c.exit.terminalSource}`;
}

/** `toWall`: the server's deadline clock to wall time (queueExpiry); identity where both are one clock. */
export function commandView(c: CommittedCommand, toWall: (deadline: number) => number = (t) => t): CommandInfo {
  const k = c.committed;
  return {
    uuid: c.uuid,
    clientId: c.clientId,
    state: lifecycleName(k.state),
    revision: k.revision,
    exitCode: k.exitCode,
    signalName: k.signalName,
    reason: k.reason,
    terminalSource: c.exit.terminalSource,
    createdAt: c.createdAt,
    queueExpiry: toWall(c.queueExpiry),
    ...times(k.startedTime || null, k.endedTime || null),
    program: programSummary(c.spec),
    cwd: c.spec.cwd,
    stdinOpen: c.spec.stdinOpen,
    timeoutMs: Number(c.spec.timeoutMs),
    storedThrough: k.storedThrough,
    retainedBytes: c.output.storedOutputBytes,
    retentionMarkers: c.output.retention.length,
    attempts: c.dispatch.attempts,
    stdinAckedThrough: c.stdin.ackedThrough,
    stdinCloseRequested: c.stdin.closeRequested,
    ...(c.spec.terminal ? { terminal: terminalText(c.spec) } : {}),
  };
}
