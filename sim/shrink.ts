// Shrinking a failing seed: delta debugging (ddmin) over its plan. The seed,
// swarm and every random stream stay the same; only plan entries are
// removed. A candidate "still fails" when it fails the same oracle.

import { runSeed, type RunOptions, type RunResult } from "./run.js";
import { planSchedule, type Action, type Schedule } from "./schedule.js";
import { drawSwarm } from "./swarm.js";

export interface ShrinkResult {
  schedule: Schedule;
  result: RunResult;
  originalActions: number;
  runs: number;
}

export function shrink(seed: number, opts0: RunOptions, log: (line: string) => void = () => {}, maxRuns = 400): ShrinkResult | null {
  // Paranoid: every candidate is judged by the per-step checks directly (a failing
  // candidate would otherwise be run a second time to localize its failure).
  const opts: RunOptions = { ...opts0, paranoid: true };
  const swarm = opts.swarm ?? drawSwarm(seed, opts.swarmOptions ?? opts.variant?.swarm ?? {});
  const full = opts.schedule ?? planSchedule(seed, swarm);
  const first = runSeed(seed, { ...opts, swarm, schedule: full });
  if (first.ok) return null;
  const oracle = first.failure!.oracle;
  log(`seed ${seed} fails [${oracle}] with ${full.actions.length} plan entries; shrinking...`);
  let runs = 1;
  let best: RunResult = first;
  const fails = (actions: Action[]): boolean => {
    if (runs >= maxRuns) return false;
    runs++;
    const r = runSeed(seed, { ...opts, swarm, schedule: { actions } });
    if (!r.ok && r.failure!.oracle === oracle) {
      best = r;
      return true;
    }
    return false;
  };
  let cur = full.actions.slice();
  let n = 2;
  while (cur.length >= 2 && runs < maxRuns) {
    const size = Math.ceil(cur.length / n);
    let reduced = false;
    for (let i = 0; i < n && !reduced; i++) {
      const complement = [...cur.slice(0, i * size), ...cur.slice((i + 1) * size)];
      if (complement.length < cur.length && fails(complement)) {
        cur = complement;
        n = Math.max(n - 1, 2);
        reduced = true;
        log(`  ${cur.length} entries still fail (${runs} runs)`);
      }
    }
    if (!reduced) {
      if (n >= cur.length) break;
      n = Math.min(cur.length, n * 2);
    }
  }
  // Last pass: try dropping each remaining entry alone.
  for (let i = cur.length - 1; i >= 0 && runs < maxRuns; i--) {
    const c = [...cur.slice(0, i), ...cur.slice(i + 1)];
    if (fails(c)) cur = c;
  }
  if (cur.length === 1 && fails([])) cur = [];
  return { schedule: { actions: cur }, result: best, originalActions: full.actions.length, runs };
}
