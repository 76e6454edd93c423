// Simulator throughput: virtual seconds per CPU (and wall) second for
// 8-agent worlds, and seeds per minute for a small campaign, each in two
// configurations run in the same invocation, interleaved so both see the
// same machine load:
//
//   baseline  the full invariants of every node after every step, every
//             frame decoded and digested afresh (the simulator before the
//             speedup; `--paranoid` is the same checking)
//   default   the full invariants every CHECK_EVERY steps of a node, before
//             a crash and at the end; per-frame caches
//
// Both run the same worlds (the trace hashes must match: checked).
//
//   npx tsx sim/bench.ts [--seeds N] [--jobs J] [--worlds W] [--no-baseline]

import { runSeed, type RunOptions, type RunResult } from "./run.js";
import { drawSwarm } from "./swarm.js";
import { runCampaign } from "./campaign.js";
import { wireCaches } from "./wire.js";
import { CHECK_EVERY } from "./world.js";
import { availableParallelism, loadavg } from "node:os";

interface Mode {
  name: string;
  opts: RunOptions;
  caches: boolean;
}

const MODES: Mode[] = [
  { name: "baseline", opts: { paranoid: true }, caches: false },
  { name: "default", opts: {}, caches: true },
];

interface Tally {
  vms: number;
  wall: number;
  cpu: number;
  steps: number;
  checks: number;
}

function runWorld(seed: number, m: Mode): { r: RunResult; cpuMs: number } {
  const sw = drawSwarm(seed);
  sw.agents = 8;
  sw.submits = 40;
  sw.faultPhaseMs = 15 * 60_000;
  wireCaches.enabled = m.caches;
  const c0 = process.cpuUsage();
  const r = runSeed(seed, { ...m.opts, swarm: sw });
  const c = process.cpuUsage(c0);
  wireCaches.enabled = true;
  return { r, cpuMs: (c.user + c.system) / 1000 };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const flag = (name: string, d: number): number => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? Number(argv[i + 1]) : d;
  };
  const seeds = flag("seeds", 40);
  const jobs = flag("jobs", 2);
  const worlds = flag("worlds", 5);
  const modes = argv.includes("--no-baseline") ? MODES.slice(1) : MODES;
  const fmt = (t: Tally): string =>
    `${(t.vms / t.cpu).toFixed(0)}x real time per CPU second, ${(t.vms / t.wall).toFixed(0)}x per wall second, ` +
    `${((t.steps / t.cpu) * 1000).toFixed(0)} core steps per CPU second (${(t.vms / 1000).toFixed(0)} virtual s, ${(t.cpu / 1000).toFixed(1)} s CPU, ${(t.wall / 1000).toFixed(1)} s wall, ${t.checks} full checks)`;

  // 1. 8-agent worlds, faults on, long fault phase; the modes alternate per world.
  console.log(`8-agent worlds (full check every ${CHECK_EVERY} steps of a node by default):`);
  const tally = new Map<string, Tally>(modes.map((m) => [m.name, { vms: 0, wall: 0, cpu: 0, steps: 0, checks: 0 }]));
  // Warm the JIT up first, so that the first measured mode is not charged for it; then alternate which mode goes first.
  for (const m of modes) runWorld(1000, m);
  for (let s = 1; s <= worlds; s++) {
    const hashes = new Set<string>();
    for (const m of s % 2 === 1 ? modes : [...modes].reverse()) {
      const { r, cpuMs } = runWorld(1000 + s, m);
      const t = tally.get(m.name)!;
      t.vms += r.virtualMs;
      t.wall += r.wallMs;
      t.cpu += cpuMs;
      t.steps += r.steps;
      t.checks += r.fullChecks;
      hashes.add(r.hash);
      console.log(
        `  seed ${1000 + s} ${m.name.padEnd(8)}: ${(r.virtualMs / 1000).toFixed(0)} virtual s, ${r.steps} steps, ${(cpuMs / 1000).toFixed(2)} s CPU, ${(r.wallMs / 1000).toFixed(2)} s wall, hash ${r.hash}${r.ok ? "" : ` [${r.failure!.oracle}]`}`,
      );
    }
    if (hashes.size !== 1) throw new Error(`seed ${1000 + s}: the modes gave different trace hashes (${[...hashes].join(", ")})`);
  }
  for (const m of modes) console.log(`${m.name.padEnd(8)}: ${fmt(tally.get(m.name)!)}`);
  if (modes.length === 2) {
    const b = tally.get("baseline")!;
    const d = tally.get("default")!;
    console.log(`speedup (default vs baseline): ${(b.cpu / d.cpu).toFixed(2)}x per CPU second, ${(b.wall / d.wall).toFixed(2)}x per wall second`);
  }
  console.log(
    `  (load average now ${loadavg()
      .map((x) => x.toFixed(1))
      .join(" ")} on ${availableParallelism()} cores: wall figures shrink on a busy machine)`,
  );

  // 2. A campaign per mode (--seeds 0: none).
  if (seeds <= 0) return;
  const campaignSeeds = Array.from({ length: seeds }, (_, i) => 5000 + i);
  const wallOf = new Map<string, number>();
  for (const m of modes) {
    const c = await runCampaign(campaignSeeds, jobs, { variant: null, swarmOptions: null, paranoid: m.opts.paranoid === true, wireCaches: m.caches });
    wallOf.set(m.name, c.wallMs);
    console.log(
      `campaign ${m.name.padEnd(8)}: ${seeds} seeds on ${jobs} workers in ${(c.wallMs / 1000).toFixed(1)} s = ${((seeds / c.wallMs) * 60_000).toFixed(0)} seeds/min, ${(c.virtualMs / c.wallMs).toFixed(0)}x real time overall, ${c.failures.length} failing seeds`,
    );
  }
  if (modes.length === 2) console.log(`campaign speedup (wall, the runs did not overlap): ${(wallOf.get("baseline")! / wallOf.get("default")!).toFixed(2)}x`);
}

void main();
