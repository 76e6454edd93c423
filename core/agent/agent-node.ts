// Agent node reducer: the whole agent daemon's protocol behaviour as one pure
// step function, `agentStep(state, input, now, env) -> { state, effects }`.
//
// Theory of operation
// -------------------
// The node owns four parts and routes each input to them:
//   session   (session/agent-session.ts)  connection, hello/welcome, fence,
//                                          heartbeat, backoff;
//   commands  (agent-commands.ts)         admission with capacity limits,
//                                          UUID + request-hash dedup, the
//                                          tombstone ledger, launch, stdin,
//                                          signals, scripts, exits;
//   reconcile (agent-reconcile.ts)        snapshot and result handling;
//   outbox    (window/outbox.ts)          durable local order, event_seq,
//                                          pinned windows, acks, watermarks.
//
// State is owned: the step mutates it in place and returns it (like
// quinn-proto's &mut self); callers keep no other reference. Every step ends
// in `pump`: admit entries into the window, send durable pinned events on a
// reconciled session, launch what may launch, retire fully acknowledged
// commands into tombstones, then seal the step: one persist batch, deferred
// actions parked behind it, and one wake effect for the earliest deadline.
//
// Durability ordering: CommandAccepted, the ReconcileSnapshot, a launch and
// every event send wait for the persist batch they depend on (`afterDurable`);
// the runner reports `durable` and the deferred actions run then.

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ClientCapacitySchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandLifecycle,
  ControlErrorSchema,
  LifecycleTransitionSchema,
  OutputIncompleteSchema,
  OutputStream,
  Platform,
  ShellType as ShellTypeEnum,
  type ShellType,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert, Code, codeName } from "../errors.js";
import { decodeFrame, encodeEnvelope, encodeEventEnvelope, type Payload } from "../codec/frame-codec.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { rangeToWire, versionInRange, SUPPORTED_PROTOCOL } from "../codec/version.js";
import * as LIM from "../limits.js";
import { MAX_REASON_CHARS } from "../limits.js";
import type { PersistRecord } from "../effects.js";
import { rngFromSeed, nextHex128 } from "../rng.js";
import { StepContext, newGate, releaseDurable } from "../step-context.js";
import {
  agentSessionInvariants,
  fenceMatches,
  newAgentSession,
  sessionActivity,
  sessionConnect,
  sessionDeadline,
  sessionFail,
  sessionHoldOff,
  sessionTick,
  sessionTransportClosed,
  sessionTransportOpen,
  sessionWelcome,
  type SessionAction,
} from "../session/agent-session.js";
import {
  admit,
  appendMeta,
  newOutbox,
  outboxInvariants,
  fullyAcknowledged,
  type CommandOutbox,
} from "../window/outbox.js";
import type { AgentCommand, AgentConfig, AgentDeferred, AgentEffect, AgentEnv, AgentInput, AgentState, Step } from "./agent-types.js";
import {
  handleCloseStdin,
  handleDispatch,
  handleEventAck,
  handleExit,
  handleOutput,
  handleProcessStarted,
  handleScriptChunk,
  handleScriptCommit,
  handleScriptFailed,
  handleScriptPrepared,
  handleSignal,
  handleSpawnFailed,
  handleStdinWrite,
  handleStdinWritten,
  expireQueued,
  launchReady,
  runDeferredCommand,
  tombstoneAndRemove,
  agentCommandInvariants,
  countCapacity,
} from "./agent-commands.js";
import { agentRows, agentRowsByKey, commandFromRow, commandRecord, instanceIdRecord, keyUuid, META_INSTANCE_ID, type AgentTables } from "./store.js";
import { endLocalWork, handleReconcileRequest, handleReconcileResult, sendSnapshot } from "./agent-reconcile.js";

export type AgentCtx = StepContext<AgentEffect, AgentDeferred>;

export type { AgentTables };

