import { execFileSync } from "node:child_process";
import { hasZstdCli } from "../../support/zstd-cli.js";
import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { decompress as fzstdDecompress } from "fzstd";
import { describe, expect, it } from "vitest";
import { encodeRawZstdFrame, parseZstdFrameHeader, readZstdFrameContentSize, scanZstdFrame, ZSTD_BLOCK_SIZE_MAX } from "../../../shells/zstd/index.js";

const MAGIC = [0x28, 0xb5, 0x2f, 0xfd];

const zstdCli = hasZstdCli();

/** header bytes: magic, FHD, then the rest */
const hdr = (fhd: number, ...rest: number[]): Uint8Array => new Uint8Array([...MAGIC, fhd, ...rest]);

describe("readZstdFrameContentSize: Frame_Content_Size forms", () => {
  it("single segment, FCS flag 0: 1-byte FCS", () => {
    expect(readZstdFrameContentSize(hdr(0x20, 0))).toEqual({ ok: true, contentSize: 0, headerSize: 6 });
    expect(readZstdFrameContentSize(hdr(0x20, 255))).toEqual({ ok: true, contentSize: 255, headerSize: 6 });
  });

  it("not single segment, FCS flag 0: no FCS, window descriptor present", () => {
    expect(readZstdFrameContentSize(hdr(0x00, 0x00))).toEqual({ ok: true, contentSize: null, headerSize: 6 });
  });

  it("FCS flag 1: 2 bytes + 256", () => {
    expect(readZstdFrameContentSize(hdr(0x60, 0x00, 0x00))).toEqual({ ok: true, contentSize: 256, headerSize: 7 });
    expect(readZstdFrameContentSize(hdr(0x60, 0xff, 0xff))).toEqual({ ok: true, contentSize: 65791, headerSize: 7 });
    expect(readZstdFrameContentSize(hdr(0x60, 0x00, 0xff))).toEqual({ ok: true, contentSize: 65536, headerSize: 7 });
    // with a window descriptor instead of single segment
    expect(readZstdFrameContentSize(hdr(0x40, 0x50, 0x34, 0x12))).toEqual({
      ok: true,
      contentSize: 0x1234 + 256,
      headerSize: 8,
    });
  });

  it("FCS flag 2: 4 bytes, unsigned", () => {
    expect(readZstdFrameContentSize(hdr(0xa0, 0x78, 0x56, 0x34, 0x12))).toEqual({
      ok: true,
      contentSize: 0x12345678,
      headerSize: 9,
    });
    expect(readZstdFrameContentSize(hdr(0xa0, 0xff, 0xff, 0xff, 0xff))).toEqual({
      ok: true,
      contentSize: 0xffffffff,
      headerSize: 9,
    });
  });

  it("FCS flag 3: 8 bytes, up to Number.MAX_SAFE_INTEGER", () => {
    expect(readZstdFrameContentSize(hdr(0xe0, 5, 0, 0, 0, 1, 0, 0, 0))).toEqual({
      ok: true,
      contentSize: 2 ** 32 + 5,
      headerSize: 13,
    });
    expect(readZstdFrameContentSize(hdr(0xe0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0))).toEqual({
      ok: true,
      contentSize: Number.MAX_SAFE_INTEGER,
      headerSize: 13,
    });
    expect(readZstdFrameContentSize(hdr(0xe0, 0, 0, 0, 0, 0, 0, 0x20, 0))).toMatchObject({ ok: false });
  });

  it("Dictionary_ID field: zero accepted (all sizes), non-zero refused", () => {
    expect(readZstdFrameContentSize(hdr(0x21, 0, 7))).toEqual({ ok: true, contentSize: 7, headerSize: 7 });
    expect(readZstdFrameContentSize(hdr(0x22, 0, 0, 7))).toEqual({ ok: true, contentSize: 7, headerSize: 8 });
    expect(readZstdFrameContentSize(hdr(0x23, 0, 0, 0, 0, 7))).toEqual({ ok: true, contentSize: 7, headerSize: 10 });
    expect(readZstdFrameContentSize(hdr(0x21, 1, 7))).toMatchObject({ ok: false, reason: expect.stringMatching(/dictionar/) });
    expect(readZstdFrameContentSize(hdr(0x23, 0, 0, 0, 0x80, 7))).toMatchObject({ ok: false });
  });

  it("refuses skippable frames, bad magic, reserved bit, truncation", () => {
    for (let n = 0; n < 16; n++) {
      expect(readZstdFrameContentSize(new Uint8Array([0x50 + n, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]))).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/skippable/),
      });
    }
    expect(readZstdFrameContentSize(new Uint8Array([0x28, 0xb5, 0x2f, 0xfe, 0x20, 0]))).toMatchObject({ ok: false });
    expect(readZstdFrameContentSize(hdr(0x28, 0))).toMatchObject({ ok: false, reason: expect.stringMatching(/reserved/) });
    const full = hdr(0xe0, 1, 2, 3, 4, 5, 6, 7, 0);
    for (let len = 0; len < full.length; len++) {
      expect(readZstdFrameContentSize(full.subarray(0, len)).ok).toBe(false);
    }
    expect(readZstdFrameContentSize(full).ok).toBe(true);
  });

  it("parseZstdFrameHeader computes Window_Size and flags", () => {
    // exponent 5, mantissa 3: 2^15 + 3 * 2^12
    expect(parseZstdFrameHeader(hdr(0x04, (5 << 3) | 3))).toMatchObject({
      ok: true,
      singleSegment: false,
      hasChecksum: true,
      windowSize: 2 ** 15 + 3 * 2 ** 12,
      contentSize: null,
    });
    expect(parseZstdFrameHeader(hdr(0x60, 0x10, 0x00))).toMatchObject({ singleSegment: true, windowSize: 256 + 0x10 });
  });
});

