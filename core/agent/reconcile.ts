// Agent side of reconciliation: R-D7, R-D10, R-D12, R-D13.
//
// On ReconcileRequest the agent (1) treats each target's
// last_server_event_seq as a cumulative ack, (2) notes which requested UUIDs
// match its tombstone ledger exactly, and (3) answers with one complete
// snapshot of everything it retains, sent only once everything persisted so
// far is durable, so the snapshot never claims a record a crash could still
// take back. Only after the snapshot leaves does the agent resume sending
// pinned events, from the first unacknowledged one.
//
// An agent with an unresolved store incident answers the request with an
// AgentError(CODE_STORE_INCIDENT) instead: it cannot claim completeness.
//
// The snapshot waits for durability as the `send_snapshot` deferred action
// (`runSnapshotDeferred` below); it leaves only on the session that asked.
//
// ReconcileResult is idempotent: it terminates (kills and tombstones) the
// listed active commands and discards the listed terminal ones.

import { create, toBinary } from "@bufbuild/protobuf";
import {
  ReconcileCommandStateSchema,
  ReconcileSnapshotSchema,
  type ReconcileCommandState,
  type ReconcileRequest,
  type ReconcileResult,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { fromHex, toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { assert, Code } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import { AGENT_SNAPSHOT_SLACK_BYTES, MAX_ENVELOPE_BYTES } from "../limits.js";
import { acknowledge, lastAssigned } from "../window/outbox.js";
import type { AgentState, SnapshotDeferred } from "./agent-types.js";
import { send, sendError, trace, type AgentCtx, type Fail } from "./io.js";
import { resendPinned } from "./outbox-ack.js";
import { tombstoneAndRemove } from "./retention.js";

export function handleReconcileRequest(st: AgentState, ctx: AgentCtx, req: ReconcileRequest, fail: Fail): void {
  if (st.storeIncident !== null) {
    sendError(st, ctx, Code.STORE_INCIDENT, `agent store incident, no complete snapshot possible: ${st.storeIncident}`, false);
    return;
  }
  if (req.targets.length > st.config.limits.maxRetained + st.config.limits.maxTombstones) {
    return fail(Code.PAYLOAD_TOO_LARGE, `reconcile request with ${req.targets.length} targets`, true);
  }
  // A set: a request naming a UUID twice gets it once in the snapshot.
  const tombstoned = new Set<string>();
  for (const t of req.targets) {
    const hash = toHex(t.immutableRequestSha256);
    const c = st.commands.get(t.issueUuid);
    const cb = st.outbox.commands.get(t.issueUuid);
    if (c && cb && c.hash === hash) {
      const through = safeNumber(t.lastServerEventSeq);
      if (through === null) return fail(Code.SEQUENCE_VIOLATION, `server claims an impossible event_seq ${t.lastServerEventSeq}`, true);
      // More than this agent assigned: the events came from another copy of this
      // instance. Not an ack of ours; the snapshot tells the truth and the server
      // resolves the divergence (no close: it would repeat on every reconnect).
      if (through <= lastAssigned(cb)) {
        const records: PersistRecord[] = [];
        acknowledge(st.outbox, cb, through, records);
        ctx.persist(...records);
      } else ctx.emit(trace("reconcile_diverged", { uuid: t.issueUuid, serverStored: through, assigned: lastAssigned(cb) }));
    } else if (!c && st.tombstones.get(t.issueUuid) === hash) {
      tombstoned.add(t.issueUuid);
    }
  }
  st.pendingSnapshotTombstones = [...tombstoned].map((uuid) => ({ uuid, hash: st.tombstones.get(uuid)! }));
  ctx.afterDurable({ kind: "send_snapshot", conn: st.session.conn });
}

/** What a snapshot may take of an envelope (the slack is for the envelope's own fields). */
const SNAPSHOT_BUDGET_BYTES = MAX_ENVELOPE_BYTES - AGENT_SNAPSHOT_SLACK_BYTES;

/**
 * Append matching tombstones to the retained records while the snapshot
 * stays under `budget` bytes; returns how many were left out. Retained
 * records (bounded by MAX_RETAINED_COMMANDS) must fit on their own. A
 * tombstone left out costs nothing unsafe: the server re-dispatches a
 * queued/dispatched command and the ledger answers CODE_ALREADY_EXECUTED
 * (R-D5); an accepted/running one becomes interrupted either way (R-D9).
 */
export function fitSnapshot(retained: ReconcileCommandState[], tombstones: readonly ReconcileCommandState[], budget: number): number {
  let size = toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: retained })).length;
  assert(size < budget, `snapshot of ${size} bytes does not fit an envelope`);
  let omitted = 0;
  for (const t of tombstones) {
    const len = toBinary(ReconcileCommandStateSchema, t).length;
    const cost = len + 1 + varintBytes(len); // field tag + length prefix
    if (size + cost >= budget) {
      omitted++;
      continue;
    }
    size += cost;
    retained.push(t);
  }
  return omitted;
}

