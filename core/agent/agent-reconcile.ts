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
// ReconcileResult is idempotent: it terminates (kills and tombstones) the
// listed active commands and discards the listed terminal ones.

import { create, toBinary } from "@bufbuild/protobuf";
import {
  AgentEnvelopeSchema,
  ReconcileCommandStateSchema,
  ReconcileSnapshotSchema,
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
import { send, sendError, trace, type AgentCtx } from "./agent-node.js";
import { tombstoneAndRemove, type Fail } from "./agent-commands.js";
import type { AgentState } from "./agent-types.js";

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
  // Retained commands always fit (MAX_RETAINED_COMMANDS of at most ~200 bytes);
  // tombstone hits are added while the envelope has room, and the rest left out:
  // the server then treats them as commands the agent lacks (interrupted, with
  // an incident), never as launched twice.
  let size = toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: retained })).length;
  const budget = MAX_ENVELOPE_BYTES - AGENT_SNAPSHOT_SLACK_BYTES;
  let left = 0;
  for (const t of st.pendingSnapshotTombstones) {
    const entry = create(ReconcileCommandStateSchema, {
      issueUuid: t.uuid,
      lifecycle: CommandLifecycle.UNSPECIFIED,
      tombstoned: true,
      immutableRequestSha256: fromHex(t.hash),
    });
    // Field tag (1 byte) and a length prefix (at most 3 bytes under 2 MiB).
    const n = toBinary(ReconcileCommandStateSchema, entry).length + 4;
    if (size + n > budget) {
      left++;
      continue;
    }
    size += n;
    retained.push(entry);
  }
  if (left > 0) ctx.emit(trace("snapshot_tombstones_left_out", { left }));
  st.pendingSnapshotTombstones = [];
  const snapshot = create(ReconcileSnapshotSchema, { retainedCommands: retained });
  size = toBinary(ReconcileSnapshotSchema, snapshot).length;
  assert(size < MAX_ENVELOPE_BYTES - 1024, `snapshot of ${size} bytes does not fit an envelope`);
  send(st, ctx, { case: "reconcileSnapshot", value: snapshot });
  ctx.emit(trace("snapshot_sent", { retained: retained.length }));
  void AgentEnvelopeSchema;
}

export function handleReconcileResult(st: AgentState, ctx: AgentCtx, res: ReconcileResult): void {
  for (const uuid of res.terminateLocalIssueUuids) {
    const c = st.commands.get(uuid);
    if (!c) continue;
    if ((c.phase === "running" || c.phase === "launching") && c.pid > 0) {
      ctx.emit({ type: "signal", uuid, signal: SignalKind.KILL, revision: c.revision });
    }
    if (c.script?.path) ctx.emit({ type: "discard_script", uuid, path: c.script.path });
    tombstoneAndRemove(st, ctx, uuid, "terminated by reconcile result");
  }
  for (const uuid of res.discardLocalTerminalIssueUuids) {
    const c = st.commands.get(uuid);
    if (c && c.phase === "done") tombstoneAndRemove(st, ctx, uuid, "discarded by reconcile result");
  }
}
