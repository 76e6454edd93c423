// rvbox simulator CLI.
//
//   npx tsx sim/cli.ts run --seed S [--variant NAME] [--only f1,f2] [--no-faults]
//   npx tsx sim/cli.ts campaign --seeds A..B [--jobs J] [--variant NAME] [--only ...]
//   npx tsx sim/cli.ts replay --seed S [--node X] [--command UUID] [--plan]
//   npx tsx sim/cli.ts shrink --seed S [--variant NAME]
//   npx tsx sim/cli.ts hashes --seeds A..B   (one line per seed: hash, steps, states, oracle work; diff before/after a refactor)
//   --paranoid (run, campaign, shrink): every node's full invariants after
//   every step (default: every CHECK_EVERY steps, and a failing run is rerun
//   paranoid to localize it); replay is always paranoid.
//   A campaign stopped by SIGINT/SIGTERM finishes the seeds in flight and
//   prints the summary of exactly the seeds that ran.
//
// Every failure prints the seed and the trace hash; `replay` with the same
// seed reproduces it exactly.

import { runSeed, formatFailure, type RunOptions } from "./run.js";
import { drawSwarm, enabledFaults, type FaultKind, type SwarmOptions } from "./swarm.js";
import { planSchedule, describeAction } from "./schedule.js";
import { Timeline } from "./timeline.js";
import { runCampaign, printCampaign } from "./campaign.js";
import { shrink } from "./shrink.js";
import { VARIANTS } from "./variants.js";

function args(argv: string[]): { cmd: string; flags: Map<string, string> } {
  const flags = new Map<string, string>();
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith("--")) continue;
    const next = argv[i + 1];
    if (next !== undefined && !next.startsWith("--")) {
      flags.set(a.slice(2), next);
      i++;
    } else flags.set(a.slice(2), "true");
  }
  return { cmd: argv[0] ?? "help", flags };
}

function swarmOptions(flags: Map<string, string>): SwarmOptions | undefined {
  const o: SwarmOptions = {};
  if (flags.has("only")) o.only = flags.get("only")!.split(",") as FaultKind[];
  if (flags.has("exclude")) o.exclude = flags.get("exclude")!.split(",") as FaultKind[];
  if (flags.has("no-faults")) o.noFaults = true;
  if (flags.has("max-agents")) o.maxAgents = Number(flags.get("max-agents"));
  return Object.keys(o).length > 0 ? o : undefined;
}

function runOptions(flags: Map<string, string>): RunOptions {
  const variantName = flags.get("variant");
  const variant = variantName ? VARIANTS.find((v) => v.name === variantName) : undefined;
  if (variantName && !variant) throw new Error(`unknown variant ${variantName}; known: ${VARIANTS.map((v) => v.name).join(", ")}`);
  const so = swarmOptions(flags);
  return { ...(variant ? { variant } : {}), ...(so ? { swarmOptions: so } : {}), ...(flags.has("paranoid") ? { paranoid: true } : {}) };
}

function parseSeeds(s: string): number[] {
  const m = /^(\d+)\.\.(\d+)$/.exec(s);
  if (m) {
    const out: number[] = [];
    for (let i = Number(m[1]); i <= Number(m[2]); i++) out.push(i);
    return out;
  }
  return s.split(",").map(Number);
}

export function quietOnEpipe(): void {
  process.stdout.on("error", (e: NodeJS.ErrnoException) => {
    if (e.code === "EPIPE") process.exit(0);
    throw e;
  });
}

/** The simulator CLI; `rvbox sim ...` and `npm run sim -- ...` both land here. Returns the exit code. */
export async function simMain(argv: string[]): Promise<number> {
  process.exitCode = 0;
  await main(argv);
  return Number(process.exitCode ?? 0);
}

