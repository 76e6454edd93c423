// The Pair rig of the core tests (the idea of quinn-proto's `Pair`, written
// for RVBox): one server node and any number of agent nodes, each a pure
// reducer stepped with an explicit clock, joined by an in-memory link.
//
//   - Link: one FIFO for every frame (no frame overtakes an earlier one);
//     `autoDeliver = false` queues frames until `deliver()`; `hold(agent)` /
//     `release(agent)` park one agent's frames (both directions) while the
//     others flow; `dropNext(agent, n)` loses its next n frames; `cutLink`
//     breaks a link (frames in flight are lost with it).
//   - Clock: `now` (the deadline clock) moves only by `advance(ms)` or by a
//     test setting it; every node's wall clock is `now + wallStep`.
//   - Disk: each node's persist batches become durable at once
//     (`autoDurable`), or stay pending until `flush(node, n)`; a crash
//     (`restartServer`, `restartAgent`) loses the pending ones and restores the
//     node from its durable tables.
//   - Executor: a scripted process table per agent (spawn, stdin, signals,
//     script files; `spawnFails` / `prepareFails` make them fail), whose
//     reports follow the agent's step like a real executor's would.
//   - Invariants: both reducers' `invariants` run after every step, and every
//     persisted record is checked to be a plain table/key/value row.
//
// Tests observe what a peer or an operator sees, through the public helpers:
// `command(uuid)` (the operator's command view: core/reader/command-view.ts
// over the committed view, as GetCommand answers), `outputOf(uuid)` (what a
// follower prints: the durable events through the core's follow cursor),
// `clientList()`, `sessions()`, `claims()`, `incidents()` (the control API's
// list replies, shells/server/control-service.ts), `framesSent(...)` (the
// wire), `spawned(agent)` / `agentRunning(agent)` / `process(agent, uuid)`
// (what the agent's effects did to processes). The node states (`server`,
// `agents.get(x).st`) stay reachable for the few tests that check an
// invariant-level property with no observable equivalent.
//
// The server-only and agent-only rigs (test/support/server-rig.ts,
// test/core/agent/rig.ts), for tests that hand-craft the peer's frames, build
// on the same parts: `Disk`, `stepServerChecked` / `stepAgentChecked` and
// the observation functions below.
import { createHash } from "node:crypto";
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { expect } from "vitest";
import {
  AgentEnvelopeSchema,
  ReconcileRequestSchema,
  ReconcileTargetSchema,
  type AgentError,
  type ClientHello,
  type CommandDispatch,
  type ReconcileCommandState,
  type ReconcileSnapshot,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, ExecutionSpecSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { JobChildPhase, type AuditEntry, type Client, type Incident, type Job, type PendingClaim, type Session } from "../../protos/gen/rvbox/v1/control_pb.js";
import {
  agentInvariants,
  applyRecord,
  agentStep,
  defaultAgentConfig,
  defaultServerConfig,
  newServer,
  restoreAgent,
  restoreServer,
  serverInvariants,
  serverStep,
  type AgentConfig,
  type AgentEffect,
  type AgentInput,
  type AgentState,
  type ControlRequest,
  type ControlResult,
  type PersistEffect,
  type ServerConfig,
  type ServerEffect,
  type ServerInput,
  type ServerCommand,
  type ServerState,
} from "../../core/index.js";
import { handleReconcileRequest, sendSnapshot } from "../../core/agent/reconcile.js";
import { StepContext } from "../../core/step-context.js";
import { commandView, lifecycleName, type CommandInfo } from "../../core/reader/command-view.js";
import { newCursor, step as cursorStep, type FollowCursor } from "../../core/reader/follow-cursor.js";
import type { OutputItem, StreamName } from "../../core/reader/items.js";
import { missingMessage } from "../../core/server/history.js";
import { type EventRow, type RetentionRow, type ServerTables, restoreCommand, rowOf, rowsOf } from "../../core/server/store.js";
import { activeCounts, auditView, claimView, clientView, incidentView, sessionView, toJob, type FleetReader } from "../../shells/server/control-service.js";
import { decompressValidated } from "../../shells/zstd/decompress.js";
import { testPorts } from "./ports.js";

// ------------------------------------------------------------------ shared parts

export const T0 = 1_700_000_000_000;
export const sha = (b: Uint8Array | string): Uint8Array => new Uint8Array(createHash("sha256").update(b).digest());
export const enc = (s: string) => new TextEncoder().encode(s);
export const decode = (data: Uint8Array) => fromBinary(AgentEnvelopeSchema, data);
export type Envelope = ReturnType<typeof decode>;

/** A node's disk: durable tables, and the persist batches not yet durable. */
export class Disk {
  durable = new Map<string, Map<string, unknown>>();
  pending: PersistEffect[] = [];
  apply(p: PersistEffect): void {
    for (const r of p.records) applyRecord(this.durable, r, (v) => structuredClone(v));
  }
  tables(): { get(t: string): ReadonlyMap<string, unknown> | undefined } {
    const snap = structuredClone(this.durable);
    return { get: (t) => snap.get(t) };
  }
  /** The durable tables as they are now, uncopied (for reads that change nothing). */
  view(): { get(t: string): ReadonlyMap<string, unknown> | undefined } {
    return { get: (t) => this.durable.get(t) };
  }
}

/**
 * Most unit tests submit to a client before (or without) registering it and
 * authorize instances that never tried: the rigs opt those requests in to
 * `allowUnknownClient` / `instanceNotYetSeen` unless the test sets the field
 * itself (the tests of those refusals set it to false).
 */
export function lenient(r: ControlRequest): ControlRequest {
  if (r.op === "submit" && r.allowUnknownClient === undefined) return { ...r, allowUnknownClient: true };
  if (r.op === "authorize" && r.instanceNotYetSeen === undefined) return { ...r, instanceNotYetSeen: true };
  return r;
}

function checkRows(effects: ReadonlyArray<ServerEffect | AgentEffect>, prefixAllowed: boolean): void {
  for (const e of effects) {
    if (e.type !== "persist") continue;
    for (const rec of e.records)
      expect(rec, "persist records are table/key/value rows").toEqual({
        table: expect.any(String),
        key: expect.any(String),
        value: rec.value,
        ...(prefixAllowed && rec.prefix ? { prefix: true } : {}),
      });
  }
}

/** One server step: the reducer, then its invariants and the shape of what it persists. */
export function stepServerChecked(st: ServerState, input: ServerInput, now: number, wall: number): ServerEffect[] {
  const r = serverStep(st, input, now, { ports: testPorts }, wall);
  serverInvariants(st);
  checkRows(r.effects, true);
  return r.effects;
}

/** One agent step: the reducer, then its invariants and the shape of what it persists. `wall` undefined: the reducer's default. */
export function stepAgentChecked(st: AgentState, input: AgentInput, now: number, wall?: number): AgentEffect[] {
  const r = wall === undefined ? agentStep(st, input, now, { ports: testPorts }) : agentStep(st, input, now, { ports: testPorts }, wall);
  agentInvariants(st);
  checkRows(r.effects, false);
  return r.effects;
}

// ------------------------------------------------------------------ what an operator sees

/** The control API's view of the fleet over a core state (no socket facts: sessions have no remote address). */
export function fleetOf(st: ServerState, wallStep = 0): FleetReader {
  return { state: st, lastActivity: new Map(), sessionInfo: () => undefined, toWall: (t) => t + wallStep };
}

/**
 * GetCommand: the operator's view of a command (the committed view only);
 * undefined: NOT_FOUND. With the history in the store, a command memory no
 * longer holds is read from its durable row (`durable`: the disk's tables),
 * as the daemon reads it from its store.
 */
export function commandOf(st: ServerState, uuid: string, wallStep = 0, durable?: ServerTables): CommandInfo | undefined {
  const c = st.commands.get(uuid) ?? storedCommand(st, uuid, durable);
  return c ? commandView(c, (t) => t + wallStep) : undefined;
}

function storedCommand(st: ServerState, uuid: string, durable: ServerTables | undefined): ServerCommand | undefined {
  if (!st.config.limits.historyInStore || !durable) return undefined;
  const row = rowOf(durable, "command", uuid);
  return row ? restoreCommand(row, undefined) : undefined;
}

/**
 * ListCommands (all pages): the commands with a committed state, newest
 * first; with the history in the store, every durable command row (the
 * committed view of each), as the daemon lists them from its store.
 */
export function listCommandsOf(st: ServerState, wallStep = 0, durable?: ServerTables): CommandInfo[] {
  const all =
    st.config.limits.historyInStore && durable ? [...rowsOf(durable, "command")].map(([, r]) => restoreCommand(r, undefined)) : [...st.commands.values()];
  return all
    .filter((c) => c.committed.state !== CommandLifecycle.UNSPECIFIED)
    .sort((a, b) => b.createdAt - a.createdAt || (a.uuid < b.uuid ? -1 : 1))
    .map((c) => commandView(c, (t) => t + wallStep));
}

/** ListClients. */
export function clientListOf(st: ServerState, wallStep = 0): Client[] {
  const f = fleetOf(st, wallStep);
  const active = activeCounts(st);
  return [...st.clients.values()].map((c) => clientView(f, c, active));
}

/** ListSessions. */
export function sessionsOf(st: ServerState, wallStep = 0): Session[] {
  const f = fleetOf(st, wallStep);
  return [...st.conns.values()].map((c) => sessionView(f, c));
}

/** GetJob: a job as readers see it (its committed view, shells/server/control-service.ts `toJob`); undefined: NOT_FOUND. */
export function jobOf(st: ServerState, jobId: string, wallStep = 0): Job | undefined {
  const j = st.jobs.get(jobId);
  return j ? toJob(j, fleetOf(st, wallStep)) : undefined;
}

/** ListJobs (all pages, summaries only), newest first. */
export function jobsOf(st: ServerState, wallStep = 0): Job[] {
  return [...st.jobs.values()].sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? -1 : 1)).map((j) => toJob(j, fleetOf(st, wallStep), false));
}

