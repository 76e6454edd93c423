// The operators' audit log: every mutating control call the control service
// makes on an operator's behalf (who, which RPC and arguments, which clients,
// when, the result), appended in the same persist batch as the call's own
// change, so the reply (parked behind that batch) never leaves before its
// entry is durable. Bounded by limits.auditMax: the oldest entries go first
// and are counted (durably), so a listing can say "N older entries dropped"
// instead of being silently short.
//
// Calls refused before they reached the core (access control, a missing
// field) go to a log of their own, bounded by limits.auditRefusalMax, with
// its own drop count: a caller refused thousands of times a second must not
// push accepted calls' entries out. Repeated refusals of one identity, RPC
// and reason within AUDIT_REFUSAL_WINDOW_MS are counted in one entry.

import { assert, codeName, unreachable } from "../errors.js";
import { AUDIT_REFUSAL_WINDOW_MS, MAX_AUDIT_CLIENTS_PER_ENTRY, MAX_AUDIT_MESSAGE_CHARS, MAX_AUDIT_SUMMARY_CHARS } from "../limits.js";
import type { AuditCall, AuditEntry, ControlRequest, ControlResult, RefusalEntry, ServerState } from "./server-types.js";
import {
  type ServerTables,
  auditDelete,
  auditDroppedOf,
  auditDroppedRecord,
  auditRecord,
  refusalDelete,
  refusalRecord,
  refusalsDroppedRecord,
  rowsOf,
} from "./store.js";
import type { ServerCtx } from "./io.js";

const cut = (s: string, max: number): string => (s.length <= max ? s : `${s.slice(0, max - 1)}…`);

/** The clients a control request names (a command's client for the ones that name a command). */
export function requestClients(st: ServerState, r: ControlRequest): string[] {
  switch (r.op) {
    case "submit":
    case "authorize":
    case "revoke_authorization":
    case "dismiss_claim":
    case "forget_client":
    case "set_draining":
    case "set_labels":
      return r.clientId !== "" ? [r.clientId] : [];
    case "stdin":
    case "close_stdin":
    case "signal": {
      const id = st.commands.get(r.uuid)?.clientId ?? st.pruned.get(r.uuid)?.clientId;
      return id !== undefined ? [id] : [];
    }
    case "ack_incident": {
      const id = st.incidents.get(r.incidentId)?.clientId;
      return id ? [id] : [];
    }
    case "audit_refusal":
      return r.clients;
    case "cancel_job": {
      const job = st.jobs.get(r.jobId);
      return job ? job.children.map((c) => c.clientId) : [];
    }
    case "submit_job": {
      // The targets the job resolved (a selector's matches), else the ones it named.
      const job = st.jobs.get(r.jobId);
      return job ? job.children.map((c) => c.clientId) : r.clients;
    }
    default:
      return unreachable(r, "control request");
  }
}

/** An audit entry of `call` (not yet numbered), with its arguments and message cut to their bounds. */
function entryOf(seq: number, at: number, call: AuditCall, clients: readonly string[], result: string, message: string): AuditEntry {
  return {
    seq,
    at,
    operator: call.operator,
    role: call.role,
    rpc: call.rpc,
    summary: cut(call.summary, MAX_AUDIT_SUMMARY_CHARS),
    clients: clients.slice(0, MAX_AUDIT_CLIENTS_PER_ENTRY),
    clientsOmitted: Math.max(0, clients.length - MAX_AUDIT_CLIENTS_PER_ENTRY),
    result,
    message: cut(message, MAX_AUDIT_MESSAGE_CHARS),
  };
}

/**
 * Append one audit entry (and drop the oldest past the bound); persisted with
 * this step's batch. With the history in the store the entry is only
 * persisted: the store keeps the log, bounds it (limits.auditMax, its own
 * sweep) and answers ListAudit; memory holds none of it.
 */
export function appendAudit(st: ServerState, ctx: ServerCtx, call: AuditCall, clients: readonly string[], result: string, message: string): AuditEntry {
  st.auditSeq++;
  const e = entryOf(st.auditSeq, ctx.wall, call, clients, result, message);
  ctx.persist(auditRecord(e));
  if (st.config.limits.historyInStore) return e;
  st.audit.set(e.seq, e);
  let dropped = 0;
  let through = 0;
  for (const seq of st.audit.keys()) {
    if (st.audit.size <= st.config.limits.auditMax) break;
    st.audit.delete(seq);
    ctx.persist(auditDelete(seq));
    dropped++;
    through = seq;
  }
  if (dropped > 0) {
    st.auditDropped += dropped;
    ctx.persist(auditDroppedRecord(st.auditDropped, through));
  }
  return e;
}

/** Which refusals one entry counts: same identity, RPC, result and message. */
const refusalKey = (e: AuditCall & { result: string; message: string }): string => JSON.stringify([e.operator, e.rpc, e.result, e.message]);

/**
 * Record one refused call: counted in the newest entry of its identity, RPC
 * and reason if that began within AUDIT_REFUSAL_WINDOW_MS, else a new entry
 * (dropping the oldest past limits.auditRefusalMax). Never touches the audit
 * entries. Persisted with this step's batch.
 */
