// Dispatch (R-D1, R-D3, R-D4, R-D5).
//
// `pumpCommands` dispatches queued commands on a `ready` session, oldest
// first, while the agent has capacity and fewer than maxInflightDispatches
// are unanswered; a dispatch unanswered for the redelivery timeout is sent
// again (same revision, same bytes). The first send waits until `dispatched`
// is durable (`releaseDispatch`, its after-durable half).
//
// CommandAccepted: accepted -> `accepted`; transient rejection (capacity,
// store incident, stale generation) -> back to `queued` with full-jitter
// backoff (R-D3); permanent rejection -> terminal `rejected` (R-D4);
// CODE_ALREADY_EXECUTED -> the server's state was stale: terminal
// `interrupted` plus a recovery incident, never a new rejection (R-D5).

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type CommandAccepted, CommandDispatchSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { fromHex } from "../bytes.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { Code, codeName, isPermanentRejection, isTransientRejection } from "../errors.js";
import { CAPACITY_RETRY_CAP_MS, CAPACITY_RETRY_INITIAL_MS, MAX_ENVELOPE_BYTES } from "../limits.js";
import type { Payload } from "../codec/frame-codec.js";
import { nextFloat } from "../rng.js";
import type { ConnState, ServerCommand, ServerDeferred, ServerEnv, ServerState } from "./server-types.js";
import { persistCommand, readyConn, setState } from "./commands.js";
import { activeSeq, blocked, markQuiet, nextQueueExpiry, park, places, quietOn, quietUnanswered, release, takeExpired, touch } from "./active.js";
import { prunedFor } from "./history.js";
import { openIncident } from "./incidents.js";
import { type Fail, type ServerCtx, encodeFor, sendEncoded } from "./io.js";
import { pumpScript } from "./scripts.js";
import { pumpSignals } from "./signals.js";
import { pumpStdin } from "./stdin.js";
import { refuseTerminalDispatch } from "./terminal.js";

export function pumpCommands(st: ServerState, ctx: ServerCtx, env: ServerEnv): void {
  // Queue expiry passes at the server only for commands no agent can hold; looked for only once one can be due.
  if (ctx.now >= nextQueueExpiry(st)) expireQueued(st, ctx);
  // Everything else concerns the loud commands of clients with a ready session, in submission order.
  // (A session's `inflight` is counted afresh here and read only below: its
  // client's dispatched commands are loud or quiet and unanswered, never
  // parked, which holds only queued ones.)
  const ix = st.activeIndex;
  const mine: ServerCommand[] = [];
  // (The ids first: releasing parked commands adds to the loud sets.)
  const visit = [...ix.loud.keys()];
  for (const clientId of ix.roomGrew) if (!ix.loud.has(clientId)) visit.push(clientId);
  for (const clientId of visit) {
    const conn = readyConn(st, clientId);
    if (!conn) continue;
    conn.inflight = quietUnanswered(st, clientId);
    for (const uuid of ix.loud.get(clientId) ?? []) {
      const c = st.commands.get(uuid)!;
      mine.push(c);
      if (c.state === L.DISPATCHED && c.dispatch.dispatchedOn === conn.generation) conn.inflight++;
    }
    // Its room grew: its oldest parked commands, as many as can take a place.
    if (ix.roomGrew.has(clientId)) {
      const n = places(st, st.clients.get(clientId)!, conn.inflight);
      for (const c of release(st, clientId, n, (x) => retryDue(x, ctx.now))) mine.push(c);
    }
  }
  // A loud set is in the order its commands became loud, not submitted.
  if (mine.length > 1) mine.sort((a, b) => activeSeq(st, a) - activeSeq(st, b));
  for (const c of mine) {
    if (isTerminal(c.state)) continue;
    const conn = readyConn(st, c.clientId);
    if (!conn) continue;
    if (c.state === L.QUEUED) {
      // A terminal never goes to a session of an older minor (R-T4/R-T5, terminal.ts).
      if (refuseTerminalDispatch(st, ctx, conn, c)) continue;
      // No room (drained, no free capacity, too many in flight): parked until
      // the room can have grown (active.ts `unpark`); a later command of this
      // client finds no more room in this pass, so it is parked too.
      if (blocked(st, st.clients.get(c.clientId)!, conn.inflight)) park(st, c);
      // A command submitted in this very step may be dispatched at once: its
      // create and its `dispatched` record then share one persist batch, and the
      // send still waits for that batch to be durable (R-D1), one fsync not two.
      else if (retryDue(c, ctx.now)) {
        dispatch(st, ctx, conn, c);
        conn.inflight++;
      }
      // Its capacity retry is ahead (R-D3 backoff): nothing to do until that
      // retry comes due (its kept timer: wakeDueCommands) or it changes. A
      // fleet-wide CAPACITY rejection leaves thousands of these for a minute.
      else markQuiet(st, c);
    } else if (redeliveryDue(st, c, conn.generation, ctx.now)) {
      dispatch(st, ctx, conn, c); // Redelivery until CommandAccepted (R-D1).
    } else if (c.state === L.DISPATCHED) {
      // Sent on this session and durably recorded, its redelivery not yet due:
      // nothing to do until it is answered (a touch) or that redelivery comes
      // due (wakeDueCommands). One still waiting for its record to be durable
      // is touched when it is; one sent on an older session waits for
      // reconciliation, loud as before.
      if (quietWaiting(st, c, conn.generation)) markQuiet(st, c);
    } else if (c.state === L.ACCEPTED || c.state === L.RUNNING) {
      pumpScript(st, ctx, conn, c, env);
      pumpStdin(st, ctx, conn, c);
      pumpSignals(ctx, conn, c);
      if (quietOn(c, conn.generation)) markQuiet(st, c);
    }
  }
}

