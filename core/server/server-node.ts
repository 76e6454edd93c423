// Server node reducer: the control-plane server's protocol behaviour as one
// pure step function, `serverStep(state, input, now, env) -> { state, effects }`.
//
// Theory of operation
// -------------------
// Connections (one per agent WebSocket) go through phases:
//
//   hello --valid ClientHello--> welcoming --client record durable--> reconciling
//     --ReconcileSnapshot, result durable--> ready --close/fence/dead--> (gone)
//
// Registration (R-F2..R-F6): a hello from the instance that holds the client
// id fences the older connection (R-F3); a different instance while a session
// is live is refused with CODE_IDENTITY_CONFLICT and recorded as the pending
// claim (R-F4) unless an operator authorized exactly that instance within the
// last 5 minutes, which the hello consumes (R-F5); with no live session any
// instance is accepted (R-F6). Each accepted registration takes the next
// generation of that client, persisted before the welcome leaves, so
// generations never repeat, even across server crashes.
//
// After the welcome the server sends a ReconcileRequest naming the commands
// it considers in flight for that client (R-D6). Nothing is dispatched on the
// session until the snapshot has been classified (reconcile/classify.ts) and
// the ReconcileResult persisted and sent (R-D8).
//
// Every envelope after the hello must carry the connection's session id and
// generation exactly (R-F7); anything else is CODE_STALE_GENERATION and the
// connection closes. Malformed frames, oversize payloads, bad compression and
// impossible sequences are answered with an AgentError and a close (R-W10).
//
// Commands, events, stdin, signals, scripts and retention live in
// server-commands.ts. State is owned and mutated in place.

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AgentErrorSchema, ReconcileRequestSchema, ReconcileTargetSchema, ServerWelcomeSchema, type ClientHello } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, ControlErrorSchema, ProtocolVersionSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { fromHex, isPrintableAscii } from "../bytes.js";
import { decodeFrame, encodeEnvelope, singleFieldBytes, type Payload } from "../codec/frame-codec.js";
import { negotiate, rangeFromWire, SUPPORTED_PROTOCOL } from "../codec/version.js";
import { assert, Code, codeName } from "../errors.js";
import * as LIM from "../limits.js";
import { nextHex128, rngFromSeed } from "../rng.js";
import { heartbeatDeadline, heartbeatDue, newHeartbeat, onActivity } from "../session/heartbeat.js";
import { StepContext, newGate, releaseDurable } from "../step-context.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { historyDeadline, pruneHistory } from "./server-history.js";
import {
  handleAccepted,
  handleCommandEvent,
  handleControl,
  handleSnapshot,
  pumpCommands,
  commandDeadline,
  restoreCommands,
  serverCommandInvariants,
  flushIncidentDrops,
  incidentInvariants,
  openIncident,
  restoreIncidentIndex,
  onSessionReady,
  reconcileTargets,
  releaseDispatch,
} from "./server-commands.js";
import type {
  ClientRecord,
  ConnState,
  ServerConfig,
  ServerDeferred,
  ServerEffect,
  ServerEnv,
  ServerInput,
  ServerState,
} from "./server-types.js";
import type { Step } from "../agent/agent-types.js";
import { clientRecord, parseIncidentKey, rowsOf, type ServerTables } from "./store.js";

export type ServerCtx = StepContext<ServerEffect, ServerDeferred>;

export type { ServerTables } from "./store.js";

