// Server command handling: the command lifecycle (R-D1, R-D3, R-D4, R-D5),
// reconciliation (R-D8, R-D9, R-D11, R-D12), event ingest (R-O3, R-O4, R-O5,
// R-W7), stdin (R-S1..R-S3), signals (R-S4, R-S5) and script upload (R-C1,
// R-C3).
//
// Theory of operation
// -------------------
// A submit persists the command as `queued` before anything is sent (R-D1);
// the control reply waits for that persist. `pumpCommands` dispatches queued
// commands on a `ready` session, oldest first, while the agent has capacity
// and fewer than maxInflightDispatches are unanswered; a dispatch unanswered
// for the redelivery timeout is sent again (same revision, same bytes).
//
// CommandAccepted: accepted -> `accepted`; transient rejection (capacity,
// store incident, stale generation) -> back to `queued` with full-jitter
// backoff (R-D3); permanent rejection -> terminal `rejected` (R-D4);
// CODE_ALREADY_EXECUTED -> the server's state was stale: terminal
// `interrupted` plus a recovery incident, never a new rejection (R-D5).
//
// Events: event_seq must be exactly receivedThrough + 1; a lower one is a
// resend and must match the digest of what was stored (R-O2), else
// CODE_SEQUENCE_VIOLATION; a higher one is a gap (violation). Output offsets
// must continue each stream exactly, either by bytes or by a truncation
// marker's ranges, so every byte is accounted for. The event is persisted and
// the cumulative EventAck leaves only once that persist is durable (R-O3).
// When ingress bytes awaiting durability exceed the high watermark the
// connection is closed without acknowledgement (R-W7).

