// Command history on the server: the reserved metadata tier and pruning.
//
// Theory of operation
// -------------------
// architecture.md charges every durable byte a daemon keeps for commands to
// one budget; on the server the command records sit in the reserved metadata
// tier (64 MiB by default). Each command is charged `metaCharge(c)`, an
// estimate of its record, its spec, its stored row events, its remembered
// digests and its segment list, recomputed whenever the record is persisted.
//
// Terminal commands are history. `pruneHistory` runs at the end of every step
// and, oldest ended first, prunes a terminal command while the tier is over
// budget or the command ended more than `historyMs` ago. Only a *settled*
// command is pruned: its terminal state is durable and every event it
// received is durable (so nothing in flight still refers to it). Pruning is one
// persist batch: the command record and its events deleted, a compact
// `pruned` record written; once that batch is durable the shell deletes the
// command's output segments (`prune_output`).
//
// The compact record keeps what the protocol still needs about the command:
// its client, request hash, final state, who ended it and how many events
// were stored. With it a reconcile snapshot that names the command is
// classified exactly as before (discard, or terminate with an incident), a
// late resend or CommandAccepted is ignored instead of being an error, and a
// repeated submit is answered CODE_ALREADY_EXECUTED (same request) or
// CODE_CONFLICT (different request) rather than running it again. The ledger
// is bounded (`prunedMax`, oldest forgotten first); a command forgotten from
// it is what the spec calls a command the server lacks (R-D11).
//
// New submits are refused with CODE_CAPACITY while active commands alone take
// more than SERVER_ACTIVE_METADATA_SHARE of the tier, so history, final states
// and event rows always have room (submit.ts).
//
// History in the store (`limits.historyInStore`, the shells' stores): the
// database keeps the history, memory keeps what is live. Pruning then only
// drops a settled command from memory: nothing is persisted or deleted (its
// rows are durable already, and readers read them from the store), and it
// also happens once more than `historyHeld` ended commands are held. The
// ledger entry is kept in memory only; a restore builds the ledger from the
// newest ended command rows instead of holding them (restore.ts). The
// store's own retention deletes rows past `historyMs`.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { assert } from "../errors.js";
import { SERVER_PRUNES_PER_STEP } from "../limits.js";
import type { PrunedCommand, ServerCommand, ServerDeferred, ServerState } from "./server-types.js";
import { type PrunedRow, commandDelete, eventsDelete, prunedDelete, prunedRecord, retentionDelete } from "./store.js";
import type { ServerCtx } from "./io.js";
import { metaCharge } from "./metadata.js";
import { noteOutput } from "./retention.js";

/** `c` just became terminal: it is history from now on. */
export function noteEnded(st: ServerState, c: ServerCommand, now: number): void {
  c.endedAt = now;
  st.history.set(c.uuid, now);
}

/**
 * Terminal durably. (The view that says so was persisted after every event
 * the command received, and batches are durable in order, so its events are
 * durable too; `prune` asserts it.)
 */
export function isSettled(c: ServerCommand): boolean {
  return isTerminal(c.committed.state);
}

/**
 * Prune history oldest-ended first while the tier is over budget or the
 * oldest ended more than historyMs ago. Returns true when it stopped at the
 * per-step bound with more to do (the caller wakes again at once).
 */
export function pruneHistory(st: ServerState, ctx: ServerCtx): boolean {
  const lim = st.config.limits;
  let n = 0;
  for (const [uuid, endedAt] of st.history) {
    const over = st.metaBytes > lim.metadataBudget || (lim.historyInStore && st.history.size > lim.historyHeld);
    const old = lim.historyMs > 0 && ctx.now - endedAt >= lim.historyMs;
    if (!over && !old) break;
    const c = st.commands.get(uuid)!;
    // The oldest waits for its last persist; it settles within one commit.
    if (!isSettled(c)) break;
    if (n >= SERVER_PRUNES_PER_STEP) return true;
    prune(st, ctx, c);
    n++;
  }
  forgetPruned(st, ctx);
  return false;
}