export function defaultServerConfig(): ServerConfig {
  return {
    protocol: SUPPORTED_PROTOCOL,
    limits: {
      outputPerCommand: LIM.SERVER_OUTPUT_PER_COMMAND_BYTES,
      outputPerClient: LIM.SERVER_OUTPUT_PER_CLIENT_BYTES,
      segmentBytes: LIM.SERVER_SEGMENT_BYTES,
      ingressHigh: LIM.SERVER_INGRESS_HIGH_WATERMARK_BYTES,
      maxInflightDispatches: LIM.MAX_INFLIGHT_DISPATCHES,
      maxActivePerClient: LIM.MAX_ACTIVE_COMMANDS_PER_CLIENT,
      reconcileTargets: LIM.MAX_RECONCILE_TARGETS,
      redeliveryMs: LIM.REDELIVERY_TIMEOUT_MS,
      authorizationTtlMs: LIM.AUTHORIZATION_TTL_MS,
      stdinWindow: LIM.SERVER_STDIN_WINDOW_BYTES,
      stdinQueue: LIM.SERVER_STDIN_QUEUE_BYTES,
      scriptWindow: LIM.SCRIPT_UPLOAD_WINDOW_BYTES,
      metadataBudget: LIM.SERVER_METADATA_BUDGET_BYTES,
      historyMs: LIM.SERVER_HISTORY_MS,
      prunedMax: LIM.SERVER_PRUNED_LEDGER_MAX,
      maxClients: LIM.MAX_CLIENTS,
    },
  };
}

export function newServer(config: ServerConfig, seed: number): ServerState {
  return restoreServer(config, { get: () => undefined }, seed);
}

/** Rebuild the server from its durable tables. No connection survives a restart. */
export function restoreServer(config: ServerConfig, tables: ServerTables, seed: number): ServerState {
  const st: ServerState = {
    config,
    rng: rngFromSeed(seed),
    clients: new Map(),
    conns: new Map(),
    commands: new Map(),
    active: new Set(),
    history: new Map(),
    metaBytes: 0,
    pruned: new Map(),
    clientOutput: new Map(),
    incidents: new Map(),
    incidentSeq: 0,
    openIncidents: 0,
    openByClient: new Map(),
    openOverByClient: new Map(),
    incidentDrops: new Map(),
    incidentsDropped: 0,
    dropsDirty: new Set(),
    generationFloor: 0,
    clientsAtRestore: 0,
    gate: newGate<ServerDeferred>(),
  };
  for (const [id, c] of rowsOf(tables, "client")) {
    st.clients.set(id, { ...c, conn: 0, capacity: { ...c.capacity }, replaced: c.replaced ? { ...c.replaced } : null, draining: c.draining === true });
  }
  for (const [id, v] of rowsOf(tables, "incident")) {
    st.incidents.set(id, { ...v });
    const n = parseIncidentKey(id);
    if (Number.isFinite(n) && n > st.incidentSeq) st.incidentSeq = n;
  }
  restoreIncidentIndex(st, tables);
  st.clientsAtRestore = st.clients.size;
  restoreCommands(st, tables);
  return st;
}

export function serverStep(st: ServerState, input: ServerInput, now: number, env: ServerEnv, wall: number = now): Step<ServerState, ServerEffect> {
  const ctx: ServerCtx = new StepContext(now, wall);
  switch (input.type) {
    case "tick":
      tick(st, ctx);
      break;
    case "durable":
      runReleased(st, ctx, releaseDurable(st.gate, input.through));
      break;
    case "conn_open":
      assert(!st.conns.has(input.conn), `connection ${input.conn} opened twice`);
      if (st.conns.size >= LIM.MAX_SERVER_CONNECTIONS) {
        // Refused before it is tracked: the shell closes the socket.
        ctx.emit({ type: "close", conn: input.conn, reason: `CODE_CAPACITY: ${st.conns.size} connections open` });
        break;
      }
      st.conns.set(input.conn, {
        conn: input.conn,
        phase: "hello",
        clientId: "",
        instanceId: "",
        sessionId: "",
        generation: 0,
        version: null,
        hb: newHeartbeat(now),
        ingressPending: 0,
        inflight: 0,
        openedAt: wall,
        snapshotReceived: false,
      });
      break;
    case "conn_closed":
      dropConn(st, input.conn);
      break;
    case "activity": {
      const c = st.conns.get(input.conn);
      if (c) onActivity(c.hb, now);
      break;
    }
    case "ingress_full":
      // R-W5: the staging queue could not admit a frame: close, acknowledge nothing.
      closeConn(st, ctx, input.conn, Code.CAPACITY, "ingress queue full", false);
      break;
    case "frame":
      onFrame(st, ctx, input.conn, input.data, input.binary ?? true, env);
      break;
    case "control":
      handleControl(st, ctx, input.request, env);
      break;
  }
  pump(st, ctx, env);
  return { state: st, effects: ctx.effects as ServerEffect[] };
}