/** A job's child phases as GetJob shows them ("pending", "started", "done", "refused", "cancelled"). */
export const jobPhases = (j: Job | undefined): string[] => (j ? j.children.map((c) => (JobChildPhase[c.phase] ?? String(c.phase)).toLowerCase()) : []);

/** ListAudit (everything kept, oldest first, as control-service.ts `auditView` shows it) and its dropped_entries count. */
export function auditOf(st: ServerState, durable?: ServerTables): { entries: AuditEntry[]; dropped: number } {
  // With the history in the store the log is the store's (its durable rows), as the daemon reads it.
  const kept =
    st.config.limits.historyInStore && durable ? [...rowsOf(durable, "audit")].map(([, e]) => e).sort((a, b) => a.seq - b.seq) : [...st.audit.values()];
  return { entries: kept.map(auditView), dropped: st.auditDropped };
}

/** ListAudit's refusals (kept apart from the entries, oldest first) and its dropped_refusals count. */
export function refusalsOf(st: ServerState): { refusals: AuditEntry[]; dropped: number } {
  return { refusals: [...st.refusals.values()].map(auditView), dropped: st.refusalsDropped };
}

/** ListClaims. */
export function claimsOf(st: ServerState): PendingClaim[] {
  return [...st.clients.values()].filter((c) => c.pendingClaim !== null).map(claimView);
}

