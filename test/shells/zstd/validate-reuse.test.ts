/**
 * `validateCompressed` (what the server's checkCompressed port runs on every
 * incoming output frame, R-T3) reuses one native decoder context and one
 * scratch buffer across frames. Its verdict must be exactly that of
 * `decompressValidated` (a fresh decoder per frame) for every frame, in any
 * order: a bad frame must not leave state behind that changes the verdict on
 * the next one, and a frame that decodes to more or less than declared is
 * refused.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compress, decompressValidated, validateCompressed, ZSTD_BACKENDS } from "../../../shells/zstd/index.js";

const verdict = (r: { ok: true; size: number } | { ok: false; code: string }) => (r.ok ? `ok ${r.size}` : r.code);
const reference = (f: Uint8Array, d: number, limit: number) => {
  const r = decompressValidated(f, d, limit, "native");
  return r.ok ? `ok ${r.data.length}` : r.code;
};

function text(seed: number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = (x >>> 16) % 7 === 0 ? 10 : 97 + ((x >>> 20) % 6);
  }
  return out;
}

describe.runIf(ZSTD_BACKENDS.includes("native"))("validateCompressed (reused native decoder)", () => {
  it("R-T3: gives decompressValidated's verdict on good, corrupted, truncated and mis-declared frames, in any order", () => {
    const item = fc.record({
      seed: fc.integer({ min: 1, max: 2 ** 31 }),
      size: fc.oneof(fc.constant(0), fc.constant(65536), fc.integer({ min: 1, max: 65536 })),
      damage: fc.oneof(
        fc.constant<{ kind: "none" }>({ kind: "none" }),
        fc.record({ kind: fc.constant<"flip">("flip"), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
        fc.record({ kind: fc.constant<"cut">("cut"), keep: fc.nat() }),
        fc.record({ kind: fc.constant<"declare">("declare"), delta: fc.integer({ min: -3, max: 3 }) }),
      ),
    });
    fc.assert(
      fc.property(fc.array(item, { minLength: 1, maxLength: 12 }), (items) => {
        for (const it of items) {
          const raw = text(it.seed, it.size);
          let frame = compress(raw, 3, "native");
          let declared = raw.length;
          const d = it.damage;
          if (d.kind === "flip" && frame.length > 0) {
            frame = frame.slice();
            const at = d.at % frame.length;
            frame[at] = frame[at]! ^ (1 << d.bit);
          } else if (d.kind === "cut") {
            frame = frame.subarray(0, d.keep % (frame.length + 1));
          } else if (d.kind === "declare") {
            declared = Math.max(0, declared + d.delta);
          }
          expect(verdict(validateCompressed(frame, declared, 65536, "native"))).toBe(reference(frame, declared, 65536));
        }
      }),
      { numRuns: 300 },
    );
  });

  it("R-T3: a frame that decodes past its declared size is refused (Frame_Content_Size rewritten to lie), then a good frame passes", () => {
    const raw = text(7, 4096);
    const good = compress(raw, 3, "native");
    // A single-segment frame with a 2-byte FCS (size - 256): lower the claim by one.
    const fhd = good[4]!;
    expect(fhd >> 6).toBe(1);
    const lie = good.slice();
    const fcs = lie[5]! | (lie[6]! << 8);
    lie[5] = (fcs - 1) & 0xff;
    lie[6] = (fcs - 1) >> 8;
    const r = validateCompressed(lie, raw.length - 1, 65536, "native");
    expect(r.ok).toBe(false);
    expect(verdict(r)).toBe(reference(lie, raw.length - 1, 65536));
    expect(verdict(validateCompressed(good, raw.length, 65536, "native"))).toBe(`ok ${raw.length}`);
  });

  it("R-T3: the portable backend gives the same verdicts", () => {
    const raw = text(3, 10000);
    const frame = compress(raw, 3, "native");
    expect(verdict(validateCompressed(frame, raw.length, 65536, "portable"))).toBe(`ok ${raw.length}`);
    expect(verdict(validateCompressed(frame, raw.length + 1, 65536, "portable"))).toBe("BAD_COMPRESSION");
    expect(verdict(validateCompressed(frame, 70000, 65536, "portable"))).toBe("PAYLOAD_TOO_LARGE");
  });
});