import { create, toBinary } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  CommandDispatchSchema,
  CloseStdinSchema,
  ScriptChunkSchema,
  ScriptCommitSchema,
  SignalCommandSchema,
  StdinWriteSchema,
  type CommandAccepted,
  type ReconcileSnapshot,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandEventSchema,
  CommandLifecycle as L,
  ExecutionSpecSchema,
  OutputStream,
  SignalKind,
  type CommandEvent,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import { concatBytes, digest53, fromHex, isPrintableAscii, toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { canTransition, isTerminal } from "../dispatch/lifecycle.js";
import { assert, Code, coreError, isPermanentRejection, isTransientRejection, codeName } from "../errors.js";
import {
  CAPACITY_RETRY_CAP_MS,
  CAPACITY_RETRY_INITIAL_MS,
  DEFAULT_QUEUE_EXPIRY_MS,
  MAX_CHUNK_BYTES,
  MAX_INCIDENTS_KEPT,
  MAX_INSTANCE_ID_CHARS,
  MAX_OPEN_INCIDENTS,
  MAX_OPEN_INCIDENTS_PER_CLIENT,
  MAX_PENDING_SIGNALS,
  MAX_RECONCILE_TARGETS,
  MAX_REQUEST_IDS_PER_COMMAND,
  MAX_SCRIPT_BYTES,
  SCRIPT_CHUNK_BYTES,
  SERVER_ACTIVE_METADATA_SHARE,
  SERVER_RECENT_DIGESTS,
  SERVER_RECORD_BASE_BYTES,
  SERVER_ROW_EVENTS_PER_COMMAND,
  STDIN_WRITES_IN_FLIGHT,
} from "../limits.js";
import { nextFloat } from "../rng.js";
import { classify, type AgentView, type ServerView } from "../reconcile/classify.js";
import { clientsNamedBy, closestClients } from "./client-names.js";
import { historyInvariants, missingMessage, noteEnded, prunedFor, recharge, restoreHistory } from "./server-history.js";
import { closeConn, send, sendAck, type ServerCtx } from "./server-node.js";
import {
  clientDelete,
  clientRecord,
  commandRecord,
  eventRecord,
  generationFloorOf,
  generationFloorRecord,
  incidentDelete,
  incidentDropRecord,
  incidentKey,
  incidentRecord,
  incidentsDroppedOf,
  incidentsDroppedRecord,
  reconcileDelete,
  reconcileRecord,
  restoreCommand,
  retentionRecord,
  rowsOf,
  scriptDelete,
  scriptRecord,
  type EventRow,
  type ScriptRow,
  type ServerTables,
} from "./store.js";
import type {
  ClientRecord,
  ConnState,
  ControlRequest,
  ControlResult,
  CommittedView,
  Incident,
  IncidentDrops,
  ServerCommand,
  ServerEnv,
  ServerState,
} from "./server-types.js";
import type { StreamName } from "../window/outbox.js";

type Fail = (code: Code, message: string, close: boolean, uuid?: string) => void;

/** The outward view a durable copy of `c` would show. */
export function viewOf(c: ServerCommand): CommittedView {
  return {
    state: c.state,
    exitCode: c.exitCode,
    signalName: c.signalName,
    reason: c.reason,
    storedThrough: c.receivedThrough,
    revision: c.revision,
    stdinAssigned: c.stdin.nextSeq - 1,
    startedTime: c.startedTime,
    endedTime: c.endedTime,
  };
}

/** Persist the command record; readers see its new view once that persist is durable. */
function persistCommand(st: ServerState, ctx: ServerCtx, c: ServerCommand): void {
  recharge(st, c);
  ctx.persist(commandRecord(c));
  ctx.afterDurable({ kind: "committed", uuid: c.uuid, view: viewOf(c) });
}

export function restoreCommands(st: ServerState, tables: ServerTables): void {
  const scripts = tables.get("script");
  for (const [uuid, r] of rowsOf(tables, "command")) {
    const c = restoreCommand(r, scripts?.get(uuid) as ScriptRow | undefined);
    st.commands.set(uuid, c);
    if (!isTerminal(c.state)) st.active.add(uuid);
    if (c.storedOutputBytes > 0) noteOutput(st, c, c.storedOutputBytes);
    recharge(st, c);
  }
  restoreHistory(st, rowsOf(tables, "pruned"));
  // Digests of the most recent stored events, for resend checks after a restart.
  for (const [key, e] of rowsOf(tables, "event")) {
    const uuid = key.slice(0, key.lastIndexOf("/"));
    const c = st.commands.get(uuid);
    if (c && e.seq > c.storedThrough - SERVER_RECENT_DIGESTS) c.digests[e.seq] = e.digest;
  }
}

/**
 * Record an incident, within bounds: at most MAX_OPEN_INCIDENTS_PER_CLIENT
 * open per client and MAX_OPEN_INCIDENTS open in all. What does not fit is
 * counted (per client and in total, durably), never silently lost. With the
 * total full, a client holding fewer open incidents than the heaviest client
 * takes the place of that client's newest one, so one client's flood never
 * hides another client's incident (R-D11).
 */
export function openIncident(st: ServerState, ctx: ServerCtx, clientId: string, uuid: string, kind: string, detail: string): void {
  const mine = st.openByClient.get(clientId) ?? 0;
  if (mine >= MAX_OPEN_INCIDENTS_PER_CLIENT) return dropIncident(st, ctx, clientId, uuid, kind, "per-client bound");
  if (st.openIncidents >= MAX_OPEN_INCIDENTS) {
    let heavy = "";
    let most = 0;
    for (const [id, n] of st.openByClient) {
      if (n > most) {
        most = n;
        heavy = id;
      }
    }
    if (most <= mine + 1) return dropIncident(st, ctx, clientId, uuid, kind, "total bound");
    let victim: Incident | undefined;
    for (const i of st.incidents.values()) if (!i.acknowledged && i.clientId === heavy) victim = i;
    assert(victim !== undefined, `no open incident of ${heavy} to make room`);
    st.incidents.delete(victim.id);
    noteOpen(st, heavy, -1);
    ctx.persist(incidentDelete(victim.id));
    dropIncident(st, ctx, heavy, victim.uuid, victim.kind, `evicted for ${clientId}'s incident (total bound)`);
  }
  if (st.incidents.size >= MAX_INCIDENTS_KEPT) {
    for (const [id, i] of st.incidents) {
      if (!i.acknowledged) continue;
      st.incidents.delete(id);
      ctx.persist(incidentDelete(id));
      break;
    }
  }
  st.incidentSeq++;
  const inc: Incident = { id: incidentKey(st.incidentSeq), clientId, uuid, kind, detail, at: ctx.wall, acknowledged: false };
  st.incidents.set(inc.id, inc);
  noteOpen(st, clientId, 1);
  ctx.persist(incidentRecord(inc));
  ctx.emit({ type: "trace", event: "incident", detail: { id: inc.id, client: clientId, uuid, kind, detail } });
}

function noteOpen(st: ServerState, clientId: string, delta: number): void {
  const n = (st.openByClient.get(clientId) ?? 0) + delta;
  if (n === 0) st.openByClient.delete(clientId);
  else st.openByClient.set(clientId, n);
  st.openIncidents += delta;
}

function dropIncident(st: ServerState, ctx: ServerCtx, clientId: string, uuid: string, kind: string, why: string): void {
  let d = st.incidentDrops.get(clientId);
  if (!d) st.incidentDrops.set(clientId, (d = { clientId, count: 0, lastAt: 0, lastKind: "" }));
  d.count++;
  d.lastAt = ctx.now;
  d.lastKind = kind;
  st.incidentsDropped++;
  st.dropsDirty.add(clientId);
  ctx.emit({ type: "trace", event: "incident_dropped", detail: { client: clientId, kind, uuid, why } });
}

/** Persist the drop counters this step changed: one record per client and the total, however many were dropped. */
export function flushIncidentDrops(st: ServerState, ctx: ServerCtx): void {
  if (st.dropsDirty.size === 0) return;
  for (const id of st.dropsDirty) {
    ctx.persist(incidentDropRecord(id, st.incidentDrops.get(id)));
  }
  st.dropsDirty.clear();
  ctx.persist(incidentsDroppedRecord(st.incidentsDropped));
}

/** Rebuild the incident indexes and drop counters (after the `incident` table is loaded). */
export function restoreIncidentIndex(st: ServerState, tables: ServerTables): void {
  for (const i of st.incidents.values()) if (!i.acknowledged) noteOpen(st, i.clientId, 1);
  for (const [id, n] of st.openByClient) if (n > MAX_OPEN_INCIDENTS_PER_CLIENT) st.openOverByClient.set(id, n);
  for (const [id, d] of rowsOf(tables, "incident_drop")) st.incidentDrops.set(id, { ...d });
  st.incidentsDropped = incidentsDroppedOf(tables);
  st.generationFloor = generationFloorOf(tables);
}

export function incidentInvariants(st: ServerState): void {
  let open = 0;
  const by = new Map<string, number>();
  for (const [id, i] of st.incidents) {
    assert(i.id === id, "incident key mismatch");
    if (i.acknowledged) continue;
    open++;
    by.set(i.clientId, (by.get(i.clientId) ?? 0) + 1);
  }
  assert(open === st.openIncidents && by.size === st.openByClient.size, "open incident index drift");
  for (const [id, n] of by) {
    assert(st.openByClient.get(id) === n, `open incident index drift for ${id}`);
    assert(n <= Math.max(MAX_OPEN_INCIDENTS_PER_CLIENT, st.openOverByClient.get(id) ?? 0), `${id}: ${n} open incidents over the per-client bound`);
  }
  assert(open <= MAX_OPEN_INCIDENTS, `${open} open incidents over the bound`);
  assert(st.incidents.size <= MAX_INCIDENTS_KEPT, "incidents over their bound");
  let dropped = 0;
  for (const [id, d] of st.incidentDrops) {
    assert(d.clientId === id && d.count > 0, `drop counter of ${id} malformed`);
    assert(st.clients.has(id), `drop counter of unknown client ${id}`);
    dropped += d.count;
  }
  assert(dropped <= st.incidentsDropped, "per-client drop counts exceed the total");
}

/** Remember request_id -> number for idempotent retries, forgetting the oldest past the bound. */
function remember(c: ServerCommand, requestId: string, n: number): void {
  c.requests[requestId] = n;
  const keys = Object.keys(c.requests);
  if (keys.length > MAX_REQUEST_IDS_PER_COMMAND) delete c.requests[keys[0]!];
}

/** Keep the per-client retained-output index in step with a command's stored bytes. */
export function noteOutput(st: ServerState, c: ServerCommand, delta: number): void {
  let e = st.clientOutput.get(c.clientId);
  if (!e) st.clientOutput.set(c.clientId, (e = { bytes: 0, uuids: new Set() }));
  e.bytes += delta;
  if (c.storedOutputBytes > 0) e.uuids.add(c.uuid);
  else e.uuids.delete(c.uuid);
}

/** `at`: the wall time of the transition (the agent's event time for its own events). */
function setState(st: ServerState, ctx: ServerCtx, c: ServerCommand, to: L, source: "agent" | "server", reason = "", at = ctx.wall): void {
  assert(!isTerminal(c.state), `terminal ${L[c.state]} of ${c.uuid} may not change to ${L[to]}`);
  assert(canTransition(c.state, to), `illegal transition ${L[c.state]} -> ${L[to]} for ${c.uuid}`);
  c.state = to;
  if (to === L.RUNNING && c.startedTime === 0) c.startedTime = at;
  if (isTerminal(to)) {
    c.endedTime = at;
    st.active.delete(c.uuid);
    noteEnded(st, c, ctx.now);
    c.terminalSource = source;
    if (reason) c.reason = reason;
    c.script = null;
    ctx.persist(scriptDelete(c.uuid));
    c.stdin.queue = [];
    c.stdin.queuedBytes = 0;
    c.signals = [];
  }
  persistCommand(st, ctx, c);
  ctx.emit({ type: "trace", event: "state", detail: { uuid: c.uuid, state: L[to] ?? to, source, reason } });
}

// ------------------------------------------------------------------ control

function reply(ctx: ServerCtx, requestId: string, result: ControlResult): void {
  ctx.afterDurable({ kind: "reply", requestId, result });
}

function replyError(ctx: ServerCtx, requestId: string, code: Code, message: string, uuid?: string): void {
  ctx.emit({ type: "reply", requestId, result: { ok: false, error: coreError(code, message, uuid) } });
}

/** The immutable request digest: what the agent deduplicates on (with the UUID). */
export function requestDigest(env: ServerEnv, uuid: string, clientId: string, specBytes: Uint8Array, queueExpiry: number): Uint8Array {
  const head = new TextEncoderLite().encode(`rvbox.v1/request\n${uuid}\n${clientId}\n${queueExpiry}\n`);
  return env.ports.sha256(concatBytes([head, specBytes]));
}

/** Minimal UTF-8 encoder (core has no TextEncoder in its lib). */
class TextEncoderLite {
  encode(s: string): Uint8Array {
    const out: number[] = [];
    for (const ch of s) {
      let cp = ch.codePointAt(0)!;
      if (cp < 0x80) out.push(cp);
      else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 63));
      else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
      else {
        cp -= 0;
        out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
      }
    }
    return new Uint8Array(out);
  }
}

