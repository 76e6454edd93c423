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
// Registration (R-F2..R-F6) is registration.ts. After the welcome the server
// sends a ReconcileRequest naming the commands it considers in flight for that
// client (R-D6, reconcile.ts). Nothing is dispatched on the session until the snapshot has been classified (reconcile/classify.ts) and
// the ReconcileResult persisted and sent (R-D8).
//
// Every envelope after the hello must carry the connection's session id and
// generation exactly (R-F7); anything else is CODE_STALE_GENERATION and the
// connection closes. Malformed frames, oversize payloads, bad compression and
// impossible sequences are answered with an AgentError and a close (R-W10).
//
// This file is the router: it turns inputs into calls of the concern modules
// (registration, reconcile, dispatch, ingest, control, ...), runs what
// durability released through the module that parked it (`runReleased`), and
// pumps. State is owned and mutated in place.
//
// Modules (each imports only those below it; io.ts, store.ts, metadata.ts
// and server-types.ts are leaves):
//   registration.ts  hello, fencing, claims; the welcome (after durable)
//   reconcile.ts     ReconcileRequest targets, the snapshot, the result
//   dispatch.ts      pumping queued commands, redelivery, CommandAccepted
//   stdin.ts, signals.ts, scripts.ts   per-command operator input to agents
//   ingest.ts        CommandEvent checks, persist, coalesced EventAcks
//   retention.ts     output segments and retention markers (R-O5)
//   history.ts       the metadata tier and pruning; metadata.ts its charge
//   control.ts       operator requests -> submit.ts, clients.ts, stdin.ts,
//                    signals.ts, incidents.ts
//   commands.ts      the command record: setState, persistCommand
//   active.ts        the active index: per client, submission order, timers kept per client
//   heartbeats.ts    every connection's heartbeat deadline in a heap
//   restore.ts, invariants.ts, store.ts (the storage schema), io.ts (output)

import type { Step } from "../agent/agent-types.js";
import { decodeFrame, singleFieldBytes } from "../codec/frame-codec.js";
import { Code, assert, codeName, unreachable } from "../errors.js";
import { serverAccepts } from "../protocol/envelopes.js";
import * as LIM from "../limits.js";
import { heartbeatDue, newHeartbeat, onActivity } from "../session/heartbeat.js";
import { StepContext, releaseDurable } from "../step-context.js";
import type { ServerDeferred, ServerEffect, ServerEnv, ServerInput, ServerState } from "./server-types.js";
import { expireAuthorizations } from "./clients.js";
import { releaseCommitted } from "./commands.js";
import { handleControl } from "./control.js";
import { handleAccepted, pumpCommands, releaseDispatch } from "./dispatch.js";
import { pruneHistory, releasePrune } from "./history.js";
import { flushIncidentDrops, openIncident } from "./incidents.js";
import { type AckBatch, handleCommandEvent, releaseAck, sendAcks } from "./ingest.js";
import { pumpJobs, releaseJobCommitted } from "./jobs.js";
import { type ServerCtx, closeConn, dropConn, releaseReply, sendError } from "./io.js";
import { handleSnapshot, releaseReconcileResult } from "./reconcile.js";
import { onCapacity, register, releaseWelcome } from "./registration.js";
import { releaseDropOutput } from "./retention.js";
import { nextWake, wakeDueCommands } from "./timers.js";
import { dueHeartbeats, nextConnOrder, track } from "./heartbeats.js";

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
        hbOrder: nextConnOrder(st),
      });
      track(st, st.conns.get(input.conn)!);
      break;
    case "conn_closed":
      dropConn(st, input.conn);
      break;
    case "activity": {
      const c = st.conns.get(input.conn);
      if (c) {
        onActivity(c.hb, now);
        track(st, c);
      }
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
      handleControl(st, ctx, input.request, env, input.audit, input.callId);
      break;
    default:
      unreachable(input, "server input");
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
  track(st, conn);
  const e = d.envelope;
  const p = e.payload;
  // core/protocol/envelopes.ts says which kinds each phase accepts.
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
  if (p.case === undefined || !serverAccepts(p.case, conn.phase)) {
    // R-W10: a kind the agent never sends, or not in this phase (a snapshot
    // once the session is ready can only be a second one).
    const second = p.case === "reconcileSnapshot";
    return fail(Code.PROTOCOL_ERROR, second ? "second ReconcileSnapshot on one session" : `unexpected ${p.case} from agent`, true);
  }
  switch (p.case) {
    case "reconcileSnapshot":
      // One per session, also while the first one's result waits for durability.
      if (conn.snapshotReceived) return fail(Code.PROTOCOL_ERROR, "second ReconcileSnapshot on one session", true);
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
    case "clientCapacity":
      onCapacity(st, conn, p.value);
      return;
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
    case "clientHello":
    case "serverWelcome":
    case "commandDispatch":
    case "eventAck":
    case "stdinWrite":
    case "closeStdin":
    case "signalCommand":
    case "scriptChunk":
    case "scriptCommit":
    case "reconcileRequest":
    case "reconcileResult":
      // Refused above: ENVELOPES accepts none of these from an agent on a welcomed session.
      return assert(false, `ENVELOPES accepted ${p.case} in phase ${conn.phase}`);
    default:
      return unreachable(p, "agent payload");
  }
}

