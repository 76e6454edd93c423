/**
 * Every encoder's frames decode with every decoder: native node:zlib frames
 * with fzstd and zstd-codec, zstd-codec frames natively, the simulator's raw
 * frames everywhere, and the reference CLI's both ways when it is installed.
 * Both daemons' backends (agent compress, server validate) must interoperate
 * whichever one each side picked at startup (R-T3).
 */
import { execFileSync } from "node:child_process";
import { hasZstdCli } from "../../support/zstd-cli.js";
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import zlib from "node:zlib";
import { decompress as fzstdDecompress } from "fzstd";
import { beforeAll, describe, expect, it } from "vitest";
import { checkZstdFrame, encodeRawZstdFrame as simRawFrame } from "../../../sim/zstd-raw.js";
import { compress, decompressValidated, initZstd, readZstdFrameContentSize } from "../../../shells/zstd/index.js";
import type { ZstdCodecPackage, ZstdSimple } from "../../../shells/zstd/zstd-codec.js";

const KiB = 1024;

/** Log-like text: timestamps, levels, varying numbers, repeated phrases. */
function logText(n: number): Uint8Array {
  const parts: string[] = [];
  let len = 0;
  for (let i = 0; len < n; i++) {
    const line = `2026-12-01T09:${String(i % 60).padStart(2, "0")}:${String((i * 7) % 60).padStart(2, "0")}.${String((i * 37) % 1000).padStart(3, "0")}Z ${
      ["INFO", "WARN", "DEBUG"][i % 3]
    } worker-${i % 8} request id=${(i * 2654435761) % 1000003} path=/api/v1/items/${i % 97} status=${[200, 200, 304, 404][i % 4]} took=${(i * 13) % 250}ms\n`;
    parts.push(line);
    len += line.length;
  }
  return new TextEncoder().encode(parts.join("")).subarray(0, n);
}

const inputs: Array<[string, Uint8Array]> = [
  ["empty", new Uint8Array(0)],
  ["1 byte", new Uint8Array([0x41])],
  ["300 B of log text", logText(300)],
  ["64 KiB of log text", logText(64 * KiB)],
  ["64 KiB random", new Uint8Array(randomBytes(64 * KiB))],
  ["64 KiB zeros", new Uint8Array(64 * KiB)],
];

let codec: ZstdSimple;
beforeAll(async () => {
  await initZstd("portable");
  const pkg = createRequire(import.meta.url)("zstd-codec") as ZstdCodecPackage;
  codec = await new Promise<ZstdSimple>((resolve) => pkg.ZstdCodec.run((z) => resolve(new z.Simple())));
});

type Encoder = (raw: Uint8Array, level: number) => Uint8Array;
const encoders: Array<[string, Encoder]> = [
  ["native (node:zlib)", (raw, level) => compress(raw, level, "native")],
  ["zstd-codec", (raw, level) => compress(raw, level, "portable")],
  ["simulator raw blocks", (raw) => simRawFrame(raw)],
  ...(hasZstdCli()
    ? ([
        [
          "zstd CLI",
          (raw: Uint8Array, level: number) =>
            new Uint8Array(execFileSync("zstd", [`-${Math.max(1, level)}`, `--stream-size=${raw.length}`, "-c", "-q"], { input: raw })),
        ],
      ] as Array<[string, Encoder]>)
    : []),
];

type Decoder = (frame: Uint8Array, size: number) => Uint8Array | null;
const decoders: Array<[string, Decoder]> = [
  [
    "validated native",
    (f, n) => {
      const r = decompressValidated(f, n, 64 * KiB, "native");
      return r.ok ? r.data : null;
    },
  ],
  [
    "validated portable (fzstd)",
    (f, n) => {
      const r = decompressValidated(f, n, 64 * KiB, "portable");
      return r.ok ? r.data : null;
    },
  ],
  ["node:zlib zstdDecompressSync", (f) => new Uint8Array(zlib.zstdDecompressSync(f))],
  ["fzstd decompress", (f) => fzstdDecompress(f)],
  ["zstd-codec Simple.decompress", (f) => codec.decompress(f)],
  [
    "simulator checkZstdFrame (size only)",
    (f, n) => {
      const r = checkZstdFrame(f, n);
      return r.ok && r.size === n ? null : new Uint8Array([0xff]);
    },
  ],
  ...(hasZstdCli()
    ? ([["zstd CLI", (f: Uint8Array) => new Uint8Array(execFileSync("zstd", ["-d", "-c", "-q"], { input: f }))]] as Array<[string, Decoder]>)
    : []),
];

describe.each(encoders)("R-T3: frames from %s", (_encoder, encode) => {
  it.each(decoders)("decode with %s, at levels 1, 3 and 19, with their exact Frame_Content_Size", (decoderName, decode) => {
    for (const [name, raw] of inputs) {
      for (const level of [1, 3, 19]) {
        const frame = encode(raw, level);
        expect(readZstdFrameContentSize(frame), `${name} level ${level}`).toMatchObject({ ok: true, contentSize: raw.length });
        const out = decode(frame, raw.length);
        if (decoderName.startsWith("simulator")) {
          expect(out, `${name} level ${level}`).toBeNull(); // null = accepted with the right size
          continue;
        }
        // zstd-codec's Simple.decompress returns null for an empty frame's content
        if (decoderName.startsWith("zstd-codec") && raw.length === 0 && out === null) continue;
        expect(out, `${name} level ${level}`).not.toBeNull();
        expect(Buffer.from(out!).equals(Buffer.from(raw)), `${name} level ${level}`).toBe(true);
      }
    }
  });
});