const UUID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export function handleControl(st: ServerState, ctx: ServerCtx, r: ControlRequest, env: ServerEnv): void {
  switch (r.op) {
    case "submit":
      return submit(st, ctx, r, env);
    case "stdin":
    case "close_stdin": {
      const c = st.commands.get(r.uuid);
      if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
      const prior = c.requests[r.requestId];
      if (prior !== undefined) return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: prior });
      if (isTerminal(c.state)) return replyError(ctx, r.requestId, Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`, r.uuid);
      if (!c.spec.stdinOpen) return replyError(ctx, r.requestId, Code.VALIDATION, "the command was submitted without open stdin", r.uuid);
      if (c.stdin.closeRequested) return replyError(ctx, r.requestId, Code.VALIDATION, "stdin is already closed", r.uuid);
      const data = r.op === "stdin" ? r.data : new Uint8Array(0);
      if (data.length > MAX_CHUNK_BYTES) return replyError(ctx, r.requestId, Code.PAYLOAD_TOO_LARGE, `stdin writes are at most ${MAX_CHUNK_BYTES} bytes`, r.uuid);
      if (c.stdin.queuedBytes + data.length > st.config.limits.stdinQueue)
        return replyError(ctx, r.requestId, Code.CAPACITY, "stdin queue for this command is full; retry later", r.uuid);
      const seq = c.stdin.nextSeq++;
      c.stdin.queue.push({ seq, data, appendNewline: r.op === "stdin" && r.appendNewline, close: r.op === "close_stdin", requestId: r.requestId });
      c.stdin.queuedBytes += data.length;
      if (r.op === "close_stdin") c.stdin.closeRequested = true;
      remember(c, r.requestId, seq);
      persistCommand(st, ctx, c);
      return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: seq });
    }
    case "signal": {
      const c = st.commands.get(r.uuid);
      if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
      const prior = c.requests[r.requestId];
      if (prior !== undefined) return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: prior });
      if (SignalKind[r.signal] === undefined || r.signal === SignalKind.UNSPECIFIED) return replyError(ctx, r.requestId, Code.VALIDATION, "unknown signal", r.uuid);
      if (isTerminal(c.state)) return replyError(ctx, r.requestId, Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`, r.uuid);
      if (c.signals.length >= MAX_PENDING_SIGNALS) return replyError(ctx, r.requestId, Code.CAPACITY, `${c.signals.length} signals already outstanding; retry once they are answered`, r.uuid);
      const ending = r.signal !== SignalKind.USER1 && r.signal !== SignalKind.USER2;
      // Refused before anything is remembered: a refusal must not evict the
      // remembered answer of an earlier request (R-S5).
      if (c.state === L.QUEUED && !ending) return replyError(ctx, r.requestId, Code.VALIDATION, "the command is not running yet", r.uuid);
      c.revision++;
      remember(c, r.requestId, c.revision);
      if (c.state === L.QUEUED) {
        // Never reached an agent: the server ends it itself.
        setState(st, ctx, c, L.CANCELLED, "server", `${SignalKind[r.signal]?.toLowerCase()} before dispatch`);
        return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: c.revision });
      }
      c.signals.push({ revision: c.revision, signal: r.signal, requestId: r.requestId, sentOn: 0 });
      persistCommand(st, ctx, c);
      return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: c.revision });
    }
    case "authorize":
      return authorize(st, ctx, r);
    case "revoke_authorization": {
      const client = st.clients.get(r.clientId);
      if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
      const auth = client.authorization;
      if (!auth || auth.expiresAt <= ctx.now) return replyError(ctx, r.requestId, Code.NOT_FOUND, `client ${r.clientId} has no authorization to revoke`);
      client.authorization = null;
      ctx.persist(clientRecord(client));
      ctx.emit({ type: "trace", event: "authorization_revoked", detail: { client: r.clientId, instance: auth.instanceId } });
      return reply(ctx, r.requestId, { ok: true, instanceId: auth.instanceId });
    }
    case "dismiss_claim": {
      const client = st.clients.get(r.clientId);
      if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
      const claim = client.pendingClaim;
      if (!claim) return replyError(ctx, r.requestId, Code.NOT_FOUND, `client ${r.clientId} has no pending claim`);
      client.pendingClaim = null;
      ctx.persist(clientRecord(client));
      ctx.emit({ type: "trace", event: "claim_dismissed", detail: { client: r.clientId, instance: claim.instanceId } });
      return reply(ctx, r.requestId, { ok: true, instanceId: claim.instanceId });
    }
    case "ack_incident": {
      const inc = st.incidents.get(r.incidentId);
      if (!inc) return replyError(ctx, r.requestId, Code.NOT_FOUND, `no incident ${r.incidentId}`);
      if (!inc.acknowledged) noteOpen(st, inc.clientId, -1);
      inc.acknowledged = true;
      ctx.persist(incidentRecord(inc));
      return reply(ctx, r.requestId, { ok: true });
    }
    case "forget_client":
      return forgetClient(st, ctx, r.requestId, r.clientId);
    case "set_draining": {
      const client = st.clients.get(r.clientId);
      if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
      const was = client.draining;
      if (was !== r.draining) {
        client.draining = r.draining;
        ctx.persist(clientRecord(client));
        ctx.emit({ type: "trace", event: r.draining ? "client_draining" : "client_undrained", detail: { client: r.clientId } });
      }
      // Undrained: this step's pumpCommands dispatches what waited.
      return reply(ctx, r.requestId, { ok: true, wasDraining: was });
    }
  }
}

/**
 * R-F5: an operator authorizes exactly one instance, once. Only the pending
 * claimant (the instance the server refused, R-F4) or the instance a takeover
 * displaced may be named, character for character; any other instance only
 * with `instanceNotYetSeen` (one that has not tried to register yet). So a
 * prefix, a typo or a client without a claim is refused instead of creating
 * an authorization nobody will ever consume.
 */
function authorize(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "authorize" }>): void {
  const client = st.clients.get(r.clientId);
  if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
  const id = r.instanceId;
  if (id.length < 1 || id.length > MAX_INSTANCE_ID_CHARS || !isPrintableAscii(id))
    return replyError(ctx, r.requestId, Code.VALIDATION, `instance id must be 1-${MAX_INSTANCE_ID_CHARS} printable ASCII characters`);
  if (id === client.instanceId) return replyError(ctx, r.requestId, Code.VALIDATION, `instance ${id} already holds client ${r.clientId}; nothing to authorize`);
  const claim = client.pendingClaim;
  const known = claim?.instanceId === id || client.replaced?.instanceId === id;
  if (!known && !r.instanceNotYetSeen) {
    if (claim) {
      const hint = claim.instanceId.startsWith(id) ? "; give the full id, not a prefix" : "";
      return replyError(ctx, r.requestId, Code.VALIDATION, `instance ${id} is not the pending claimant of client ${r.clientId} (that is ${claim.instanceId})${hint}`);
    }
    return replyError(
      ctx,
      r.requestId,
      Code.VALIDATION,
      `client ${r.clientId} has no pending claim: no other instance has tried it; to authorize an instance that has not tried yet, set instance_not_yet_seen`,
    );
  }
  client.authorization = { instanceId: id, expiresAt: ctx.now + st.config.limits.authorizationTtlMs };
  ctx.persist(clientRecord(client));
  return reply(ctx, r.requestId, { ok: true, instanceId: id, expiresAt: client.authorization.expiresAt });
}

/** A submit, authorize or revoke named a client id the server has no record of. */
export function unknownClientMessage(st: ServerState, clientId: string): string {
  const near = closestClients(st.clients.keys(), clientId);
  const hint = near.length > 0 ? `; did you mean ${near.join(", ")}?` : st.clients.size === 0 ? "; no client has registered yet" : "";
  return `no client ${clientId} has registered with this server${hint}`;
}

/**
 * An operator forgets a client record (its commands' history stays). Refused
 * while the client has a live session or non-terminal commands. The highest
 * generation forgotten becomes the floor of every new record, so the id, seen
 * again, never reuses a generation.
 */