export function appendRefusal(st: ServerState, ctx: ServerCtx, call: AuditCall, clients: readonly string[], result: string, message: string): RefusalEntry {
  const fresh = entryOf(st.refusalSeq + 1, ctx.wall, call, clients, result, message);
  const key = refusalKey(fresh);
  const openSeq = st.refusalOpen.get(key);
  const open = openSeq === undefined ? undefined : st.refusals.get(openSeq);
  if (open && ctx.wall - open.at < AUDIT_REFUSAL_WINDOW_MS) {
    open.count++;
    open.lastAt = Math.max(open.lastAt, ctx.wall);
    open.summary = fresh.summary;
    open.clients = fresh.clients;
    open.clientsOmitted = fresh.clientsOmitted;
    ctx.persist(refusalRecord(open));
    return open;
  }
  st.refusalSeq++;
  const e: RefusalEntry = { ...fresh, count: 1, lastAt: ctx.wall };
  st.refusals.set(e.seq, e);
  st.refusalOpen.set(key, e.seq);
  ctx.persist(refusalRecord(e));
  trimRefusals(st, ctx);
  return e;
}

function trimRefusals(st: ServerState, ctx: ServerCtx): void {
  let dropped = 0;
  let through = 0;
  for (const [seq, e] of st.refusals) {
    if (st.refusals.size <= st.config.limits.auditRefusalMax) break;
    st.refusals.delete(seq);
    const key = refusalKey(e);
    if (st.refusalOpen.get(key) === seq) st.refusalOpen.delete(key);
    ctx.persist(refusalDelete(seq));
    dropped++;
    through = seq;
  }
  if (dropped > 0) {
    st.refusalsDropped += dropped;
    ctx.persist(refusalsDroppedRecord(st.refusalsDropped, through));
  }
}

/** The result an audit entry records for a reply. */
export function auditResult(result: ControlResult): { result: string; message: string } {
  return result.ok ? { result: "OK", message: "" } : { result: codeName(result.error.code), message: result.error.message };
}

/** Rebuild the audit log (after restore). */
export function restoreAudit(st: ServerState, tables: ServerTables): void {
  const rows = [...rowsOf(tables, "audit")].map(([, r]) => r).sort((a, b) => a.seq - b.seq);
  // History in the store: the rows only say where the sequence is (a store may hand over just the newest).
  if (!st.config.limits.historyInStore) for (const r of rows) st.audit.set(r.seq, { ...r, clients: [...r.clients] });
  const d = auditDroppedOf(tables);
  st.auditDropped = d.count;
  st.auditSeq = Math.max(d.throughSeq, rows.at(-1)?.seq ?? 0);
  st.auditAtRestore = st.audit.size;
  const refusals = [...rowsOf(tables, "refusal")].map(([, r]) => r).sort((a, b) => a.seq - b.seq);
  for (const r of refusals) {
    st.refusals.set(r.seq, { ...r, clients: [...r.clients] });
    st.refusalOpen.set(refusalKey(r), r.seq);
  }
  const rd = auditDroppedOf(tables, "refusalsDropped");
  st.refusalsDropped = rd.count;
  st.refusalSeq = Math.max(rd.throughSeq, refusals.at(-1)?.seq ?? 0);
  st.refusalsAtRestore = st.refusals.size;
}

export function auditInvariants(st: ServerState): void {
  let prev = 0;
  for (const [seq, e] of st.audit) {
    assert(e.seq === seq && seq > prev, `audit entry ${seq} out of order`);
    assert(e.clients.length <= MAX_AUDIT_CLIENTS_PER_ENTRY, `audit entry ${seq} lists too many clients`);
    prev = seq;
  }
  assert(prev <= st.auditSeq, "audit entry beyond the audit sequence");
  // Audit entries may exceed a lowered bound only until the next append trims them.
  assert(st.audit.size <= Math.max(st.config.limits.auditMax, st.auditAtRestore), "audit log over its bound");
  refusalInvariants(st);
}

function refusalInvariants(st: ServerState): void {
  let prev = 0;
  for (const [seq, e] of st.refusals) {
    assert(e.seq === seq && seq > prev, `refusal entry ${seq} out of order`);
    assert(e.count >= 1 && e.lastAt >= e.at, `refusal entry ${seq} counts nothing`);
    assert(e.clients.length <= MAX_AUDIT_CLIENTS_PER_ENTRY, `refusal entry ${seq} lists too many clients`);
    prev = seq;
  }
  assert(prev <= st.refusalSeq, "refusal entry beyond the refusal sequence");
  assert(st.refusals.size <= Math.max(st.config.limits.auditRefusalMax, st.refusalsAtRestore), "refusal log over its bound");
  for (const [key, seq] of st.refusalOpen) {
    const e = st.refusals.get(seq);
    assert(e !== undefined && refusalKey(e) === key, `open refusal ${seq} is not a kept entry of its key`);
  }
}