/**
 * Rebuild the agent from what was durably stored (R-F1: the instance id is
 * generated once and then always read back). `seed` feeds the PRNG (backoff
 * jitter, first instance id); it is not protocol state. The rows and their
 * keys are defined in store.ts.
 */
export function restoreAgent(config: AgentConfig, tables: AgentTables, seed: number): AgentState {
  const rng = rngFromSeed(seed);
  const storedInstance = tables.get("meta")?.get(META_INSTANCE_ID);
  const st: AgentState = {
    config,
    instanceId: typeof storedInstance === "string" ? storedInstance : "",
    rng,
    session: newAgentSession(),
    reconciled: false,
    storeIncident: null,
    commands: new Map(),
    tombstones: new Map(),
    outbox: newOutbox(config.limits),
    gate: newGate<AgentDeferred>(),
    metadataUsed: 0,
    scriptBytes: 0,
    lastCapacity: "",
    started: false,
    pendingSnapshotTombstones: [],
    tombstoneSeq: 0,
    replaced: null,
  };
  const tombs = agentRows(tables, "tombstone");
  tombs.sort((a, b) => a[1].order - b[1].order);
  for (const [uuid, t] of tombs) st.tombstones.set(uuid, t.hash);
  st.tombstoneSeq = tombs.length > 0 ? tombs[tombs.length - 1]![1].order : 0;
  for (const [uuid, row] of agentRows(tables, "command")) {
    const c = commandFromRow(row);
    st.commands.set(uuid, c);
    st.metadataUsed += config.limits.metadataPerCommand;
    if (c.script) st.scriptBytes += c.script.size;
  }
  for (const [k, ch] of agentRowsByKey(tables, "chunk")) {
    const c = st.commands.get(keyUuid(k));
    if (c?.script) c.script.chunks.push(ch.data);
  }
  for (const [k, item] of agentRowsByKey(tables, "stdin")) {
    const c = st.commands.get(keyUuid(k));
    if (c) {
      c.stdin.pending.push({ seq: item.seq, data: item.data, close: item.close });
      c.stdin.pendingBytes += item.data.length;
    }
  }
  for (const [uuid, h] of agentRows(tables, "outbox")) {
    const cb: CommandOutbox = {
      uuid,
      entries: [],
      nextIdx: h.nextIdx,
      pinned: [],
      pinnedBytes: 0,
      nextSeq: h.nextSeq,
      ackedThrough: h.ackedThrough,
      rawBytes: 0,
      streamNext: { ...h.streamNext },
      closed: h.closed,
    };
    st.outbox.commands.set(uuid, cb);
  }
  for (const [k, e] of agentRowsByKey(tables, "entry")) {
    const cb = st.outbox.commands.get(keyUuid(k));
    if (!cb) continue;
    cb.entries.push(e.kind === "truncation" ? { ...e, ranges: e.ranges.map((r) => ({ ...r })) } : { ...e });
    if (e.kind === "output") {
      cb.rawBytes += e.data.length;
      st.outbox.rawTotal += e.data.length;
    }
  }
  for (const [k, p] of agentRowsByKey(tables, "event")) {
    const cb = st.outbox.commands.get(keyUuid(k));
    if (!cb) continue;
    if (p.seq <= cb.ackedThrough) continue;
    cb.pinned.push({ seq: p.seq, bytes: p.bytes, sentOn: 0, durable: true });
    cb.pinnedBytes += p.bytes.length;
    st.outbox.sessionPinnedBytes += p.bytes.length;
  }
  if (st.outbox.rawTotal > st.outbox.limits.rawHigh) st.outbox.summarizing = true;
  return st;
}

/** A fresh agent with empty storage. */
export function newAgent(config: AgentConfig, seed: number): AgentState {
  return restoreAgent(config, { get: () => undefined }, seed);
}