async function main(argv: string[]): Promise<void> {
  const { cmd, flags } = args(argv);
  switch (cmd) {
    case "run": {
      const seed = Number(flags.get("seed") ?? 1);
      const r = runSeed(seed, runOptions(flags));
      console.log(formatFailure(r));
      console.log(`  agents=${r.agents} commands=${r.commands} virtual=${(r.virtualMs / 1000).toFixed(1)}s steps=${r.steps} wall=${r.wallMs.toFixed(0)}ms`);
      console.log(`  faults enabled: ${r.faultsEnabled.join(", ") || "none"}; happened: ${JSON.stringify(r.faultsSeen)}`);
      console.log(`  final states: ${JSON.stringify(r.states)}`);
      process.exitCode = r.ok ? 0 : 1;
      return;
    }
    case "replay": {
      const seed = Number(flags.get("seed") ?? 1);
      const opts = runOptions(flags);
      const sw = drawSwarm(seed, opts.swarmOptions ?? opts.variant?.swarm ?? {});
      const plan = planSchedule(seed, sw);
      console.log(
        `seed ${seed}: ${sw.agents} agents, fault phase ${sw.faultPhaseMs} ms, faults ${enabledFaults(sw).join(",") || "none"}, small limits ${sw.smallLimits}`,
      );
      if (flags.has("plan") || !flags.has("command")) for (const a of plan.actions) console.log(`  plan @${(a.at / 1000).toFixed(3)}s ${describeAction(a)}`);
      const filter: { node?: string; command?: string } = {};
      if (flags.has("node")) filter.node = flags.get("node")!;
      if (flags.has("command")) filter.command = flags.get("command")!;
      const tl = new Timeline(filter, (line) => console.log(line));
      const r = runSeed(seed, { ...opts, swarm: sw, schedule: plan, timeline: tl });
      console.log(formatFailure(r));
      process.exitCode = r.ok ? 0 : 1;
      return;
    }
    case "campaign": {
      const seeds = parseSeeds(flags.get("seeds") ?? "1..100");
      const jobs = Number(flags.get("jobs") ?? 2);
      const opts = runOptions(flags);
      // SIGINT/SIGTERM: hand out no new seed, let the ones in flight finish, print the summary of what ran.
      // A second signal ends the process at once.
      const control = { stop: false };
      const onSignal = (sig: NodeJS.Signals): void => {
        if (control.stop) process.exit(130);
        control.stop = true;
        process.stderr.write(`\n  ${sig}: stopping after the seeds in flight (signal again to quit at once)\n`);
      };
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
      const summary = await runCampaign(
        seeds,
        jobs,
        { variant: opts.variant?.name ?? null, swarmOptions: opts.swarmOptions ?? null, ...(opts.paranoid ? { paranoid: true } : {}) },
        (line) => process.stderr.write(line),
        control,
      );
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      printCampaign(summary, (l) => console.log(l));
      process.exitCode = summary.failures.length === 0 ? 0 : 1;
      return;
    }
    case "hashes": {
      // One line per seed: seed, ok, trace hash, steps, virtual ms, final states and oracle work.
      // A behaviour-preserving change to the core or the simulator leaves this output byte-identical:
      //   npm run -s sim -- hashes --seeds 1..100 > before.txt; (change); ... > after.txt; diff before.txt after.txt
      const seeds = parseSeeds(flags.get("seeds") ?? "1..100");
      const opts = runOptions(flags);
      let bad = 0;
      for (const seed of seeds) {
        const r = runSeed(seed, opts);
        if (!r.ok) bad++;
        console.log(
          `${seed} ${r.ok ? "ok" : "FAIL"} ${r.hash} steps=${r.steps} virtual=${r.virtualMs} states=${JSON.stringify(r.states)} stats=${JSON.stringify(r.stats)}`,
        );
      }
      process.exitCode = bad === 0 ? 0 : 1;
      return;
    }
    case "shrink": {
      const seed = Number(flags.get("seed") ?? 1);
      const res = shrink(seed, runOptions(flags), (l) => console.log(l));
      if (!res) {
        console.log(`seed ${seed} does not fail; nothing to shrink`);
        return;
      }
      console.log(`\nminimal plan (${res.schedule.actions.length} of ${res.originalActions} actions) still fails with [${res.result.failure!.oracle}]:`);
      for (const a of res.schedule.actions) console.log(`  @${(a.at / 1000).toFixed(3)}s ${describeAction(a)}`);
      console.log(formatFailure(res.result));
      process.exitCode = 1;
      return;
    }
    default:
      process.exitCode = cmd === undefined || cmd === "help" || cmd === "--help" ? 0 : 2;
      console.log(
        "usage: rvbox sim run --seed S | campaign --seeds A..B --jobs J | replay --seed S [--node X] [--command UUID] | shrink --seed S   (run/campaign/shrink: --paranoid = full invariants after every step)",
      );
  }
}

// Run directly (npx tsx sim/cli.ts ...): not when imported by bin/rvbox.ts.
if (process.argv[1] && /sim[\\/]cli\.ts$/.test(process.argv[1])) {
  quietOnEpipe();
  void main(process.argv.slice(2));
}