function prune(st: ServerState, ctx: ServerCtx, c: ServerCommand): void {
  assert(
    c.committed.storedThrough === c.ingest.receivedThrough && c.ingest.storedThrough === c.ingest.receivedThrough,
    `${c.uuid}: pruned with events not yet durable`,
  );
  const entry = ledgerEntry(c, ctx.now);
  if (!st.config.limits.historyInStore) {
    ctx.persist(commandDelete(c.uuid));
    ctx.persist(eventsDelete(c.uuid));
    if (c.output.retention.length > 0) ctx.persist(retentionDelete(c.uuid));
    ctx.persist(prunedRecord(entry));
    // Output files go once the batch that forgets the command is durable.
    // (Retention never drops a command's last segment: no segments, no files.)
    if (c.output.segments.length > 0) ctx.afterDurable({ kind: "prune", uuid: c.uuid });
  }
  if (c.output.storedOutputBytes > 0) {
    const bytes = c.output.storedOutputBytes;
    c.output.storedOutputBytes = 0;
    noteOutput(st, c, -bytes);
  }
  st.metaBytes -= c.charged;
  st.commands.delete(c.uuid);
  st.history.delete(c.uuid);
  st.pruned.set(c.uuid, entry); // new to the ledger: held and pruned are disjoint
  ctx.emit({ type: "trace", event: "pruned", detail: { uuid: c.uuid, client: c.clientId, state: L[c.state] ?? c.state } });
}

/** Keep the ledger within prunedMax, forgetting the oldest. */
function forgetPruned(st: ServerState, ctx: ServerCtx): void {
  for (const uuid of st.pruned.keys()) {
    if (st.pruned.size <= st.config.limits.prunedMax) break;
    st.pruned.delete(uuid);
    // (With the history in the store the entry has no row, unless a store
    // without it wrote one: that row stays, and a restore bounds the ledger.)
    if (!st.config.limits.historyInStore) ctx.persist(prunedDelete(uuid));
  }
}

/** The pruned record of `uuid` if it belongs to `clientId`. */
export function prunedFor(st: ServerState, uuid: string, clientId: string): PrunedCommand | undefined {
  const p = st.pruned.get(uuid);
  return p && p.clientId === clientId ? p : undefined;
}

/** What an operator is told about a uuid the server no longer holds (`p`: its ledger entry, or the store's record of it). */
export function missingMessage(st: ServerState, uuid: string, p: PrunedCommand | undefined = st.pruned.get(uuid)): string {
  if (!p) return `no command ${uuid}`;
  const exit = p.exitCode !== null && p.exitCode !== 0 ? ` (exit ${p.exitCode})` : "";
  return `command ${uuid} ended ${L[p.state]?.toLowerCase() ?? p.state}${exit} and was pruned from history`;
}

/**
 * The history index and the ledger from what a restore loaded. `archived`:
 * ended commands the store keeps but memory does not hold (history in the
 * store): they join the ledger as if pruned when they ended, and the ledger
 * keeps its newest prunedMax.
 */
export function restoreHistory(st: ServerState, pruned: Iterable<[string, PrunedRow]>, archived: PrunedCommand[] = []): void {
  const ended = [...st.commands.values()].filter((c) => isTerminal(c.state));
  ended.sort((a, b) => a.endedAt - b.endedAt || a.createdAt - b.createdAt);
  for (const c of ended) st.history.set(c.uuid, c.endedAt);
  const ledger = [...[...pruned].map(([, v]) => v), ...archived];
  ledger.sort((a, b) => a.at - b.at || a.endedAt - b.endedAt);
  const skip = Math.max(0, ledger.length - (archived.length > 0 ? st.config.limits.prunedMax : ledger.length));
  for (const p of ledger.slice(skip)) if (!st.commands.has(p.uuid)) st.pruned.set(p.uuid, { ...p });
}

/** What the ledger keeps of an ended command (prune). */
export function ledgerEntry(c: ServerCommand, at: number): PrunedCommand {
  return {
    uuid: c.uuid,
    clientId: c.clientId,
    hash: c.hash,
    state: c.state,
    terminalSource: c.exit.terminalSource,
    storedThrough: c.ingest.storedThrough,
    exitCode: c.exit.exitCode,
    endedAt: c.endedAt,
    at,
  };
}

export function historyInvariants(st: ServerState): void {
  let sum = 0;
  let terminal = 0;
  for (const [uuid, c] of st.commands) {
    assert(c.charged === metaCharge(c), `${uuid}: metadata charge ${c.charged} out of step with its record (${metaCharge(c)})`);
    sum += c.charged;
    if (isTerminal(c.state)) {
      terminal++;
      assert(st.history.get(uuid) === c.endedAt, `${uuid}: terminal but not in the history index`);
    }
    assert(!st.pruned.has(uuid), `${uuid}: both held and pruned`);
  }
  assert(sum === st.metaBytes, `metadata tier accounting: ${st.metaBytes} != ${sum}`);
  assert(terminal === st.history.size, "history index out of step");
  assert(st.pruned.size <= st.config.limits.prunedMax, "pruned ledger over its bound");
  // (No assertion on end order: a wall clock may step back; pruning then
  // follows the order commands ended in, which is what the index keeps.)
}

/** A pruned command's output files go once the batch that forgets it is durable (prune). */
export function releasePrune(ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "prune" }>): void {
  ctx.emit({ type: "prune_output", uuid: a.uuid });
}