export function agentStep(st: AgentState, input: AgentInput, now: number, env: AgentEnv, wall: number = now): Step<AgentState, AgentEffect> {
  const ctx: AgentCtx = new StepContext(now, wall);
  const acts: SessionAction[] = [];
  switch (input.type) {
    case "start":
      start(st, ctx, acts);
      break;
    case "tick":
      sessionTick(st.session, now, st.rng, acts);
      expireQueued(st, ctx);
      break;
    case "durable":
      for (const a of releaseDurable(st.gate, input.through)) runDeferred(st, ctx, a, env);
      break;
    case "transport_open":
      sessionTransportOpen(st.session, input.conn, now, acts);
      break;
    case "transport_closed":
      sessionTransportClosed(st.session, input.conn, input.reason, now, st.rng, acts);
      break;
    case "activity":
      sessionActivity(st.session, input.conn, now);
      break;
    case "ingress_full":
      if (input.conn === st.session.conn) sessionFail(st.session, "ingress queue full", now, st.rng, acts);
      break;
    case "frame":
      if (input.conn === st.session.conn) onFrame(st, ctx, acts, input.data, input.binary ?? true, env);
      break;
    case "store_incident":
      st.storeIncident = input.detail;
      ctx.emit(trace("store_incident", { detail: input.detail }));
      break;
    case "store_repaired":
      if (st.storeIncident !== null) {
        st.storeIncident = null;
        // Reconcile again from scratch now that a complete snapshot is possible.
        sessionFail(st.session, "store repaired: re-registering", now, st.rng, acts);
      }
      break;
    case "script_prepared":
      handleScriptPrepared(st, ctx, input.uuid, input.path);
      break;
    case "script_failed":
      handleScriptFailed(st, ctx, input.uuid, input.reason);
      break;
    case "process_started":
      handleProcessStarted(st, ctx, input.uuid, input.pid);
      break;
    case "spawn_failed":
      handleSpawnFailed(st, ctx, input.uuid, input.reason);
      break;
    case "process_output":
      handleOutput(st, ctx, input.uuid, input.stream, input.data);
      break;
    case "process_exited":
      handleExit(st, ctx, input);
      break;
    case "stdin_written":
      handleStdinWritten(st, ctx, input.uuid, input.seq, input.failure);
      break;
  }
  applySessionActions(st, ctx, acts);
  pump(st, ctx, env);
  return { state: st, effects: ctx.effects as AgentEffect[] };
}

function start(st: AgentState, ctx: AgentCtx, acts: SessionAction[]): void {
  if (st.started) return;
  st.started = true;
  if (st.instanceId === "") {
    st.instanceId = nextHex128(st.rng);
    ctx.persist(instanceIdRecord(st.instanceId));
  }
  // Anything that was launched before a crash has an uncertain outcome.
  for (const c of st.commands.values()) {
    if (c.phase === "launching" || c.phase === "running") {
      // The spawn may have happened even when its pid never became durable:
      // pid 0 asks the shell to use its own spawn-time record of the process.
      ctx.emit({ type: "kill_orphan", uuid: c.uuid, pid: c.pid });
      finishInterrupted(st, ctx, c, "agent restarted while the command was running; outcome unknown");
    }
  }
  sessionConnect(st.session, ctx.now, acts);
}

function finishInterrupted(st: AgentState, ctx: AgentCtx, c: AgentCommand, reason: string): void {
  const cb = st.outbox.commands.get(c.uuid);
  c.phase = "done";
  c.lifecycle = CommandLifecycle.INTERRUPTED;
  ctx.persist(commandRecord(c));
  if (cb && !cb.closed) {
    // The capture pipes went with the old agent process: whatever the command
    // wrote after the last durable output was never read, so neither stream
    // was drained to a provable EOF (R-O8). No byte count is claimed.
    const records: PersistRecord[] = [];
    const value = create(OutputIncompleteSchema, { streams: [OutputStream.STDOUT, OutputStream.STDERR], reason: "agent restarted: capture pipes not drained to EOF" });
    appendMeta(st.outbox, cb, { case: "incomplete", value }, c.revision, ctx.now, records);
    ctx.persist(...records);
    appendLifecycle(st, ctx, c, CommandLifecycle.INTERRUPTED, { reason });
  }
}

