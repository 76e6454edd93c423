/**
 * The operator's plain view of the fleet: what the CLI prints (and its
 * `--json` output) and what the TUI renders. Converted from the control API
 * messages (protos/rvbox/v1/control.proto) here; the output items and the
 * command view are the core's (core/reader/), which the simulator's TUI
 * source builds from a simulated server, so every consumer sees the same
 * shapes. Times are milliseconds since the Unix epoch; counters are numbers.
 */
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { CommandLifecycle, OutputStream, SignalKind, TruncationCause } from "../protos/gen/rvbox/v1/common_pb.js";
import { lifecycleName, programSummary, terminalText, times, type CommandInfo } from "../core/reader/command-view.js";
import type { Lifecycle, OutputItem, StreamName, TruncationSource } from "../core/reader/items.js";
import {
  JobChildPhase,
  TerminalSource,
  type Client,
  type Command,
  type Job,
  type FollowOutputResponse,
  type Incident,
  type PendingClaim,
  type Session,
} from "../protos/gen/rvbox/v1/control_pb.js";

export const LIFECYCLES: readonly Lifecycle[] = [
  "queued",
  "dispatched",
  "accepted",
  "running",
  "succeeded",
  "failed",
  "rejected",
  "cancelled",
  "interrupted",
  "expired",
];
export const TERMINAL_STATES: ReadonlySet<Lifecycle> = new Set(["succeeded", "failed", "rejected", "cancelled", "interrupted", "expired"]);
export const isTerminalState = (s: Lifecycle): boolean => TERMINAL_STATES.has(s);

export function lifecycleEnum(s: string): CommandLifecycle | null {
  const k = s.toUpperCase() as keyof typeof CommandLifecycle;
  const v = CommandLifecycle[k];
  return typeof v === "number" && v !== CommandLifecycle.UNSPECIFIED ? v : null;
}

export const streamName = (s: OutputStream): StreamName | "unknown" =>
  s === OutputStream.STDOUT ? "stdout" : s === OutputStream.STDERR ? "stderr" : "unknown";

/** Signals an operator can send; CANCEL is the operator cancel (TERM, then KILL after the grace period). */
export const SIGNALS = ["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2", "CANCEL"] as const;
export type SignalName = (typeof SIGNALS)[number];
const SIGNAL_KIND: Record<SignalName, SignalKind> = {
  INT: SignalKind.INTERRUPT,
  TERM: SignalKind.TERMINATE,
  KILL: SignalKind.KILL,
  HUP: SignalKind.HANGUP,
  QUIT: SignalKind.QUIT,
  USR1: SignalKind.USER1,
  USR2: SignalKind.USER2,
  CANCEL: SignalKind.CANCEL,
};
export const signalKind = (s: SignalName): SignalKind => SIGNAL_KIND[s];

/** "TERM", "sigterm", "SIGTERM", "15" -> "TERM"; null if unknown. */
export function parseSignal(s: string): SignalName | null {
  const u = s.trim().toUpperCase().replace(/^SIG/, "");
  const byNumber: Record<string, SignalName> = { "1": "HUP", "2": "INT", "3": "QUIT", "9": "KILL", "10": "USR1", "12": "USR2", "15": "TERM" };
  if (byNumber[u]) return byNumber[u];
  if (u === "TERMINATE") return "TERM";
  if (u === "INTERRUPT") return "INT";
  if (u === "HANGUP") return "HUP";
  if (u === "USER1") return "USR1";
  if (u === "USER2") return "USR2";
  return (SIGNALS as readonly string[]).includes(u) ? (u as SignalName) : null;
}

export function signalKindName(k: SignalKind): string {
  return SignalKind[k] ?? String(k);
}

export { lifecycleName, programSummary, shellQuote, times, type CommandInfo } from "../core/reader/command-view.js";
export type { ByteSpan, Lifecycle, OutputItem, StreamName, TruncationSource } from "../core/reader/items.js";
export { lastSeqOf } from "../core/reader/items.js";

const ms = (t: Timestamp | undefined): number | null => (t ? timestampMs(t) : null);

// ------------------------------------------------------------------ fleet

export type Usage = { used: number; limit: number };

/** Connection state of one agent as far as the source knows it. */
export type LinkState = "connected" | "reconciling" | "registering" | "connecting" | "backoff" | "offline" | "down";