/** ListIncidents (with the acknowledged ones unless `open`), and the dropped totals it reports. */
export function incidentsOf(st: ServerState, open = false): Incident[] {
  return [...st.incidents.values()].filter((i) => !open || !i.acknowledged).map(incidentView);
}

/** What a follower of a command's output was shown (FollowOutput from event 1 through the core's follow cursor). */
export interface Followed {
  stdout: string;
  stderr: string;
  /** The items shown, in order. */
  items: OutputItem[];
  /** The lifecycle states shown, in order. */
  states: string[];
  /** Where the reader would resume (next event sequence). */
  next: number;
  /** Byte ranges no marker explained. */
  gaps: number;
}

function itemOfRow(v: EventRow): OutputItem {
  const seq = v.seq;
  switch (v.kind) {
    case "output": {
      const d = decompressValidated(v.zstd, v.originalSize);
      if (!d.ok) throw new Error(`event ${seq}: stored frame does not decode: ${d.message}`);
      return { kind: "output", seq, stream: v.stream, offset: v.offset, data: d.data };
    }
    case "truncation":
      return { kind: "truncation", seq, cause: "unknown", events: null, ranges: v.ranges.map((r) => ({ ...r })) };
    case "lifecycle":
      return {
        kind: "lifecycle",
        seq,
        revision: v.revision,
        state: lifecycleName(v.state),
        exitCode: v.exitCode,
        signalName: v.signalName,
        reason: v.reason,
        error: v.error?.message ?? "",
      };
    case "stdin_ack":
      return { kind: "stdin_ack", seq, writeSeq: v.writeSeq, closed: v.closed, failure: v.failure };
    case "signal_result":
      return { kind: "signal_result", seq, revision: v.revision, signal: String(v.signal), delivered: v.delivered, detail: v.detail };
    case "script_upload":
      return { kind: "script_upload", seq, receivedBytes: v.receivedBytes, complete: v.complete };
    case "incomplete":
      return { kind: "incomplete", seq, streams: v.streams.map((s) => s ?? "unknown"), reason: v.reason };
    default:
      throw new Error(`event ${seq}: unknown kind`);
  }
}

/**
 * The durable events of a command as FollowOutput sends them (a server
 * retention marker where its range begins, in place of the output rows it
 * covers), run through the core's follow cursor in one batch.
 */
export function followOf(durable: ReadonlyMap<string, ReadonlyMap<string, unknown>>, uuid: string): Followed {
  const rows = [...(durable.get("event") ?? new Map<string, unknown>()).entries()]
    .filter(([k]) => k.startsWith(`${uuid}/`))
    .sort((a, b) => (a[0] < b[0] ? -1 : 1))
    .map(([, v]) => v as EventRow);
  const markers = [...(durable.get("retention") ?? new Map<string, unknown>()).values()]
    .map((v) => v as RetentionRow)
    .filter((m) => m.uuid === uuid)
    .sort((a, b) => a.firstSeq - b.firstSeq);
  const items: OutputItem[] = [];
  let mi = 0;
  for (const v of rows) {
    while (mi < markers.length && markers[mi]!.firstSeq <= v.seq) {
      const m = markers[mi++]!;
      items.push({
        kind: "truncation",
        seq: m.firstSeq,
        cause: "server-retention",
        events: { first: m.firstSeq, last: m.lastSeq },
        ranges: m.ranges.map((r) => ({ ...r })),
      });
    }
    if (v.kind === "output" && markers.some((m) => m.firstSeq <= v.seq && v.seq <= m.lastSeq)) continue;
    items.push(itemOfRow(v));
  }
  const r = cursorStep(newCursor(), items);
  if (!r.ok) throw new Error(`the follow cursor refused the stored stream: ${r.error.code}`);
  const shown = r.admitted.flatMap((a) => a.shown);
  const text: Record<StreamName, string> = { stdout: "", stderr: "" };
  const dec = new TextDecoder();
  for (const it of shown) if (it.kind === "output" && it.stream !== "unknown") text[it.stream] += dec.decode(it.data);
  const cursor: FollowCursor = r.cursor;
  return {
    stdout: text.stdout,
    stderr: text.stderr,
    items: shown,
    states: shown.flatMap((it) => (it.kind === "lifecycle" ? [it.state] : [])),
    next: cursor.next,
    gaps: cursor.gaps,
  };
}