export function appendLifecycle(
  st: AgentState,
  ctx: AgentCtx,
  c: AgentCommand,
  state: CommandLifecycle,
  extra: { exitCode?: number; signalName?: string; reason?: string; code?: Code },
  revision = c.revision,
): void {
  const cb = st.outbox.commands.get(c.uuid);
  assert(cb !== undefined, `no outbox for ${c.uuid}`);
  const reason = (extra.reason ?? "").slice(0, MAX_REASON_CHARS);
  const value = create(LifecycleTransitionSchema, {
    state,
    signalName: (extra.signalName ?? "").slice(0, 64),
    reason,
    ...(extra.exitCode !== undefined ? { exitCode: extra.exitCode } : {}),
    ...(extra.code !== undefined ? { error: create(ControlErrorSchema, { code: extra.code, message: reason || codeName(extra.code), issueUuid: c.uuid }) } : {}),
  });
  const records: PersistRecord[] = [];
  appendMeta(st.outbox, cb, { case: "lifecycle", value }, revision, ctx.wall, records);
  ctx.persist(...records);
}

function onFrame(st: AgentState, ctx: AgentCtx, acts: SessionAction[], data: Uint8Array, binary: boolean, env: AgentEnv): void {
  const s = st.session;
  const d = decodeFrame(data, binary);
  if (!d.ok) {
    protocolFailure(st, ctx, acts, d.error.code, d.error.message);
    return;
  }
  sessionActivity(s, s.conn, ctx.now);
  const env0 = d.envelope;
  const p = env0.payload;
  if (s.phase === "registering") {
    if (p.case === "serverWelcome") {
      const sel = p.value.selectedProtocol;
      const gen = Number(env0.sessionGeneration);
      if (!sel || !versionInRange({ major: sel.major, minor: sel.minor }, st.config.protocol)) {
        protocolFailure(st, ctx, acts, Code.INCOMPATIBLE_VERSION, "server selected a version outside our range");
        return;
      }
      if (env0.sessionId === "" || gen <= 0 || !Number.isSafeInteger(gen) || gen < s.maxGeneration) {
        protocolFailure(st, ctx, acts, Code.STALE_GENERATION, `welcome with unusable fence (generation ${gen})`);
        return;
      }
      sessionWelcome(s, s.conn, { sessionId: env0.sessionId, generation: gen }, { major: sel.major, minor: sel.minor }, ctx.now, acts);
      return;
    }
    if (p.case === "error") {
      sessionFail(s, `registration refused: ${codeName(p.value.error?.code ?? 0)} ${p.value.error?.message ?? ""}`, ctx.now, st.rng, acts);
      if (p.value.error?.code === Code.REPLACED) onReplaced(st, ctx, p.value.error.message);
      return;
    }
    protocolFailure(st, ctx, acts, Code.PROTOCOL_ERROR, `${p.case} before ServerWelcome`);
    return;
  }
  if (s.phase !== "established") return;
  if (!fenceMatches(s, env0.sessionId, env0.sessionGeneration)) {
    protocolFailure(st, ctx, acts, Code.STALE_GENERATION, `envelope fenced to generation ${env0.sessionGeneration}, current ${s.fence?.generation}`);
    return;
  }
  const fail = (code: Code, message: string, close: boolean): void => {
    if (close) protocolFailure(st, ctx, acts, code, message);
    else sendError(st, ctx, code, message, false);
  };
  switch (p.case) {
    case "commandDispatch":
      handleDispatch(st, ctx, p.value, fail);
      break;
    case "eventAck":
      handleEventAck(st, ctx, p.value, fail);
      break;
    case "stdinWrite":
      handleStdinWrite(st, ctx, p.value, fail);
      break;
    case "closeStdin":
      handleCloseStdin(st, ctx, p.value, fail);
      break;
    case "signalCommand":
      handleSignal(st, ctx, p.value, fail);
      break;
    case "scriptChunk":
      handleScriptChunk(st, ctx, p.value, env, fail);
      break;
    case "scriptCommit":
      handleScriptCommit(st, ctx, p.value, env, fail);
      break;
    case "reconcileRequest":
      handleReconcileRequest(st, ctx, p.value, fail);
      break;
    case "reconcileResult":
      handleReconcileResult(st, ctx, p.value);
      break;
    case "error":
      if (p.value.closeSession) sessionFail(s, `server error: ${codeName(p.value.error?.code ?? 0)} ${p.value.error?.message ?? ""}`, ctx.now, st.rng, acts);
      else ctx.emit(trace("server_error", { code: codeName(p.value.error?.code ?? 0), message: p.value.error?.message ?? "" }));
      if (p.value.closeSession && p.value.error?.code === Code.REPLACED) onReplaced(st, ctx, p.value.error.message);
      break;
    default:
      // A payload only an agent sends, or one for the registration phase.
      protocolFailure(st, ctx, acts, Code.PROTOCOL_ERROR, `unexpected ${p.case} from server`);
  }
}

