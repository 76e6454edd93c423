/**
 * Zip bombs are refused without the decoder ever allocating their content,
 * on both backends. fzstd and node:zlib's zstdDecompressSync are wrapped
 * (vi.mock) to count decoder runs and decoded bytes (R-T3).
 */
import { execFileSync } from "node:child_process";
import { hasZstdCli } from "../../support/zstd-cli.js";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type * as Fzstd from "fzstd";
import type * as Zlib from "node:zlib";
import {
  compress,
  decompressValidated as decompressOn,
  initZstd,
  MAX_COMPRESS_INPUT_BYTES,
  scanZstdFrame,
  ZSTD_BACKENDS,
  type ZstdBackend,
} from "../../../shells/zstd/index.js";

const all = vi.hoisted(() => ({
  portable: { decoders: 0, decodedBytes: 0 },
  native: { decoders: 0, decodedBytes: 0 },
}));

vi.mock("fzstd", async (importOriginal) => {
  const orig = await importOriginal<typeof Fzstd>();
  class CountingDecompress extends orig.Decompress {
    constructor(ondata?: Fzstd.ZstdStreamHandler) {
      all.portable.decoders += 1;
      super((data, final) => {
        all.portable.decodedBytes += data.length;
        return ondata?.(data, final);
      });
    }
  }
  return {
    ...orig,
    Decompress: CountingDecompress,
    decompress: (...args: Parameters<typeof orig.decompress>) => {
      all.portable.decoders += 1;
      return orig.decompress(...args);
    },
  };
});

vi.mock("node:zlib", async (importOriginal) => {
  const orig = await importOriginal<typeof Zlib>();
  const zstdDecompressSync = (buf: Zlib.InputType, opts?: Zlib.ZstdOptions): Buffer => {
    all.native.decoders += 1;
    const out = orig.zstdDecompressSync(buf, opts);
    all.native.decodedBytes += out.length;
    return out;
  };
  return { ...orig, zstdDecompressSync, default: { ...orig, zstdDecompressSync } };
});

const KiB = 1024;
const MiB = 1024 * KiB;

/** A valid zstd frame of `total` zero bytes made of 128 KiB RLE blocks (4 bytes each). */
function rleBomb(total: number, fcs: number): Uint8Array {
  const blocks: number[] = [];
  for (let left = total; left > 0; ) {
    const size = Math.min(128 * KiB, left);
    left -= size;
    const bh = (size << 3) | (1 << 1) | (left === 0 ? 1 : 0);
    blocks.push(bh & 0xff, (bh >> 8) & 0xff, (bh >> 16) & 0xff, 0x00);
  }
  // window descriptor 0x50: 2^(10+10) = 1 MiB window; 4-byte FCS (flag 2)
  const header = [0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x50, fcs & 0xff, (fcs >> 8) & 0xff, (fcs >> 16) & 0xff, (fcs >>> 24) & 0xff];
  return new Uint8Array([...header, ...blocks]);
}

beforeAll(async () => {
  await initZstd("portable");
});
beforeEach(() => {
  for (const c of Object.values(all)) {
    c.decoders = 0;
    c.decodedBytes = 0;
  }
});

/** Run `f`, recording the size of every Buffer.allocUnsafe it makes. */
function recordingAllocations<T>(f: () => T): { result: T; allocated: number[] } {
  const allocated: number[] = [];
  const real = Buffer.allocUnsafe;
  const spy = vi.spyOn(Buffer, "allocUnsafe").mockImplementation((size: number) => {
    allocated.push(size);
    return real.call(Buffer, size);
  });
  try {
    return { result: f(), allocated };
  } finally {
    spy.mockRestore();
  }
}

