// The server's invariants, checked after every step in tests and by the
// simulator: connections, clients, commands, and (in their modules) incidents
// and history.

import { isTerminal } from "../dispatch/lifecycle.js";
import { assert } from "../errors.js";
import * as LIM from "../limits.js";
import { MAX_PENDING_SIGNALS, MAX_REQUEST_IDS_PER_COMMAND, SERVER_RECENT_DIGESTS, STDIN_WRITES_IN_FLIGHT } from "../limits.js";
import type { ServerState } from "./server-types.js";
import { historyInvariants } from "./history.js";
import { auditInvariants } from "./audit.js";
import { incidentInvariants } from "./incidents.js";
import { jobInvariants } from "./jobs.js";
import { rowEventBound } from "./ingest.js";
import { labelsError } from "./labels.js";
import { commandWake } from "./timers.js";
import { blocked, quietOn } from "./active.js";
import { quietWaiting, redeliveryAt } from "./dispatch.js";
import { readyConn } from "./commands.js";
import { heartbeatInvariants } from "./heartbeats.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";

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
    const bad = labelsError(client.labels);
    assert(bad === null, `client ${client.clientId} labels invalid: ${bad}`);
    const rep = client.replaced;
    if (rep) {
      assert(rep.instanceId !== client.instanceId, `client ${client.clientId} replaced by its own instance`);
      assert(rep.generation < client.generation, `client ${client.clientId} replacement beyond its generation`);
    }
  }
  assert(st.gate.durableThrough <= st.gate.lastId, "durable beyond last persist");
  assert(st.conns.size <= LIM.MAX_SERVER_CONNECTIONS, "connections over their bound");
  assert(
    st.clients.size <= Math.max(st.config.limits.maxClients, st.clientsAtRestore),
    `${st.clients.size} client records over the bound ${st.config.limits.maxClients}`,
  );
  incidentInvariants(st);
  auditInvariants(st);
  serverCommandInvariants(st);
  activeIndexInvariants(st);
  heartbeatInvariants(st);
  jobInvariants(st);
}

