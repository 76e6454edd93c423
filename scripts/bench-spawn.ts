// How long `child_process.spawn()` blocks the calling event loop, as the
// caller's resident memory grows. On Linux, Node 20's libuv (1.46) forks, and
// fork copies the page tables of every mapped page, so the synchronous part of
// a spawn grows with the caller's RSS. The agent spawns from its own process
// (RSS ~100 MiB with sql.js and zstd loaded), so this cost sits on the latency
// path of every command and blocks everything else the agent does meanwhile.
//
//   npx tsx scripts/bench-spawn.ts            # 40 spawns of `true` per step
//
// Prints, per RSS step: p50 and p90 of the blocking spawn() call, and of spawn
// to exit. The baseline is the first line (the process as started).

import { spawn } from "node:child_process";

const N = 40;
const STEPS_MIB = [0, 50, 100, 200];

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
}

async function measure(): Promise<{ call: number[]; total: number[] }> {
  const call: number[] = [];
  const total: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    const p = spawn("true", [], { stdio: ["ignore", "pipe", "pipe"], detached: true });
    call.push(performance.now() - t0);
    p.stdout.resume();
    p.stderr.resume();
    await new Promise<void>((r) => p.on("close", () => r()));
    total.push(performance.now() - t0);
  }
  return { call, total };
}

async function main(): Promise<void> {
  const held: Buffer[] = [];
  await measure(); // warm-up
  let base = 0;
  console.log(`bench-spawn: node ${process.version}, libuv ${process.versions.uv}, ${N} spawns of \`true\` per step`);
  for (const extra of STEPS_MIB) {
    while (held.length * 5 < extra) held.push(Buffer.alloc(5 << 20, 1)); // touched: resident
    const { call, total } = await measure();
    const rss = process.memoryUsage().rss / 2 ** 20;
    const p50 = pct(call, 0.5);
    if (extra === 0) base = p50;
    console.log(
      `rss ${rss.toFixed(0).padStart(4)} MiB: spawn() blocks p50 ${p50.toFixed(2)} ms p90 ${pct(call, 0.9).toFixed(2)} ms` +
        ` | spawn->close p50 ${pct(total, 0.5).toFixed(2)} ms | blocking ratio vs baseline ${(p50 / base).toFixed(1)}x`,
    );
  }
}

void main();
