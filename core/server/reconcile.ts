// Reconciliation (R-D6, R-D8, R-D9, R-D11, R-D12): what a ReconcileRequest
// names, how the snapshot is applied (reconcile/classify.ts judges it), and
// the result, which leaves only once durable; only then is the session ready.

import { unreachable } from "../errors.js";
import { setPhase } from "./conn-phase.js";
import type { ReconcileSnapshot } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { MAX_RECONCILE_TARGETS } from "../limits.js";
import { type AgentView, type ServerView, classify } from "../reconcile/classify.js";
import type { ClientRecord, ConnState, ServerCommand, ServerDeferred, ServerState } from "./server-types.js";
import { reconcileRecord } from "./store.js";
import { persistCommand, setState } from "./commands.js";
import { touch } from "./active.js";
import { prunedFor } from "./history.js";
import { openIncident } from "./incidents.js";
import { type ServerCtx, send } from "./io.js";

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
  for (const uuid of st.activeIndex.byClient.get(clientId) ?? []) {
    const c = st.commands.get(uuid)!;
    if (c.state === L.QUEUED) queued.push(c);
    else if (c.state === L.DISPATCHED || c.state === L.ACCEPTED || c.state === L.RUNNING) inFlight.push(c);
  }
  return inFlight.concat(queued).slice(0, Math.min(st.config.limits.reconcileTargets, MAX_RECONCILE_TARGETS));
}

export function onSessionReady(st: ServerState, conn: ConnState): void {
  // Resend from the last acknowledged point on the new session (and let the pump look at every command again).
  for (const uuid of st.activeIndex.byClient.get(conn.clientId) ?? []) {
    const c = st.commands.get(uuid)!;
    c.stdin.sentThrough = c.stdin.ackedThrough;
    c.script.sent = c.script.acked;
    c.script.commitSentOn = 0;
    for (const s of c.signals) s.sentOn = 0;
    touch(st, c);
  }
}

export function handleSnapshot(st: ServerState, ctx: ServerCtx, conn: ConnState, snap: ReconcileSnapshot): void {
  const view = (c: ServerCommand): ServerView => ({
    uuid: c.uuid,
    state: c.state,
    terminalSource: c.exit.terminalSource,
    hash: c.hash,
    storedThrough: c.ingest.storedThrough,
  });
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
    takenOver = replacedFor && c && v.action === "interrupt" && c.dispatch.dispatchedOn <= replacedFor.generation ? replacedFor : null;
    if (takenOver && c) openIncident(st, ctx, conn.clientId, v.uuid, "takeover_interrupt", takeoverIncident(conn.clientId, c, takenOver));
    else if (v.incident) openIncident(st, ctx, conn.clientId, v.uuid, `reconcile_${v.action}`, v.incident);
    if (!c || c.clientId !== conn.clientId) continue;
    switch (v.action) {
      case "requeue":
        if (c.state === L.QUEUED) break; // never dispatched: nothing to undo
        setState(st, ctx, c, L.QUEUED, "server", "", ctx.wall, false);
        c.dispatch.nextAttemptAt = 0;
        touch(st, c);
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
      case "terminate_local":
      case "discard":
      case "keep":
      case "none":
        break; // the result (terminate, discard) or nothing: the command itself stays as it is
      default:
        unreachable(v.action, "reconcile verdict");
    }
    // Signals the agent already applied need not be sent again.
    const rev = revisions.get(v.uuid) ?? 0;
    if (c.signals.length > 0) c.signals = c.signals.filter((s) => s.revision > rev);
  }
  ctx.persist(reconcileRecord(conn.clientId, { generation: conn.generation, terminate: result.terminate, discard: result.discard }));
  ctx.emit({
    type: "trace",
    event: "reconciled",
    detail: { conn: conn.conn, client: conn.clientId, terminate: result.terminate.length, discard: result.discard.length },
  });
  ctx.afterDurable({ kind: "reconcile_result", conn: conn.conn, terminate: result.terminate, discard: result.discard });
}

/** The after-durable half of handleSnapshot: the result leaves, and only now is the session ready (R-D8). */
export function releaseReconcileResult(st: ServerState, ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "reconcile_result" }>): void {
  const conn = st.conns.get(a.conn);
  if (!conn || conn.phase !== "reconciling") return;
  send(ctx, conn, {
    case: "reconcileResult",
    value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: a.terminate, discardLocalTerminalIssueUuids: a.discard },
  });
  setPhase(conn, "ready");
  ctx.emit({ type: "trace", event: "session_ready", detail: { conn: a.conn, client: conn.clientId, generation: conn.generation } });
  onSessionReady(st, conn);
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