// ------------------------------------------------------------------ what a server sees of an agent

/** A target of a ReconcileRequest: a UUID and its request hash (default: sha(uuid), the rigs' dispatch hash). */
export interface AskTarget {
  uuid: string;
  hash?: Uint8Array;
  /** last_server_event_seq (default 0). */
  through?: number;
}

/**
 * What the agent would answer a ReconcileRequest naming `targets` now: the
 * ReconcileSnapshot's records (every retained command with its lifecycle,
 * last event seq, revision and hash; a tombstone record for each named UUID
 * its ledger holds with that hash). Built by the agent's own handlers
 * (core/agent/reconcile.ts: handleReconcileRequest, sendSnapshot) on a copy
 * of its state, so asking changes nothing; an open store incident (which
 * would refuse the request) is set aside on the copy.
 */
export function agentSnapshotOf(st: AgentState, targets: ReadonlyArray<AskTarget> = []): ReconcileCommandState[] {
  const copy = structuredClone(st);
  copy.storeIncident = null;
  copy.pendingSnapshotTombstones = [];
  if (copy.session.conn === 0) copy.session.conn = -1; // a send needs a connection
  const ctx = new StepContext<AgentEffect, never>(0);
  const req = create(ReconcileRequestSchema, {
    targets: targets.map((t) =>
      create(ReconcileTargetSchema, { issueUuid: t.uuid, immutableRequestSha256: t.hash ?? sha(t.uuid), lastServerEventSeq: BigInt(t.through ?? 0) }),
    ),
  });
  handleReconcileRequest(copy, ctx as never, req, (code, message) => {
    throw new Error(`the agent would refuse the request: ${code} ${message}`);
  });
  sendSnapshot(copy, ctx as never);
  const sent = ctx.effects.filter((e) => e.type === "send").map((e) => decode((e as { data: Uint8Array }).data));
  const snap = sent.find((e) => e.payload.case === "reconcileSnapshot")?.payload.value as ReconcileSnapshot | undefined;
  if (!snap) throw new Error("no snapshot built");
  return snap.retainedCommands;
}

/** The UUIDs a snapshot would report retained (not tombstones), in the agent's order. */
export const retainedOf = (st: AgentState): string[] =>
  agentSnapshotOf(st)
    .filter((c) => !c.tombstoned)
    .map((c) => c.issueUuid);

/** Whether the agent would answer a ReconcileRequest naming `uuid` (with `hash`, default sha(uuid)) with a tombstone: its ledger holds it. */
export const tombstonedOf = (st: AgentState, uuid: string, hash: Uint8Array = sha(uuid)): boolean =>
  agentSnapshotOf(st, [{ uuid, hash }]).some((c) => c.issueUuid === uuid && c.tombstoned);

/** ListIncidents' `dropped` list: per client, how many were dropped, the last one's time (wall ms) and kind (as control-service.ts listIncidents builds it). */
export function incidentDropsOf(st: ServerState): Array<{ clientId: string; count: number; lastAt: number; lastKind: string }> {
  // lastAt as the service shows it: the stored value as is (a wall-clock time, as incidents' own).
  return [...st.incidentDrops.values()].map((x) => ({ clientId: x.clientId, count: x.count, lastAt: x.lastAt, lastKind: x.lastKind }));
}

/** ListIncidents' `dropped` count of a client (0: none dropped). */
export function droppedIncidentsOf(st: ServerState, clientId: string): number {
  return st.incidentDrops.get(clientId)?.count ?? 0;
}

/** A pending claim as plain data (claim time in ms), undefined for none. */
export const plainClaim = (c: PendingClaim | undefined) => c && { instanceId: c.instanceId, at: timestampMs(c.claimTime!), attempts: c.attempts };

/** A client's authorization as ListClients shows it (expiry in wall ms), null for none. */
export const plainAuthorization = (c: Client | undefined) =>
  c && c.authorizedInstanceId !== "" ? { instanceId: c.authorizedInstanceId, expiresAt: timestampMs(c.authorizationExpiryTime!) } : null;

/** An incident as ListIncidents shows it, as plain data (time in ms). */
export const plainIncident = (i: Incident) => ({
  id: i.incidentId,
  clientId: i.clientId,
  uuid: i.issueUuid,
  kind: i.kind,
  detail: i.detail,
  at: timestampMs(i.time!),
  acknowledged: i.acknowledged,
});

