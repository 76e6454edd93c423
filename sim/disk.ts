// A node's disk: durable tables plus an unsynced write-back buffer.
//
// A persist batch is appended to the buffer and becomes durable when its
// (seeded) fsync completes; fsyncs complete in batch order (group commit).
// A crash loses every batch still in the buffer, whole: records of one batch
// are atomic, so a torn write is modelled as "the batch is lost".
//
// Values are shared on the way in and copied on the way out (a restart gets
// its own copy). A core must never write into a value it has emitted: the
// stored value would change with it, as no real store's would. That is
// checked, not assumed: the caller freezes the values of every batch with
// `freeze` set (deeply; bytes excepted, as before), so such a write throws
// at once. The world sets it on every batch under --paranoid and on every
// CHECK_EVERY-th batch otherwise: a core that writes into emitted values
// does so systematically and is caught within a few batches, and the failed
// run is rerun paranoid. (Copying every value on the way in, as before, cost
// ~12 % of the simulator's CPU and would have hidden such a write.)

import { applyRecord, type PersistRecord } from "../core/effects.js";

export type Tables = Map<string, Map<string, unknown>>;

const same = (v: unknown): unknown => v;

export interface PendingBatch {
  id: number;
  records: PersistRecord[];
  durableAt: number;
}

export class SimDisk {
  readonly tables: Tables = new Map();
  pending: PendingBatch[] = [];
  /** Bumped by a crash: fsync completions scheduled before it are void. */
  epoch = 0;
  /** Time the last scheduled fsync completes (group commit keeps order). */
  lastDurableAt = 0;
  /** Detected corruption, reported to the node on its next restart. */
  corruption: string | null = null;
  /** Persist attempts left before the disk is "full" (Infinity: never). */
  spaceLeft = Infinity;
  bytesWritten = 0;
  batchesLost = 0;

  /** Queue a batch; returns when it will be durable. */
  append(id: number, records: readonly PersistRecord[], now: number, latency: number, freeze = true): number {
    const stored = new Array<PersistRecord>(records.length);
    for (let i = 0; i < records.length; i++) {
      const r = records[i]!;
      const value = r.value;
      if (freeze && value !== null) freezeValue(value);
      stored[i] = r.prefix ? { table: r.table, key: r.key, value, prefix: r.prefix } : { table: r.table, key: r.key, value };
    }
    const durableAt = Math.max(this.lastDurableAt, now + latency);
    this.lastDurableAt = durableAt;
    this.pending.push({ id, records: stored, durableAt });
    return durableAt;
  }

  /** Apply every batch durable by `now`; returns them (in order). */
  sync(now: number): PendingBatch[] {
    const done: PendingBatch[] = [];
    while (this.pending.length > 0 && this.pending[0]!.durableAt <= now) {
      const b = this.pending.shift()!;
      for (const r of b.records) applyRecord(this.tables, r, same); // copied on the way out (snapshot)
      done.push(b);
    }
    return done;
  }

  crash(): number {
    const lost = this.pending.length;
    this.batchesLost += lost;
    this.pending = [];
    this.epoch++;
    this.lastDurableAt = 0;
    return lost;
  }

  /** A deep copy of the durable tables, for a restart. */
  snapshot(): { get(table: string): ReadonlyMap<string, unknown> | undefined } {
    const copy: Tables = new Map();
    for (const [name, t] of this.tables) {
      const m = new Map<string, unknown>();
      for (const [k, v] of t) m.set(k, cloneValue(v));
      copy.set(name, m);
    }
    return { get: (table) => copy.get(table) };
  }

  /** A copy of the whole disk (a cloned VM image): durable state only. */
  cloneDurable(): SimDisk {
    const d = new SimDisk();
    for (const [name, t] of this.tables) {
      const m = new Map<string, unknown>();
      for (const [k, v] of t) m.set(k, cloneValue(v));
      d.tables.set(name, m);
    }
    return d;
  }

  get(table: string, key: string): unknown {
    return this.tables.get(table)?.get(key);
  }
}

/** Deep copy of plain data (objects, arrays, Uint8Array, primitives, bigint). */
export function cloneValue<T>(v: T): T {
  return (v === null || typeof v !== "object" ? v : cloneObject(v as object)) as T;
}

// One small function per kind of value, each called with few shapes: a
// single recursive function over every record shape went megamorphic and
// was deoptimized again and again (node --trace-deopt).
function cloneObject(v: object): unknown {
  const proto = Object.getPrototypeOf(v);
  // Plain objects (most records): a literal, and for-in (own keys only: Object.prototype has no enumerable ones).
  if (proto === Object.prototype) return clonePlain(v as Record<string, unknown>);
  if (proto === Array.prototype) return cloneArray(v as unknown[]);
  // Byte arrays are shared: the core never writes into bytes it emitted
  // (checked for pinned events by the R-O2 oracle, which compares the wire
  // bytes with this durable copy).
  if (v instanceof Uint8Array) return v;
  if (Array.isArray(v)) return cloneArray(v);
  if (v instanceof Map) {
    const out = new Map<unknown, unknown>();
    for (const [k, x] of v) out.set(k, cloneValue(x));
    return out;
  }
  const src = v as Record<string, unknown>;
  const out: Record<string, unknown> = Object.create(proto);
  for (const k of Object.keys(src)) out[k] = cloneValue(src[k]);
  return out;
}

function clonePlain(src: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k in src) {
    const x = src[k];
    out[k] = x === null || typeof x !== "object" ? x : cloneObject(x);
  }
  return out;
}

function cloneArray(v: unknown[]): unknown[] {
  const out = new Array<unknown>(v.length);
  for (let i = 0; i < v.length; i++) {
    const x = v[i];
    out[i] = x === null || typeof x !== "object" ? x : cloneObject(x as object);
  }
  return out;
}

/**
 * Deep-freeze plain data the way a store would hold it: objects and arrays
 * frozen, bytes left as they are (the core never writes into bytes it
 * emitted: the R-O2 oracle compares pinned bytes on the wire with the
 * stored ones). A Map or a class instance cannot be frozen in that sense:
 * it is an error to persist one.
 */
export function freezeValue(v: unknown): void {
  if (v === null || typeof v !== "object" || v instanceof Uint8Array || Object.isFrozen(v)) return;
  const proto = Object.getPrototypeOf(v);
  if (proto === Object.prototype || proto === null) {
    Object.freeze(v);
    for (const k in v) freezeValue((v as Record<string, unknown>)[k]);
  } else if (Array.isArray(v)) {
    Object.freeze(v);
    for (let i = 0; i < v.length; i++) freezeValue(v[i]);
  } else throw new Error(`persisted value holds a ${proto?.constructor?.name ?? "non-plain object"}: records are plain data`);
}