/**
 * An operator authorized another instance to take over this client id. What
 * this instance still runs is out of everyone's reach (the server ended those
 * commands when the new instance reconciled), so it is ended here: processes
 * killed, every local command tombstoned (never launched again, its output
 * never sent). The agent then retries only at the backoff cap, so it does not
 * keep claiming the id; an operator may authorize it again.
 */
function onReplaced(st: AgentState, ctx: AgentCtx, message: string): void {
  const ended = endLocalWork(st, ctx, "this instance was replaced by another one (CODE_REPLACED)");
  st.replaced = message;
  sessionHoldOff(st.session, ctx.now + LIM.BACKOFF_CAP_MS);
  ctx.emit(trace("replaced", { message, ended, retryInMs: LIM.BACKOFF_CAP_MS }));
}

/** Send a structured error and close the session (R-W10). */
function protocolFailure(st: AgentState, ctx: AgentCtx, acts: SessionAction[], code: Code, message: string): void {
  ctx.emit(trace("protocol_failure", { code: codeName(code), message }));
  sendError(st, ctx, code, message, true);
  sessionFail(st.session, `${codeName(code)}: ${message}`, ctx.now, st.rng, acts);
}

export function sendError(st: AgentState, ctx: AgentCtx, code: Code, message: string, close: boolean): void {
  if (st.session.conn === 0) return;
  send(st, ctx, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code, message }), closeSession: close } }, "priority");
}

/** Send a payload on the current connection with the current fence. */
export function send(st: AgentState, ctx: AgentCtx, payload: Payload, lane: "priority" | "data" = "data"): void {
  const s = st.session;
  if (s.conn === 0 || payload.case === undefined) return;
  ctx.emit({ type: "send", conn: s.conn, lane, data: encodeEnvelope(s.fence, payload), kind: payload.case });
}