function forgetClient(st: ServerState, ctx: ServerCtx, requestId: string, clientId: string): void {
  const client = st.clients.get(clientId);
  if (!client) return replyError(ctx, requestId, Code.NOT_FOUND, `unknown client ${clientId}`);
  if (client.conn !== 0)
    return replyError(ctx, requestId, Code.CONFLICT, `client ${clientId} has a live session (connection ${client.conn}); stop its agent first`);
  let active = 0;
  for (const uuid of st.active) if (st.commands.get(uuid)!.clientId === clientId) active++;
  if (active > 0)
    return replyError(ctx, requestId, Code.CONFLICT, `client ${clientId} has ${active} non-terminal command${active === 1 ? "" : "s"}; cancel them or let them finish first`);
  st.clients.delete(clientId);
  st.generationFloor = Math.max(st.generationFloor, client.generation);
  ctx.persist(
    clientDelete(clientId),
    reconcileDelete(clientId),
    generationFloorRecord(st.generationFloor),
  );
  if (st.incidentDrops.delete(clientId)) ctx.persist(incidentDropRecord(clientId, undefined));
  ctx.emit({ type: "trace", event: "client_forgotten", detail: { client: clientId, generation: client.generation } });
  reply(ctx, requestId, { ok: true });
}

function submit(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "submit" }>, env: ServerEnv): void {
  if (!UUID_RE.test(r.uuid)) return replyError(ctx, r.requestId, Code.VALIDATION, "issue uuid must be 1-128 characters of [A-Za-z0-9._:-]");
  if (r.clientId === "") return replyError(ctx, r.requestId, Code.VALIDATION, "client id is required");
  const p = r.spec.program;
  if (p.case === undefined) return replyError(ctx, r.requestId, Code.VALIDATION, "no program (argv, shell or script)");
  if (p.case === "script") {
    const bytes = r.script;
    if (!bytes || bytes.length === 0 || bytes.length > MAX_SCRIPT_BYTES) return replyError(ctx, r.requestId, Code.VALIDATION, `script of 1..${MAX_SCRIPT_BYTES} bytes required`);
    if (Number(p.value.sizeBytes) !== bytes.length || toHex(env.ports.sha256(bytes)) !== toHex(p.value.sha256))
      return replyError(ctx, r.requestId, Code.VALIDATION, "script descriptor does not match the script bytes");
  }
  // The operator's expiry is a wall-clock instant; it is kept on the deadline clock.
  const queueExpiry = r.queueExpiry && r.queueExpiry > 0 ? Math.max(1, ctx.toDeadline(r.queueExpiry)) : ctx.now + DEFAULT_QUEUE_EXPIRY_MS;
  const specBytes = toBinary(ExecutionSpecSchema, r.spec);
  const hash = toHex(requestDigest(env, r.uuid, r.clientId, specBytes, r.queueExpiry ?? 0));
  const existing = st.commands.get(r.uuid);
  if (existing) {
    // A retry is answered like the original, and no sooner: only once the command is durable.
    if (existing.hash === hash) return reply(ctx, r.requestId, { ok: true, uuid: r.uuid, revision: existing.revision });
    return replyError(ctx, r.requestId, Code.CONFLICT, "issue uuid already used by a different request", r.uuid);
  }
  const gone = st.pruned.get(r.uuid);
  if (gone) {
    // Never run a pruned command again: the same request already ran.
    if (gone.hash === hash) return replyError(ctx, r.requestId, Code.ALREADY_EXECUTED, missingMessage(st, r.uuid), r.uuid);
    return replyError(ctx, r.requestId, Code.CONFLICT, "issue uuid already used by a different request (since pruned from history)", r.uuid);
  }
  // A mistyped client id would wait silently for an agent that never comes
  // (or for whichever agent registers under that id later).
  if (!st.clients.has(r.clientId)) {
    if (r.clientId.includes(",") || r.clientId.includes("*")) {
      const named = clientsNamedBy(st.clients.keys(), r.clientId);
      const which = named.total === 0 ? "it names no known client" : `it names ${named.ids.join(", ")}${named.total > named.ids.length ? ` and ${named.total - named.ids.length} more` : ""}`;
      return replyError(ctx, r.requestId, Code.VALIDATION, `client id ${r.clientId} looks like a list or a wildcard (${which}); multi-client runs are not supported yet: submit once per client`);
    }
    if (!r.allowUnknownClient) return replyError(ctx, r.requestId, Code.NOT_FOUND, `${unknownClientMessage(st, r.clientId)} (allow_unknown_client queues it for an id that has not registered yet)`);
  }
  // One pass: this client's active commands, and the metadata all active ones hold.
  let active = 0;
  let activeBytes = 0;
  for (const uuid of st.active) {
    const a = st.commands.get(uuid)!;
    activeBytes += a.charged;
    if (a.clientId === r.clientId) active++;
  }
  if (active >= st.config.limits.maxActivePerClient) return replyError(ctx, r.requestId, Code.CAPACITY, `client ${r.clientId} has ${active} active commands`);
  // Active work may take only its share of the tier: final states and history need the rest.
  if (activeBytes + SERVER_RECORD_BASE_BYTES + specBytes.length > st.config.limits.metadataBudget * SERVER_ACTIVE_METADATA_SHARE)
    return replyError(ctx, r.requestId, Code.CAPACITY, `server metadata budget: active commands hold ${activeBytes} bytes; retry once some finish`);
  const c: ServerCommand = {
    uuid: r.uuid,
    clientId: r.clientId,
    hash,
    revision: 1,
    spec: r.spec,
    script: p.case === "script" ? r.script! : null,
    createdAt: ctx.wall,
    committed: { state: L.UNSPECIFIED, exitCode: null, signalName: "", reason: "", storedThrough: 0, revision: 0, stdinAssigned: 0, startedTime: 0, endedTime: 0 },
    queueExpiry,
    state: L.QUEUED,
    terminalSource: "",
    everDispatched: false,
    dispatchedOn: 0,
    dispatchedAt: 0,
    attempts: 0,
    nextAttemptAt: 0,
    storedThrough: 0,
    receivedThrough: 0,
    streamNext: { stdout: 0, stderr: 0 },
    exitCode: null,
    signalName: "",
    reason: "",
    stdin: { nextSeq: 1, ackedThrough: 0, sentThrough: 0, queue: [], queuedBytes: 0, closeRequested: false },
    signals: [],
    scriptAcked: 0,
    scriptSent: 0,
    scriptCommitSentOn: 0,
    scriptCommitted: false,
    segments: [],
    storedOutputBytes: 0,
    retention: [],
    requests: { [r.requestId]: 1 },
    digests: {},
    endedAt: 0,
    startedTime: 0,
    endedTime: 0,
    specBytes: specBytes.length,
    rowEvents: 0,
    charged: 0,
  };
  st.commands.set(c.uuid, c);
  st.active.add(c.uuid);
  persistCommand(st, ctx, c);
  if (c.script) ctx.persist(scriptRecord(c.uuid, c.script));
  ctx.emit({ type: "trace", event: "submitted", detail: { uuid: c.uuid, client: c.clientId } });
  reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: 1 });
}

// ------------------------------------------------------------------ dispatch

function readyConn(st: ServerState, clientId: string): ConnState | undefined {
  const client = st.clients.get(clientId);
  const conn = client && client.conn !== 0 ? st.conns.get(client.conn) : undefined;
  return conn && conn.phase === "ready" ? conn : undefined;
}

/**
 * Non-terminal commands, oldest first (the index keeps submission order), as
 * a snapshot for loops that change commands: a loop skips any that became
 * terminal before its turn (`isTerminal` at the visit), and never visits one
 * submitted during it. Loops that change no command walk `st.active` itself.
 */
function activeCommands(st: ServerState): ServerCommand[] {
  const out: ServerCommand[] = [];
  for (const uuid of st.active) out.push(st.commands.get(uuid)!);
  return out;
}

/**
 * R-D6: what a ReconcileRequest names for a client: every non-terminal
 * command the server holds for it, queued ones included. Those the agent may
 * already hold (dispatched, accepted, running) come first, then queued ones
 * oldest first, up to MAX_RECONCILE_TARGETS so that the request (and the
 * agent's answer, which echoes matching tombstones) fits one envelope. The
 * snapshot is judged against the same list.
 */
