// Effects: plain data a reducer returns, executed in order by a shell or by
// the simulator. Nothing here does anything; see docs/ARCHITECTURE.md
// "Effects" for who executes what and which inputs report back.

import type { PayloadCase } from "./codec/frame-codec.js";

/** Ping/pong/close/fencing/protocol errors go ahead of data (R-W4). */
export type Lane = "priority" | "data";

/**
 * One durable row change. `value: null` deletes the row. Values are plain
 * data (objects, arrays, strings, numbers, booleans, Uint8Array) and are
 * never mutated after the effect is emitted.
 *
 * `prefix: true` (with `value: null` only) deletes every row of `table` whose
 * key starts with `key` — all the events of a pruned command in one record.
 * Records of one batch apply in order, so a row written after a prefix delete
 * in the same batch survives it.
 */
export interface PersistRecord {
  readonly table: string;
  readonly key: string;
  readonly value: unknown;
  readonly prefix?: true;
}

/**
 * Apply one record to in-memory tables (the simulator's disks and the tests'
 * use this; the shells' stores do the same in SQL). `copy` clones a value so
 * the tables never share it with the core.
 */
export function applyRecord(tables: Map<string, Map<string, unknown>>, r: PersistRecord, copy: (v: unknown) => unknown): void {
  let t = tables.get(r.table);
  if (!t) tables.set(r.table, (t = new Map()));
  if (r.prefix) {
    for (const k of [...t.keys()]) if (k.startsWith(r.key)) t.delete(k);
  } else if (r.value === null) t.delete(r.key);
  else t.set(r.key, copy(r.value));
}

/**
 * Persist a batch atomically. Batches are durable in id order; the runner
 * reports `{ type: "durable", through: id }` once this batch and every
 * earlier one survive a crash. The core releases any send or spawn that
 * depends on this batch only after that input (architecture.md: durability
 * is ordered).
 */
export interface PersistEffect {
  readonly type: "persist";
  readonly id: number;
  readonly records: readonly PersistRecord[];
}

export interface SendEffect {
  readonly type: "send";
  readonly conn: number;
  readonly lane: Lane;
  readonly data: Uint8Array;
  /** Payload kind, for traces and metrics only. */
  readonly kind: PayloadCase;
}

export interface PingEffect {
  readonly type: "ping";
  readonly conn: number;
}

/** Close the connection after flushing the priority lane. */
export interface CloseEffect {
  readonly type: "close";
  readonly conn: number;
  readonly reason: string;
}

/** Call the reducer with `{ type: "tick" }` at (or after) `at`. Replaces any earlier wake. */
export interface WakeEffect {
  readonly type: "wake";
  readonly at: number;
}

/** A line for the timeline (sim replay, daemon debug log). Never affects behaviour. */
export interface TraceEffect {
  readonly type: "trace";
  readonly event: string;
  readonly detail: Readonly<Record<string, string | number | boolean>>;
}

export type CommonEffect = PersistEffect | SendEffect | PingEffect | CloseEffect | WakeEffect | TraceEffect;