function applySessionActions(st: AgentState, ctx: AgentCtx, acts: SessionAction[]): void {
  for (let i = 0; i < acts.length; i++) {
    const a = acts[i]!;
    switch (a.type) {
      case "connect":
        st.reconciled = false;
        ctx.emit({ type: "connect", conn: a.conn });
        ctx.emit(trace("connect", { conn: a.conn }));
        break;
      case "send_hello": {
        const c = st.config;
        ctx.emit({
          type: "send",
          conn: a.conn,
          lane: "priority",
          kind: "clientHello",
          data: encodeEnvelope(null, {
            case: "clientHello",
            value: {
              $typeName: "rvbox.v1.ClientHello",
              clientId: c.clientId,
              supportedProtocol: rangeToWire(c.protocol),
              daemonVersion: c.daemonVersion,
              platform: c.platform,
              architecture: c.architecture,
              daemonCwd: c.daemonCwd,
              supportedShells: [...c.supportedShells] as ShellType[],
              clientInstanceId: st.instanceId,
              maxRunningCommands: c.maxRunning,
              maxQueuedCommands: c.maxQueued,
              sentAt: timestampFromMs(ctx.wall),
            },
          }),
        });
        break;
      }
      case "ping":
        ctx.emit({ type: "ping", conn: a.conn });
        break;
      case "close":
        ctx.emit({ type: "close", conn: a.conn, reason: a.reason });
        break;
      case "lost":
        st.reconciled = false;
        st.lastCapacity = "";
        ctx.emit(trace("session_lost", { conn: a.conn, reason: a.reason }));
        break;
      case "established":
        st.lastCapacity = "";
        st.replaced = null;
        ctx.emit(trace("established", { conn: a.conn, generation: st.session.fence?.generation ?? 0 }));
        break;
    }
  }
}

function runDeferred(st: AgentState, ctx: AgentCtx, a: AgentDeferred, env: AgentEnv): void {
  switch (a.kind) {
    case "pinned": {
      const cb = st.outbox.commands.get(a.uuid);
      const p = cb?.pinned.find((x) => x.seq === a.seq);
      if (p) p.durable = true;
      break;
    }
    case "send_snapshot":
      if (a.conn === st.session.conn && st.session.phase === "established") {
        sendSnapshot(st, ctx);
        st.reconciled = true;
        // Retransmit everything pinned from the first unacknowledged event (R-H6, R-D7).
        for (const cb of st.outbox.commands.values()) for (const p of cb.pinned) p.sentOn = 0;
      }
      break;
    default:
      runDeferredCommand(st, ctx, a, env);
  }
}

/** End-of-step work: admit, send, launch, retire, seal, wake. */
function pump(st: AgentState, ctx: AgentCtx, env: AgentEnv): void {
  if (st.started) {
    const records: PersistRecord[] = [];
    const admitted = admit(st.outbox, env.ports, records);
    ctx.persist(...records);
    for (const a of admitted) ctx.afterDurable({ kind: "pinned", uuid: a.uuid, seq: a.seq });
    launchReady(st, ctx);
    retire(st, ctx);
  }
  const now = ctx.now;
  // Seal first so that actions with nothing pending run in this same step.
  let ready = ctx.seal(st.gate);
  while (ready.length > 0) {
    for (const a of ready) runDeferred(st, ctx, a, env);
    ready = ctx.seal(st.gate);
  }
  sendPinned(st, ctx);
  sendCapacity(st, ctx);
  const after = ctx.seal(st.gate);
  assert(after.length === 0, "deferred work produced after the final seal");
  const deadline = nextDeadline(st);
  if (deadline !== null) ctx.emit({ type: "wake", at: Math.max(deadline, now) });
}

function sendPinned(st: AgentState, ctx: AgentCtx): void {
  const s = st.session;
  if (s.phase !== "established" || !st.reconciled || !s.fence) return;
  const gen = s.fence.generation;
  for (const cb of st.outbox.commands.values()) {
    for (const p of cb.pinned) {
      if (!p.durable || p.sentOn === gen) continue;
      p.sentOn = gen;
      ctx.emit({ type: "send", conn: s.conn, lane: "data", kind: "commandEvent", data: encodeEventEnvelope(s.fence, p.bytes) });
    }
  }
}

function sendCapacity(st: AgentState, ctx: AgentCtx): void {
  if (st.session.phase !== "established" || !st.reconciled) return;
  const { running, queued } = countCapacity(st);
  const key = `${running}/${queued}`;
  if (key === st.lastCapacity) return;
  st.lastCapacity = key;
  send(st, ctx, {
    case: "clientCapacity",
    value: create(ClientCapacitySchema, {
      runningCommands: running,
      queuedCommands: queued,
      maxRunningCommands: st.config.maxRunning,
      maxQueuedCommands: st.config.maxQueued,
    }),
  });
}

