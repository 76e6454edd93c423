// Per-step scratch space shared by the node reducers: the effects produced so
// far, the records of the one persist batch this step will emit, and actions
// that must wait until that batch (or an earlier one) is durable.

import type { CommonEffect, PersistRecord } from "./effects.js";

export interface DurableGate<A> {
  /** Id of the last persist batch emitted. */
  lastId: number;
  /** Highest id reported durable. */
  durableThrough: number;
  /** Actions waiting for durability, in id order. */
  waiting: Array<{ id: number; action: A }>;
}

export function newGate<A>(lastId = 0): DurableGate<A> {
  return { lastId, durableThrough: lastId, waiting: [] };
}

export class StepContext<E extends { type: string }, A> {
  readonly effects: Array<E | CommonEffect> = [];
  readonly records: PersistRecord[] = [];
  private readonly afterBatch: A[] = [];
  /**
   * `now` is the deadline clock (monotonic, anchored to the epoch by the
   * runner); `wall` is the wall clock, for timestamps only. Both in ms.
   */
  constructor(
    readonly now: number,
    readonly wall: number = now,
  ) {}

  /** A deadline-clock instant as wall time (for a protobuf timestamp). */
  toWall(t: number): number {
    return t + (this.wall - this.now);
  }

  /** A wall-clock instant (from a protobuf timestamp) on the deadline clock. */
  toDeadline(w: number): number {
    return w - (this.wall - this.now);
  }

  emit(e: E | CommonEffect): void {
    this.effects.push(e);
  }

  persist(...r: PersistRecord[]): void {
    for (const x of r) this.records.push(x);
  }

  /** Run `action` once everything persisted so far (this step included) is durable. */
  afterDurable(action: A): void {
    this.afterBatch.push(action);
  }

  /**
   * Close the step: emit the persist batch (if any) and park the deferred
   * actions behind it. Returns actions that may run now (nothing was pending).
   */
  seal(gate: DurableGate<A>): A[] {
    if (this.records.length > 0) {
      gate.lastId++;
      this.effects.push({ type: "persist", id: gate.lastId, records: this.records.splice(0) });
    }
    if (this.afterBatch.length === 0) return [];
    const acts = this.afterBatch.splice(0);
    if (gate.durableThrough >= gate.lastId) return acts;
    for (const action of acts) gate.waiting.push({ id: gate.lastId, action });
    return [];
  }
}

/** Pop the actions released by `durable(through)`. */
export function releaseDurable<A>(gate: DurableGate<A>, through: number): A[] {
  if (through > gate.durableThrough) gate.durableThrough = Math.min(through, gate.lastId);
  const out: A[] = [];
  while (gate.waiting.length > 0 && gate.waiting[0]!.id <= gate.durableThrough) out.push(gate.waiting.shift()!.action);
  return out;
}
