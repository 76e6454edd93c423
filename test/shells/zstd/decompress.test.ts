import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { compress as compressOn, decompressValidated as decompressOn, encodeRawZstdFrame, initZstd, ZSTD_BACKENDS } from "../../../shells/zstd/index.js";

beforeAll(async () => {
  await initZstd("portable");
});

const KiB = 1024;
const bytes = (n: number): Uint8Array => new Uint8Array(randomBytes(n));

function expectBad(r: ReturnType<typeof decompressOn>, code = "BAD_COMPRESSION", pattern?: RegExp): void {
  expect(r.ok).toBe(false);
  if (r.ok) return;
  expect(r.code).toBe(code);
  if (pattern) expect(r.message).toMatch(pattern);
}

// Every case runs on both backends: node:zlib (native) and fzstd (portable).
describe.each(ZSTD_BACKENDS)("%s", (backend) => {
  const compress = (raw: Uint8Array, level = 3): Uint8Array => compressOn(raw, level, backend);
  const decompressValidated = (frame: Uint8Array, declared: number, limit?: number): ReturnType<typeof decompressOn> =>
    decompressOn(frame, declared, limit, backend);

  describe(`decompressValidated (${backend}): accepts`, () => {
    it("our frames and raw frames at 0, 1 and 64 KiB", () => {
      for (const n of [0, 1, 64 * KiB]) {
        const raw = bytes(n);
        for (const frame of [compress(raw), encodeRawZstdFrame(raw)]) {
          const r = decompressValidated(frame, n);
          expect(r.ok).toBe(true);
          if (r.ok) {
            expect(r.data.length).toBe(n);
            expect(Buffer.from(r.data).equals(Buffer.from(raw))).toBe(true);
          }
        }
      }
    });

    it("honours a custom limit", () => {
      const raw = bytes(100 * KiB);
      expect(decompressValidated(compress(raw), raw.length, 128 * KiB).ok).toBe(true);
      expectBad(decompressValidated(compress(raw), raw.length), "PAYLOAD_TOO_LARGE");
    });
  });

  describe(`decompressValidated (${backend}): refuses`, () => {
    it("declared > 64 KiB (PAYLOAD_TOO_LARGE), checked before the frame is looked at", () => {
      expectBad(decompressValidated(new Uint8Array(0), 64 * KiB + 1), "PAYLOAD_TOO_LARGE");
      const raw = bytes(64 * KiB + 1);
      expectBad(decompressValidated(encodeRawZstdFrame(raw), raw.length), "PAYLOAD_TOO_LARGE");
    });

    it("declared sizes that are not sizes", () => {
      const frame = compress(bytes(10));
      for (const d of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        expectBad(decompressValidated(frame, d));
      }
    });

    it("declared != header content size", () => {
      const raw = bytes(1000);
      const frame = compress(raw);
      expectBad(decompressValidated(frame, 999), "BAD_COMPRESSION", /declares 1000/);
      expectBad(decompressValidated(frame, 1001), "BAD_COMPRESSION", /declares 1000/);
      expectBad(decompressValidated(frame, 0), "BAD_COMPRESSION");
    });

    it("a frame without Frame_Content_Size", () => {
      // hand-made: no single segment, window descriptor 0 (1 KiB), FCS flag 0 => absent; one raw block "abc"
      const frame = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, (3 << 3) | 1, 0, 0, 0x61, 0x62, 0x63]);
      expectBad(decompressValidated(frame, 3), "BAD_COMPRESSION", /Frame_Content_Size/);
    });

    it("truncated frames, at every length", () => {
      const raw = new TextEncoder().encode("truncate me ".repeat(500));
      const frame = compress(raw);
      for (let len = 0; len < frame.length; len++) {
        expectBad(decompressValidated(frame.subarray(0, len), raw.length));
      }
      const rawFrame = encodeRawZstdFrame(bytes(300));
      for (let len = 0; len < rawFrame.length; len++) {
        expectBad(decompressValidated(rawFrame.subarray(0, len), 300));
      }
    });

    it("trailing bytes and a second frame", () => {
      const raw = bytes(100);
      const frame = compress(raw);
      expectBad(decompressValidated(new Uint8Array([...frame, 0]), 100), "BAD_COMPRESSION", /after the zstd frame/);
      expectBad(decompressValidated(new Uint8Array([...frame, ...frame]), 100), "BAD_COMPRESSION", /after/);
      const skippable = [0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0];
      expectBad(decompressValidated(new Uint8Array([...frame, ...skippable]), 100));
      expectBad(decompressValidated(new Uint8Array([...skippable, ...frame]), 100), "BAD_COMPRESSION", /skippable/);
    });

    it("garbage", () => {
      expectBad(decompressValidated(new Uint8Array(0), 0));
      expectBad(decompressValidated(bytes(1000), 1000));
      expectBad(decompressValidated(new TextEncoder().encode("definitely not zstd"), 19));
    });

    it("a frame whose header lies: content size 64 KiB, blocks decode to 256 KiB", () => {
      // zstd-codec's frame (its blocks pass the structural checks even after
      // the lie, so the decoder itself must stop); decoded by either backend
      const frame = compressOn(new Uint8Array(256 * KiB), 3, "portable").slice(); // 4-byte FCS at offset 5
      expect(frame[4]).toBe(0xa0);
      new DataView(frame.buffer).setUint32(5, 64 * KiB, true);
      expectBad(decompressValidated(frame, 64 * KiB), "BAD_COMPRESSION", /more than the declared/);
    });

    it("raw/RLE blocks that do not add up to the declared size", () => {
      // FCS 10, one raw block of 5 bytes
      const short = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x20, 10, (5 << 3) | 1, 0, 0, 1, 2, 3, 4, 5]);
      expectBad(decompressValidated(short, 10), "BAD_COMPRESSION", /cannot decode to 10/);
      // FCS 4, two RLE blocks of 4 bytes
      const long = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x20, 4, (4 << 3) | 2, 0, 0, 7, (4 << 3) | 3, 0, 0, 7]);
      expectBad(decompressValidated(long, 4), "BAD_COMPRESSION", /cannot decode to 4/);
    });

    it("frames naming a dictionary or with a huge window", () => {
      const dict = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x21, 0x05, 3, (3 << 3) | 1, 0, 0, 1, 2, 3]);
      expectBad(decompressValidated(dict, 3), "BAD_COMPRESSION", /dictionar/);
      // window descriptor exponent 20 => 1 GiB window, FCS 2-byte form => 256 + 0
      const huge = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x40, 20 << 3, 0, 0, 1, 0, 0]);
      expectBad(decompressValidated(huge, 256), "BAD_COMPRESSION", /Window_Size/);
    });

    it("throws (caller bug) only for an invalid limit", () => {
      expect(() => decompressValidated(new Uint8Array(0), 0, -1)).toThrow(RangeError);
    });
  });

  describe(`decompressValidated (${backend}): properties`, () => {
    it("round-trips any bytes <= 64 KiB", () => {
      fc.assert(
        // fast-check keeps arrays tiny (<= 10 bytes) unless asked for bigger sizes
        fc.property(
          fc.oneof(
            fc.uint8Array({ maxLength: 64 * KiB }),
            fc.uint8Array({ maxLength: 64 * KiB, size: "large" }),
            fc.uint8Array({ maxLength: 64 * KiB, size: "max" }),
            fc.uint8Array({ maxLength: 64 * KiB, size: "max", max: 7 }),
          ),
          (b) => {
            const r = decompressValidated(compress(b), b.length);
            return r.ok && Buffer.from(r.data).equals(Buffer.from(b));
          },
        ),
        { numRuns: 200 },
      );
    });

    it("round-trips large and compressible inputs near 64 KiB", () => {
      fc.assert(
        fc.property(fc.uint8Array({ minLength: 60 * KiB, maxLength: 64 * KiB, max: 3, size: "max" }), fc.integer({ min: -7, max: 22 }), (b, level) => {
          const r = decompressValidated(compress(b, level), b.length);
          return r.ok && Buffer.from(r.data).equals(Buffer.from(b));
        }),
        { numRuns: 30 },
      );
    });

    it("never throws on random garbage, with or without a zstd magic prefix", () => {
      fc.assert(
        fc.property(
          fc.oneof(fc.uint8Array({ maxLength: 2048 }), fc.uint8Array({ maxLength: 2048, size: "max" })),
          fc.boolean(),
          fc.integer({ min: -1, max: 70 * KiB }),
          (junk, withMagic, declared) => {
            const frame = withMagic ? new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, ...junk]) : junk;
            const r = decompressValidated(frame, declared);
            return r.ok ? r.data.length === declared : typeof r.message === "string";
          },
        ),
        { numRuns: 2000 },
      );
    });

    // Note: without a content checksum many corruptions decode "successfully" to
    // wrong bytes of the right length; only "no throw, right length" is promised.
    it("never throws on corrupted valid frames, and never returns a wrong length", () => {
      const samples = [
        new TextEncoder().encode("the quick brown fox jumps over the lazy dog\n".repeat(300)),
        new Uint8Array(10 * KiB).map((_, i) => (i * 7) % 13),
        bytes(3000),
      ];
      const frames = samples.map((s) => ({ size: s.length, frame: compress(s) }));
      fc.assert(
        fc.property(
          fc.constantFrom(...frames),
          fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
          ({ size, frame }, edits) => {
            const f = frame.slice();
            for (const [pos, value] of edits) f[pos % f.length] = value;
            const r = decompressValidated(f, size);
            return r.ok ? r.data.length === size : r.code === "BAD_COMPRESSION" || r.code === "PAYLOAD_TOO_LARGE";
          },
        ),
        { numRuns: 3000 },
      );
    });
  });
});