/** The active index (active.ts) agrees with the commands, and every kept command wake is what a recomputation gives. */
export function activeIndexInvariants(st: ServerState): void {
  const ix = st.activeIndex;
  let n = 0;
  let charged = 0;
  let lastSeq = 0;
  for (const uuid of st.active) {
    const c = st.commands.get(uuid);
    assert(c !== undefined && !isTerminal(c.state), `${uuid}: in the active index but not an active command`);
    assert(ix.byClient.get(c.clientId)?.has(uuid) === true, `${uuid}: missing from its client's active set`);
    const seq = ix.seq.get(uuid);
    assert(seq !== undefined && seq > lastSeq && seq < ix.nextSeq, `${uuid}: active order number ${seq} out of order`);
    lastSeq = seq;
    charged += c.charged;
    if (c.state === L.QUEUED)
      assert(ix.expiryKept.get(uuid) === c.queueExpiry, `${uuid}: queue expiry ${c.queueExpiry} kept as ${ix.expiryKept.get(uuid)} (a change without touch)`);
    n++;
  }
  // The expiry heap holds a live entry for each queued command, and few stale ones.
  const liveExpiry = new Set<string>();
  for (const e of ix.expiries.entries()) if (ix.expiryKept.get(e.uuid) === e.at && ix.seq.get(e.uuid) === e.seq) liveExpiry.add(e.uuid);
  for (const [uuid] of ix.expiryKept) {
    assert(st.commands.get(uuid)?.state === L.QUEUED, `${uuid}: a queue expiry kept for a command that is not queued`);
    assert(liveExpiry.has(uuid), `${uuid}: its queue expiry is missing from the heap`);
  }
  assert(!ix.expiries.over(ix.expiryKept.size), `the expiry heap holds ${ix.expiries.length} entries for ${ix.expiryKept.size} queued`);
  let inSets = 0;
  for (const [clientId, set] of ix.byClient) {
    assert(set.size > 0, `empty active set kept for ${clientId}`);
    for (const uuid of set) assert(st.commands.get(uuid)?.clientId === clientId && st.active.has(uuid), `${uuid}: in ${clientId}'s active set by mistake`);
    inSets += set.size;
  }
  assert(inSets === n && ix.seq.size === n, `active index sizes ${inSets}/${ix.seq.size} != ${n}`);
  assert(charged === ix.charged, `active metadata charge ${ix.charged} != ${charged}`);
  // Each active command is exactly one of quiet, parked or loud, and the sets name no other.
  for (const [clientId, set] of ix.byClient) {
    const loud = ix.loud.get(clientId);
    const parked = ix.parked.get(clientId)?.live;
    for (const uuid of set) {
      const marks = (ix.quiet.has(uuid) ? 1 : 0) + (parked?.has(uuid) ? 1 : 0) + (loud?.has(uuid) ? 1 : 0);
      assert(marks === 1, `${uuid}: in ${marks} of the quiet, parked and loud sets, not exactly one`);
    }
  }
  const ownSet = (what: string, clientId: string, set: Set<string>): void => {
    assert(set.size > 0, `empty ${what} set kept for ${clientId}`);
    for (const uuid of set) assert(ix.byClient.get(clientId)?.has(uuid) === true, `${uuid}: ${what} for ${clientId} but not its active command`);
  };
  for (const [clientId, set] of ix.loud) ownSet("loud", clientId, set);
  for (const [clientId, q] of ix.parked) ownSet("parked", clientId, q.live);
  let unanswered = 0;
  for (const uuid of ix.quiet) {
    const c = st.commands.get(uuid);
    assert(c !== undefined && st.active.has(uuid), `${uuid}: marked quiet but not active`);
    const waiting = c.state === L.DISPATCHED;
    const backoff = c.state === L.QUEUED;
    assert(waiting || backoff || c.state === L.ACCEPTED || c.state === L.RUNNING, `${uuid}: marked quiet while ${L[c.state]} (a state change without touch)`);
    assert(waiting === (ix.unanswered.get(c.clientId)?.has(uuid) === true), `${uuid}: ${L[c.state]} and quiet, ${waiting ? "not " : ""}counted as unanswered`);
    if (backoff) {
      // Its capacity retry is what wakes it (wakeDueCommands): a kept timer no later than that retry.
      const best = ix.wakes.get(uuid)?.best;
      assert(ix.dirty.has(uuid) || (best != null && best.at <= c.dispatch.nextAttemptAt), `${uuid}: quiet while queued, but nothing wakes it by its retry`);
      continue;
    }
    if (waiting) {
      unanswered++;
      // Its redelivery is what wakes it (timers.ts wakeDueCommands): armed, and kept as its next timer.
      const at = redeliveryAt(st, c);
      assert(
        at !== null && (ix.dirty.has(uuid) || ix.wakes.get(uuid)?.best?.at === at),
        `${uuid}: quiet while dispatched, but its redelivery is not its kept timer`,
      );
    }
    const conn = readyConn(st, c.clientId);
    // A quiet mark matters only on a ready session; a new session clears it (onSessionReady).
    if (conn && waiting) assert(quietWaiting(st, c, conn.generation), `${uuid}: quiet while dispatched, but not sent on this session or not yet durable`);
    else if (conn) assert(quietOn(c, conn.generation), `${uuid}: marked quiet but has something to send (a change without touch)`);
  }
  let counted = 0;
  for (const [clientId, set] of ix.unanswered) {
    ownSet("unanswered", clientId, set);
    counted += set.size;
  }
  assert(counted === unanswered, `${counted} commands counted as unanswered, ${unanswered} quiet while dispatched`);
  // A parked command waits for room: on a ready session its client must still have none (else a
  // change that grew it did not unpark, and a later loud command could take its turn). Each sits
  // in its client's heap under its own submission order, which holds few stale entries.
  for (const [clientId, q] of ix.parked) {
    const inHeap = new Set<string>();
    for (const e of q.heap.entries()) {
      assert(!q.live.has(e.uuid) || e.seq === ix.seq.get(e.uuid), `${e.uuid}: parked under order ${e.seq}, not its own`);
      inHeap.add(e.uuid);
    }
    for (const uuid of q.live) {
      assert(st.commands.get(uuid)?.state === L.QUEUED, `${uuid}: parked but not queued (a state change without touch)`);
      assert(inHeap.has(uuid), `${uuid}: parked but missing from ${clientId}'s heap`);
    }
    assert(!q.heap.over(q.live.size), `${clientId}'s parked heap holds ${q.heap.length} entries for ${q.live.size}`);
    const conn = readyConn(st, clientId);
    if (!conn) continue;
    let inflight = 0;
    for (const uuid of ix.byClient.get(clientId)!) {
      const c = st.commands.get(uuid)!;
      if (c.state === L.DISPATCHED && c.dispatch.dispatchedOn === conn.generation) inflight++;
    }
    assert(blocked(st, st.clients.get(clientId)!, inflight), `${clientId}: ${q.live.size} commands parked but it has room (a change without unpark)`);
  }
  // A grown room is released by the next pump pass on a ready session.
  for (const clientId of ix.roomGrew) {
    assert(ix.parked.has(clientId), `${clientId}: room flagged as grown without parked commands`);
    assert(readyConn(st, clientId) === undefined, `${clientId}: room grew on a ready session and the pump did not release it`);
  }
  const bound = ix.wakeHeap.bound(st.active.size);
  assert(
    ix.wakeHeap.length <= bound && ix.recheck.length <= bound,
    `kept-wake heaps hold ${ix.wakeHeap.length} and ${ix.recheck.length} entries (bound ${bound})`,
  );
  const inHeap = new Set(ix.wakeHeap.entries().map((e) => e.cw));
  const inRecheck = new Set(ix.recheck.entries().map((e) => e.cw));
  for (const uuid of st.active) {
    const cw = ix.wakes.get(uuid);
    assert(cw !== undefined || ix.dirty.has(uuid), `${uuid}: no kept wake and not marked to work one out`);
    if (!cw) continue;
    if (cw.best) assert(inHeap.has(cw), `${uuid}: kept wake missing from the timer heap`);
    if (cw.validUntil < (cw.best?.at ?? Number.POSITIVE_INFINITY)) assert(inRecheck.has(cw), `${uuid}: kept wake missing from the recheck heap`);
  }
  for (const [uuid, cw] of ix.wakes) {
    assert(st.active.has(uuid), `a wake kept for ${uuid}, which is not active`);
    const again = commandWake(st, uuid, cw.computedAt);
    assert(
      JSON.stringify(again) === JSON.stringify(cw),
      `the wake kept for ${uuid} went stale (it changed without touch): kept ${JSON.stringify(cw)}, now ${JSON.stringify(again)}`,
    );
  }
}

