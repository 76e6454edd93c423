// Operator requests about client records: authorize (R-F5), revoke, dismiss a
// claim, forget, drain; and the expiry of unused authorizations.

import { isPrintableAscii } from "../bytes.js";
import { Code } from "../errors.js";
import { MAX_INSTANCE_ID_CHARS } from "../limits.js";
import { closestClients } from "./client-names.js";
import { applyLabelChanges, formatLabels, sameLabels } from "./labels.js";
import type { ClientRecord, ControlRequest, ServerState } from "./server-types.js";
import { clientDelete, clientRecord, generationFloorRecord, incidentDropRecord, reconcileDelete } from "./store.js";
import { type ServerCtx, reply, replyError } from "./io.js";
import { activeSeq, unpark } from "./active.js";
import { setState } from "./commands.js";
import { forceEnd } from "./signals.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";

/** A submit, authorize or revoke named a client id the server has no record of. */
export function unknownClientMessage(st: ServerState, clientId: string): string {
  const near = closestClients(st.clients.keys(), clientId);
  const hint = near.length > 0 ? `; did you mean ${near.join(", ")}?` : st.clients.size === 0 ? "; no client has registered yet" : "";
  return `no client ${clientId} has registered with this server${hint}`;
}

/**
 * R-F5: an operator authorizes exactly one instance, once. Only the pending
 * claimant (the instance the server refused, R-F4) or the instance a takeover
 * displaced may be named, character for character; any other instance only
 * with `instanceNotYetSeen` (one that has not tried to register yet). So a
 * prefix, a typo or a client without a claim is refused instead of creating
 * an authorization nobody will ever consume.
 */
export function authorize(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "authorize" }>): void {
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
      return replyError(
        ctx,
        r.requestId,
        Code.VALIDATION,
        `instance ${id} is not the pending claimant of client ${r.clientId} (that is ${claim.instanceId})${hint}`,
      );
    }
    return replyError(
      ctx,
      r.requestId,
      Code.VALIDATION,
      `client ${r.clientId} has no pending claim: no other instance has tried it; to authorize an instance that has not tried yet, set instance_not_yet_seen`,
    );
  }
  client.authorization = { instanceId: id, expiresAt: ctx.now + st.config.limits.authorizationTtlMs };
  st.authorized.add(client.clientId);
  ctx.persist(clientRecord(client));
  return reply(ctx, r.requestId, { ok: true, instanceId: id, expiresAt: client.authorization.expiresAt });
}

export function revokeAuthorization(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "revoke_authorization" }>): void {
  const client = st.clients.get(r.clientId);
  if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
  const auth = client.authorization;
  if (!auth || auth.expiresAt <= ctx.now) return replyError(ctx, r.requestId, Code.NOT_FOUND, `client ${r.clientId} has no authorization to revoke`);
  client.authorization = null;
  ctx.persist(clientRecord(client));
  ctx.emit({ type: "trace", event: "authorization_revoked", detail: { client: r.clientId, instance: auth.instanceId } });
  return reply(ctx, r.requestId, { ok: true, instanceId: auth.instanceId });
}

export function dismissClaim(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "dismiss_claim" }>): void {
  const client = st.clients.get(r.clientId);
  if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
  const claim = client.pendingClaim;
  if (!claim) return replyError(ctx, r.requestId, Code.NOT_FOUND, `client ${r.clientId} has no pending claim`);
  client.pendingClaim = null;
  ctx.persist(clientRecord(client));
  ctx.emit({ type: "trace", event: "claim_dismissed", detail: { client: r.clientId, instance: claim.instanceId } });
  return reply(ctx, r.requestId, { ok: true, instanceId: claim.instanceId });
}

/**
 * An admin forgets a client record (its commands' history stays). Refused
 * while the client has a live session. Its non-terminal commands are ended
 * first, oldest first (`endForgotten`), so a command stuck in any state never
 * keeps a client from being forgotten. The highest generation forgotten
 * becomes the floor of every new record, so the id, seen again, never reuses
 * a generation.
 */