export function reconcileTargets(st: ServerState, clientId: string): ServerCommand[] {
  const inFlight: ServerCommand[] = [];
  const queued: ServerCommand[] = [];
  for (const uuid of st.active) {
    const c = st.commands.get(uuid)!;
    if (isTerminal(c.state)) continue;
    if (c.clientId !== clientId) continue;
    if (c.state === L.QUEUED) queued.push(c);
    else if (c.state === L.DISPATCHED || c.state === L.ACCEPTED || c.state === L.RUNNING) inFlight.push(c);
  }
  return inFlight.concat(queued).slice(0, Math.min(st.config.limits.reconcileTargets, MAX_RECONCILE_TARGETS));
}

export function onSessionReady(st: ServerState, conn: ConnState): void {
  // Resend from the last acknowledged point on the new session.
  for (const uuid of st.active) {
    const c = st.commands.get(uuid)!;
    if (isTerminal(c.state)) continue;
    if (c.clientId !== conn.clientId) continue;
    c.stdin.sentThrough = c.stdin.ackedThrough;
    c.scriptSent = c.scriptAcked;
    c.scriptCommitSentOn = 0;
    for (const s of c.signals) s.sentOn = 0;
  }
}

export function pumpCommands(st: ServerState, ctx: ServerCtx, env: ServerEnv): void {
  const inflightByConn = new Map<number, number>();
  const active = activeCommands(st);
  for (const c of active) {
    if (isTerminal(c.state)) continue;
    // Queue expiry passes at the server only for commands no agent can hold.
    if (c.state === L.QUEUED && ctx.now >= c.queueExpiry) {
      setState(st, ctx, c, L.EXPIRED, "server", "queue expiry passed before dispatch");
      continue;
    }
    const conn = readyConn(st, c.clientId);
    if (!conn) continue;
    if (c.state === L.DISPATCHED && c.dispatchedOn === conn.generation) {
      inflightByConn.set(conn.conn, (inflightByConn.get(conn.conn) ?? 0) + 1);
    }
  }
  for (const conn of st.conns.values()) conn.inflight = inflightByConn.get(conn.conn) ?? 0;
  for (const c of active) {
    if (isTerminal(c.state)) continue;
    const conn = readyConn(st, c.clientId);
    if (!conn) continue;
    // A command submitted in this very step may be dispatched at once: its
    // create and its `dispatched` record then share one persist batch, and the
    // send still waits for that batch to be durable (R-D1), one fsync not two.
    if (c.state === L.QUEUED && retryDue(c, ctx.now)) {
      const client = st.clients.get(c.clientId)!;
      // Drained (rvbox drain): it stays queued; its queue expiry still applies.
      if (client.draining) continue;
      const cl = client.capacity;
      const free = cl.maxRunning + cl.maxQueued - cl.running - cl.queued - conn.inflight;
      if (free <= 0 || conn.inflight >= st.config.limits.maxInflightDispatches) continue;
      dispatch(st, ctx, conn, c);
      conn.inflight++;
    } else if (redeliveryDue(st, c, conn.generation, ctx.now)) {
      dispatch(st, ctx, conn, c); // Redelivery until CommandAccepted (R-D1).
    } else if (c.state === L.ACCEPTED || c.state === L.RUNNING) {
      pumpScript(st, ctx, conn, c, env);
      pumpStdin(st, ctx, conn, c);
      pumpSignals(ctx, conn, c);
    }
  }
}

/**
 * A capacity retry is due at `nextAttemptAt`, or at once when it is further
 * away than the longest retry delay: a deadline clock re-anchored backwards
 * at a restart must not hold a queued command back by the wall-clock step.
 */
function retryDue(c: ServerCommand, now: number): boolean {
  return now >= c.nextAttemptAt || c.nextAttemptAt - now > CAPACITY_RETRY_CAP_MS;
}

/**
 * A dispatch unanswered for the redelivery timeout is sent again, but only
 * once a `dispatched` record is durable: until then a crash would restore the
 * command as never sent (or not at all) while the agent holds it.
 */
function redeliveryDue(st: ServerState, c: ServerCommand, generation: number, now: number): boolean {
  const at = redeliveryAt(st, c);
  return at !== null && c.dispatchedOn === generation && now >= at;
}

/** When a dispatch sent on a live session and durably recorded may be sent again (null: none). */
function redeliveryAt(st: ServerState, c: ServerCommand): number | null {
  const armed = c.state === L.DISPATCHED && c.dispatchedOn !== 0 && c.committed.state === L.DISPATCHED;
  return armed ? c.dispatchedAt + st.config.limits.redeliveryMs : null;
}

function dispatch(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  c.everDispatched = true;
  c.dispatchedOn = conn.generation;
  c.dispatchedAt = ctx.now;
  c.attempts++;
  if (c.state === L.QUEUED) {
    // The first send waits until `dispatched` is durable: a server that crashed
    // after sending but before recording it would believe the command never
    // left, and could expire or cancel it on its own while the agent runs it.
    c.state = L.DISPATCHED;
    persistCommand(st, ctx, c);
    ctx.afterDurable({ kind: "dispatch", uuid: c.uuid, conn: conn.conn, generation: conn.generation });
    return;
  }
  sendDispatch(ctx, conn, c);
}

/** The first dispatch, once its `dispatched` record is durable (server-node runReleased). */
export function releaseDispatch(st: ServerState, ctx: ServerCtx, uuid: string, connId: number, generation: number): void {
  const c = st.commands.get(uuid);
  const conn = st.conns.get(connId);
  if (!c || !conn || c.state !== L.DISPATCHED || c.dispatchedOn !== generation) return;
  if (conn.phase !== "ready" || conn.generation !== generation) return; // redelivery or reconciliation takes over
  c.dispatchedAt = ctx.now;
  sendDispatch(ctx, conn, c);
}

function sendDispatch(ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  send(ctx, conn, {
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
  });
  ctx.emit({ type: "trace", event: "dispatch", detail: { uuid: c.uuid, conn: conn.conn, generation: conn.generation, attempt: c.attempts } });
}

import { timestampFromMs } from "@bufbuild/protobuf/wkt";
function timestampFromMsLocal(ms: number): ReturnType<typeof timestampFromMs> {
  return timestampFromMs(ms);
}

function pumpScript(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand, env: ServerEnv): void {
  if (!c.script || c.scriptCommitted) return;
  const size = c.script.length;
  while (c.scriptSent < size && c.scriptSent - c.scriptAcked < st.config.limits.scriptWindow) {
    const data = c.script.subarray(c.scriptSent, Math.min(size, c.scriptSent + SCRIPT_CHUNK_BYTES));
    send(ctx, conn, {
      case: "scriptChunk",
      value: create(ScriptChunkSchema, { issueUuid: c.uuid, offset: BigInt(c.scriptSent), data, sha256: env.ports.sha256(data) }),
    });
    c.scriptSent += data.length;
  }
  if (c.scriptAcked === size && c.scriptCommitSentOn !== conn.generation) {
    // All bytes durably received: commit, once per session.
    send(ctx, conn, {
      case: "scriptCommit",
      value: create(ScriptCommitSchema, { issueUuid: c.uuid, sizeBytes: BigInt(size), sha256: (c.spec.program.value as { sha256: Uint8Array }).sha256 }),
    });
    c.scriptCommitSentOn = conn.generation;
  }
}


function pumpStdin(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  let inflight = 0;
  let writes = 0;
  for (const op of c.stdin.queue) {
    if (op.seq > c.stdin.sentThrough) break;
    inflight += op.data.length + 1;
    writes++;
  }
  for (const op of c.stdin.queue) {
    if (op.seq <= c.stdin.sentThrough) continue;
    if (writes >= STDIN_WRITES_IN_FLIGHT) break;
    // Never send a write_seq a crash could take back (the agent would apply it and the
    // server would later refuse its acknowledgement as never sent).
    if (op.seq > c.committed.stdinAssigned) break;
    if (inflight > 0 && inflight + op.data.length > st.config.limits.stdinWindow) break;
    if (op.close) {
      send(ctx, conn, { case: "closeStdin", value: create(CloseStdinSchema, { issueUuid: c.uuid, writeSeq: BigInt(op.seq) }) });
    } else {
      send(ctx, conn, {
        case: "stdinWrite",
        value: create(StdinWriteSchema, { issueUuid: c.uuid, writeSeq: BigInt(op.seq), data: op.data, appendNewline: op.appendNewline }),
      });
    }
    c.stdin.sentThrough = op.seq;
    inflight += op.data.length + 1;
    writes++;
  }
}

