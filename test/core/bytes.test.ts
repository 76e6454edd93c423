// Exact-behaviour tests of core/bytes.ts (targets taken from the mutation report,
// docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { bytesEqual, concatBytes, digest53, fromHex, isPrintableAscii, toHex } from "../../core/bytes.js";

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
