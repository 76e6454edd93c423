import { execFileSync } from "node:child_process";
import { hasZstdCli } from "../../support/zstd-cli.js";
import { randomBytes } from "node:crypto";
import { decompress as fzstdDecompress } from "fzstd";
import { beforeAll, describe, expect, it } from "vitest";
import {
  compress,
  decompressValidated,
  initZstd,
  isZstdReady,
  MAX_COMPRESS_INPUT_BYTES,
  NATIVE_ZSTD_AVAILABLE,
  readZstdFrameContentSize,
  ZSTD_BACKEND,
  ZSTD_BACKENDS,
} from "../../../shells/zstd/index.js";
import { nativeCompress, nativeCompressOneShot } from "../../../shells/zstd/native.js";

const text = (n: number): Uint8Array => {
  const line = new TextEncoder().encode("2024-01-01T00:00:00Z INFO rvbox agent: command 42 wrote a line of output\n");
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = line[i % line.length] ?? 0;
  return out;
};

describe("backend selection", () => {
  it("native node:zlib zstd is found on this Node (>= 22.15) and is the default", () => {
    expect(NATIVE_ZSTD_AVAILABLE).toBe(true);
    expect(ZSTD_BACKEND).toBe(process.env.RVBOX_ZSTD === "portable" ? "portable" : "native");
    expect(ZSTD_BACKENDS).toEqual(["native", "portable"]);
  });

  it("native needs no initialisation", () => {
    expect(isZstdReady("native")).toBe(true);
    expect(readZstdFrameContentSize(compress(text(100), 3, "native"))).toMatchObject({ ok: true, contentSize: 100 });
  });
});

describe("compress (portable: zstd-codec)", () => {
  it("throws before initZstd()", () => {
    expect(isZstdReady("portable")).toBe(false);
    expect(() => compress(new Uint8Array(1), 3, "portable")).toThrow(/initZstd/);
  });

  it("initZstd is idempotent and concurrency-safe", async () => {
    await Promise.all([initZstd("portable"), initZstd("portable"), initZstd("portable")]);
    await initZstd("portable");
    expect(isZstdReady("portable")).toBe(true);
  });

  it("every level -7..22 works up to MAX_COMPRESS_INPUT_BYTES without exhausting the WASM heap", () => {
    const raw = new Uint8Array(randomBytes(MAX_COMPRESS_INPUT_BYTES));
    raw.fill(0, 0, MAX_COMPRESS_INPUT_BYTES / 2);
    for (let level = -7; level <= 22; level++) {
      const frame = compress(raw, level, "portable");
      const r = decompressValidated(frame, raw.length, MAX_COMPRESS_INPUT_BYTES, "portable");
      expect(r.ok).toBe(true);
    }
    expect(isZstdReady("portable")).toBe(true);
  });
});

describe.each(ZSTD_BACKENDS)("compress (%s)", (backend) => {
  const compress3 = (raw: Uint8Array, level = 3): Uint8Array => compress(raw, level, backend);
  beforeAll(async () => {
    await initZstd(backend);
  });

  const cases: Array<[string, Uint8Array]> = [
    ["empty", new Uint8Array(0)],
    ["1 random byte", new Uint8Array(randomBytes(1))],
    ["64 KiB random", new Uint8Array(randomBytes(65536))],
    ["1 byte text", text(1)],
    ["64 KiB text", text(65536)],
    ["64 KiB zeros", new Uint8Array(65536)],
  ];
  it.each(cases)("%s: frame carries exact FCS; round-trips via decompressValidated and fzstd", (_name, raw) => {
    const frame = compress3(raw);
    expect(readZstdFrameContentSize(frame)).toMatchObject({ ok: true, contentSize: raw.length });
    const r = decompressValidated(frame, raw.length, undefined, backend);
    expect(r.ok).toBe(true);
    if (r.ok) expect(Buffer.from(r.data).equals(Buffer.from(raw))).toBe(true);
    expect(Buffer.from(fzstdDecompress(frame)).equals(Buffer.from(raw))).toBe(true);
  });

  it("text compresses well; results are independent copies", () => {
    const a = compress3(text(65536));
    expect(a.length).toBeLessThan(2000);
    const snapshot = Buffer.from(a);
    compress3(new Uint8Array(randomBytes(65536)));
    expect(Buffer.from(a).equals(snapshot)).toBe(true);
  });

  it("every level -7..22 works up to MAX_COMPRESS_INPUT_BYTES", () => {
    const raw = new Uint8Array(randomBytes(MAX_COMPRESS_INPUT_BYTES));
    raw.fill(0, 0, MAX_COMPRESS_INPUT_BYTES / 2);
    for (let level = -7; level <= 22; level++) {
      const frame = compress3(raw, level);
      const r = decompressValidated(frame, raw.length, MAX_COMPRESS_INPUT_BYTES, backend);
      expect(r.ok).toBe(true);
      if (r.ok) expect(Buffer.from(r.data).equals(Buffer.from(raw))).toBe(true);
    }
  });

  it("refuses oversize input and bad levels", () => {
    expect(() => compress3(new Uint8Array(MAX_COMPRESS_INPUT_BYTES + 1))).toThrow(RangeError);
    expect(() => compress3(new Uint8Array(1), 23)).toThrow(RangeError);
    expect(() => compress3(new Uint8Array(1), -8)).toThrow(RangeError);
    expect(() => compress3(new Uint8Array(1), 1.5)).toThrow(RangeError);
    expect(isZstdReady(backend)).toBe(true);
  });

  it.runIf(hasZstdCli())("the reference zstd CLI decodes our frames", () => {
    const raw = Buffer.concat([Buffer.from(text(40000)), randomBytes(25536)]);
    const out = execFileSync("zstd", ["-d", "-c", "-q"], { input: compress3(raw) });
    expect(out.equals(raw)).toBe(true);
  });
});

describe.runIf(NATIVE_ZSTD_AVAILABLE)("compress (native: one reused context)", () => {
  it("R-O4: gives the one-shot zstdCompressSync frame byte for byte, whatever the size, level and order", () => {
    const sizes = [0, 1, 63, 64, 1000, 65535, 65536, 65537, MAX_COMPRESS_INPUT_BYTES];
    for (const level of [1, 3, -5, 19, 1]) {
      for (const n of sizes) {
        const raw = Buffer.concat([Buffer.from(text(Math.ceil(n / 2))), randomBytes(Math.floor(n / 2))]);
        const frame = nativeCompress(raw, level);
        expect(Buffer.from(frame).equals(Buffer.from(nativeCompressOneShot(raw, level)))).toBe(true);
        expect(readZstdFrameContentSize(frame)).toMatchObject({ ok: true, contentSize: n });
      }
    }
  });

  it("returns a frame of its own: the next call does not overwrite it", () => {
    const a = compress(text(65536), 1, "native");
    const keep = Buffer.from(a);
    compress(new Uint8Array(randomBytes(65536)), 1, "native");
    expect(Buffer.from(a).equals(keep)).toBe(true);
  });
});