function pumpSignals(ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  for (const s of c.signals) {
    if (s.sentOn === conn.generation) continue;
    // A revision not yet durable could be handed out again after a crash, and the
    // agent would discard the second request as a duplicate.
    if (s.revision > c.committed.revision) continue;
    send(ctx, conn, { case: "signalCommand", value: create(SignalCommandSchema, { issueUuid: c.uuid, commandRevision: BigInt(s.revision), signal: s.signal }) });
    s.sentOn = conn.generation;
  }
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
    return;
  }
  if (isTransientRejection(code) || code === Code.STALE_GENERATION) {
    c.state = L.QUEUED;
    const ceiling = Math.min(CAPACITY_RETRY_CAP_MS, CAPACITY_RETRY_INITIAL_MS * 2 ** Math.min(c.attempts, 20));
    c.nextAttemptAt = ctx.now + Math.floor(nextFloat(st.rng) * ceiling);
    persistCommand(st, ctx, c);
    ctx.emit({ type: "trace", event: "requeue", detail: { uuid: c.uuid, code: codeName(code), retryAt: c.nextAttemptAt } });
    return;
  }
  fail(Code.PROTOCOL_ERROR, `rejection with code ${code} is not a dispatch answer`, true);
}

// ------------------------------------------------------------------ reconcile

export function handleSnapshot(st: ServerState, ctx: ServerCtx, conn: ConnState, snap: ReconcileSnapshot): void {
  const view = (c: ServerCommand): ServerView => ({ uuid: c.uuid, state: c.state, terminalSource: c.terminalSource, hash: c.hash, storedThrough: c.storedThrough });
  const requested: ServerView[] = reconcileTargets(st, conn.clientId).map(view);
  const agentViews: AgentView[] = snap.retainedCommands.map((r) => ({
    uuid: r.issueUuid,
    lifecycle: r.lifecycle,
    tombstoned: r.tombstoned,
    hash: toHex(r.immutableRequestSha256),
    lastEventSeq: safeNumber(r.lastClientEventSeq) ?? Number.MAX_SAFE_INTEGER,
  }));
  const lookup = (uuid: string): ServerView | undefined => {
    const c = st.commands.get(uuid);
    if (c) return c.clientId === conn.clientId ? view(c) : undefined;
    // Pruned history is still server-confirmed terminal history (R-D11, R-D12).
    const p = prunedFor(st, uuid, conn.clientId);
    return p && { uuid, state: p.state, terminalSource: p.terminalSource, hash: p.hash, storedThrough: p.storedThrough };
  };
  const result = classify(requested, lookup, agentViews);
  const revisions = new Map(snap.retainedCommands.map((r) => [r.issueUuid, safeNumber(r.commandRevision) ?? 0]));
  // This session's instance displaced another one: the commands that other
  // instance held were not lost by this one (no invariant failed).
  const rep = st.clients.get(conn.clientId)?.replaced;
  const replacedFor = rep && rep.by === conn.instanceId ? rep : null;
  let takenOver: NonNullable<typeof rep> | null = null;
  for (const v of result.verdicts) {
    const c = st.commands.get(v.uuid);
    takenOver = replacedFor && c && v.action === "interrupt" && c.dispatchedOn <= replacedFor.generation ? replacedFor : null;
    if (takenOver && c) openIncident(st, ctx, conn.clientId, v.uuid, "takeover_interrupt", takeoverIncident(conn.clientId, c, takenOver));
    else if (v.incident) openIncident(st, ctx, conn.clientId, v.uuid, `reconcile_${v.action}`, v.incident);
    if (!c || c.clientId !== conn.clientId) continue;
    switch (v.action) {
      case "requeue":
        if (c.state === L.QUEUED) break; // never dispatched: nothing to undo
        c.state = L.QUEUED;
        c.nextAttemptAt = 0;
        persistCommand(st, ctx, c);
        break;
      case "interrupt":
        setState(st, ctx, c, L.INTERRUPTED, "server", takenOver ? takeoverReason(c, takenOver) : "agent lost an accepted command");
        break;
      case "already_executed":
        setState(st, ctx, c, L.INTERRUPTED, "server", "agent tombstone: already executed; outcome not retained");
        break;
      case "diverged":
        setState(st, ctx, c, L.INTERRUPTED, "server", "the agent's copy is behind the events stored from another copy of this instance");
        break;
      case "adopt":
        setState(st, ctx, c, v.adopt!, "agent");
        break;
      default:
        break;
    }
    // Signals the agent already applied need not be sent again.
    const rev = revisions.get(v.uuid) ?? 0;
    if (c.signals.length > 0) c.signals = c.signals.filter((s) => s.revision > rev);
  }
  ctx.persist(reconcileRecord(conn.clientId, { generation: conn.generation, terminate: result.terminate, discard: result.discard }));
  ctx.emit({ type: "trace", event: "reconciled", detail: { conn: conn.conn, client: conn.clientId, terminate: result.terminate.length, discard: result.discard.length } });
  ctx.afterDurable({ kind: "reconcile_result", conn: conn.conn, terminate: result.terminate, discard: result.discard });
}

type Replaced = NonNullable<ClientRecord["replaced"]>;

const heldAs = (c: ServerCommand): string => (c.state === L.RUNNING ? "running on" : "accepted by");

function takeoverIncident(clientId: string, c: ServerCommand, r: Replaced): string {
  const how = r.authorized ? "was taken over by" : "registered from a new";
  const tail = r.authorized
    ? "; its process may still run there until that instance reconnects and is told it was replaced"
    : " while no session was live; its process may still run on the previous instance";
  return `${clientId} ${how} instance ${r.by}; the command was ${heldAs(c)} the previous instance ${r.instanceId}${tail}`;
}

function takeoverReason(c: ServerCommand, r: Replaced): string {
  return `${r.authorized ? "client taken over by" : "client re-registered from"} instance ${r.by}; the command was ${heldAs(c)} the previous instance ${r.instanceId}`;
}

// ------------------------------------------------------------------ events

const streamName = (s: OutputStream): StreamName | null => (s === OutputStream.STDOUT ? "stdout" : s === OutputStream.STDERR ? "stderr" : null);

