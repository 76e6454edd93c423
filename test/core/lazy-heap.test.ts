// The min-heap with lazy deletion behind the server's deadline and order
// indexes (core/lazy-heap.ts): stale entries never come out as the top, and
// the heap is rebuilt from the live items once it holds more than
// slack + 2 × live entries, not before.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LazyHeap } from "../../core/lazy-heap.js";

type E = { key: number; id: number; gen: number };
const byKey = (a: E, b: E): number => a.key - b.key || a.id - b.id;

describe("LazyHeap", () => {
  it("top skips stale entries and drops them, leaving the live least on top", () => {
    const h = new LazyHeap<E>(byKey, 4);
    const gen = new Map<number, number>();
    const put = (id: number, key: number): void => {
      const g = (gen.get(id) ?? 0) + 1;
      gen.set(id, g);
      h.push({ key, id, gen: g });
    };
    put(1, 10);
    put(2, 20);
    put(1, 30); // 1 moved: its key-10 entry is stale
    const live = (e: E): boolean => gen.get(e.id) === e.gen;
    expect(h.top(live)).toEqual({ key: 20, id: 2, gen: 1 });
    expect(h.length).toBe(2); // the stale top was dropped, nothing else
    gen.delete(2); // 2 left
    expect(h.top(live)).toEqual({ key: 30, id: 1, gen: 2 });
    gen.delete(1);
    expect(h.top(live)).toBeUndefined();
    expect(h.length).toBe(0);
  });

  it("keepBound rebuilds at slack + 2 × live + 1 entries, not at slack + 2 × live", () => {
    const slack = 3;
    const h = new LazyHeap<E>(byKey, slack);
    const liveOnes = [{ key: 5, id: 1, gen: 1 }];
    let rebuilt = 0;
    const entries = (): E[] => {
      rebuilt++;
      return liveOnes.map((e) => ({ ...e }));
    };
    for (let i = 0; i < slack + 2; i++) h.push({ key: i, id: 100 + i, gen: 0 });
    expect(h.length).toBe(h.bound(1));
    h.keepBound(1, entries);
    expect({ rebuilt, length: h.length }).toEqual({ rebuilt: 0, length: slack + 2 });
    h.push({ key: 99, id: 200, gen: 0 });
    expect(h.over(1)).toBe(true);
    h.keepBound(1, entries);
    expect({ rebuilt, length: h.length, top: h.peek() }).toEqual({ rebuilt: 1, length: 1, top: liveOnes[0] });
  });

  it("under any pushes, moves and removals, the top is the least live entry and the bound holds", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom("put", "drop", "top"), fc.integer({ min: 0, max: 15 }), fc.integer({ min: 0, max: 1000 })), {
          maxLength: 300,
        }),
        (ops) => {
          const slack = 2;
          const h = new LazyHeap<E>(byKey, slack);
          const cur = new Map<number, E>();
          const live = (e: E): boolean => cur.get(e.id) === e;
          for (const [op, id, key] of ops) {
            if (op === "put") {
              const e = { key, id, gen: (cur.get(id)?.gen ?? 0) + 1 };
              cur.set(id, e);
              h.push(e);
            } else if (op === "drop") cur.delete(id);
            else {
              const want = [...cur.values()].sort(byKey)[0];
              expect(h.top(live)).toBe(want);
            }
            h.keepBound(cur.size, () => [...cur.values()]);
            expect(h.length).toBeLessThanOrEqual(h.bound(cur.size));
            const held = new Set(h.entries().filter(live));
            for (const e of cur.values()) expect(held.has(e)).toBe(true);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
