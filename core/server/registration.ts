// Registration (R-F2..R-F6): a hello from the instance that holds the client
// id fences the older connection (R-F3); a different instance while a session
// is live is refused with CODE_IDENTITY_CONFLICT and recorded as the pending
// claim (R-F4) unless an operator authorized exactly that instance within the
// last 5 minutes, which the hello consumes (R-F5); with no live session any
// instance is accepted (R-F6). Each accepted registration takes the next
// generation of that client, persisted before the welcome leaves
// (`releaseWelcome`), so generations never repeat, even across server crashes.
//
// After the welcome the server sends a ReconcileRequest naming the commands
// it considers in flight for that client (R-D6).

import { setPhase } from "./conn-phase.js";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type ClientCapacity,
  type ClientHello,
  ReconcileRequestSchema,
  ReconcileTargetSchema,
  ServerWelcomeSchema,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import { ProtocolVersionSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { fromHex, isPrintableAscii } from "../bytes.js";
import { negotiate, rangeFromWire } from "../codec/version.js";
import { Code } from "../errors.js";
import * as LIM from "../limits.js";
import { nextHex128 } from "../rng.js";
import type { ConnState, ServerDeferred, ServerState } from "./server-types.js";
import { clientRecord } from "./store.js";
import { authorizationExpired } from "./clients.js";
import { type ServerCtx, closeConn, send } from "./io.js";
import { reconcileTargets } from "./reconcile.js";
import { NO_LABELS } from "./labels.js";
import { room, unpark } from "./active.js";

function validHello(h: ClientHello): string | null {
  if (h.clientId.length < 1 || h.clientId.length > LIM.MAX_CLIENT_ID_CHARS || !isPrintableAscii(h.clientId))
    return "client_id must be 1-128 printable ASCII characters";
  if (h.clientInstanceId.length < 1 || h.clientInstanceId.length > LIM.MAX_INSTANCE_ID_CHARS || !isPrintableAscii(h.clientInstanceId))
    return "client_instance_id must be 1-128 printable ASCII characters";
  return null;
}

export function register(st: ServerState, ctx: ServerCtx, conn: ConnState, h: ClientHello): void {
  const bad = validHello(h);
  if (bad) return closeConn(st, ctx, conn.conn, Code.VALIDATION, bad, true);
  const range = rangeFromWire(h.supportedProtocol);
  if (!range.ok) return closeConn(st, ctx, conn.conn, range.error.code, range.error.message, true);
  const v = negotiate(st.config.protocol, range.value);
  if (!v.ok) return closeConn(st, ctx, conn.conn, v.error.code, v.error.message, true);

  let client = st.clients.get(h.clientId);
  if (!client) {
    // Bounded: a refused hello creates no record (existing clients are unaffected).
    if (st.clients.size >= st.config.limits.maxClients) return closeConn(st, ctx, conn.conn, Code.CAPACITY, clientsFullMessage(st, h.clientId), true);
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
      labels: NO_LABELS,
    };
    st.clients.set(h.clientId, client);
  }
  const live = client.conn !== 0 ? st.conns.get(client.conn) : undefined;
  const authorized =
    client.authorization !== null && client.authorization.instanceId === h.clientInstanceId && !authorizationExpired(st, client.authorization, ctx.now);
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
  unpark(st, client.clientId); // (the new session's onSessionReady touches them all again as well)
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
  setPhase(conn, "welcoming");
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

/** The after-durable half of register: the client record (with its new generation) is durable, so the welcome may leave (R-F2). */
export function releaseWelcome(st: ServerState, ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "welcome" }>): void {
  const { conn: connId, generation } = a;
  const conn = st.conns.get(connId);
  if (!conn || conn.phase !== "welcoming" || conn.generation !== generation) return;
  const client = st.clients.get(conn.clientId);
  if (!client || client.conn !== connId) return;
  send(
    ctx,
    conn,
    {
      case: "serverWelcome",
      value: create(ServerWelcomeSchema, {
        selectedProtocol: create(ProtocolVersionSchema, conn.version!),
        serverTime: timestampFromMs(ctx.wall),
      }),
    },
    "priority",
  );
  // R-D6: ask about every command the server holds non-terminal for this client.
  const targets = reconcileTargets(st, conn.clientId).map((c) =>
    create(ReconcileTargetSchema, {
      issueUuid: c.uuid,
      lastServerEventSeq: BigInt(c.ingest.storedThrough),
      commandRevision: BigInt(c.revision),
      immutableRequestSha256: fromHex(c.hash),
    }),
  );
  setPhase(conn, "reconciling");
  send(ctx, conn, { case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets }) });
}

/** R-W2: the agent's capacity report (capped) replaces the one its hello gave. */
export function onCapacity(st: ServerState, conn: ConnState, v: ClientCapacity): void {
  const cl = st.clients.get(conn.clientId)!;
  const before = room(cl.capacity);
  cl.capacity = {
    running: v.runningCommands,
    queued: v.queuedCommands,
    maxRunning: Math.min(v.maxRunningCommands, 1 << 16),
    maxQueued: Math.min(v.maxQueuedCommands, 1 << 16),
  };
  if (room(cl.capacity) > before) unpark(st, cl.clientId);
}
