// Exact-behaviour tests of the small helpers bytes.ts, rng.ts and
// step-context.ts (targets taken from the mutation report, docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { bytesEqual, concatBytes, digest53, fromHex, isPrintableAscii, toHex } from "../../core/bytes.js";
import { nextFloat, nextHex128, nextInt, nextU32, rngFromSeed, type RngState } from "../../core/rng.js";
import { newGate, releaseDurable, StepContext, type DurableGate } from "../../core/step-context.js";
import type { PersistRecord } from "../../core/effects.js";

const u8 = (...b: number[]) => new Uint8Array(b);
const ascii = (s: string) => new TextEncoder().encode(s);

describe("bytes", () => {
  it("bytesEqual: equal only with the same length and every byte equal, wherever the difference is", () => {
    expect(bytesEqual(u8(), u8())).toBe(true);
    expect(bytesEqual(u8(1, 2, 3), u8(1, 2, 3))).toBe(true);
    expect(bytesEqual(u8(1, 2), u8(1, 2, 3))).toBe(false);
    expect(bytesEqual(u8(1, 2, 3), u8(1, 2))).toBe(false);
    expect(bytesEqual(u8(), u8(0))).toBe(false);
    expect(bytesEqual(u8(9, 2, 3), u8(1, 2, 3))).toBe(false);
    expect(bytesEqual(u8(1, 9, 3), u8(1, 2, 3))).toBe(false);
    expect(bytesEqual(u8(1, 2, 9), u8(1, 2, 3))).toBe(false);
  });

  it("hex round trip is lowercase, two digits per byte, and exact", () => {
    expect(toHex(u8(0, 1, 15, 16, 171, 255))).toBe("00010f10abff");
    expect(Array.from(fromHex("00010f10abff"))).toEqual([0, 1, 15, 16, 171, 255]);
    expect(fromHex("")).toHaveLength(0);
    expect(concatBytes([u8(1), u8(), u8(2, 3)])).toEqual(u8(1, 2, 3));
  });

  it("R-O2: digest53 is cyrb53 (published reference values), and depends on every byte and the seed", () => {
    // Reference values of the published cyrb53 (bryc), which hashes char codes: equal to bytes for ASCII.
    expect(digest53(ascii("a"))).toBe(7929297801672961);
    expect(digest53(ascii("b"))).toBe(8684336938537663);
    expect(digest53(ascii("revenge"))).toBe(4051478007546757);
    expect(digest53(ascii("revenue"))).toBe(8309097637345594);
    expect(digest53(u8())).toBe(3338908027751811);
    expect(digest53(ascii("a"), 1)).toBe(5368154436228575);
    // A trailing zero byte is not the same input.
    expect(digest53(u8(97, 0))).not.toBe(digest53(u8(97)));
    for (const s of ["", "a", "revenge", "x".repeat(1000)]) {
      const d = digest53(ascii(s));
      expect(Number.isSafeInteger(d) && d >= 0).toBe(true);
    }
  });

  it("isPrintableAscii: one or more of 0x21..0x7e, nothing else anywhere", () => {
    expect(isPrintableAscii("a")).toBe(true);
    expect(isPrintableAscii("host-01.example_A~!")).toBe(true);
    expect(isPrintableAscii("!~")).toBe(true);
    expect(isPrintableAscii("")).toBe(false);
    expect(isPrintableAscii(" a")).toBe(false);
    expect(isPrintableAscii("a ")).toBe(false);
    expect(isPrintableAscii("a b")).toBe(false);
    expect(isPrintableAscii("a\x7f")).toBe(false);
    expect(isPrintableAscii("\x20")).toBe(false);
    expect(isPrintableAscii("é")).toBe(false);
    expect(isPrintableAscii("a\nb")).toBe(false);
  });
});