function onFrame(st: ServerState, ctx: ServerCtx, connId: number, data: Uint8Array, binary: boolean, env: ServerEnv): void {
  const conn = st.conns.get(connId);
  if (!conn) return;
  const d = decodeFrame(data, binary);
  if (!d.ok) {
    closeConn(st, ctx, connId, d.error.code, d.error.message, true);
    return;
  }
  onActivity(conn.hb, ctx.now);
  const e = d.envelope;
  const p = e.payload;
  if (conn.phase === "hello") {
    if (p.case !== "clientHello") {
      closeConn(st, ctx, connId, Code.PROTOCOL_ERROR, `${p.case} before ClientHello`, true);
      return;
    }
    register(st, ctx, conn, p.value);
    return;
  }
  if (conn.phase === "welcoming") {
    closeConn(st, ctx, connId, Code.PROTOCOL_ERROR, `${p.case} before ServerWelcome`, true);
    return;
  }
  if (e.sessionId !== conn.sessionId || e.sessionGeneration !== BigInt(conn.generation)) {
    closeConn(st, ctx, connId, Code.STALE_GENERATION, `envelope fenced to generation ${e.sessionGeneration}, current ${conn.generation}`, true);
    return;
  }
  const fail = (code: Code, message: string, close: boolean, uuid?: string): void => {
    if (close) closeConn(st, ctx, connId, code, message, true);
    else sendError(ctx, conn, code, message, false, uuid);
  };
  switch (p.case) {
    case "reconcileSnapshot":
      // One per session, also while the first one's result waits for durability.
      if (conn.phase !== "reconciling" || conn.snapshotReceived) return fail(Code.PROTOCOL_ERROR, "second ReconcileSnapshot on one session", true);
      conn.snapshotReceived = true;
      handleSnapshot(st, ctx, conn, p.value);
      return;
    case "commandAccepted":
      handleAccepted(st, ctx, conn, p.value, fail);
      return;
    case "commandEvent":
      // The event's own bytes as received (field 7 of the envelope), for its digest.
      handleCommandEvent(st, ctx, conn, p.value, data.length, env, fail, singleFieldBytes(data, 7));
      return;
    case "clientCapacity": {
      const cl = st.clients.get(conn.clientId)!;
      const v = p.value;
      cl.capacity = {
        running: v.runningCommands,
        queued: v.queuedCommands,
        maxRunning: Math.min(v.maxRunningCommands, 1 << 16),
        maxQueued: Math.min(v.maxQueuedCommands, 1 << 16),
      };
      return;
    }
    case "error": {
      const err = p.value.error;
      if (err?.code === Code.STORE_INCIDENT) {
        openIncident(st, ctx, conn.clientId, "", "agent_store_incident", err.message);
      } else {
        ctx.emit({ type: "trace", event: "agent_error", detail: { conn: connId, code: codeName(err?.code ?? 0), message: err?.message ?? "" } });
      }
      if (p.value.closeSession) closeConn(st, ctx, connId, Code.UNSPECIFIED, "agent closed the session", false);
      return;
    }
    default:
      fail(Code.PROTOCOL_ERROR, `unexpected ${p.case} from agent`, true);
  }
}