describe("encodeRawZstdFrame", () => {
  const sizes = [0, 1, 255, 256, 65535, 65536, 65791, 65792, ZSTD_BLOCK_SIZE_MAX, ZSTD_BLOCK_SIZE_MAX + 1, 300 * 1024];
  it.each(sizes)("size %i: valid frame, exact FCS, fzstd decodes it", (n) => {
    const raw = new Uint8Array(randomBytes(n));
    const frame = encodeRawZstdFrame(raw);
    const h = readZstdFrameContentSize(frame);
    expect(h).toMatchObject({ ok: true, contentSize: n });
    const expectedHeader = n < 256 ? 6 : n < 65792 ? 7 : 9;
    expect(h.ok && h.headerSize).toBe(expectedHeader);

    const scan = scanZstdFrame(frame);
    expect(scan.ok).toBe(true);
    if (!scan.ok) return;
    expect(scan.frameSize).toBe(frame.length);
    expect(scan.singleSegment).toBe(true);
    expect(scan.hasChecksum).toBe(false);
    expect(scan.compressedBlockCount).toBe(0);
    expect(scan.rawAndRleBytes).toBe(n);
    expect(scan.blockCount).toBe(Math.max(1, Math.ceil(n / ZSTD_BLOCK_SIZE_MAX)));

    const decoded = fzstdDecompress(frame);
    expect(decoded.length).toBe(n);
    expect(Buffer.from(decoded).equals(Buffer.from(raw))).toBe(true);
  });

  it.runIf(zstdCli)("the reference zstd CLI decodes raw frames byte-exact", () => {
    for (const n of [0, 1, 300, 70_000, 2 * ZSTD_BLOCK_SIZE_MAX + 17]) {
      const raw = randomBytes(n);
      const out = execFileSync("zstd", ["-d", "-c", "-q"], { input: encodeRawZstdFrame(raw) });
      expect(out.equals(raw)).toBe(true);
    }
  });
});

describe("scanZstdFrame", () => {
  it("detects trailing bytes and truncation at every length", () => {
    const frame = encodeRawZstdFrame(new Uint8Array(randomBytes(1000)));
    const withTail = new Uint8Array([...frame, 0, 1, 2]);
    const s = scanZstdFrame(withTail);
    expect(s.ok && s.frameSize).toBe(frame.length);
    for (let len = 0; len < frame.length; len++) {
      expect(scanZstdFrame(frame.subarray(0, len)).ok).toBe(false);
    }
  });

  it("refuses Reserved block type and oversized blocks", () => {
    // FCS 10, block header: last=1, type=3 (reserved), size 10
    const reserved = new Uint8Array([...MAGIC, 0x20, 10, (10 << 3) | (3 << 1) | 1, 0, 0, ...new Array(10).fill(0)]);
    expect(scanZstdFrame(reserved)).toMatchObject({ ok: false, reason: expect.stringMatching(/Reserved/) });
    // FCS 10 => Window_Size 10 => a 20-byte RLE block is over Block_Maximum_Size
    const rle = new Uint8Array([...MAGIC, 0x20, 10, (20 << 3) | (1 << 1) | 1, 0, 0, 0x41]);
    expect(scanZstdFrame(rle)).toMatchObject({ ok: false, reason: expect.stringMatching(/Block_Maximum_Size/) });
  });

  it.runIf(zstdCli)("accounts for the Content_Checksum of CLI frames and finds frame boundaries", () => {
    const data = Buffer.from("hello from the zstd cli ".repeat(100));
    const withCheck = execFileSync("zstd", ["-c", "-q", "--check"], { input: data });
    const s = scanZstdFrame(withCheck);
    expect(s).toMatchObject({ ok: true, hasChecksum: true, frameSize: withCheck.length });
    const two = Buffer.concat([withCheck, withCheck]);
    const s2 = scanZstdFrame(two);
    expect(s2.ok && s2.frameSize).toBe(withCheck.length);
  });
});

describe("properties", () => {
  it("header parsing and scanning never throw", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.boolean(), (junk, magic) => {
        const b = magic ? new Uint8Array([...MAGIC, ...junk]) : junk;
        const h = readZstdFrameContentSize(b);
        const s = scanZstdFrame(b);
        return typeof h.ok === "boolean" && typeof s.ok === "boolean" && (!s.ok || s.frameSize <= b.length);
      }),
      { numRuns: 5000 },
    );
  });

  it("encodeRawZstdFrame round-trips through fzstd for any bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 * 1024, size: "max" }), (raw) => {
        const frame = encodeRawZstdFrame(raw);
        const h = readZstdFrameContentSize(frame);
        return h.ok && h.contentSize === raw.length && Buffer.from(fzstdDecompress(frame)).equals(Buffer.from(raw));
      }),
      { numRuns: 50 },
    );
  });

  it("every FCS value round-trips through its smallest header form", () => {
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: 0, max: 70000 }), fc.integer({ min: 0, max: 0xffffffff })), (n) => {
        // build just the header the way encodeRawZstdFrame would, via a fake length
        const flag = n < 256 ? 0 : n < 65792 ? 1 : 2;
        const size = flag === 0 ? 1 : 1 << flag;
        const v = flag === 1 ? n - 256 : n;
        const fcs = Array.from({ length: size }, (_, i) => Math.floor(v / 256 ** i) % 256);
        const h = readZstdFrameContentSize(hdr((flag << 6) | 0x20, ...fcs));
        return h.ok && h.contentSize === n && h.headerSize === 5 + size;
      }),
      { numRuns: 2000 },
    );
  });
});