export function serverCommandInvariants(st: ServerState): void {
  const output = new Map<string, number>();
  for (const [uuid, c] of st.commands) {
    assert(st.active.has(uuid) === !isTerminal(c.state), `${uuid}: active index out of step`);
    if (isTerminal(c.committed.state)) assert(c.state === c.committed.state, `${uuid}: committed terminal state ${c.committed.state} changed to ${c.state}`);
    assert(c.committed.revision <= c.revision && c.committed.stdinAssigned < c.stdin.nextSeq, `${uuid}: committed view ahead of memory`);
    assert(c.stdin.sentThrough <= Math.max(c.committed.stdinAssigned, c.stdin.ackedThrough), `${uuid}: stdin sent before it was durable`);
    assert(c.committed.storedThrough <= c.ingest.storedThrough, `${uuid}: readers would see events not yet durable`);
    if (c.output.storedOutputBytes > 0) output.set(c.clientId, (output.get(c.clientId) ?? 0) + c.output.storedOutputBytes);
    assert(c.uuid === uuid, "command key mismatch");
    assert(c.ingest.storedThrough <= c.ingest.receivedThrough, `${uuid}: stored beyond received`);
    assert(c.stdin.ackedThrough < c.stdin.nextSeq, `${uuid}: stdin acked beyond assigned`);
    let q = 0;
    let prev = c.stdin.ackedThrough;
    for (const op of c.stdin.queue) {
      assert(op.seq > prev && op.seq < c.stdin.nextSeq, `${uuid}: stdin queue out of order or outside (acked, next)`);
      prev = op.seq;
      q += op.data.length;
    }
    assert(c.stdin.inlineThrough < c.stdin.nextSeq, `${uuid}: inline stdin writes beyond the assigned ones`);
    assert(q === c.stdin.queuedBytes && q <= st.config.limits.stdinQueue, `${uuid}: stdin queue accounting`);
    let seg = 0;
    for (const s of c.output.segments) seg += s.bytes;
    assert(seg === c.output.storedOutputBytes, `${uuid}: segment accounting`);
    assert(c.output.storedOutputBytes <= st.config.limits.outputPerCommand || c.output.segments.length <= 1, `${uuid}: retention exceeded`);
    assert(
      c.output.retention.length <= 1 && c.signals.length <= MAX_PENDING_SIGNALS && Object.keys(c.requests).length <= MAX_REQUEST_IDS_PER_COMMAND,
      `${uuid}: a per-command bound exceeded`,
    );
    // Digests grow only while a command is active (events of terminal ones are never stored).
    if (!isTerminal(c.state)) assert(Object.keys(c.ingest.digests).length <= SERVER_RECENT_DIGESTS, `${uuid}: more than SERVER_RECENT_DIGESTS digests`);
    assert(c.ingest.rowEvents <= rowEventBound(c), `${uuid}: ${c.ingest.rowEvents} stored non-output events over the bound`);
    let sent = 0;
    for (const op of c.stdin.queue) if (op.seq <= c.stdin.sentThrough) sent++;
    assert(sent <= STDIN_WRITES_IN_FLIGHT, `${uuid}: ${sent} stdin writes in flight over the bound`);
    assert(c.script.acked <= (c.spec.program.case === "script" ? Number(c.spec.program.value.sizeBytes) : 0), `${uuid}: script progress beyond size`);
    if (isTerminal(c.state)) {
      assert(c.exit.terminalSource !== "", `${uuid}: terminal without a source`);
      assert(c.signals.length === 0 && c.stdin.queue.length === 0, `${uuid}: terminal with pending work`);
    }
  }
  historyInvariants(st);
  for (const [client, e] of st.clientOutput) {
    assert(e.bytes === (output.get(client) ?? 0), `${client}: retained output index drift`);
    assert(e.bytes <= st.config.limits.outputPerClient + st.config.limits.segmentBytes * e.uuids.size, `${client}: per-client retention exceeded`);
  }
}