function validHello(h: ClientHello): string | null {
  if (h.clientId.length < 1 || h.clientId.length > LIM.MAX_CLIENT_ID_CHARS || !isPrintableAscii(h.clientId))
    return "client_id must be 1-128 printable ASCII characters";
  if (h.clientInstanceId.length < 1 || h.clientInstanceId.length > LIM.MAX_INSTANCE_ID_CHARS || !isPrintableAscii(h.clientInstanceId))
    return "client_instance_id must be 1-128 printable ASCII characters";
  return null;
}

function register(st: ServerState, ctx: ServerCtx, conn: ConnState, h: ClientHello): void {
  const bad = validHello(h);
  if (bad) return closeConn(st, ctx, conn.conn, Code.VALIDATION, bad, true);
  const range = rangeFromWire(h.supportedProtocol);
  if (!range.ok) return closeConn(st, ctx, conn.conn, range.error.code, range.error.message, true);
  const v = negotiate(st.config.protocol, range.value);
  if (!v.ok) return closeConn(st, ctx, conn.conn, v.error.code, v.error.message, true);

  let client = st.clients.get(h.clientId);
  if (!client) {
    // Bounded: a refused hello creates no record (existing clients are unaffected).
    if (st.clients.size >= st.config.limits.maxClients)
      return closeConn(st, ctx, conn.conn, Code.CAPACITY, clientsFullMessage(st, h.clientId), true);
    client = {
      clientId: h.clientId,
      generation: st.generationFloor,
      instanceId: h.clientInstanceId,
      conn: 0,
      pendingClaim: null,
      authorization: null,
      replaced: null,
      capacity: { running: 0, queued: 0, maxRunning: 0, maxQueued: 0 },
      lastSeen: ctx.wall,
      draining: false,
    };
    st.clients.set(h.clientId, client);
  }
  const live = client.conn !== 0 ? st.conns.get(client.conn) : undefined;
  const authorized = client.authorization !== null && client.authorization.instanceId === h.clientInstanceId && !authorizationExpired(st, client.authorization, ctx.now);
  const rep = client.replaced;
  if (rep && rep.authorized && rep.instanceId === h.clientInstanceId && client.instanceId !== h.clientInstanceId && !authorized) {
    // An operator chose another instance for this id: this one must end the
    // work it still holds, not become the next pending claim.
    closeConn(st, ctx, conn.conn, Code.REPLACED, replacedMessage(h.clientId, h.clientInstanceId, rep.by), true);
    return;
  }
  let takeover = false;
  if (live && client.instanceId !== h.clientInstanceId) {
    if (authorized) {
      client.authorization = null; // one-shot: consumed (R-F5)
      takeover = true;
      ctx.emit({ type: "trace", event: "authorization_consumed", detail: { client: h.clientId, instance: h.clientInstanceId } });
    } else {
      // R-F4: refused, and remembered as the current pending claim.
      const prev = client.pendingClaim;
      client.pendingClaim = {
        instanceId: h.clientInstanceId,
        at: ctx.wall,
        attempts: prev && prev.instanceId === h.clientInstanceId ? prev.attempts + 1 : 1,
      };
      ctx.persist(clientRecord(client));
      closeConn(st, ctx, conn.conn, Code.IDENTITY_CONFLICT, `client id ${h.clientId} is live under another instance; recorded as a pending claim`, true);
      return;
    }
  }
  if (live) {
    // R-F3: the newer registration fences the older session; an authorized
    // takeover tells the displaced instance that it was replaced.
    if (takeover) closeConn(st, ctx, live.conn, Code.REPLACED, replacedMessage(h.clientId, client.instanceId, h.clientInstanceId), true);
    else closeConn(st, ctx, live.conn, Code.STALE_GENERATION, "fenced by a newer registration of this client", true);
  }
  if (client.instanceId !== h.clientInstanceId) {
    takeover ||= authorized;
    client.replaced = { instanceId: client.instanceId, generation: client.generation, by: h.clientInstanceId, at: ctx.now, authorized: takeover };
  }
  client.generation++;
  client.instanceId = h.clientInstanceId;
  client.conn = conn.conn;
  client.lastSeen = ctx.wall;
  client.capacity = { running: 0, queued: 0, maxRunning: h.maxRunningCommands, maxQueued: h.maxQueuedCommands };
  if (client.pendingClaim?.instanceId === h.clientInstanceId) client.pendingClaim = null;
  const auth = client.authorization;
  if (auth && authorizationExpired(st, auth, ctx.now)) client.authorization = null;
  else if (auth && auth.instanceId === h.clientInstanceId) {
    // R-F5: the matching instance's first accepted registration consumes the
    // one-shot authorization, whichever path accepted it (here: no live
    // session). Left in place, it would let this instance fence a later live
    // session without a new authorization.
    client.authorization = null;
    ctx.emit({ type: "trace", event: "authorization_consumed", detail: { client: h.clientId, instance: h.clientInstanceId } });
  }
  conn.phase = "welcoming";
  conn.clientId = h.clientId;
  conn.instanceId = h.clientInstanceId;
  conn.generation = client.generation;
  conn.sessionId = nextHex128(st.rng);
  conn.version = v.value;
  ctx.persist(clientRecord(client));
  ctx.emit({ type: "trace", event: "registered", detail: { conn: conn.conn, client: h.clientId, generation: client.generation } });
  ctx.afterDurable({ kind: "welcome", conn: conn.conn, generation: client.generation });
}

