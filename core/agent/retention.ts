// Retention of finished commands: a command becomes a tombstone (a compact
// ledger entry, uuid -> request hash, bounded by maxTombstones, oldest out
// first) once it is done and every one of its events is acknowledged, or
// when the server's ReconcileResult ends or discards it (reconcile.ts).
// Everything else of it is deleted. A tombstone answers a re-dispatch with
// CODE_ALREADY_EXECUTED (R-D5, R-D10).

import type { PersistRecord } from "../effects.js";
import { fullyAcknowledged, removeCommand } from "../window/outbox.js";
import type { AgentState } from "./agent-types.js";
import { deleteChunks } from "./finish.js";
import { trace, type AgentCtx } from "./io.js";
import { deleteRecord, stdinKey, tombstoneRecord } from "./store.js";

/** Commands whose every event is acknowledged become tombstones. */
export function retire(st: AgentState, ctx: AgentCtx): void {
  for (const c of [...st.commands.values()]) {
    if (c.phase !== "done") continue;
    const cb = st.outbox.commands.get(c.uuid);
    if (cb && !fullyAcknowledged(cb)) continue;
    tombstoneAndRemove(st, ctx, c.uuid, "acknowledged");
  }
}

export function tombstoneAndRemove(st: AgentState, ctx: AgentCtx, uuid: string, why: string): void {
  const c = st.commands.get(uuid);
  if (!c) return;
  const records: PersistRecord[] = [];
  removeCommand(st.outbox, uuid, records);
  ctx.persist(...records);
  for (const item of c.stdin.pending) ctx.persist(deleteRecord("stdin", stdinKey(uuid, item.seq)));
  deleteChunks(ctx, c);
  ctx.persist(deleteRecord("command", uuid));
  st.commands.delete(uuid);
  st.metadataUsed -= st.config.limits.metadataPerCommand;
  if (c.script) st.scriptBytes -= c.script.size;
  st.tombstones.set(uuid, c.hash);
  st.tombstoneSeq++;
  ctx.persist(tombstoneRecord(uuid, { hash: c.hash, order: st.tombstoneSeq }));
  while (st.tombstones.size > st.config.limits.maxTombstones) {
    const oldest = st.tombstones.keys().next().value as string;
    st.tombstones.delete(oldest);
    ctx.persist(deleteRecord("tombstone", oldest));
  }
  ctx.emit(trace("tombstoned", { uuid, why }));
}
