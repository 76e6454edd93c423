// Simulator throughput: virtual seconds per wall second for an 8-agent
// world, and seeds per minute for a small campaign.
//
//   npx tsx sim/bench.ts [--seeds N] [--jobs J]

import { runSeed } from "./run.js";
import { drawSwarm } from "./swarm.js";
import { runCampaign } from "./campaign.js";

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const flag = (name: string, d: number): number => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? Number(argv[i + 1]) : d;
  };
  const seeds = flag("seeds", 40);
  const jobs = flag("jobs", 2);

  // 1. One 8-agent world, faults on, long fault phase.
  let vms = 0;
  let wall = 0;
  let steps = 0;
  const cpu0 = process.cpuUsage();
  for (let s = 1; s <= 5; s++) {
    const sw = drawSwarm(1000 + s);
    sw.agents = 8;
    sw.submits = 40;
    sw.faultPhaseMs = 15 * 60_000;
    const r = runSeed(1000 + s, { swarm: sw });
    vms += r.virtualMs;
    wall += r.wallMs;
    steps += r.steps;
    console.log(`  8-agent world seed ${1000 + s}: ${(r.virtualMs / 1000).toFixed(0)} virtual s in ${(r.wallMs / 1000).toFixed(2)} s wall, ${r.steps} steps${r.ok ? "" : " [" + r.failure!.oracle + "]"}`);
  }
  const cpu = process.cpuUsage(cpu0);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  console.log(
    `8-agent worlds: ${(vms / wall).toFixed(0)}x real time per wall second, ${(vms / cpuMs).toFixed(0)}x per CPU second ` +
      `(${(vms / 1000).toFixed(0)} virtual s in ${(wall / 1000).toFixed(1)} s wall / ${(cpuMs / 1000).toFixed(1)} s CPU, ${((steps / wall) * 1000).toFixed(0)} core steps/s)`,
  );
  console.log(`  (load average now ${(await import("node:os")).loadavg().map((x) => x.toFixed(1)).join(" ")} on ${(await import("node:os")).availableParallelism()} cores: wall figures shrink on a busy machine)`);

  // 2. A campaign.
  const c = await runCampaign(Array.from({ length: seeds }, (_, i) => 5000 + i), jobs, { variant: null, swarmOptions: null });
  console.log(`campaign: ${seeds} seeds on ${jobs} workers in ${(c.wallMs / 1000).toFixed(1)} s = ${((seeds / c.wallMs) * 60_000).toFixed(0)} seeds/min, ${(c.virtualMs / c.wallMs).toFixed(0)}x real time overall, ${c.failures.length} failing seeds`);
}

void main();
