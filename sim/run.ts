// One simulation run: seed -> swarm -> plan -> world -> result. Everything
// a run does is a function of (seed, plan, variant): running it again gives
// the same trace hash.

import { SimFailure } from "./oracles.js";
import { planSchedule, type Schedule } from "./schedule.js";
import { drawSwarm, enabledFaults, type Swarm, type SwarmOptions } from "./swarm.js";
import type { Timeline } from "./timeline.js";
import { World, type Variant } from "./world.js";

export interface RunOptions {
  swarm?: Swarm;
  swarmOptions?: SwarmOptions;
  schedule?: Schedule;
  variant?: Variant | null;
  timeline?: Timeline | null;
  /** Skip the liveness phase checks (faults only). */
  noLiveness?: boolean;
}

export interface RunResult {
  seed: number;
  hash: string;
  ok: boolean;
  failure?: { oracle: string; message: string; at: number };
  virtualMs: number;
  steps: number;
  wallMs: number;
  agents: number;
  commands: number;
  states: Record<string, number>;
  faultsEnabled: string[];
  faultsSeen: Record<string, number>;
  stats: Record<string, number>;
}

export function runSeed(seed: number, opts: RunOptions = {}): RunResult {
  const t0 = performance.now();
  const swarm = opts.swarm ?? drawSwarm(seed, opts.swarmOptions ?? opts.variant?.swarm ?? {});
  const schedule = opts.schedule ?? planSchedule(seed, swarm);
  const w = new World(seed, swarm, schedule, opts.variant ?? null, opts.timeline ?? null);
  let failure: RunResult["failure"];
  try {
    w.start();
    for (;;) {
      if (w.phase === "done") break;
      const ev = w.q.pop();
      if (!ev) break;
      if (ev.at > w.endAt) break;
      ev.run();
      if ((w.steps & 0xfff) === 0) w.net.gc();
    }
    w.oracles.checkCoverage();
    w.oracles.checkRetention();
    if (!opts.noLiveness) w.oracles.checkLiveness();
  } catch (e) {
    if (e instanceof SimFailure) failure = { oracle: e.oracle, message: e.message, at: e.at };
    else failure = { oracle: "sim-crashed", message: `${(e as Error).stack ?? e}`, at: w.q.now };
  }
  const hash = w.hash.digest();
  const states = Object.fromEntries(w.oracles.finalStates());
  const stats: Record<string, number> = {
    ...w.oracles.stats,
    ...prefix("net.", w.net.stats),
    ...prefix("exec.", w.exec.stats),
    ...prefix("ops.", w.ops.stats),
    diskBatchesLost: w.server.disk.batchesLost + w.hosts.reduce((n, h) => n + h.disk.batchesLost, 0),
  };
  const result: RunResult = {
    seed,
    hash,
    ok: failure === undefined,
    virtualMs: w.q.now,
    steps: w.steps,
    wallMs: performance.now() - t0,
    agents: swarm.agents,
    commands: w.ops.submitted.size,
    states,
    faultsEnabled: enabledFaults(swarm),
    faultsSeen: Object.fromEntries(w.faultsSeen),
    stats,
  };
  if (failure) result.failure = failure;
  return result;
}

function prefix(p: string, o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [p + k, v]));
}

export function formatFailure(r: RunResult): string {
  if (r.ok) return `seed ${r.seed} ok hash ${r.hash}`;
  return `FAIL seed ${r.seed} hash ${r.hash} at ${(r.failure!.at / 1000).toFixed(3)}s [${r.failure!.oracle}] ${r.failure!.message}`;
}