export interface SessionInfo {
  /** Row key: the client id (live), or the simulated host's name (a clone or impostor shares a client id). */
  key: string;
  clientId: string;
  instanceId: string;
  generation: number;
  link: LinkState;
  /** Free text after the link state: server session phase, backoff deadline, remote address. */
  detail: string;
  lastActivity: number | null;
  running: number;
  queued: number;
  maxRunning: number | null;
  maxQueued: number | null;
  /** Non-terminal commands at the server. */
  active: number | null;
  /** Unacknowledged send-window bytes of the session (agent side). */
  window: Usage | null;
  /** Output budget use: retained output at the server or spooled output at the agent. */
  budget: Usage | null;
  authorizedInstance: string | null;
  authorizationExpiry: number | null;
  kind: "agent" | "clone" | "impostor";
  /** Incidents of this client counted instead of stored (the server's incident bounds); absent: unknown. */
  incidentsDropped?: number;
  /** An operator drains the client (rvbox drain): no new command is dispatched to it. */
  draining?: boolean;
  /** The client's labels at the server (rvbox label); absent: unknown (a simulated host). */
  labels?: Record<string, string>;
}

export interface ClaimInfo {
  clientId: string;
  instanceId: string;
  currentInstanceId: string;
  at: number | null;
  attempts: number;
}

export interface IncidentInfo {
  id: string;
  clientId: string;
  uuid: string;
  kind: string;
  detail: string;
  at: number | null;
  acknowledged: boolean;
}

