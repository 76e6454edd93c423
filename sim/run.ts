// One simulation run: seed -> swarm -> plan -> world -> result. Everything
// a run does is a function of (seed, plan, variant): running it again gives
// the same trace hash.
//
// Each node's full invariants run every `checkEvery` of its steps, before a
// crash and at the end (sim/world.ts); the oracles run after every step. A
// run that fails in that mode is run again with the full check after every
// step (--paranoid): invariant checks add nothing to the trace, so the rerun
// is the same run, and it stops at the first step whose state breaks an
// invariant, with the oracle, time and hash a per-step check would give.

import { SimFailure } from "./oracles.js";
import { planSchedule, type Schedule } from "./schedule.js";
import { drawSwarm, enabledFaults, type Swarm, type SwarmOptions } from "./swarm.js";
import type { Timeline } from "./timeline.js";
import { CHECK_EVERY, World, type Variant } from "./world.js";

export interface RunOptions {
  swarm?: Swarm;
  swarmOptions?: SwarmOptions;
  schedule?: Schedule;
  variant?: Variant | null;
  timeline?: Timeline | null;
  /** Skip the liveness phase checks (faults only). */
  noLiveness?: boolean;
  /** Full invariants after every step of every node (the old default; replay with a timeline uses it too). */
  paranoid?: boolean;
  /** Steps of one node between full invariant checks (default CHECK_EVERY; 1 = paranoid). */
  checkEvery?: number;
  /** On a failure, rerun paranoid to localize it (default true; tests turn it off to see the periodic check itself). */
  localize?: boolean;
}

export interface RunResult {
  seed: number;
  hash: string;
  ok: boolean;
  failure?: { oracle: string; message: string; at: number };
  virtualMs: number;
  steps: number;
  wallMs: number;
  /** Full invariant checks run (over all nodes). */
  fullChecks: number;
  /** The failure was localized by a --paranoid rerun (its figures are the rerun's; wallMs covers both). */
  localized?: boolean;
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
  // A timeline (replay) must end where a per-step check would: no rerun there.
  const paranoid = opts.paranoid === true || opts.checkEvery === 1 || (opts.timeline ?? null) !== null;
  w.checkEvery = paranoid ? 1 : Math.max(1, Math.floor(opts.checkEvery ?? CHECK_EVERY));
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
    w.checkAllNow("at the end of the run");
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
    // Only seeds that submit jobs have these (the others' lines stay as they were).
    ...(w.oracles.jobs.active ? prefix("jobs.", w.oracles.jobs.stats) : {}),
    diskBatchesLost: w.server.disk.batchesLost + w.hosts.reduce((n, h) => n + h.disk.batchesLost, 0),
  };
  const result: RunResult = {
    seed,
    hash,
    ok: failure === undefined,
    virtualMs: w.q.now,
    steps: w.steps,
    wallMs: performance.now() - t0,
    fullChecks: w.fullChecks,
    agents: swarm.agents,
    // The operator's submits and the commands its jobs created (children started or ended).
    commands: w.ops.submitted.size + jobChildren(w),
    states,
    faultsEnabled: enabledFaults(swarm),
    faultsSeen: Object.fromEntries(w.faultsSeen),
    stats,
  };
  if (failure) result.failure = failure;
  if (failure && w.checkEvery > 1 && opts.localize !== false) {
    const again = runSeed(seed, { ...opts, swarm, schedule, paranoid: true });
    again.wallMs += result.wallMs;
    again.localized = true;
    if (again.ok) {
      // Nothing in a run depends on the invariant checks: a rerun that passes means nondeterminism.
      result.failure = { ...failure, message: `${failure.message} [NOT reproduced by the --paranoid rerun (hash ${again.hash}): nondeterminism?]` };
      return result;
    }
    return again;
  }
  return result;
}

function jobChildren(w: World): number {
  let n = 0;
  for (const j of w.server.state?.jobs.values() ?? []) for (const c of j.children) if (c.phase === "started" || c.phase === "done") n++;
  return n;
}

function prefix(p: string, o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [p + k, v]));
}

export function formatFailure(r: RunResult): string {
  if (r.ok) return `seed ${r.seed} ok hash ${r.hash}`;
  return `FAIL seed ${r.seed} hash ${r.hash} at ${(r.failure!.at / 1000).toFixed(3)}s [${r.failure!.oracle}] ${r.failure!.message}`;
}
