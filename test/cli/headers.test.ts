// The CLI bundle's Headers class (shells/operator/headers.ts) against Node's
// own (undici's): the same operations give the same observable results, the
// same errors, and the same iteration, on random sequences.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Headers as LiteHeaders } from "../../shells/operator/headers.js";

type Op = { k: "append" | "set"; name: string; value: string } | { k: "delete" | "has" | "get"; name: string } | { k: "getSetCookie" | "iterate" };

const names = fc.oneof(
  fc.constantFrom("content-type", "Content-Type", "SET-COOKIE", "set-cookie", "x-a", "X-A", "connect-timeout-ms", "a"),
  fc.string({ maxLength: 6 }), // mostly invalid or odd tokens: errors must agree
);
const values = fc.oneof(
  fc.constantFrom("", " padded ", "\tx\t", "a, b", "application/proto", "x\r\ny", "nul\0", "é", "\u0100", "v"),
  fc.string({ maxLength: 8 }),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ k: fc.constantFrom("append" as const, "set" as const), name: names, value: values }),
  fc.record({ k: fc.constantFrom("delete" as const, "has" as const, "get" as const), name: names }),
  fc.record({ k: fc.constantFrom("getSetCookie" as const, "iterate" as const) }),
);

interface HeadersLike {
  append(n: string, v: string): void;
  set(n: string, v: string): void;
  delete(n: string): void;
  has(n: string): boolean;
  get(n: string): string | null;
  getSetCookie(): string[];
  forEach(cb: (v: string, n: string) => void): void;
  [Symbol.iterator](): Iterator<[string, string]>;
}

function apply(h: HeadersLike, o: Op): unknown {
  try {
    switch (o.k) {
      case "append":
        return h.append(o.name, o.value);
      case "set":
        return h.set(o.name, o.value);
      case "delete":
        return h.delete(o.name);
      case "has":
        return h.has(o.name);
      case "get":
        return h.get(o.name);
      case "getSetCookie":
        return h.getSetCookie();
      case "iterate": {
        const viaForEach: Array<[string, string]> = [];
        h.forEach((v, n) => viaForEach.push([n, v]));
        return { iter: [...(h as Iterable<[string, string]>)], viaForEach };
      }
    }
  } catch (err) {
    return { threw: err instanceof TypeError ? "TypeError" : String(err) };
  }
}

describe("CLI Headers (shells/operator/headers.ts)", () => {
  it("behaves as Node's Headers on random operation sequences (results, errors, iteration order)", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 30 }), (ops) => {
        const real = new Headers() as unknown as HeadersLike;
        const lite = new LiteHeaders() as unknown as HeadersLike;
        for (const o of ops) expect(apply(lite, o)).toEqual(apply(real, o));
        expect([...(lite as Iterable<[string, string]>)]).toEqual([...(real as Iterable<[string, string]>)]);
        for (const n of ["content-type", "set-cookie", "x-a", "a"]) expect(lite.get(n)).toBe(real.get(n));
      }),
      { numRuns: 2000 },
    );
  });

  it("takes the same init forms: pairs, a record, another Headers; refuses a malformed pair", () => {
    const inits: unknown[] = [
      [
        ["B", "2"],
        ["a", "1"],
        ["set-cookie", "x=1"],
        ["set-cookie", "y=2"],
      ],
      { "Content-Type": "application/proto", "x-b": " 2 " },
      new LiteHeaders({ "x-c": "3" }),
    ];
    for (const init of inits) {
      const realInit = init instanceof LiteHeaders ? [...init] : init;
      expect([...new LiteHeaders(init as never)]).toEqual([...new Headers(realInit as never)]);
    }
    expect(() => new LiteHeaders([["only-one"]] as never)).toThrow(TypeError);
    expect(() => new Headers([["only-one"]] as never)).toThrow(TypeError);
    expect(() => new LiteHeaders({ "bad name": "v" })).toThrow(TypeError);
  });

  it("keeps set-cookie values apart and joins the others", () => {
    const h = new LiteHeaders();
    h.append("Set-Cookie", "a=1");
    h.append("set-cookie", "b=2");
    h.append("x", "1");
    h.append("X", "2");
    expect(h.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect(h.get("x")).toBe("1, 2");
    expect([...h]).toEqual([
      ["set-cookie", "a=1"],
      ["set-cookie", "b=2"],
      ["x", "1, 2"],
    ]);
  });
});