/** A duration as people read it: 850ms, 12.3s, 3m04s, 1h02m, 2d03h. */
export function humanDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.floor(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`;
}

/** The DURATION column: how long it ran, or has been running ("12s…"); "-" if it never ran. */
export function durationText(c: Pick<CommandInfo, "startedAt" | "durationMs">, now: number): string {
  if (c.durationMs !== null) return humanDuration(c.durationMs);
  if (c.startedAt !== null) return `${humanDuration(Math.max(0, now - c.startedAt))}…`;
  return "-";
}

export function commandInfo(c: Command): CommandInfo {
  return {
    uuid: c.issueUuid,
    clientId: c.clientId,
    state: lifecycleName(c.state),
    revision: Number(c.revision),
    exitCode: c.exitCode ?? null,
    signalName: c.signalName,
    reason: c.reason,
    terminalSource: c.terminalSource === TerminalSource.AGENT ? "agent" : c.terminalSource === TerminalSource.SERVER ? "server" : "",
    createdAt: ms(c.createdTime),
    queueExpiry: ms(c.queueExpiryTime),
    ...times(ms(c.startedTime), ms(c.endedTime)),
    program: programSummary(c.spec),
    cwd: c.spec?.cwd ?? "",
    stdinOpen: c.spec?.stdinOpen ?? false,
    timeoutMs: Number(c.spec?.timeoutMs ?? 0n),
    storedThrough: Number(c.storedThroughEventSeq),
    retainedBytes: Number(c.retainedOutputBytes),
    retentionMarkers: c.retentionMarkers,
    attempts: c.dispatchAttempts,
    stdinAckedThrough: Number(c.stdinAckedThrough),
    stdinCloseRequested: c.stdinCloseRequested,
    ...(c.spec?.terminal ? { terminal: terminalText(c.spec) } : {}),
  };
}

export function claimInfo(c: PendingClaim): ClaimInfo {
  return { clientId: c.clientId, instanceId: c.instanceId, currentInstanceId: c.currentInstanceId, at: ms(c.claimTime), attempts: c.attempts };
}

export function incidentInfo(i: Incident): IncidentInfo {
  return { id: i.incidentId, clientId: i.clientId, uuid: i.issueUuid, kind: i.kind, detail: i.detail, at: ms(i.time), acknowledged: i.acknowledged };
}

/**
 * Client ids in the order an operator reads a fleet: runs of digits compare
 * as numbers (web-2 before web-10), everything else character by character.
 * Ids equal as numbers (web-01, web-1) fall back to plain order, so the
 * order is total.
 */
export function compareClientIds(a: string, b: string): number {
  const pa = a.match(/\d+|\D+/g) ?? [];
  const pb = b.match(/\d+|\D+/g) ?? [];
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const x = pa[i]!;
    const y = pb[i]!;
    if (x === y) continue;
    const dx = /^\d/.test(x);
    const dy = /^\d/.test(y);
    if (dx && dy) {
      // Compare as numbers without Number()'s limits: strip leading zeros, then length, then digits.
      const nx = x.replace(/^0+(?=\d)/, "");
      const ny = y.replace(/^0+(?=\d)/, "");
      if (nx.length !== ny.length) return nx.length - ny.length;
      if (nx !== ny) return nx < ny ? -1 : 1;
      continue;
    }
    return x < y ? -1 : 1;
  }
  if (pa.length !== pb.length) return pa.length - pb.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * One row per client id, in client id order (compareClientIds): the server's
 * client record, joined with its live WebSocket session (if any) for the
 * session phase and remote address. Connections that have not registered yet
 * (no client id) are left out.
 */
export function sessionInfos(clients: readonly Client[], sessions: readonly Session[]): SessionInfo[] {
  const live = new Map<string, Session>();
  for (const s of sessions) if (s.clientId !== "") live.set(s.clientId, s);
  return [...clients]
    .sort((x, y) => compareClientIds(x.clientId, y.clientId))
    .map((c) => {
      const s = live.get(c.clientId);
      let link: LinkState = c.connected ? "connected" : "offline";
      if (s && s.phase !== "ready") link = s.phase === "reconciling" ? "reconciling" : "registering";
      const lastInbound = s ? ms(s.lastInboundTime) : null;
      const lastActivity = Math.max(ms(c.lastActivityTime) ?? 0, lastInbound ?? 0);
      return {
        key: c.clientId,
        clientId: c.clientId,
        instanceId: c.instanceId,
        generation: Number(c.generation),
        link,
        detail: s ? `${s.phase}${s.remoteAddress ? ` ${s.remoteAddress}` : ""}` : "",
        lastActivity: lastActivity > 0 ? lastActivity : null,
        running: c.runningCommands,
        queued: c.queuedCommands,
        maxRunning: c.maxRunningCommands || null,
        maxQueued: c.maxQueuedCommands || null,
        active: c.activeCommands,
        // The agent's unacknowledged window is known only agent-side (not in the control API).
        window: null,
        // Servers older than WatchFleet leave the budget at 0: unknown.
        budget: c.outputBudgetBytes > 0n ? { used: Number(c.retainedOutputBytes), limit: Number(c.outputBudgetBytes) } : null,
        authorizedInstance: c.authorizedInstanceId || null,
        authorizationExpiry: ms(c.authorizationExpiryTime),
        kind: "agent",
        incidentsDropped: Number(c.incidentsDropped),
        draining: c.draining,
        labels: { ...c.labels },
      };
    });
}

// ------------------------------------------------------------------ output

export function truncationSource(c: TruncationCause): TruncationSource {
  switch (c) {
    case TruncationCause.AGENT_WATERMARK:
      return "agent-watermark";
    case TruncationCause.AGENT_BUDGET:
      return "agent-budget";
    case TruncationCause.SERVER_RETENTION:
      return "server-retention";
    default:
      return "unknown";
  }
}

/**
 * Output bytes a reader asks the server to put in one FollowOutput response
 * (FollowOutputRequest.max_batch_bytes; the server caps it at its own limit).
 */
export const FOLLOW_MAX_BATCH_BYTES = 1024 * 1024;

/** The events of one FollowOutput response: its batch (`events`), or itself. */
export function followEvents(m: FollowOutputResponse): readonly FollowOutputResponse[] {
  return m.events.length > 0 ? m.events : [m];
}

/** A FollowOutput message as an OutputItem; `finished` (and an empty item) give null. */
export function outputItem(m: FollowOutputResponse): OutputItem | null {
  const seq = Number(m.eventSeq);
  const it = m.item;
  switch (it.case) {
    case "output":
      return { kind: "output", seq, stream: streamName(it.value.stream), offset: Number(it.value.streamOffset), data: it.value.data };
    case "truncation":
    case "retention": {
      const ev = it.value.removedEvents;
      return {
        kind: "truncation",
        seq,
        cause: it.case === "retention" ? "server-retention" : truncationSource(it.value.cause),
        events: ev ? { first: Number(ev.firstEventSeq), last: Number(ev.lastEventSeq) } : null,
        ranges: it.value.removedBytes.map((r) => ({ stream: streamName(r.stream), offset: Number(r.offset), length: Number(r.length) })),
      };
    }
    case "incomplete":
      return { kind: "incomplete", seq, streams: it.value.streams.map(streamName), reason: it.value.reason };
    case "lifecycle":
      return {
        kind: "lifecycle",
        seq,
        revision: Number(m.commandRevision),
        state: lifecycleName(it.value.state),
        exitCode: it.value.exitCode ?? null,
        signalName: it.value.signalName,
        reason: it.value.reason,
        error: it.value.error ? it.value.error.message : "",
      };
    case "stdinAck":
      return { kind: "stdin_ack", seq, writeSeq: Number(it.value.writeSeq), closed: it.value.closed, failure: it.value.failure };
    case "signalResult":
      return {
        kind: "signal_result",
        seq,
        revision: Number(m.commandRevision),
        signal: signalKindName(it.value.signal),
        delivered: it.value.delivered,
        detail: it.value.detail,
      };
    case "scriptUpload":
      return { kind: "script_upload", seq, receivedBytes: Number(it.value.receivedBytes), complete: it.value.complete };
    default:
      return null;
  }
}

// ------------------------------------------------------------------ jobs

export type JobChildPhaseName = "pending" | "started" | "done" | "refused" | "cancelled" | "unknown";

/** One client of a job: `state` is its command's (or cancelled / rejected for one never started). */
export interface JobChildInfo {
  client: string;
  uuid: string;
  phase: JobChildPhaseName;
  state: Lifecycle | "pending";
  exitCode: number | null;
  reason: string;
  startedAt: number | null;
  endedAt: number | null;
  durationMs: number | null;
}

export interface JobInfo {
  id: string;
  createdAt: number;
  program: string;
  maxConcurrency: string;
  maxConcurrencyResolved: number;
  maxErrors: string;
  /** -1: no limit. */
  maxErrorsResolved: number;
  stoppedReason: string;
  endedAt: number | null;
  summary: { targets: number; pending: number; inFlight: number; succeeded: number; failed: number; cancelled: number };
  children: JobChildInfo[];
}

const PHASE_NAMES: Record<JobChildPhase, JobChildPhaseName> = {
  [JobChildPhase.UNSPECIFIED]: "unknown",
  [JobChildPhase.PENDING]: "pending",
  [JobChildPhase.STARTED]: "started",
  [JobChildPhase.DONE]: "done",
  [JobChildPhase.REFUSED]: "refused",
  [JobChildPhase.CANCELLED]: "cancelled",
};

export function jobInfo(j: Job): JobInfo {
  const ms = (t: Parameters<typeof timestampMs>[0] | undefined): number | null => (t ? timestampMs(t) : null);
  const s = j.summary;
  return {
    id: j.jobId,
    createdAt: ms(j.createdTime) ?? 0,
    program: programSummary(j.spec),
    maxConcurrency: j.maxConcurrency,
    maxConcurrencyResolved: j.maxConcurrencyResolved,
    maxErrors: j.maxErrors,
    maxErrorsResolved: j.maxErrorsResolved,
    stoppedReason: j.stoppedReason,
    endedAt: ms(j.endedTime),
    summary: {
      targets: s?.targets ?? 0,
      pending: s?.pending ?? 0,
      inFlight: s?.inFlight ?? 0,
      succeeded: s?.succeeded ?? 0,
      failed: s?.failed ?? 0,
      cancelled: s?.cancelled ?? 0,
    },
    children: j.children.map((c) => {
      const startedAt = ms(c.startedTime);
      const endedAt = ms(c.endedTime);
      const phase = PHASE_NAMES[c.phase] ?? "unknown";
      return {
        client: c.clientId,
        uuid: c.issueUuid,
        phase,
        state: phase === "pending" ? "pending" : lifecycleName(c.state),
        exitCode: c.exitCode ?? null,
        reason: c.reason,
        startedAt,
        endedAt,
        durationMs: startedAt !== null && endedAt !== null ? Math.max(0, endedAt - startedAt) : null,
      };
    }),
  };
}

/** A job's one-line summary: "6 targets: 3 succeeded, 2 failed, 1 cancelled (stopped: …)". */
export function jobSummaryText(j: JobInfo): string {
  const s = j.summary;
  const parts = [
    s.succeeded > 0 ? `${s.succeeded} succeeded` : "",
    s.failed > 0 ? `${s.failed} failed` : "",
    s.cancelled > 0 ? `${s.cancelled} cancelled` : "",
    s.inFlight > 0 ? `${s.inFlight} in flight` : "",
    s.pending > 0 ? `${s.pending} pending` : "",
  ].filter(Boolean);
  const state = j.endedAt !== null ? "done" : "running";
  return `job ${j.id} ${state}: ${s.targets} target${s.targets === 1 ? "" : "s"}: ${parts.join(", ") || "none started"}${j.stoppedReason ? ` (stopped: ${j.stoppedReason})` : ""}`;
}