function replacedMessage(clientId: string, instanceId: string, by: string): string {
  return `client id ${clientId} was taken over by instance ${by} (an operator authorized it); this instance ${instanceId} was replaced: end its local commands and stop claiming the id (an operator may authorize it again)`;
}

export function clientsFullMessage(st: ServerState, clientId: string): string {
  return `client id ${clientId} refused: the server keeps at most ${st.config.limits.maxClients} client records (limits.maxClients) and holds ${st.clients.size}; an operator may forget unused ones (rvbox forget-client)`;
}

function runReleased(st: ServerState, ctx: ServerCtx, acts: ServerDeferred[]): void {
  // Coalesce acknowledgements: one EventAck per (connection, command).
  const acks = new Map<string, { conn: number; uuid: string; through: number }>();
  for (const a of acts) {
    switch (a.kind) {
      case "welcome":
        welcome(st, ctx, a.conn, a.generation);
        break;
      case "reconcile_result": {
        const conn = st.conns.get(a.conn);
        if (!conn || conn.phase !== "reconciling") break;
        send(ctx, conn, {
          case: "reconcileResult",
          value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: a.terminate, discardLocalTerminalIssueUuids: a.discard },
        });
        conn.phase = "ready";
        ctx.emit({ type: "trace", event: "session_ready", detail: { conn: a.conn, client: conn.clientId, generation: conn.generation } });
        onSessionReady(st, conn);
        break;
      }
      case "ack": {
        const conn = st.conns.get(a.conn);
        if (conn) conn.ingressPending -= a.bytes;
        const cmd = st.commands.get(a.uuid);
        if (cmd && a.through > cmd.storedThrough) cmd.storedThrough = a.through;
        const key = `${a.conn}/${a.uuid}`;
        const prev = acks.get(key);
        if (!prev || prev.through < a.through) acks.set(key, { conn: a.conn, uuid: a.uuid, through: a.through });
        break;
      }
      case "reply":
        ctx.emit({ type: "reply", requestId: a.requestId, result: a.result });
        break;
      case "committed": {
        const c = st.commands.get(a.uuid);
        if (c) c.committed = a.view;
        break;
      }
      case "dispatch":
        releaseDispatch(st, ctx, a.uuid, a.conn, a.generation);
        break;
      case "drop_output":
        ctx.emit({ type: "drop_output", uuid: a.uuid, throughSeq: a.throughSeq });
        break;
      case "prune":
        ctx.emit({ type: "prune_output", uuid: a.uuid });
        break;
    }
  }
  for (const a of acks.values()) {
    const conn = st.conns.get(a.conn);
    const cmd = st.commands.get(a.uuid);
    if (!conn || !cmd || (conn.phase !== "ready" && conn.phase !== "reconciling")) continue;
    sendAck(ctx, conn, a.uuid, cmd.storedThrough);
  }
}