export function forgetClient(st: ServerState, ctx: ServerCtx, requestId: string, clientId: string): void {
  const client = st.clients.get(clientId);
  if (!client) return replyError(ctx, requestId, Code.NOT_FOUND, `unknown client ${clientId}`);
  if (client.conn !== 0)
    return replyError(ctx, requestId, Code.CONFLICT, `client ${clientId} has a live session (connection ${client.conn}); stop its agent first`);
  const ended = endForgotten(st, ctx, clientId);
  st.clients.delete(clientId);
  st.generationFloor = Math.max(st.generationFloor, client.generation);
  ctx.persist(clientDelete(clientId), reconcileDelete(clientId), generationFloorRecord(st.generationFloor));
  if (st.incidentDrops.delete(clientId)) ctx.persist(incidentDropRecord(clientId, undefined));
  ctx.emit({ type: "trace", event: "client_forgotten", detail: { client: clientId, generation: client.generation, ...(ended > 0 ? { ended } : {}) } });
  reply(ctx, requestId, ended > 0 ? { ok: true, ended } : { ok: true });
}

/**
 * End every non-terminal command of a client being forgotten: a queued one
 * never left the server (cancelled); one that may have reached the agent is
 * force-ended (signals.ts `forceEnd`: cancelled with an incident; terminal,
 * so never dispatched again). At most `maxActivePerClient` of them.
 */
function endForgotten(st: ServerState, ctx: ServerCtx, clientId: string): number {
  const uuids = [...(st.activeIndex.byClient.get(clientId) ?? [])];
  const cmds = uuids.map((u) => st.commands.get(u)!).sort((a, b) => activeSeq(st, a) - activeSeq(st, b));
  for (const c of cmds) {
    if (c.state === L.QUEUED) setState(st, ctx, c, L.CANCELLED, "server", `client ${clientId} was forgotten before it was dispatched`);
    else forceEnd(st, ctx, c, `client ${clientId} was forgotten by an admin`);
  }
  return cmds.length;
}

/** Drain (cordon) a client or end its drain (rvbox drain). */
export function setDraining(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "set_draining" }>): void {
  const client = st.clients.get(r.clientId);
  if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
  const was = client.draining;
  if (was !== r.draining) {
    client.draining = r.draining;
    if (!r.draining) unpark(st, r.clientId);
    ctx.persist(clientRecord(client));
    ctx.emit({ type: "trace", event: r.draining ? "client_draining" : "client_undrained", detail: { client: r.clientId } });
  }
  // Undrained: this step's pumpCommands dispatches what waited.
  return reply(ctx, r.requestId, { ok: true, wasDraining: was });
}

/**
 * Set and remove labels of a client (rvbox label). The whole request is
 * validated first (labels.ts; a key both set and removed, or a result over
 * MAX_LABELS_PER_CLIENT, is refused and changes nothing). A change is
 * persisted with the client record before the reply; a request that changes
 * nothing persists nothing and still answers with the labels.
 */
export function setLabels(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "set_labels" }>): void {
  const client = st.clients.get(r.clientId);
  if (!client) return replyError(ctx, r.requestId, Code.NOT_FOUND, unknownClientMessage(st, r.clientId));
  const next = applyLabelChanges(client.labels, r.set, r.remove);
  if (!next.ok) return replyError(ctx, r.requestId, next.error.code, `client ${r.clientId}: ${next.error.message}`);
  if (!sameLabels(client.labels, next.value)) {
    client.labels = next.value;
    ctx.persist(clientRecord(client));
    ctx.emit({ type: "trace", event: "client_labels", detail: { client: r.clientId, labels: formatLabels(next.value) } });
  }
  return reply(ctx, r.requestId, { ok: true, labels: client.labels });
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

/** R-F5: an authorization nobody used within its TTL is dropped (durably), in the order of the client records. */
export function expireAuthorizations(st: ServerState, ctx: ServerCtx): void {
  const due = authorizedClients(st).filter((c) => authorizationExpired(st, c.authorization!, ctx.now));
  for (const client of inClientOrder(st, due)) {
    client.authorization = null;
    st.authorized.delete(client.clientId);
    ctx.persist(clientRecord(client));
  }
}

/** `some` in the order of the client records (walks them only when there are two or more to order). */
export function inClientOrder(st: ServerState, some: ClientRecord[]): ClientRecord[] {
  if (some.length < 2) return some;
  const wanted = new Set(some);
  return [...st.clients.values()].filter((c) => wanted.has(c));
}

/**
 * The clients holding an authorization. `st.authorized` may also name clients
 * whose authorization was consumed, revoked or forgotten since (only setting one
 * adds to it): those are dropped here, so walking it costs what is held, not
 * every client record.
 */
export function authorizedClients(st: ServerState): ClientRecord[] {
  const out: ClientRecord[] = [];
  for (const id of st.authorized) {
    const client = st.clients.get(id);
    if (client?.authorization) out.push(client);
    else st.authorized.delete(id);
  }
  return out;
}
