// Exact-behaviour tests of core/step-context.ts (targets taken from the mutation report,
// docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { newGate, releaseDurable, StepContext, type DurableGate } from "../../core/step-context.js";
import type { PersistRecord } from "../../core/effects.js";

type Eff = { type: "x"; n: number };
const rec = (k: string): PersistRecord => ({ table: "t", key: k, value: 1 });

describe("step context and the durable gate", () => {
  it("R-O3: a step with neither records nor deferred actions emits nothing and releases nothing", () => {
    const gate = newGate<string>(4);
    expect(gate).toEqual({ lastId: 4, durableThrough: 4, waiting: [] });
    const ctx = new StepContext<Eff, string>(100);
    expect(ctx.seal(gate)).toEqual([]);
    expect(ctx.effects).toEqual([]);
    expect(gate).toEqual({ lastId: 4, durableThrough: 4, waiting: [] });
  });

  it("R-O3: deferred actions with nothing pending run at once; behind a new batch they wait for it", () => {
    const gate = newGate<string>();
    const c1 = new StepContext<Eff, string>(0);
    c1.afterDurable("now");
    expect(c1.seal(gate)).toEqual(["now"]);
    expect(gate.waiting).toEqual([]);

    const c2 = new StepContext<Eff, string>(0);
    c2.persist(rec("a"), rec("b"));
    c2.afterDurable("later");
    expect(c2.seal(gate)).toEqual([]);
    expect(c2.effects).toEqual([{ type: "persist", id: 1, records: [rec("a"), rec("b")] }]);
    expect(c2.records).toEqual([]);
    expect(gate.waiting).toEqual([{ id: 1, action: "later" }]);
  });

  it("R-O3: releaseDurable releases exactly the actions at or below the durable id, in order, and never goes backwards", () => {
    const gate: DurableGate<string> = {
      lastId: 3,
      durableThrough: 0,
      waiting: [
        { id: 1, action: "a" },
        { id: 2, action: "b" },
        { id: 3, action: "c" },
      ],
    };
    expect(releaseDurable(gate, 0)).toEqual([]);
    expect(releaseDurable(gate, 2)).toEqual(["a", "b"]);
    expect(gate.durableThrough).toBe(2);
    // A stale (lower) report does not lower the durable mark.
    expect(releaseDurable(gate, 1)).toEqual([]);
    expect(gate.durableThrough).toBe(2);
    // A report beyond the last batch emitted is clamped to it.
    expect(releaseDurable(gate, 10)).toEqual(["c"]);
    expect(gate.durableThrough).toBe(3);
    expect(gate.waiting).toEqual([]);
    // Nothing waiting: nothing released, no crash.
    expect(releaseDurable(gate, 3)).toEqual([]);
    // Because of the clamp, the next batch (id 4) is not already durable.
    const ctx = new StepContext<Eff, string>(0);
    ctx.persist(rec("z"));
    ctx.afterDurable("d");
    expect(ctx.seal(gate)).toEqual([]);
    expect(gate.waiting).toEqual([{ id: 4, action: "d" }]);
    expect(releaseDurable(gate, 3)).toEqual([]);
    expect(releaseDurable(gate, 4)).toEqual(["d"]);
  });

  it("R-O3: an action deferred in a step without records waits for the earlier batch that is still pending", () => {
    const gate = newGate<string>();
    const c1 = new StepContext<Eff, string>(0);
    c1.persist(rec("a"));
    c1.seal(gate);
    const c2 = new StepContext<Eff, string>(0);
    c2.emit({ type: "x", n: 1 });
    c2.afterDurable("after-1");
    expect(c2.seal(gate)).toEqual([]);
    expect(c2.effects).toEqual([{ type: "x", n: 1 }]);
    expect(gate.waiting).toEqual([{ id: 1, action: "after-1" }]);
    expect(releaseDurable(gate, 1)).toEqual(["after-1"]);
  });
});