export function handleCommandEvent(
  st: ServerState,
  ctx: ServerCtx,
  conn: ConnState,
  ev: CommandEvent,
  frameBytes: number,
  env: ServerEnv,
  fail: Fail,
  /** The encoded CommandEvent exactly as received, when the frame holds it once (else null: re-encoded). */
  evBytes: Uint8Array | null = null,
): void {
  const c = st.commands.get(ev.issueUuid);
  if (!c && prunedFor(st, ev.issueUuid, conn.clientId)) {
    // Settled history: its events were stored before it was pruned. A resend
    // (or a stale copy's event) is ignored, as for any terminal command; the
    // ReconcileResult of the next session tells the agent to drop its copy.
    ctx.emit({ type: "trace", event: "event_ignored", detail: { uuid: ev.issueUuid, seq: String(ev.eventSeq), why: "pruned from history" } });
    return;
  }
  if (!c || c.clientId !== conn.clientId) return fail(Code.NOT_FOUND, `event for unknown command ${ev.issueUuid}`, false, ev.issueUuid);
  const seq = safeNumber(ev.eventSeq);
  if (seq === null || seq === 0) return fail(Code.SEQUENCE_VIOLATION, `event_seq ${ev.eventSeq} impossible`, true);
  // Ended by the server itself (cancelled before dispatch, expired, interrupted by
  // reconciliation): the agent's copy is stale history. Its events are ignored
  // whatever their sequence; the ReconcileResult tells the agent to drop it.
  // (Checking sequences first would close every session on a "gap" and the
  // result that ends the copy would never arrive: a livelock.)
  if (isTerminal(c.state) && c.terminalSource === "server") return;
  // The digest of the event's bytes as received: every retry must resend
  // identical bytes (R-O2). For a canonical encoder (every RVBox agent:
  // protobuf-es, whose sub-message bytes inside an envelope are those of the
  // message alone) this is the digest of the re-encoded event, without
  // encoding it again.
  const digest = digest53(evBytes ?? toBinary(CommandEventSchema, ev));
  if (isTerminal(c.state)) {
    // History is settled. An identical resend (its ack was lost) is acknowledged
    // again; anything else comes from a copy that diverged (e.g. a cloned
    // instance) and is ignored: closing here would keep the ReconcileResult that
    // discards that copy from ever arriving.
    // Acknowledge only through the resent seq: storedThrough may include events
    // from another copy of this instance that this agent never assigned.
    if (seq <= c.storedThrough && c.digests[seq] === digest) sendAck(ctx, conn, c.uuid, seq);
    else ctx.emit({ type: "trace", event: "event_ignored", detail: { uuid: c.uuid, seq, why: "command is terminal" } });
    return;
  }
  if (seq <= c.receivedThrough) {
    const known = c.digests[seq];
    if (known !== undefined && known !== digest) return fail(Code.SEQUENCE_VIOLATION, `event ${seq} of ${c.uuid} resent with different bytes`, true);
    if (seq <= c.storedThrough) sendAck(ctx, conn, c.uuid, c.storedThrough);
    return;
  }
  if (seq !== c.receivedThrough + 1) return fail(Code.SEQUENCE_VIOLATION, `event ${seq} of ${c.uuid} after ${c.receivedThrough}: gap`, true);
  if (ev.event.case !== "output" && c.rowEvents >= rowEventBound(c))
    return fail(Code.CAPACITY, `${c.uuid} already has ${c.rowEvents} stored non-output events, the most it may have`, true);
  if (c.state === L.QUEUED || c.state === L.DISPATCHED) {
    // The agent can only emit events for a command it accepted: the
    // CommandAccepted must have been lost. Adopt it.
    setState(st, ctx, c, L.ACCEPTED, "agent");
  }
  if (conn.ingressPending + frameBytes > st.config.limits.ingressHigh) {
    // R-W7: never acknowledge or discard a sequenced event; close, the agent resends.
    closeConn(st, ctx, conn.conn, Code.CAPACITY, "server ingress high watermark", true);
    return;
  }
  const rev = safeNumber(ev.commandRevision) ?? 0;
  const time = ev.time ? timestampMs(ev.time) : ctx.wall;
  const base = { seq, revision: rev, time, digest };
  let record: EventRow;
  const e = ev.event;
  switch (e.case) {
    case "output": {
      const stream = streamName(e.value.stream);
      if (!stream) return fail(Code.PROTOCOL_ERROR, "output chunk without a stream", true);
      const size = e.value.originalSize;
      if (size > MAX_CHUNK_BYTES) return fail(Code.PAYLOAD_TOO_LARGE, `output chunk declares ${size} bytes`, true);
      if (e.value.zstdData.length > MAX_CHUNK_BYTES + 1024) return fail(Code.PAYLOAD_TOO_LARGE, "compressed chunk larger than any 64 KiB input needs", true);
      const offset = safeNumber(e.value.streamOffset);
      if (offset !== c.streamNext[stream]) return fail(Code.SEQUENCE_VIOLATION, `${stream} offset ${e.value.streamOffset}, expected ${c.streamNext[stream]}`, true);
      const chk = env.ports.checkCompressed(e.value.zstdData, size);
      if (!chk.ok) return fail(chk.code, chk.message, true);
      c.streamNext[stream] += size;
      record = { ...base, kind: "output", stream, offset, originalSize: size, zstd: e.value.zstdData };
      addToSegments(st, ctx, c, seq, e.value.zstdData.length, { stream, offset, length: size });
      break;
    }
    case "truncation": {
      if (e.value.removedEvents) return fail(Code.PROTOCOL_ERROR, "agent truncation markers carry no event range", true);
      const ranges: Array<{ stream: StreamName; offset: number; length: number }> = [];
      const next = { ...c.streamNext };
      for (const r of e.value.removedBytes) {
        const stream = streamName(r.stream);
        const offset = safeNumber(r.offset);
        const length = safeNumber(r.length);
        if (!stream || offset === null || length === null || length === 0) return fail(Code.PROTOCOL_ERROR, "bad truncation range", true);
        if (offset !== next[stream]) return fail(Code.SEQUENCE_VIOLATION, `truncation of ${stream} at ${offset}, expected ${next[stream]}`, true);
        next[stream] += length;
        ranges.push({ stream, offset, length });
      }
      c.streamNext = next;
      record = { ...base, kind: "truncation", cause: e.value.cause, ranges };
      break;
    }
    case "lifecycle": {
      const to = e.value.state;
      if (to !== c.state && !canTransition(c.state, to)) return fail(Code.SEQUENCE_VIOLATION, `lifecycle ${L[c.state]} -> ${L[to] ?? to} is not allowed`, true);
      if (to === L.ACCEPTED || to === L.QUEUED || to === L.DISPATCHED) return fail(Code.PROTOCOL_ERROR, `agent lifecycle event ${L[to]}`, true);
      if (e.value.exitCode !== undefined) c.exitCode = e.value.exitCode;
      c.signalName = e.value.signalName;
      record = { ...base, kind: "lifecycle", state: to, exitCode: e.value.exitCode ?? null, signalName: e.value.signalName, reason: e.value.reason, error: e.value.error ? { code: e.value.error.code, message: e.value.error.message } : null };
      if (to !== c.state) setState(st, ctx, c, to, "agent", e.value.reason, time);
      if (isTerminal(to)) c.signals = [];
      break;
    }
    case "stdinAck": {
      const ws = safeNumber(e.value.writeSeq);
      if (ws === null || ws >= c.stdin.nextSeq) return fail(Code.SEQUENCE_VIOLATION, `stdin ack for write ${e.value.writeSeq} never sent`, true);
      if (ws > c.stdin.ackedThrough) {
        c.stdin.ackedThrough = ws;
        while (c.stdin.queue.length > 0 && c.stdin.queue[0]!.seq <= ws) {
          const op = c.stdin.queue.shift()!;
          c.stdin.queuedBytes -= op.data.length;
        }
      }
      record = { ...base, kind: "stdin_ack", writeSeq: ws, closed: e.value.closed, failure: e.value.failure };
      break;
    }
    case "signalResult":
      c.signals = c.signals.filter((s) => s.revision > rev);
      record = { ...base, kind: "signal_result", signal: e.value.signal, delivered: e.value.delivered, detail: e.value.detail };
      break;
    case "scriptUpload": {
      const got = safeNumber(e.value.receivedBytes);
      const size = c.spec.program.case === "script" ? Number(c.spec.program.value.sizeBytes) : -1;
      if (got === null || got > size || got < c.scriptAcked) return fail(Code.SEQUENCE_VIOLATION, `script progress ${e.value.receivedBytes} impossible`, true);
      c.scriptAcked = got;
      if (e.value.complete) {
        c.scriptCommitted = true;
        c.script = null;
        ctx.persist(scriptDelete(c.uuid));
      }
      record = { ...base, kind: "script_upload", receivedBytes: got, complete: e.value.complete };
      break;
    }
    case "incomplete":
      record = { ...base, kind: "incomplete", streams: e.value.streams.map((s) => streamName(s)), reason: e.value.reason };
      break;
    default:
      return fail(Code.PROTOCOL_ERROR, "command event without a recognized payload", true);
  }
  c.receivedThrough = seq;
  if (e.case !== "output") c.rowEvents++;
  c.digests[seq] = digest;
  delete c.digests[seq - SERVER_RECENT_DIGESTS];
  conn.ingressPending += frameBytes;
  ctx.persist(eventRecord(c.uuid, record));
  persistCommand(st, ctx, c);
  ctx.afterDurable({ kind: "ack", conn: conn.conn, uuid: c.uuid, through: seq, bytes: frameBytes });
}

