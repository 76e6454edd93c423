// How long starting a command blocks the calling event loop, and how long it
// takes, as the caller's resident memory grows: `child_process.spawn()` from
// the caller itself (what the agent did before the spawn helper) against the
// spawn helper (shells/exec/spawn-client.ts: a small process forks instead).
// On Linux libuv forks (Node 24's libuv 1.52 too), and fork copies the page
// tables of every mapped page, so a spawn from a large process blocks it for
// longer; the helper's RSS does not grow with the caller's.
//
//   npm run bench:spawn                       # 40 spawns of `true` per step and way
//   npm run bench:spawn -- --steps=0,100,1000 --n=40 --relay-mib=256
//
// Per RSS step (MiB allocated and touched on top of the process as started):
// p50/p90 of the blocking call and p50 of start -> exit seen, for
//   direct   process-runner's startProcess (child_process.spawn in this process)
//   helper   SpawnHelper.startProcess (a message; the helper forks)
// and the ratio direct/helper of spawn -> exit. Then the relay's cost on
// throughput: --relay-mib of `head -c` through each way, MiB/s.
import { readFileSync } from "node:fs";
import os from "node:os";
import { startProcess, type ProcessHooks, type ProcessSpec } from "../shells/exec/process-runner.js";
import { SpawnHelper } from "../shells/exec/spawn-client.js";

const args = process.argv.slice(2);
const arg = (k: string, d: string): string => args.find((a) => a.startsWith(`--${k}=`))?.slice(k.length + 3) ?? d;
const N = Number(arg("n", "40"));
const STEPS_MIB = arg("steps", "0,100,1000").split(",").map(Number);
const RELAY_MIB = Number(arg("relay-mib", "256"));

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0;
}

type Start = (spec: ProcessSpec, hooks: ProcessHooks) => unknown;
const helper = new SpawnHelper();
const ways: Array<[string, Start]> = [
  ["direct", (s, h) => startProcess(s, h)],
  ["helper", (s, h) => helper.startProcess(s, h)],
];

function rssMiB(pid: number | "self"): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** One command; resolves with [blocking ms, start -> exit ms, bytes of stdout]. */
function once(start: Start, spec: ProcessSpec): Promise<[number, number, number]> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    const t0 = performance.now();
    let call = 0;
    start(spec, {
      onOutput: (_s, d) => (bytes += d.length),
      onExit: () => resolve([call, performance.now() - t0, bytes]),
      onSpawnError: (e) => reject(e),
    });
    call = performance.now() - t0;
  });
}

async function main(): Promise<void> {
  const held: Buffer[] = [];
  const spec: ProcessSpec = { kind: "argv", argv: ["true"], stdinOpen: false };
  for (const [, start] of ways) for (let i = 0; i < 5; i++) await once(start, spec); // warm-up, forks the helper
  console.log(
    `bench-spawn: node ${process.version}, libuv ${process.versions.uv}, ${N} spawns of \`true\` per step and way, interleaved; load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  for (const extra of STEPS_MIB) {
    while (held.length * 5 < extra) held.push(Buffer.alloc(5 << 20, 1)); // touched: resident
    const call: number[][] = ways.map(() => []);
    const total: number[][] = ways.map(() => []);
    for (let i = 0; i < N; i++) {
      for (const [w, [, start]] of ways.entries()) {
        const [c, t] = await once(start, spec);
        call[w]!.push(c);
        total[w]!.push(t);
      }
    }
    const line = ways.map(
      ([name], w) =>
        `${name}: blocks p50 ${pct(call[w]!, 0.5).toFixed(2)} p90 ${pct(call[w]!, 0.9).toFixed(2)} ms, start->exit p50 ${pct(total[w]!, 0.5).toFixed(2)} ms`,
    );
    console.log(
      `rss ${rssMiB("self").toFixed(0).padStart(5)} MiB (helper ${rssMiB(helper.pid ?? 0).toFixed(0)} MiB) | ${line.join(" | ")} | start->exit direct/helper ${(pct(total[0]!, 0.5) / pct(total[1]!, 0.5)).toFixed(2)}x`,
    );
  }
  held.length = 0;
  if (RELAY_MIB > 0) {
    const big: ProcessSpec = { kind: "argv", argv: ["head", "-c", String(RELAY_MIB << 20), "/dev/zero"], stdinOpen: false };
    const res = [];
    for (let r = 0; r < 3; r++) {
      for (const [name, start] of ways) {
        const [, t, bytes] = await once(start, big);
        if (bytes !== RELAY_MIB << 20) throw new Error(`${name}: ${bytes} bytes`);
        res.push(`${name} ${(RELAY_MIB / (t / 1000)).toFixed(0)}`);
      }
    }
    console.log(`relay: ${RELAY_MIB} MiB of head -c through each way, MiB/s (3 rounds): ${res.join(", ")}`);
  }
  helper.close();
}

await main();