/** Commands whose every event is acknowledged become tombstones. */
function retire(st: AgentState, ctx: AgentCtx): void {
  for (const c of [...st.commands.values()]) {
    if (c.phase !== "done") continue;
    const cb = st.outbox.commands.get(c.uuid);
    if (cb && !fullyAcknowledged(cb)) continue;
    tombstoneAndRemove(st, ctx, c.uuid, "acknowledged");
  }
}

function nextDeadline(st: AgentState): number | null {
  let d = sessionDeadline(st.session);
  for (const c of st.commands.values()) {
    if ((c.phase === "queued" || c.phase === "preparing") && c.queueExpiry > 0) {
      d = d === null ? c.queueExpiry : Math.min(d, c.queueExpiry);
    }
  }
  return d;
}

export function trace(event: string, detail: Record<string, string | number | boolean>): { type: "trace"; event: string; detail: Record<string, string | number | boolean> } {
  return { type: "trace", event, detail };
}

export function agentInvariants(st: AgentState): void {
  agentSessionInvariants(st.session);
  outboxInvariants(st.outbox);
  agentCommandInvariants(st);
  assert(st.gate.durableThrough <= st.gate.lastId, "durable beyond last persist");
  assert(!st.reconciled || st.session.phase === "established", "reconciled without a session");
  assert(st.tombstones.size <= st.config.limits.maxTombstones, "tombstone ledger over its bound");
  assert(st.commands.size <= st.config.limits.maxRetained, "retained commands over bound");
  assert(st.pendingSnapshotTombstones.length <= st.config.limits.maxTombstones, "snapshot tombstone hits over the ledger's bound");
  for (const uuid of st.commands.keys()) assert(!st.tombstones.has(uuid), `${uuid} both live and tombstoned`);
  for (const c of st.commands.values()) {
    if (c.phase === "done") assert(isTerminal(c.lifecycle), `${c.uuid} done but ${c.lifecycle}`);
  }
}

/** Defaults from architecture.md; shells and the simulator override per deployment. */
export function defaultAgentConfig(clientId: string, overrides: Partial<AgentConfig> = {}): AgentConfig {
  return {
    clientId,
    daemonVersion: "rvbox-agent/0.1.0",
    platform: Platform.LINUX,
    architecture: "x86_64",
    daemonCwd: "/",
    supportedShells: [ShellTypeEnum.SH, ShellTypeEnum.BASH],
    maxRunning: 4,
    maxQueued: 16,
    protocol: SUPPORTED_PROTOCOL,
    limits: {
      windowPerCommand: LIM.WINDOW_PER_COMMAND_BYTES,
      windowPerSession: LIM.WINDOW_PER_SESSION_BYTES,
      metadataReserve: LIM.WINDOW_METADATA_RESERVE_BYTES,
      rawHigh: LIM.AGENT_RAW_HIGH_WATERMARK_BYTES,
      rawLow: LIM.AGENT_RAW_LOW_WATERMARK_BYTES,
      outputPerCommand: LIM.AGENT_OUTPUT_PER_COMMAND_BYTES,
      outputTotal: LIM.AGENT_OUTPUT_TOTAL_BYTES,
      metadataBudget: LIM.AGENT_METADATA_BUDGET_BYTES,
      metadataPerCommand: LIM.AGENT_METADATA_PER_COMMAND_BYTES,
      stdinPendingPerCommand: LIM.AGENT_STDIN_PENDING_BYTES,
      scriptTotal: LIM.AGENT_SCRIPT_TOTAL_BYTES,
      maxRetained: LIM.MAX_RETAINED_COMMANDS,
      maxTombstones: LIM.MAX_TOMBSTONES,
    },
    ...overrides,
  };
}