/** The most stored non-output events `c` may have (SERVER_ROW_EVENTS_PER_COMMAND). */
export function rowEventBound(c: ServerCommand): number {
  const script = c.spec.program.case === "script" ? Math.ceil(Number(c.spec.program.value.sizeBytes) / SCRIPT_CHUNK_BYTES) : 0;
  return SERVER_ROW_EVENTS_PER_COMMAND + (c.stdin.nextSeq - 1) + c.revision + script;
}

function addToSegments(st: ServerState, ctx: ServerCtx, c: ServerCommand, seq: number, bytes: number, range: { stream: StreamName; offset: number; length: number }): void {
  const L2 = st.config.limits;
  let seg = c.segments[c.segments.length - 1];
  if (!seg || seg.bytes >= L2.segmentBytes) {
    seg = { firstSeq: seq, lastSeq: seq, bytes: 0, ranges: [] };
    c.segments.push(seg);
  }
  seg.lastSeq = seq;
  seg.bytes += bytes;
  const last = seg.ranges[seg.ranges.length - 1];
  if (last && last.stream === range.stream && last.offset + last.length === range.offset) last.length += range.length;
  else seg.ranges.push({ ...range });
  c.storedOutputBytes += bytes;
  noteOutput(st, c, bytes);
  // R-O5: rolling retention drops whole old segments (never the one being written).
  while (c.storedOutputBytes > L2.outputPerCommand && c.segments.length > 1) dropOldestSegment(st, ctx, c);
  const client = st.clientOutput.get(c.clientId)!;
  while (client.bytes > L2.outputPerClient) {
    // The client's oldest retained output goes first (the index is in order of first output).
    let victim: ServerCommand | undefined;
    for (const uuid of client.uuids) {
      const x = st.commands.get(uuid)!;
      if (x.segments.length > (x === c ? 1 : 0)) {
        victim = x;
        break;
      }
    }
    if (!victim) break;
    dropOldestSegment(st, ctx, victim);
  }
}

function dropOldestSegment(st: ServerState, ctx: ServerCtx, c: ServerCommand): void {
  const seg = c.segments.shift()!;
  c.storedOutputBytes -= seg.bytes;
  noteOutput(st, c, -seg.bytes);
  // Segments go oldest first, so everything removed is one prefix of the output:
  // one cumulative marker per command (bounded), extended on every drop. Its
  // event range covers output events only; other events are never removed.
  let marker = c.retention[0];
  if (!marker) {
    marker = { firstSeq: seg.firstSeq, lastSeq: seg.lastSeq, ranges: [], at: ctx.wall };
    c.retention.push(marker);
  }
  marker.lastSeq = seg.lastSeq;
  marker.at = ctx.wall;
  for (const r of seg.ranges) {
    const same = marker.ranges.find((x) => x.stream === r.stream && x.offset + x.length === r.offset);
    if (same) same.length += r.length;
    else marker.ranges.push({ ...r });
  }
  recharge(st, c);
  ctx.persist(retentionRecord(c.uuid, marker));
  // Files go only once the marker that says so is durable.
  ctx.afterDurable({ kind: "drop_output", uuid: c.uuid, throughSeq: seg.lastSeq });
  ctx.emit({ type: "trace", event: "retention", detail: { uuid: c.uuid, firstSeq: seg.firstSeq, lastSeq: seg.lastSeq } });
}

// ------------------------------------------------------------------ timers & invariants

export function commandDeadline(st: ServerState, now: number): number | null {
  let d: number | null = null;
  const take = (t: number): void => {
    if (t > now) d = d === null ? t : Math.min(d, t);
  };
  for (const uuid of st.active) {
    const c = st.commands.get(uuid)!;
    if (isTerminal(c.state)) continue;
    if (c.state === L.QUEUED) {
      take(c.queueExpiry);
      if (!retryDue(c, now)) take(c.nextAttemptAt);
    } else {
      const at = redeliveryAt(st, c);
      if (at !== null) take(at);
    }
  }
  return d;
}

export function serverCommandInvariants(st: ServerState): void {
  const output = new Map<string, number>();
  for (const [uuid, c] of st.commands) {
    assert(st.active.has(uuid) === !isTerminal(c.state), `${uuid}: active index out of step`);
    if (isTerminal(c.committed.state)) assert(c.state === c.committed.state, `${uuid}: committed terminal state ${c.committed.state} changed to ${c.state}`);
    assert(c.committed.revision <= c.revision && c.committed.stdinAssigned < c.stdin.nextSeq, `${uuid}: committed view ahead of memory`);
    assert(c.stdin.sentThrough <= Math.max(c.committed.stdinAssigned, c.stdin.ackedThrough), `${uuid}: stdin sent before it was durable`);
    assert(c.committed.storedThrough <= c.storedThrough, `${uuid}: readers would see events not yet durable`);
    if (c.storedOutputBytes > 0) output.set(c.clientId, (output.get(c.clientId) ?? 0) + c.storedOutputBytes);
    assert(c.uuid === uuid, "command key mismatch");
    assert(c.storedThrough <= c.receivedThrough, `${uuid}: stored beyond received`);
    assert(c.stdin.ackedThrough < c.stdin.nextSeq, `${uuid}: stdin acked beyond assigned`);
    let q = 0;
    for (const op of c.stdin.queue) q += op.data.length;
    assert(q === c.stdin.queuedBytes && q <= st.config.limits.stdinQueue, `${uuid}: stdin queue accounting`);
    let seg = 0;
    for (const s of c.segments) seg += s.bytes;
    assert(seg === c.storedOutputBytes, `${uuid}: segment accounting`);
    assert(c.storedOutputBytes <= st.config.limits.outputPerCommand || c.segments.length <= 1, `${uuid}: retention exceeded`);
    assert(c.retention.length <= 1 && c.signals.length <= MAX_PENDING_SIGNALS && Object.keys(c.requests).length <= MAX_REQUEST_IDS_PER_COMMAND, `${uuid}: a per-command bound exceeded`);
    // Digests grow only while a command is active (events of terminal ones are never stored).
    if (!isTerminal(c.state)) assert(Object.keys(c.digests).length <= SERVER_RECENT_DIGESTS, `${uuid}: more than SERVER_RECENT_DIGESTS digests`);
    assert(c.rowEvents <= rowEventBound(c), `${uuid}: ${c.rowEvents} stored non-output events over the bound`);
    let sent = 0;
    for (const op of c.stdin.queue) if (op.seq <= c.stdin.sentThrough) sent++;
    assert(sent <= STDIN_WRITES_IN_FLIGHT, `${uuid}: ${sent} stdin writes in flight over the bound`);
    assert(c.scriptAcked <= (c.spec.program.case === "script" ? Number(c.spec.program.value.sizeBytes) : 0), `${uuid}: script progress beyond size`);
    if (isTerminal(c.state)) {
      assert(c.terminalSource !== "", `${uuid}: terminal without a source`);
      assert(c.signals.length === 0 && c.stdin.queue.length === 0, `${uuid}: terminal with pending work`);
    }
  }
  historyInvariants(st);
  for (const [client, e] of st.clientOutput) {
    assert(e.bytes === (output.get(client) ?? 0), `${client}: retained output index drift`);
    assert(e.bytes <= st.config.limits.outputPerClient + st.config.limits.segmentBytes * e.uuids.size, `${client}: per-client retention exceeded`);
  }
  void create;
  void MAX_SCRIPT_BYTES;
}