/** Expire every queued command whose queue expiry has passed, oldest first (active.ts keeps them in a heap). */
function expireQueued(st: ServerState, ctx: ServerCtx): void {
  for (const uuid of takeExpired(st, ctx.now)) {
    const c = st.commands.get(uuid)!;
    setState(st, ctx, c, L.EXPIRED, "server", "queue expiry passed before dispatch");
  }
}

/**
 * A capacity retry is due at `nextAttemptAt`, or at once when it is further
 * away than the longest retry delay: a deadline clock re-anchored backwards
 * at a restart must not hold a queued command back by the wall-clock step.
 */
export function retryDue(c: ServerCommand, now: number): boolean {
  return now >= c.dispatch.nextAttemptAt || c.dispatch.nextAttemptAt - now > CAPACITY_RETRY_CAP_MS;
}

/**
 * A dispatch unanswered for the redelivery timeout is sent again, but only
 * once a `dispatched` record is durable: until then a crash would restore the
 * command as never sent (or not at all) while the agent holds it.
 */
function redeliveryDue(st: ServerState, c: ServerCommand, generation: number, now: number): boolean {
  const at = redeliveryAt(st, c);
  return at !== null && c.dispatch.dispatchedOn === generation && now >= at;
}

/**
 * Dispatched `c` needs nothing from the pump on a session of generation `g`
 * until it changes or its redelivery comes due: it was sent on that session
 * and its `dispatched` record is durable (so a redelivery is armed). The
 * caller has checked that the redelivery is not yet due.
 */
export function quietWaiting(st: ServerState, c: ServerCommand, g: number): boolean {
  return c.dispatch.dispatchedOn === g && redeliveryAt(st, c) !== null;
}

/** When a dispatch sent on a live session and durably recorded may be sent again (null: none). */
export function redeliveryAt(st: ServerState, c: ServerCommand): number | null {
  const armed = c.state === L.DISPATCHED && c.dispatch.dispatchedOn !== 0 && c.committed.state === L.DISPATCHED;
  return armed ? c.dispatch.dispatchedAt + st.config.limits.redeliveryMs : null;
}

export function dispatch(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  c.dispatch.everDispatched = true;
  c.dispatch.dispatchedOn = conn.generation;
  c.dispatch.dispatchedAt = ctx.now;
  c.dispatch.attempts++;
  touch(st, c);
  if (c.state === L.QUEUED) {
    // The first send waits until `dispatched` is durable: a server that crashed
    // after sending but before recording it would believe the command never
    // left, and could expire or cancel it on its own while the agent runs it.
    setState(st, ctx, c, L.DISPATCHED, "server", "", ctx.wall, false);
    persistCommand(st, ctx, c);
    ctx.afterDurable({ kind: "dispatch", uuid: c.uuid, conn: conn.conn, generation: conn.generation });
    return;
  }
  sendDispatch(st, ctx, conn, c);
}

/** The first dispatch, once its `dispatched` record is durable (the after-durable half of dispatch). */
export function releaseDispatch(st: ServerState, ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "dispatch" }>): void {
  const { uuid, generation } = a;
  const c = st.commands.get(uuid);
  const conn = st.conns.get(a.conn);
  if (!c || !conn || c.state !== L.DISPATCHED || c.dispatch.dispatchedOn !== generation) return;
  if (conn.phase !== "ready" || conn.generation !== generation) return; // redelivery or reconciliation takes over
  c.dispatch.dispatchedAt = ctx.now;
  touch(st, c);
  sendDispatch(st, ctx, conn, c);
}