/** sfc32 as published (bryc / PractRand), written independently of core/rng.ts. */
function referenceSfc32(a: number, b: number, c: number, d: number): () => number {
  return () => {
    a |= 0;
    b |= 0;
    c |= 0;
    d |= 0;
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return t >>> 0;
  };
}

describe("rng", () => {
  it("nextU32 is sfc32: it matches an independent implementation from any state", () => {
    for (const seed of [0, 1, 42, 0xffffffff]) {
      const st = rngFromSeed(seed);
      const ref = referenceSfc32(st.a, st.b, st.c, st.d);
      for (let i = 0; i < 200; i++) expect(nextU32(st)).toBe(ref());
    }
    const st: RngState = { a: 0xffffffff, b: 0x80000000, c: 0x7fffffff, d: 0xfffffffe };
    const ref = referenceSfc32(st.a, st.b, st.c, st.d);
    for (let i = 0; i < 50; i++) {
      const x = nextU32(st);
      expect(x).toBe(ref());
      expect(x >= 0 && x <= 0xffffffff && Number.isInteger(x)).toBe(true);
    }
  });

  it("a seed always yields the same sequence (recorded runs replay): pinned values", () => {
    const draw = (seed: number, n: number) => {
      const st = rngFromSeed(seed);
      return Array.from({ length: n }, () => nextU32(st));
    };
    expect(draw(0, 3)).toEqual([4205396811, 3543653536, 1222415357]);
    expect(draw(1, 3)).toEqual([1828152527, 3394835397, 2967886022]);
    expect(draw(42, 3)).toEqual([1028872839, 2516511472, 400437680]);
    expect(draw(0xffffffff, 3)).toEqual([1413747962, 91561161, 3282502067]);
    // Seeds are taken modulo 2^32.
    expect(draw(2 ** 32 + 42, 3)).toEqual(draw(42, 3));
    expect(draw(-1, 3)).toEqual(draw(0xffffffff, 3));
  });

  it("nextFloat is nextU32 / 2^32, in [0, 1)", () => {
    const a = rngFromSeed(5);
    const b = rngFromSeed(5);
    for (let i = 0; i < 100; i++) {
      const f = nextFloat(a);
      expect(f).toBe(nextU32(b) / 4294967296);
      expect(f >= 0 && f < 1).toBe(true);
    }
  });

  it("nextInt(n) is floor(nextFloat * n): uniform in [0, n), pinned for seed 7", () => {
    const st = rngFromSeed(7);
    expect([nextInt(st, 10), nextInt(st, 10), nextInt(st, 10), nextInt(st, 10), nextInt(st, 1000)]).toEqual([1, 3, 8, 8, 389]);
    const a = rngFromSeed(9);
    const b = rngFromSeed(9);
    const seen = new Set<number>();
    for (let i = 0; i < 500; i++) {
      const x = nextInt(a, 6);
      expect(x).toBe(Math.floor(nextFloat(b) * 6));
      seen.add(x);
    }
    expect([...seen].sort()).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("nextHex128 is four zero-padded words: always 32 lowercase hex digits", () => {
    expect(nextHex128(rngFromSeed(3))).toBe("697175d499b2844790d6242a540d0638");
    let padded = 0;
    for (let seed = 0; seed < 200; seed++) {
      const a = rngFromSeed(seed);
      const b = rngFromSeed(seed);
      const h = nextHex128(a);
      expect(h).toMatch(/^[0-9a-f]{32}$/);
      const words = [nextU32(b), nextU32(b), nextU32(b), nextU32(b)];
      expect(h).toBe(words.map((w) => w.toString(16).padStart(8, "0")).join(""));
      if (words.some((w) => w < 0x10000000)) padded++;
    }
    expect(padded).toBeGreaterThan(0); // the padding case was exercised
  });
});

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
    const gate: DurableGate<string> = { lastId: 3, durableThrough: 0, waiting: [{ id: 1, action: "a" }, { id: 2, action: "b" }, { id: 3, action: "c" }] };
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