export function sendAck(ctx: ServerCtx, conn: ConnState, uuid: string, through: number): void {
  send(ctx, conn, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: uuid, throughEventSeq: BigInt(through) } });
}

function welcome(st: ServerState, ctx: ServerCtx, connId: number, generation: number): void {
  const conn = st.conns.get(connId);
  if (!conn || conn.phase !== "welcoming" || conn.generation !== generation) return;
  const client = st.clients.get(conn.clientId);
  if (!client || client.conn !== connId) return;
  send(ctx, conn, {
    case: "serverWelcome",
    value: create(ServerWelcomeSchema, {
      selectedProtocol: create(ProtocolVersionSchema, conn.version!),
      serverTime: timestampFromMs(ctx.wall),
    }),
  }, "priority");
  // R-D6: ask about every command the server holds non-terminal for this client.
  const targets = reconcileTargets(st, conn.clientId).map((c) =>
    create(ReconcileTargetSchema, {
      issueUuid: c.uuid,
      lastServerEventSeq: BigInt(c.storedThrough),
      commandRevision: BigInt(c.revision),
      immutableRequestSha256: fromHex(c.hash),
    }),
  );
  conn.phase = "reconciling";
  send(ctx, conn, { case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets }) });
}

export function send(ctx: ServerCtx, conn: ConnState, payload: Payload, lane: "priority" | "data" = "data"): void {
  if (payload.case === undefined) return;
  ctx.emit({
    type: "send",
    conn: conn.conn,
    lane,
    kind: payload.case,
    data: encodeEnvelope(conn.sessionId ? { sessionId: conn.sessionId, generation: conn.generation } : null, payload),
  });
}

export function sendError(ctx: ServerCtx, conn: ConnState, code: Code, message: string, close: boolean, uuid?: string): void {
  send(
    ctx,
    conn,
    {
      case: "error",
      value: create(AgentErrorSchema, { error: create(ControlErrorSchema, { code, message, issueUuid: uuid ?? "" }), closeSession: close }),
    },
    "priority",
  );
}

/** Close a connection (optionally with a structured error first). Nothing of it is acknowledged afterwards. */
export function closeConn(st: ServerState, ctx: ServerCtx, connId: number, code: Code, message: string, withError: boolean): void {
  const conn = st.conns.get(connId);
  if (!conn) return;
  if (withError) sendError(ctx, conn, code, message, true);
  ctx.emit({ type: "close", conn: connId, reason: `${codeName(code)}: ${message}` });
  ctx.emit({ type: "trace", event: "conn_closed", detail: { conn: connId, client: conn.clientId, code: codeName(code), message } });
  dropConn(st, connId);
}

function dropConn(st: ServerState, connId: number): void {
  const conn = st.conns.get(connId);
  if (!conn) return;
  st.conns.delete(connId);
  const client = conn.clientId ? st.clients.get(conn.clientId) : undefined;
  if (client && client.conn === connId) client.conn = 0;
}

/**
 * An authorization is spent at its expiry, and also when it has more than its
 * whole lifetime left: that only happens when the deadline clock was
 * re-anchored backwards at a restart (the shells anchor it to the wall clock
 * at start), and a one-shot grant must not outlive its TTL because of it.
 */
export function authorizationExpired(st: ServerState, auth: { expiresAt: number }, now: number): boolean {
  return auth.expiresAt <= now || auth.expiresAt - now > st.config.limits.authorizationTtlMs;
}