/**
 * Send (or resend) the dispatch of `c`. One that does not fit an envelope
 * (R-T2) can never reach the agent: sent, it would only close the session,
 * and every new session would send it again. Submit refuses such a spec
 * (spec-limits.ts); one that still gets here (a record from before that
 * check) ends `rejected` with an incident instead. It never launched: no
 * agent can have decoded it.
 */
function sendDispatch(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  const payload = dispatchPayload(ctx, conn, c);
  const data = encodeFor(conn, payload);
  if (data.length > MAX_ENVELOPE_BYTES) return undeliverable(st, ctx, c, data.length);
  sendEncoded(ctx, conn, "commandDispatch", data);
  ctx.emit({ type: "trace", event: "dispatch", detail: { uuid: c.uuid, conn: conn.conn, generation: conn.generation, attempt: c.dispatch.attempts } });
}

function undeliverable(st: ServerState, ctx: ServerCtx, c: ServerCommand, bytes: number): void {
  const why = `its dispatch is ${bytes} bytes; the limit is ${MAX_ENVELOPE_BYTES}, one envelope (R-T2): no agent can receive it`;
  setState(st, ctx, c, L.REJECTED, "server", why);
  openIncident(st, ctx, c.clientId, c.uuid, "dispatch_undeliverable", why);
}

function dispatchPayload(ctx: ServerCtx, conn: ConnState, c: ServerCommand): Payload {
  return {
    case: "commandDispatch",
    value: create(CommandDispatchSchema, {
      issueUuid: c.uuid,
      commandRevision: BigInt(c.revision),
      targetSessionGeneration: BigInt(conn.generation),
      issueTime: timestampFromMsLocal(c.createdAt),
      spec: c.spec,
      queueExpiryTime: timestampFromMsLocal(ctx.toWall(c.queueExpiry)),
      immutableRequestSha256: fromHex(c.hash),
    }),
  };
}

function timestampFromMsLocal(ms: number): ReturnType<typeof timestampFromMs> {
  return timestampFromMs(ms);
}

export function handleAccepted(st: ServerState, ctx: ServerCtx, conn: ConnState, a: CommandAccepted, fail: Fail): void {
  const c = st.commands.get(a.issueUuid);
  if (!c && prunedFor(st, a.issueUuid, conn.clientId)) {
    ctx.emit({ type: "trace", event: "accepted_ignored", detail: { uuid: a.issueUuid, why: "pruned from history" } });
    return; // a late answer for a command that ended long ago
  }
  if (!c || c.clientId !== conn.clientId) return fail(Code.NOT_FOUND, `CommandAccepted for unknown command ${a.issueUuid}`, false, a.issueUuid);
  if (c.state !== L.DISPATCHED && c.state !== L.QUEUED) return; // duplicate or late answer
  if (a.accepted) {
    setState(st, ctx, c, L.ACCEPTED, "agent");
    return;
  }
  const code = a.rejection?.code ?? Code.UNSPECIFIED;
  const message = a.rejection?.message ?? "";
  if (code === Code.ALREADY_EXECUTED) {
    // R-D5: suppress dispatch, reconcile the stale state; not a new rejection.
    setState(st, ctx, c, L.INTERRUPTED, "server", "agent reports it already executed this request; outcome not retained");
    openIncident(st, ctx, c.clientId, c.uuid, "already_executed", message);
    return;
  }
  if (isPermanentRejection(code)) {
    setState(st, ctx, c, L.REJECTED, "server", `${codeName(code)}: ${message}`);
    // Submit checks the same spec limits (spec-limits.ts): an agent refusing one
    // means the two disagree (another version), which an operator should hear of.
    if (code === Code.VALIDATION) openIncident(st, ctx, c.clientId, c.uuid, "dispatch_refused", `the agent refused a spec the server admitted: ${message}`);
    return;
  }
  if (isTransientRejection(code) || code === Code.STALE_GENERATION) {
    setState(st, ctx, c, L.QUEUED, "server", "", ctx.wall, false);
    const ceiling = Math.min(CAPACITY_RETRY_CAP_MS, CAPACITY_RETRY_INITIAL_MS * 2 ** Math.min(c.dispatch.attempts, 20));
    c.dispatch.nextAttemptAt = ctx.now + Math.floor(nextFloat(st.rng) * ceiling);
    touch(st, c);
    persistCommand(st, ctx, c);
    ctx.emit({ type: "trace", event: "requeue", detail: { uuid: c.uuid, code: codeName(code), retryAt: c.dispatch.nextAttemptAt } });
    return;
  }
  fail(Code.PROTOCOL_ERROR, `rejection with code ${code} is not a dispatch answer`, true);
}