/** The AgentError payloads among some sent frames. */
export const errorsOf = (envs: Envelope[]) => envs.filter((e) => e.payload.case === "error").map((e) => e.payload.value as AgentError);

// ------------------------------------------------------------------ the Pair

export interface Proc {
  uuid: string;
  pid: number;
  stdin: Uint8Array[];
  stdinClosed: boolean;
  signals: number[];
  /** The agent reported it gone (`exit`). */
  exited: boolean;
}

export interface AgentNode {
  st: AgentState;
  disk: Disk;
  conn: number;
  serverConn: number;
  closedServerConn?: number;
  cfg: AgentConfig;
  procs: Map<string, Proc>;
  spawns: string[];
}

export type SpecInit = Omit<MessageInitShape<typeof ExecutionSpecSchema>, "$typeName"> & { argv?: string[] };

export class Pair {
  /** The deadline clock every node is stepped with. */
  now = T0;
  /** Wall clock minus deadline clock (every node's wall clock is `now + wallStep`). */
  wallStep = 0;
  server: ServerState;
  serverDisk = new Disk();
  agents = new Map<string, AgentNode>();
  /** Every envelope sent, in order, with its direction (also the dropped ones). */
  wire: Array<{ from: string; to: string; env: Envelope; data: Uint8Array }> = [];
  replies = new Map<string, ControlResult>();
  serverEffects: ServerEffect[] = [];
  agentEffects: Array<{ client: string; e: AgentEffect }> = [];
  /** When false, persists stay pending until flush() is called. */
  autoDurable = true;
  /** Commands whose spawn fails (ENOENT), and whose script preparation fails. */
  spawnFails = new Set<string>();
  prepareFails = new Set<string>();
  /** When false, frames are queued until deliver() is called. */
  autoDeliver = true;
  queue: Array<() => void> = [];
  private held = new Map<string, Array<() => void>>();
  private drops = new Map<string, number>();
  private nextServerConn = 1;
  private connMap = new Map<number, string>(); // server conn -> client id
  private nextPid = 100;

  constructor(readonly serverConfig: ServerConfig = defaultServerConfig()) {
    this.server = newServer(serverConfig, 1);
  }

  // -------------------------------------------------------------- nodes

  /**
   * Add an agent node. `name` is the rig's handle; the client id is
   * `overrides.clientId ?? name`. Pass `from` to start with a copy of another
   * node's durable disk (a clone: same instance id).
   */
  addAgent(name: string, overrides: Partial<AgentConfig> = {}, seed = 7, from?: string): void {
    const cfg = defaultAgentConfig(overrides.clientId ?? name, overrides);
    const disk = new Disk();
    if (from) disk.durable = structuredClone(this.agents.get(from)!.disk.durable);
    const st = restoreAgent(cfg, disk.tables(), seed);
    this.agents.set(name, { st, disk, conn: 0, serverConn: 0, cfg, procs: new Map(), spawns: [] });
    this.agentInput(name, { type: "start" });
  }

  /** Crash the node (unsynced persists are lost, its processes with it) and restart it from its disk. */
  restartAgent(name: string, seed = 8): void {
    const a = this.agents.get(name)!;
    a.disk.pending = [];
    if (a.serverConn) this.serverInput({ type: "conn_closed", conn: a.serverConn, reason: "agent crashed" });
    a.serverConn = 0;
    a.conn = 0;
    a.procs.clear();
    this.local.delete(name);
    a.st = restoreAgent(a.cfg, a.disk.tables(), seed);
    this.agentInput(name, { type: "start" });
  }

  /** Crash the server (unsynced persists are lost) and restart it from its disk; every agent sees its link close. */
  restartServer(seed = 2): void {
    this.serverDisk.pending = [];
    this.server = restoreServer(this.serverConfig, this.serverDisk.tables(), seed);
    for (const [id, a] of this.agents) {
      if (a.conn) {
        const c = a.conn;
        a.conn = 0;
        a.serverConn = 0;
        this.agentInput(id, { type: "transport_closed", conn: c, reason: "server restarted" });
      }
    }
  }

  serverInput(input: ServerInput): void {
    const effects = stepServerChecked(this.server, input, this.now, this.now + this.wallStep);
    for (const e of effects) this.serverEffect(e);
  }

  /** Executor reports are local to the agent: they follow its step, not the network. */
  private local = new Map<string, AgentInput[]>();
  private inAgent = new Set<string>();

  agentInput(name: string, input: AgentInput): void {
    const a = this.agents.get(name)!;
    const effects = stepAgentChecked(a.st, input, this.now, this.now + this.wallStep);
    if (this.inAgent.has(name)) {
      for (const e of effects) this.agentEffect(name, e);
      return;
    }
    this.inAgent.add(name);
    try {
      for (const e of effects) this.agentEffect(name, e);
      const q = this.local.get(name) ?? [];
      while (q.length > 0) {
        const next = q.shift()!;
        for (const e of stepAgentChecked(a.st, next, this.now, this.now + this.wallStep)) this.agentEffect(name, e);
      }
    } finally {
      this.inAgent.delete(name);
    }
  }