const varintBytes = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4);

export function sendSnapshot(st: AgentState, ctx: AgentCtx): void {
  const retained = [];
  for (const c of st.commands.values()) {
    const cb = st.outbox.commands.get(c.uuid)!;
    retained.push(
      create(ReconcileCommandStateSchema, {
        issueUuid: c.uuid,
        lifecycle: c.lifecycle,
        lastClientEventSeq: BigInt(lastAssigned(cb)),
        commandRevision: BigInt(c.revision),
        tombstoned: false,
        immutableRequestSha256: fromHex(c.hash),
      }),
    );
  }
  const tombstones = st.pendingSnapshotTombstones.map((t) =>
    create(ReconcileCommandStateSchema, {
      issueUuid: t.uuid,
      lifecycle: CommandLifecycle.UNSPECIFIED,
      tombstoned: true,
      immutableRequestSha256: fromHex(t.hash),
    }),
  );
  st.pendingSnapshotTombstones = [];
  const left = fitSnapshot(retained, tombstones, SNAPSHOT_BUDGET_BYTES);
  if (left > 0) ctx.emit(trace("snapshot_tombstones_left_out", { left }));
  const snapshot = create(ReconcileSnapshotSchema, { retainedCommands: retained });
  send(st, ctx, { case: "reconcileSnapshot", value: snapshot });
  ctx.emit(trace("snapshot_sent", { retained: retained.length }));
}

/** Everything persisted before the request is durable: the snapshot, then the pinned events again. */
export function runSnapshotDeferred(st: AgentState, ctx: AgentCtx, a: SnapshotDeferred): void {
  if (a.conn === st.session.conn && st.session.phase === "established") {
    sendSnapshot(st, ctx);
    st.reconciled = true;
    // Retransmit everything pinned from the first unacknowledged event (R-H6, R-D7).
    resendPinned(st);
  }
}

/** Kill (if running) and tombstone one local command: it never runs again and nothing more of it is sent. */
function terminateLocal(st: AgentState, ctx: AgentCtx, uuid: string, why: string): boolean {
  const c = st.commands.get(uuid);
  if (!c) return false;
  if ((c.phase === "running" || c.phase === "launching") && c.pid > 0) {
    ctx.emit({ type: "signal", uuid, signal: SignalKind.KILL, revision: c.revision });
  }
  if (c.script?.path) ctx.emit({ type: "discard_script", uuid, path: c.script.path });
  tombstoneAndRemove(st, ctx, uuid, why);
  return true;
}

/** Every local command, ended as a ReconcileResult would terminate it (CODE_REPLACED). Returns how many. */
export function endLocalWork(st: AgentState, ctx: AgentCtx, why: string): number {
  let n = 0;
  for (const uuid of [...st.commands.keys()]) if (terminateLocal(st, ctx, uuid, why)) n++;
  return n;
}

export function handleReconcileResult(st: AgentState, ctx: AgentCtx, res: ReconcileResult): void {
  for (const uuid of res.terminateLocalIssueUuids) terminateLocal(st, ctx, uuid, "terminated by reconcile result");
  for (const uuid of res.discardLocalTerminalIssueUuids) {
    const c = st.commands.get(uuid);
    if (c && c.phase === "done") tombstoneAndRemove(st, ctx, uuid, "discarded by reconcile result");
  }
}