describe.each(ZSTD_BACKENDS)("R-T3: zip bombs (%s)", (backend: ZstdBackend) => {
  const counters = all[backend];
  const decompressValidated = (frame: Uint8Array, declared: number): ReturnType<typeof decompressOn> => decompressOn(frame, declared, undefined, backend);
  it("sanity: the counting wrapper sees normal decodes", () => {
    const r = decompressValidated(compress(new Uint8Array(1000), 3, backend), 1000);
    expect(r.ok).toBe(true);
    expect(counters.decoders).toBe(1);
    expect(counters.decodedBytes).toBe(1000);
  });

  it("10 MiB of zeros (a 330-byte frame) declared as 64 KiB: refused by the header check, decoder never runs", () => {
    const bomb = rleBomb(10 * MiB, 10 * MiB);
    expect(bomb.length).toBeLessThan(1000);
    expect(scanZstdFrame(bomb)).toMatchObject({ ok: true, contentSize: 10 * MiB, rawAndRleBytes: 10 * MiB });
    const before = process.memoryUsage().arrayBuffers;
    const r = decompressValidated(bomb, 64 * KiB);
    expect(r).toMatchObject({ ok: false, code: "BAD_COMPRESSION" });
    expect(counters.decoders).toBe(0);
    expect(counters.decodedBytes).toBe(0);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(5 * MiB);
  });

  it("the same bomb honestly declared as 10 MiB: PAYLOAD_TOO_LARGE, decoder never runs", () => {
    const r = decompressValidated(rleBomb(10 * MiB, 10 * MiB), 10 * MiB);
    expect(r).toMatchObject({ ok: false, code: "PAYLOAD_TOO_LARGE" });
    expect(counters.decoders).toBe(0);
  });

  it("a bomb whose header lies (FCS 64 KiB, blocks 10 MiB): refused structurally, decoder never runs", () => {
    const r = decompressValidated(rleBomb(10 * MiB, 64 * KiB), 64 * KiB);
    expect(r).toMatchObject({ ok: false, code: "BAD_COMPRESSION", message: expect.stringMatching(/raw\/RLE 10485760/) });
    expect(counters.decoders).toBe(0);
  });

  it("our largest compressible input (256 KiB of zeros) declared as 64 KiB: refused before decoding", () => {
    const frame = compress(new Uint8Array(MAX_COMPRESS_INPUT_BYTES), 3, backend);
    const r = decompressValidated(frame, 64 * KiB);
    expect(r).toMatchObject({ ok: false, code: "BAD_COMPRESSION" });
    expect(counters.decoders).toBe(0);
  });

  it("a lying header on compressed blocks: decoding stops at the declared size", () => {
    // zstd-codec's frame: its 128 KiB blocks still pass the structural checks
    // after the lie, so the decoder itself has to stop
    const frame = compress(new Uint8Array(MAX_COMPRESS_INPUT_BYTES), 3, "portable").slice();
    new DataView(frame.buffer).setUint32(5, 64 * KiB, true); // 4-byte FCS at offset 5 (single segment)
    const { result: r, allocated } = recordingAllocations(() => decompressValidated(frame, 64 * KiB));
    expect(r).toMatchObject({ ok: false, code: "BAD_COMPRESSION", message: expect.stringMatching(/more than the declared/) });
    expect(counters.decoders).toBe(1);
    if (backend === "portable") {
      // at most the declared size plus one block was ever produced by the decoder
      expect(counters.decodedBytes).toBeLessThanOrEqual(64 * KiB + 128 * KiB);
    } else {
      // node:zlib: nothing returned, and its only output buffer is declared + 1 bytes
      expect(counters.decodedBytes).toBe(0);
      expect(allocated).toEqual([64 * KiB + 1]);
    }
  });

  it.runIf(backend === "native")("a frame that decodes to exactly the declared size uses one output buffer of declared + 1 bytes", () => {
    const raw = new Uint8Array(64 * KiB).map((_, i) => i % 251);
    const frame = compress(raw, 3, "native");
    const { result: r, allocated } = recordingAllocations(() => decompressValidated(frame, raw.length));
    expect(r.ok).toBe(true);
    if (r.ok) expect(Buffer.from(r.data).equals(Buffer.from(raw))).toBe(true);
    expect(allocated).toEqual([64 * KiB + 1]);
  });

  it.runIf(hasZstdCli())("10 MiB of zeros compressed by the reference zstd CLI, declared as 64 KiB", () => {
    const dir = mkdtempSync(join(tmpdir(), "rvbox-bomb-"));
    try {
      const file = join(dir, "zeros");
      writeFileSync(file, new Uint8Array(10 * MiB));
      const bomb = new Uint8Array(execFileSync("zstd", ["-c", "-q", "-19", file]));
      expect(scanZstdFrame(bomb)).toMatchObject({ ok: true, contentSize: 10 * MiB });
      const r = decompressValidated(bomb, 64 * KiB);
      expect(r).toMatchObject({ ok: false, code: "BAD_COMPRESSION" });
      expect(counters.decoders).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
