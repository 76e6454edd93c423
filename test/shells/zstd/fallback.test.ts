/**
 * Where node:zlib has no zstd (an older Node, a Node built without it), the
 * backend detected at load time is the portable pair, and the daemons' ports
 * still compress and validate (R-T3) through zstd-codec and fzstd.
 */
import type * as Zlib from "node:zlib";
import { describe, expect, it, vi } from "vitest";

vi.mock("node:zlib", async (importOriginal) => {
  const orig = await importOriginal<typeof Zlib>();
  const withoutZstd = { ...orig, zstdCompressSync: undefined, zstdDecompressSync: undefined };
  return { ...withoutZstd, default: withoutZstd };
});

describe("zstd without node:zlib zstd", () => {
  it("R-T3: detection falls back to zstd-codec + fzstd, and the ports still compress and validate", async () => {
    const z = await import("../../../shells/zstd/index.js");
    expect(z.NATIVE_ZSTD_AVAILABLE).toBe(false);
    expect(z.ZSTD_BACKEND).toBe("portable");
    expect(z.ZSTD_BACKENDS).toEqual(["portable"]);
    expect(z.isZstdReady()).toBe(false);
    expect(() => z.compress(new Uint8Array(10))).toThrow(/initZstd/);
    await z.initZstd();
    const { realPorts } = await import("../../../shells/runtime/ports.js");
    const ports = realPorts();
    const raw = new TextEncoder().encode("fallback line\n".repeat(1000));
    const frame = ports.compress(raw);
    expect(ports.checkCompressed(frame, raw.length)).toEqual({ ok: true, size: raw.length });
    expect(ports.checkCompressed(frame, raw.length - 1)).toMatchObject({ ok: false });
  });
});