function tick(st: ServerState, ctx: ServerCtx): void {
  for (const conn of [...st.conns.values()]) {
    if (ctx.now < heartbeatDeadline(conn.hb)) continue;
    const v = heartbeatDue(conn.hb, ctx.now);
    if (v === "ping") ctx.emit({ type: "ping", conn: conn.conn });
    else if (v === "dead") closeConn(st, ctx, conn.conn, Code.UNSPECIFIED, "heartbeat: no inbound activity for 30 s", false);
  }
  for (const client of st.clients.values()) {
    if (client.authorization && authorizationExpired(st, client.authorization, ctx.now)) {
      client.authorization = null;
      ctx.persist(clientRecord(client));
    }
  }
}

function pump(st: ServerState, ctx: ServerCtx, env: ServerEnv): void {
  flushIncidentDrops(st, ctx);
  pumpCommands(st, ctx, env);
  let ready = ctx.seal(st.gate);
  while (ready.length > 0) {
    runReleased(st, ctx, ready);
    pumpCommands(st, ctx, env);
    ready = ctx.seal(st.gate);
  }
  // History goes last: a command settled by this step's releases may go now.
  const backlog = pruneHistory(st, ctx);
  ready = ctx.seal(st.gate);
  assert(ready.length === 0, "pruning released deferred work");
  let d: number | null = backlog ? ctx.now : historyDeadline(st, ctx.now);
  for (const conn of st.conns.values()) {
    const h = heartbeatDeadline(conn.hb);
    d = d === null ? h : Math.min(d, h);
  }
  for (const client of st.clients.values()) {
    if (client.authorization) d = d === null ? client.authorization.expiresAt : Math.min(d, client.authorization.expiresAt);
  }
  const c = commandDeadline(st, ctx.now);
  if (c !== null) d = d === null ? c : Math.min(d, c);
  assert(st.dropsDirty.size === 0, "incident drop counters changed after they were flushed");
  if (d !== null) ctx.emit({ type: "wake", at: Math.max(d, ctx.now) });
}

export function serverInvariants(st: ServerState): void {
  const liveByClient = new Map<string, number>();
  for (const [id, conn] of st.conns) {
    assert(conn.conn === id, "conn key mismatch");
    assert(conn.ingressPending >= 0, `conn ${id} ingress accounting below zero`);
    assert(conn.ingressPending <= st.config.limits.ingressHigh, `conn ${id} ingress over its high watermark`);
    if (conn.phase !== "hello") {
      const client = st.clients.get(conn.clientId);
      assert(client !== undefined, `conn ${id} for unknown client`);
      assert(client.conn === id, `conn ${id} is not its client's current connection`);
      assert(conn.generation === client.generation, `conn ${id} generation ${conn.generation} != client ${client.generation}`);
      assert(!liveByClient.has(conn.clientId), `two live sessions for ${conn.clientId}`);
      liveByClient.set(conn.clientId, id);
    }
  }
  for (const client of st.clients.values()) {
    if (client.conn !== 0) assert(st.conns.get(client.conn)?.clientId === client.clientId, `client ${client.clientId} points at a foreign conn`);
    assert(typeof client.draining === "boolean", `client ${client.clientId} drain flag is not a boolean`);
    const rep = client.replaced;
    if (rep) {
      assert(rep.instanceId !== client.instanceId, `client ${client.clientId} replaced by its own instance`);
      assert(rep.generation < client.generation, `client ${client.clientId} replacement beyond its generation`);
    }
  }
  assert(st.gate.durableThrough <= st.gate.lastId, "durable beyond last persist");
  assert(st.conns.size <= LIM.MAX_SERVER_CONNECTIONS, "connections over their bound");
  assert(st.clients.size <= Math.max(st.config.limits.maxClients, st.clientsAtRestore), `${st.clients.size} client records over the bound ${st.config.limits.maxClients}`);
  incidentInvariants(st);
  serverCommandInvariants(st);
  void isTerminal;
}
