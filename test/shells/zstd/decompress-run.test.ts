// decompressRun: the read path's decoding of a run of stored frames that sit
// back to back in a segment file (FollowOutput), on both backends.
import { beforeAll, describe, expect, it } from "vitest";
import { compress, decompressRun, decompressRunInto, initZstd, ZSTD_BACKENDS } from "../../../shells/zstd/index.js";

beforeAll(async () => {
  await initZstd("portable");
});

const text = (n: number, seed: number): Uint8Array =>
  Buffer.from(
    Array.from({ length: Math.ceil(n / 16) }, (_, i) => `${seed}:${i} log line\n`)
      .join("")
      .slice(0, n),
  );

describe.each(ZSTD_BACKENDS)("decompressRun (%s)", (backend) => {
  const raws = [text(65536, 1), text(100, 2), text(0, 3), text(40000, 4)];
  let frames: Uint8Array[] = [];
  let span = Buffer.alloc(0);
  let index: Array<{ length: number; originalSize: number }> = [];
  beforeAll(() => {
    frames = raws.map((r) => compress(r, 3, backend));
    span = Buffer.concat(frames);
    index = frames.map((f, i) => ({ length: f.length, originalSize: raws[i]!.length }));
  });

  it("R-O4 R-T3: decodes concatenated frames to the concatenated content, split exactly at the declared sizes", () => {
    const r = decompressRun(span, index, 64 * 1024, backend);
    expect(r.ok).toBe(true);
    if (r.ok) expect(Buffer.from(r.data).equals(Buffer.concat(raws))).toBe(true);
  });

  it("R-T3: refuses a run whose index does not match its frames (wrong declared size, wrong frame length, bytes after the last frame, corrupt data)", () => {
    const wrongSize = index.map((x, i) => (i === 1 ? { ...x, originalSize: x.originalSize + 1 } : x));
    expect(decompressRun(span, wrongSize, 64 * 1024, backend).ok).toBe(false);
    const wrongLen = index.map((x, i) => (i === 0 ? { ...x, length: x.length - 1 } : i === 1 ? { ...x, length: x.length + 1 } : x));
    expect(decompressRun(span, wrongLen, 64 * 1024, backend).ok).toBe(false);
    expect(decompressRun(Buffer.concat([span, Buffer.from([0])]), index, 64 * 1024, backend).ok).toBe(false);
    const bad = Buffer.from(span);
    bad[frames[0]!.length - 3]! ^= 0xff;
    const r = decompressRun(bad, index, 64 * 1024, backend);
    if (r.ok) expect(Buffer.from(r.data).equals(Buffer.concat(raws))).toBe(false);
    const big = decompressRun(span, index, 1000, backend);
    expect(big.ok).toBe(false);
    if (!big.ok) expect(big.code).toBe("PAYLOAD_TOO_LARGE");
  });

  it("R-T3: decompressRunInto (the CLI's reused buffers) gives decompressRun's verdicts, decoding into the caller's buffer and never past declared + 1", () => {
    const total = raws.reduce((n, r) => n + r.length, 0);
    const out = new Uint8Array(total + 1 + 16).fill(0xee);
    const r = decompressRunInto(span, index, out, 64 * 1024, backend);
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(r.data.buffer).toBe(out.buffer);
      expect(Buffer.from(r.data).equals(Buffer.concat(raws))).toBe(true);
    }
    // Past total + 1 nothing was written.
    expect([...out.subarray(total + 1)].every((b) => b === 0xee)).toBe(true);
    // The same buffer again, for a run decoded after a refusal: the context is fresh each time.
    const wrongSize = index.map((x, i) => (i === 1 ? { ...x, originalSize: x.originalSize + 1 } : x));
    expect(decompressRunInto(span, wrongSize, new Uint8Array(total + 2), 64 * 1024, backend).ok).toBe(false);
    const bad = Buffer.from(span);
    bad[frames[0]!.length - 3]! ^= 0xff;
    const viaRun = decompressRun(bad, index, 64 * 1024, backend);
    const viaInto = decompressRunInto(bad, index, new Uint8Array(total + 1), 64 * 1024, backend);
    expect(viaInto.ok).toBe(viaRun.ok);
    if (viaInto.ok && viaRun.ok) expect(Buffer.from(viaInto.data).equals(Buffer.from(viaRun.data))).toBe(true);
    const again = decompressRunInto(span, index, out, 64 * 1024, backend);
    expect(again.ok && Buffer.from(again.data).equals(Buffer.concat(raws))).toBe(true);
    // A truncated span (the last frame cut short) is refused before decoding.
    expect(decompressRunInto(span.subarray(0, span.length - 2), index, out, 64 * 1024, backend).ok).toBe(false);
    // A buffer without room for total + 1 is a caller bug, not a verdict.
    expect(() => decompressRunInto(span, index, new Uint8Array(total), 64 * 1024, backend)).toThrow(RangeError);
  });
});