  private executor(name: string, input: AgentInput): void {
    let q = this.local.get(name);
    if (!q) this.local.set(name, (q = []));
    q.push(input);
  }

  // -------------------------------------------------------------- link

  private draining = false;

  /** The network: one FIFO for every frame, so no frame overtakes an earlier one. */
  private later(agent: string, f: () => void): void {
    const dropping = this.drops.get(agent) ?? 0;
    if (dropping > 0) {
      this.drops.set(agent, dropping - 1);
      return;
    }
    const held = this.held.get(agent);
    if (held) {
      held.push(f);
      return;
    }
    this.queue.push(f);
    if (this.autoDeliver) this.deliver();
  }

  deliver(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.queue.length > 0) this.queue.shift()!();
    } finally {
      this.draining = false;
    }
  }

  /** Park an agent's frames (both directions) until release(): a slow link. */
  hold(agent: string): void {
    if (!this.held.has(agent)) this.held.set(agent, []);
  }

  /** Let an agent's parked frames go, in the order they were sent. */
  release(agent: string): void {
    const held = this.held.get(agent) ?? [];
    this.held.delete(agent);
    this.queue.push(...held);
    if (this.autoDeliver) this.deliver();
  }

  /** Lose the next n frames on an agent's link (either direction). */
  dropNext(agent: string, n = 1): void {
    this.drops.set(agent, (this.drops.get(agent) ?? 0) + n);
  }

  private serverEffect(e: ServerEffect): void {
    this.serverEffects.push(e);
    switch (e.type) {
      case "persist":
        if (this.autoDurable) {
          this.serverDisk.apply(e);
          this.serverInput({ type: "durable", through: e.id });
        } else this.serverDisk.pending.push(e);
        break;
      case "send": {
        const client = this.connMap.get(e.conn);
        if (!client) break;
        const a = this.agents.get(client);
        this.wire.push({ from: "server", to: client, env: decode(e.data), data: e.data });
        if (a && a.serverConn === e.conn) {
          const conn = a.conn;
          // A priority frame sent just before a close (an AgentError) still
          // arrives: the writer flushes the priority lane before it closes.
          const flushed = e.lane === "priority";
          this.later(client, () => {
            if (a.serverConn === e.conn || (flushed && a.closedServerConn === e.conn)) this.agentInput(client, { type: "frame", conn, data: e.data });
          });
        }
        break;
      }
      case "close": {
        const client = this.connMap.get(e.conn);
        const a = client ? this.agents.get(client) : undefined;
        if (a && a.serverConn === e.conn) {
          const conn = a.conn;
          a.closedServerConn = e.conn;
          a.serverConn = 0;
          a.conn = 0;
          this.queue.push(() => this.agentInput(client!, { type: "transport_closed", conn, reason: e.reason }));
          if (this.autoDeliver) this.deliver();
        }
        break;
      }
      case "reply":
        this.replies.set(e.requestId, e.result);
        break;
      default:
        break;
    }
  }

  private agentEffect(name: string, e: AgentEffect): void {
    const a = this.agents.get(name)!;
    this.agentEffects.push({ client: name, e });
    switch (e.type) {
      case "persist":
        if (this.autoDurable) {
          a.disk.apply(e);
          this.agentInput(name, { type: "durable", through: e.id });
        } else a.disk.pending.push(e);
        break;
      case "connect": {
        const sc = this.nextServerConn++;
        this.connMap.set(sc, name);
        a.conn = e.conn;
        a.serverConn = sc;
        this.serverInput({ type: "conn_open", conn: sc });
        this.agentInput(name, { type: "transport_open", conn: e.conn });
        break;
      }
      case "send": {
        if (e.conn !== a.conn || !a.serverConn) break;
        const sc = a.serverConn;
        this.wire.push({ from: name, to: "server", env: decode(e.data), data: e.data });
        this.later(name, () => {
          if (a.serverConn === sc) this.serverInput({ type: "frame", conn: sc, data: e.data });
        });
        break;
      }
      case "close":
        if (e.conn === a.conn && a.serverConn) {
          const sc = a.serverConn;
          a.serverConn = 0;
          a.conn = 0;
          this.queue.push(() => this.serverInput({ type: "conn_closed", conn: sc, reason: e.reason }));
          if (this.autoDeliver) this.deliver();
        }
        break;
      case "spawn": {
        if (this.spawnFails.has(e.uuid)) {
          this.executor(name, { type: "spawn_failed", uuid: e.uuid, reason: "ENOENT: no such file" });
          break;
        }
        a.spawns.push(e.uuid);
        const pid = this.nextPid++;
        a.procs.set(e.uuid, { uuid: e.uuid, pid, stdin: [], stdinClosed: false, signals: [], exited: false });
        this.executor(name, { type: "process_started", uuid: e.uuid, pid });
        break;
      }
      case "write_stdin": {
        const p = a.procs.get(e.uuid);
        p?.stdin.push(e.data);
        this.executor(name, { type: "stdin_written", uuid: e.uuid, seq: e.seq });
        break;
      }
      case "close_stdin": {
        const p = a.procs.get(e.uuid);
        if (p) p.stdinClosed = true;
        this.executor(name, { type: "stdin_written", uuid: e.uuid, seq: e.seq });
        break;
      }
      case "signal":
        a.procs.get(e.uuid)?.signals.push(e.signal);
        break;
      case "write_script":
        if (this.prepareFails.has(e.uuid)) this.executor(name, { type: "script_failed", uuid: e.uuid, reason: "EACCES" });
        else this.executor(name, { type: "script_prepared", uuid: e.uuid, path: `/scripts/${e.uuid}` });
        break;
      default:
        break;
    }
  }

  /** Break an agent's link (both ends see it close; frames in flight are lost with it). */
  cutLink(name: string): void {
    const a = this.agents.get(name)!;
    if (!a.conn) return;
    const sc = a.serverConn;
    a.serverConn = 0;
    if (sc) this.serverInput({ type: "conn_closed", conn: sc, reason: "cut" });
    this.agentInput(name, { type: "transport_closed", conn: a.conn, reason: "cut" });
  }

  /** Whether an agent's link is up (its transport open to the server). */
  linkUp(name: string): boolean {
    return this.agents.get(name)!.serverConn !== 0;
  }

  /** Let an agent's backoff expire now, so it reconnects (and reconciles). */
  reconnectNow(name: string): void {
    const a = this.agents.get(name)!;
    this.now = Math.max(this.now, a.st.session.retryAt);
    this.agentInput(name, { type: "tick" });
  }

  // -------------------------------------------------------------- disk and clock

  /** Make pending persists durable (all, or the first n batches) on a node. */
  flush(node: "server" | string, n = Infinity): void {
    const disk = node === "server" ? this.serverDisk : this.agents.get(node)!.disk;
    let last = 0;
    while (disk.pending.length > 0 && n-- > 0) {
      const p = disk.pending.shift()!;
      disk.apply(p);
      last = p.id;
    }
    if (last === 0) return;
    if (node === "server") this.serverInput({ type: "durable", through: last });
    else this.agentInput(node, { type: "durable", through: last });
  }

  /** Move the clock and tick every node. */
  advance(ms: number): void {
    this.now += ms;
    this.serverInput({ type: "tick" });
    for (const id of this.agents.keys()) this.agentInput(id, { type: "tick" });
  }

  // -------------------------------------------------------------- the processes (the executor's reports)

  output(name: string, uuid: string, text: string, stream: "stdout" | "stderr" = "stdout"): void {
    this.agentInput(name, { type: "process_output", uuid, stream, data: new TextEncoder().encode(text) });
  }

  exit(name: string, uuid: string, exitCode: number | null, signal: string | null = null): void {
    const p = this.agents.get(name)?.procs.get(uuid);
    if (p) p.exited = true;
    this.agentInput(name, { type: "process_exited", uuid, exitCode, signal, timedOut: false, incompleteStreams: [] });
  }

  // -------------------------------------------------------------- the operator

  control(request: ControlRequest): ControlResult | undefined {
    this.serverInput({ type: "control", request: lenient(request) });
    return this.replies.get(request.requestId);
  }

  submit(clientId: string, uuid: string, spec: SpecInit = {}, extra: Partial<Extract<ControlRequest, { op: "submit" }>> = {}): ControlResult | undefined {
    const { argv, ...rest } = spec;
    const full = create(ExecutionSpecSchema, {
      program: { case: "argv", value: { argv: argv ?? ["echo", "hi"] } },
      ...rest,
    } as MessageInitShape<typeof ExecutionSpecSchema>);
    return this.control({ op: "submit", requestId: `submit-${uuid}`, uuid, clientId, spec: full, ...extra });
  }

  // -------------------------------------------------------------- observation

  /** GetCommand: the operator's view (committed state, exit code, …); throws if the server does not know it. */
  command(uuid: string): CommandInfo {
    const c = commandOf(this.server, uuid, this.wallStep, this.serverDisk.view());
    if (!c) throw new Error(`GetCommand ${uuid}: NOT_FOUND`);
    return c;
  }

  /** GetCommand's NOT_FOUND message (`no command …`, or how a pruned command ended); undefined when it is found. */
  notFound(uuid: string): string | undefined {
    return this.findCommand(uuid) ? undefined : missingMessage(this.server, uuid);
  }

  /** GetCommand, undefined for NOT_FOUND. */
  findCommand(uuid: string): CommandInfo | undefined {
    return commandOf(this.server, uuid, this.wallStep, this.serverDisk.view());
  }

  /** What `rvbox logs <uuid>` prints: the durable stored events through the follow cursor. */
  outputOf(uuid: string): Followed {
    return followOf(this.serverDisk.durable, uuid);
  }

  clientList(): Client[] {
    return clientListOf(this.server, this.wallStep);
  }

  client(clientId: string): Client | undefined {
    return this.clientList().find((c) => c.clientId === clientId);
  }

  sessions(): Session[] {
    return sessionsOf(this.server, this.wallStep);
  }

  /** The server's session of a client (ListSessions filtered), undefined when it has none. */
  sessionOf(clientId: string): Session | undefined {
    return this.sessions().find((s) => s.clientId === clientId);
  }

  /** ListSessions' entry for a server connection. */
  session(conn: number): Session | undefined {
    return this.sessions().find((s) => Number(s.connection) === conn);
  }

  /** The server's session on this agent's link (ListSessions' entry for its connection), undefined when the link is down. */
  sessionFor(agent: string): Session | undefined {
    const sc = this.agents.get(agent)!.serverConn;
    return sc ? this.session(sc) : undefined;
  }

  /** The last ClientHello an agent sent (its client and instance id, capacity). */
  helloOf(agent: string): ClientHello | undefined {
    return this.framesSent(agent, "clientHello").at(-1)?.payload.value as ClientHello | undefined;
  }

  claims(): PendingClaim[] {
    return claimsOf(this.server);
  }

  /** A client's pending claim as ListClaims shows it, undefined when it has none. */
  claimOf(clientId: string): PendingClaim | undefined {
    return this.claims().find((c) => c.clientId === clientId);
  }

  incidents(open = false): Incident[] {
    return incidentsOf(this.server, open);
  }

  /** ListIncidents' dropped_total. */
  incidentsDropped(): number {
    return this.server.incidentsDropped;
  }

  /** ListIncidents' per-client dropped count. */
  droppedIncidents(clientId: string): number {
    return droppedIncidentsOf(this.server, clientId);
  }

  /** ListIncidents' dropped list (per client: count, last time, last kind). */
  incidentDrops() {
    return incidentDropsOf(this.server);
  }

  /** GetJob (the committed view), undefined for NOT_FOUND. */
  getJob(jobId: string): Job | undefined {
    return jobOf(this.server, jobId, this.wallStep);
  }

  /** ListAudit: the entries kept and how many were dropped. */
  listAudit() {
    return auditOf(this.server, this.serverDisk.view());
  }

  /** ListJobs. */
  listJobs(): Job[] {
    return jobsOf(this.server, this.wallStep);
  }

  /** ListCommands: every command with a committed state (what `rvbox ls` lists). */
  listCommands(): CommandInfo[] {
    return listCommandsOf(this.server, this.wallStep, this.serverDisk.view());
  }

  /** Frames of a kind on the wire, optionally only those to (or, with `from`, from) one node. */
  sent(kind: string, to?: string): Envelope[] {
    return this.wire.filter((w) => w.env.payload.case === kind && (to === undefined || w.to === to)).map((w) => w.env);
  }

  /** Frames of a kind an agent sent ("up") or was sent ("down"). */
  framesSent(agent: string, kind: string, direction: "up" | "down" = "up"): Envelope[] {
    return this.wire.filter((w) => w.env.payload.case === kind && (direction === "up" ? w.from === agent : w.to === agent)).map((w) => w.env);
  }

  /** Commands the agent spawned a process for, in order. */
  spawned(agent: string): string[] {
    return [...this.agents.get(agent)!.spawns];
  }

  /** Commands whose process the agent has running now (spawned, not reported gone, not lost in a crash). */
  agentRunning(agent: string): string[] {
    return [...this.agents.get(agent)!.procs.values()].filter((p) => !p.exited).map((p) => p.uuid);
  }

  /** A process's executor-side record (stdin bytes written, signals delivered). */
  process(agent: string, uuid: string): Proc | undefined {
    return this.agents.get(agent)!.procs.get(uuid);
  }

  /** What an agent would answer a ReconcileRequest naming `targets` now (`agentSnapshotOf`; asking changes nothing). */
  agentSnapshot(agent: string, targets: ReadonlyArray<AskTarget> = []): ReconcileCommandState[] {
    return agentSnapshotOf(this.agents.get(agent)!.st, targets);
  }

  /** The commands an agent's snapshot would report retained. */
  retained(agent: string): string[] {
    return retainedOf(this.agents.get(agent)!.st);
  }

  /** Whether an agent would answer a ReconcileRequest naming `uuid` (with `hash`, default: the one its CommandDispatch carried) with a tombstone. */
  tombstoned(agent: string, uuid: string, hash?: Uint8Array): boolean {
    const dispatched = this.framesSent(agent, "commandDispatch", "down")
      .map((e) => e.payload.value as CommandDispatch)
      .find((d) => d.issueUuid === uuid);
    return tombstonedOf(this.agents.get(agent)!.st, uuid, hash ?? dispatched?.immutableRequestSha256 ?? sha(uuid));
  }

  /** Server-side stored event records of a command, in order (the durable rows). */
  storedEvents(uuid: string): Array<Record<string, unknown>> {
    const t = this.serverDisk.durable.get("event") ?? new Map();
    return [...t.entries()]
      .filter(([k]) => k.startsWith(`${uuid}/`))
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([, v]) => v as Record<string, unknown>);
  }

  /** The server's working record of a command: internal state, for invariant-level checks only (prefer `command`). */
  cmd(uuid: string) {
    return this.server.commands.get(uuid)!;
  }
}
