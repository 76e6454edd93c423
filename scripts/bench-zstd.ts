// `npm run bench:zstd`: the two zstd backends side by side, in one process,
// on the same log-like text cut into RVBox's 64 KiB output chunks:
//   compress  native node:zlib  vs  zstd-codec (WASM)         (the agent's side)
//   validate  native node:zlib  vs  fzstd (pure JS)            (the server's side:
//             decompressValidated, structural checks + bounded decode)
// Rounds alternate the backends (A B A B ...) so that a noisy machine slows
// both alike; each figure is the median over rounds and each line ends with
// the ratio. Flags: --mib=N text size (default 16), --rounds=N (default 7),
// --level=N (default 3).
// --levels=3,1,...: instead, native only, per level (rounds alternate the levels): CPU
// seconds (process.cpuUsage, steadier than wall time on a shared machine) to compress with
// a fresh context per chunk (zstdCompressSync) and with the agent's reused one, the ratio,
// and the server's validation (validateCompressed) of those frames.
import { compress, decompressValidated, initZstd, NATIVE_ZSTD_AVAILABLE, validateCompressed, type ZstdBackend } from "../shells/zstd/index.js";
import { nativeCompress, nativeCompressOneShot } from "../shells/zstd/native.js";
import { logLikeChunks } from "./lib/log-text.js";

const args = process.argv.slice(2);
const flag = (name: string, dflt: number): number => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.slice(name.length + 3)) : dflt;
};
const MIB = flag("mib", 16);
const ROUNDS = flag("rounds", 7);
const LEVEL = flag("level", 3);
const CHUNK = 64 * 1024;

/** The same log-like text as scripts/bench.ts's throughput bench. */
function logLike(bytes: number): Uint8Array {
  const next = logLikeChunks();
  const parts: Buffer[] = [];
  let n = 0;
  while (n < bytes) {
    const b = Buffer.from(next(n));
    parts.push(b);
    n += b.length;
  }
  return new Uint8Array(Buffer.concat(parts).subarray(0, bytes));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}

function time(fn: () => void): number {
  const t0 = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

function cpu(fn: () => void): number {
  const u = process.cpuUsage();
  fn();
  const d = process.cpuUsage(u);
  return (d.user + d.system) / 1e6;
}

function levels(list: number[]): void {
  const text = logLike(MIB * 1024 * 1024);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < text.length; i += CHUNK) chunks.push(text.subarray(i, i + CHUNK));
  const mib = text.length / (1024 * 1024);
  const t = new Map<number, { fresh: number[]; reused: number[]; validate: number[]; size: number }>();
  for (const l of list) t.set(l, { fresh: [], reused: [], validate: [], size: 0 });
  for (let round = 0; round < ROUNDS; round++) {
    for (const l of round % 2 === 0 ? list : [...list].reverse()) {
      const r = t.get(l)!;
      let frames: Uint8Array[] = [];
      r.fresh.push(cpu(() => (frames = chunks.map((c) => nativeCompressOneShot(c, l)))));
      r.reused.push(cpu(() => (frames = chunks.map((c) => nativeCompress(c, l)))));
      r.size = frames.reduce((a, f) => a + f.length, 0);
      r.validate.push(
        cpu(() => {
          for (let i = 0; i < frames.length; i++) if (!validateCompressed(frames[i]!, chunks[i]!.length, CHUNK, "native").ok) throw new Error("refused");
        }),
      );
    }
  }
  const rate = (xs: number[]): string => `${(mib / median(xs)).toFixed(0)} MiB/s (${(mib / Math.max(...xs)).toFixed(0)}-${(mib / Math.min(...xs)).toFixed(0)})`;
  console.log(
    `bench:zstd --levels on Node ${process.version}: ${mib.toFixed(0)} MiB of log-like text in 64 KiB chunks, native, CPU time, median (range) of ${ROUNDS} alternating rounds`,
  );
  for (const [l, r] of t) {
    console.log(
      `level ${l}: ratio ${(text.length / r.size).toFixed(2)}:1 | compress, fresh context ${rate(r.fresh)}, reused context ${rate(r.reused)} | validate ${rate(r.validate)}`,
    );
  }
}

async function main(): Promise<void> {
  if (!NATIVE_ZSTD_AVAILABLE) {
    console.log(`bench:zstd: node:zlib has no zstd in Node ${process.version}; nothing to compare`);
    return;
  }
  const lv = args.find((x) => x.startsWith("--levels="));
  if (lv) return levels(lv.slice(9).split(",").map(Number));
  await initZstd("portable");
  const text = logLike(MIB * 1024 * 1024);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < text.length; i += CHUNK) chunks.push(text.subarray(i, i + CHUNK));
  const mib = text.length / (1024 * 1024);

  const frames: Record<ZstdBackend, Uint8Array[]> = { native: [], portable: [] };
  const compressSecs: Record<ZstdBackend, number[]> = { native: [], portable: [] };
  // validate[decoder][encoder]
  const validateSecs: Record<ZstdBackend, Record<ZstdBackend, number[]>> = {
    native: { native: [], portable: [] },
    portable: { native: [], portable: [] },
  };
  const order: ZstdBackend[] = ["native", "portable"];
  for (let round = 0; round < ROUNDS; round++) {
    const seq = round % 2 === 0 ? order : [...order].reverse();
    for (const b of seq) {
      let out: Uint8Array[] = [];
      compressSecs[b].push(time(() => (out = chunks.map((c) => compress(c, LEVEL, b)))));
      frames[b] = out;
    }
    for (const dec of seq) {
      for (const enc of order) {
        const fs = frames[enc];
        validateSecs[dec][enc].push(
          time(() => {
            for (let i = 0; i < fs.length; i++) {
              const r = decompressValidated(fs[i]!, chunks[i]!.length, CHUNK, dec);
              if (!r.ok) throw new Error(`${dec} refused a ${enc} frame: ${r.message}`);
            }
          }),
        );
      }
    }
  }
  const size = (b: ZstdBackend): number => frames[b].reduce((a, f) => a + f.length, 0);
  const rate = (secs: number[]): number => mib / median(secs);
  const cN = rate(compressSecs.native);
  const cP = rate(compressSecs.portable);
  console.log(
    `bench:zstd on Node ${process.version}: ${mib.toFixed(0)} MiB of log-like text in ${chunks.length} chunks of 64 KiB, level ${LEVEL}, median of ${ROUNDS} alternating rounds`,
  );
  console.log(
    `compress: native ${cN.toFixed(0)} MiB/s (ratio ${(text.length / size("native")).toFixed(2)}:1) | zstd-codec ${cP.toFixed(0)} MiB/s (ratio ${(text.length / size("portable")).toFixed(2)}:1) | native/zstd-codec ${(cN / cP).toFixed(2)}x`,
  );
  for (const enc of order) {
    const vN = rate(validateSecs.native[enc]);
    const vP = rate(validateSecs.portable[enc]);
    console.log(
      `validate ${enc === "native" ? "native" : "zstd-codec"} frames: native ${vN.toFixed(0)} MiB/s | fzstd ${vP.toFixed(0)} MiB/s | native/fzstd ${(vN / vP).toFixed(2)}x`,
    );
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
