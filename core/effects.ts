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
 */
export interface PersistRecord {
  readonly table: string;
  readonly key: string;
  readonly value: unknown;
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