/**
 * Run what durability released, in order: each deferred kind is finished by
 * the module that parked it. Acknowledgements are coalesced, one EventAck per
 * (connection, command), after everything else.
 */
function runReleased(st: ServerState, ctx: ServerCtx, acts: ServerDeferred[]): void {
  const acks: AckBatch = new Map();
  for (const a of acts) {
    switch (a.kind) {
      case "welcome":
        releaseWelcome(st, ctx, a);
        break;
      case "reconcile_result":
        releaseReconcileResult(st, ctx, a);
        break;
      case "ack":
        releaseAck(st, acks, a);
        break;
      case "reply":
        releaseReply(ctx, a);
        break;
      case "committed":
        releaseCommitted(st, a);
        break;
      case "dispatch":
        releaseDispatch(st, ctx, a);
        break;
      case "drop_output":
        releaseDropOutput(ctx, a);
        break;
      case "prune":
        releasePrune(ctx, a);
        break;
      case "job_committed":
        releaseJobCommitted(st, a);
        break;
      default:
        unreachable(a, "deferred action");
    }
  }
  sendAcks(st, ctx, acks);
}

function tick(st: ServerState, ctx: ServerCtx): void {
  // Only the connections whose deadline has come (heartbeats.ts), in the order they opened.
  for (const conn of dueHeartbeats(st, ctx.now)) {
    const v = heartbeatDue(conn.hb, ctx.now);
    if (v === "ping") ctx.emit({ type: "ping", conn: conn.conn });
    else if (v === "dead") closeConn(st, ctx, conn.conn, Code.UNSPECIFIED, "heartbeat: no inbound activity for 30 s", false);
    if (st.conns.get(conn.conn) === conn) track(st, conn);
  }
  expireAuthorizations(st, ctx);
}

/**
 * Jobs and commands: jobs start children (and note ended ones), the dispatch
 * pass sends them (and may expire queued ones), until a jobs pass changes
 * nothing. Without jobs this is one dispatch pass.
 */
function pumpWork(st: ServerState, ctx: ServerCtx, env: ServerEnv): void {
  pumpJobs(st, ctx, env);
  pumpCommands(st, ctx, env);
  while (pumpJobs(st, ctx, env)) pumpCommands(st, ctx, env);
}

function pump(st: ServerState, ctx: ServerCtx, env: ServerEnv): void {
  flushIncidentDrops(st, ctx);
  wakeDueCommands(st, ctx.now);
  pumpWork(st, ctx, env);
  let ready = ctx.seal(st.gate);
  while (ready.length > 0) {
    runReleased(st, ctx, ready);
    pumpWork(st, ctx, env);
    ready = ctx.seal(st.gate);
  }
  // History goes last: a command settled by this step's releases may go now.
  const backlog = pruneHistory(st, ctx);
  ready = ctx.seal(st.gate);
  assert(ready.length === 0, "pruning released deferred work");
  assert(st.dropsDirty.size === 0, "incident drop counters changed after they were flushed");
  const w = nextWake(st, ctx.now, backlog);
  st.wake = w && { at: Math.max(w.at, ctx.now), timer: w.timer };
  if (st.wake) ctx.emit({ type: "wake", at: st.wake.at });
}
