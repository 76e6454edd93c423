import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { ExecutionSpecSchema, LifecycleTransitionSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { decodeValue, encodeValue } from "../../../shells/storage/value-codec.js";

const leaf = fc.oneof(
  fc.constant(null),
  fc.constant(undefined),
  fc.boolean(),
  fc.double(),
  fc.integer(),
  fc.maxSafeInteger(),
  fc.bigInt(),
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.uint8Array({ maxLength: 300 }),
);
const value = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: "small" }, leaf, fc.array(tie("v"), { maxLength: 5 }), fc.dictionary(fc.string(), tie("v"), { maxKeys: 5 })),
})).v;

describe("storage value codec", () => {
  it("round-trips arbitrary plain data exactly (numbers incl. -0/NaN, bigint, bytes, undefined)", () => {
    fc.assert(
      fc.property(value, (v) => {
        const back = decodeValue(encodeValue(v));
        expect(back).toStrictEqual(v);
      }),
      { numRuns: 500 },
    );
  });

  it("writes a string as tag, varint UTF-8 length, UTF-8 bytes, on the ASCII fast path and off it (stored rows stay readable)", () => {
    const varint = (n: number): number[] => {
      const out: number[] = [];
      while (n >= 0x80) {
        out.push((n % 0x80) | 0x80);
        n = Math.floor(n / 0x80);
      }
      out.push(n);
      return out;
    };
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 200 }),
          fc.string({ unit: "grapheme", maxLength: 200 }),
          fc.string({ unit: "binary-ascii", minLength: 120, maxLength: 140 }),
        ),
        (str) => {
          const utf8 = [...Buffer.from(str, "utf8")];
          const bytes = [...encodeValue(str)];
          // the tag byte, then exactly the length and bytes any UTF-8 writer produces
          expect(bytes.slice(1)).toEqual([...varint(utf8.length), ...utf8]);
          expect(decodeValue(encodeValue(str))).toBe(str);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("is canonical: key order does not change the bytes", () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.string().filter((k) => k !== "__proto__"),
          fc.integer(),
          { maxKeys: 8 },
        ),
        (o) => {
          const reversed = Object.assign(Object.create(Object.getPrototypeOf(o)) as object, Object.fromEntries(Object.entries(o).reverse()));
          expect(Buffer.from(encodeValue(reversed)).equals(Buffer.from(encodeValue(o)))).toBe(true);
        },
      ),
    );
  });

  it("keeps edge numbers exact", () => {
    for (const n of [0, -0, 1, -1, 2 ** 52, -(2 ** 52), 2 ** 53 - 1, -(2 ** 53 - 1), 2 ** 53, 1.5, NaN, Infinity, -Infinity, Number.MIN_VALUE, 1e308]) {
      expect(Object.is(decodeValue(encodeValue(n)), n)).toBe(true);
    }
    for (const b of [0n, -1n, 2n ** 64n, -(2n ** 200n) + 7n]) expect(decodeValue(encodeValue(b))).toBe(b);
  });

  it("round-trips protobuf-es messages: they stay usable with toBinary", () => {
    const spec = create(ExecutionSpecSchema, {
      program: { case: "argv", value: { argv: ["sh", "-c", "echo hi"] } },
      timeoutMs: 5000n,
      environment: [{ name: "A", value: "b" }],
      stdinOpen: true,
    });
    const back = decodeValue(encodeValue({ spec })) as { spec: typeof spec };
    expect(back.spec.$typeName).toBe("rvbox.v1.ExecutionSpec");
    expect(Buffer.from(toBinary(ExecutionSpecSchema, back.spec)).equals(Buffer.from(toBinary(ExecutionSpecSchema, spec)))).toBe(true);
    const lt = create(LifecycleTransitionSchema, { state: 5 });
    const lb = decodeValue(encodeValue(lt)) as typeof lt;
    expect("exitCode" in lb).toBe(false);
    expect(toBinary(LifecycleTransitionSchema, lb)).toEqual(toBinary(LifecycleTransitionSchema, lt));
  });

  it("decodes Buffer as Uint8Array and supports Map", () => {
    const v = decodeValue(encodeValue({ b: Buffer.from("xy"), m: new Map<unknown, unknown>([["k", 1n]]) })) as { b: Uint8Array; m: Map<string, bigint> };
    expect(v.b).toEqual(new Uint8Array([120, 121]));
    expect(Object.getPrototypeOf(v.b)).toBe(Uint8Array.prototype);
    expect(v.m.get("k")).toBe(1n);
  });

  it("refuses what it cannot encode faithfully, and malformed input", () => {
    class X {}
    expect(() => encodeValue(new X())).toThrow(TypeError);
    expect(() => encodeValue(new Uint16Array(2))).toThrow(TypeError);
    expect(() => encodeValue(() => 1)).toThrow(TypeError);
    expect(() => encodeValue(Symbol("s"))).toThrow(TypeError);
    const cyc: Record<string, unknown> = {};
    cyc.self = cyc;
    expect(() => encodeValue(cyc)).toThrow(TypeError);
    expect(() => decodeValue(new Uint8Array([99]))).toThrow(RangeError);
    expect(() => decodeValue(new Uint8Array([7, 5, 65]))).toThrow(RangeError);
    expect(() => decodeValue(new Uint8Array([0, 0]))).toThrow(RangeError);
  });
});
