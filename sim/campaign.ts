// Campaigns: many seeds over worker threads, a progress line, and a summary
// of faults exercised, commands per terminal state and failures.

import { Worker } from "node:worker_threads";
import { availableParallelism } from "node:os";
import type { RunResult } from "./run.js";
import type { SwarmOptions } from "./swarm.js";

/** Run from source (tsx), a worker needs the loader registered first; from the compiled tree (dist/), it loads the JS directly. */
const WORKER_ENTRY = new URL(import.meta.url.endsWith(".js") ? "./campaign-worker.js" : "./campaign-worker-boot.mjs", import.meta.url);

/** Young generation of a campaign worker (V8: three semi-spaces' worth; node's default semi-space is 16 MiB). */
export const YOUNG_GENERATION_MB = 96;

export interface CampaignOptions {
  variant: string | null;
  swarmOptions: SwarmOptions | null;
  /** Full invariants after every step (sim --paranoid). */
  paranoid?: boolean;
  /** Per-frame decode/digest caches (default on; the bench's baseline turns them off). */
  wireCaches?: boolean;
}

export interface CampaignSummary {
  seeds: number;
  /** Seeds asked for; more than `seeds` when the campaign was stopped early. */
  requested: number;
  /** Stopped by a signal (SIGINT/SIGTERM) before every seed ran. */
  interrupted: boolean;
  /** Requested seeds that completed, as ranges ("1..5012,5014"). */
  completedRanges: string;
  wallMs: number;
  virtualMs: number;
  steps: number;
  failures: RunResult[];
  faultsEnabled: Record<string, number>;
  faultsSeen: Record<string, number>;
  states: Record<string, number>;
  commands: number;
  stats: Record<string, number>;
  hashes: Map<number, string>;
}

/** Seeds as compact ranges, in order: "1..5012,5014,5020..5021". */
export function seedRanges(seeds: number[]): string {
  const v = [...seeds].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < v.length; ) {
    let j = i;
    while (j + 1 < v.length && v[j + 1] === v[j]! + 1) j++;
    out.push(j === i ? `${v[i]}` : `${v[i]}..${v[j]}`);
    i = j + 1;
  }
  return out.join(",");
}

export function summarize(results: RunResult[], wallMs: number, requested = results.length, interrupted = false): CampaignSummary {
  const s: CampaignSummary = {
    seeds: results.length,
    requested,
    interrupted,
    completedRanges: seedRanges(results.map((r) => r.seed)),
    wallMs,
    virtualMs: 0,
    steps: 0,
    failures: [],
    faultsEnabled: {},
    faultsSeen: {},
    states: {},
    commands: 0,
    stats: {},
    hashes: new Map(),
  };
  for (const r of results) {
    s.virtualMs += r.virtualMs;
    s.steps += r.steps;
    s.commands += r.commands;
    s.hashes.set(r.seed, r.hash);
    if (!r.ok) s.failures.push(r);
    for (const f of r.faultsEnabled) s.faultsEnabled[f] = (s.faultsEnabled[f] ?? 0) + 1;
    for (const [f, n] of Object.entries(r.faultsSeen)) s.faultsSeen[f] = (s.faultsSeen[f] ?? 0) + n;
    for (const [k, n] of Object.entries(r.states)) s.states[k] = (s.states[k] ?? 0) + n;
    for (const [k, n] of Object.entries(r.stats)) s.stats[k] = (s.stats[k] ?? 0) + n;
  }
  return s;
}

/**
 * Stops a campaign early: no new seed is handed out once `stop` is set; the
 * seeds in flight finish and the summary covers exactly the seeds that ran.
 */
export interface CampaignControl {
  stop: boolean;
}

export async function runCampaign(
  seeds: number[],
  jobs: number,
  opts: CampaignOptions,
  progress: (line: string) => void = () => {},
  control: CampaignControl = { stop: false },
): Promise<CampaignSummary> {
  const t0 = performance.now();
  const results: RunResult[] = [];
  const queue = seeds.slice();
  const n = Math.max(1, Math.min(jobs || availableParallelism(), seeds.length));
  let done = 0;
  let failed = 0;
  let virtualMs = 0;
  const tty = process.stderr.isTTY === true;
  // Without a terminal: a line every 10 % of the seeds, at most every 500 seeds, and at least once a minute.
  const every = Math.max(1, Math.min(500, Math.floor(seeds.length / 10)));
  let lastLine = t0;
  const tick = (): void => {
    const now = performance.now();
    const el = (now - t0) / 1000;
    if (!tty && done % every !== 0 && done !== seeds.length && now - lastLine < 60_000) return;
    lastLine = now;
    const ranges = seedRanges(results.map((r) => r.seed));
    progress(
      (tty ? "\r" : "") +
        `  ${done}/${seeds.length} seeds, ${failed} failed, ${el.toFixed(1)}s, ${((done / Math.max(el, 1e-3)) * 60).toFixed(0)} seeds/min, ${(virtualMs / Math.max(now - t0, 1e-3)).toFixed(0)}x real time` +
        (tty ? "   " : `; completed ${ranges.length > 80 ? `${ranges.slice(0, 40)}...${ranges.slice(-36)}` : ranges}\n`),
    );
  };
  await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<void>((resolve, reject) => {
          // A larger young generation (semi-spaces of 32 MiB instead of 16): the simulator allocates many
          // short-lived frames, lines and records, and fewer scavenges promote fewer of them.
          const w = new Worker(WORKER_ENTRY, { workerData: opts, resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } });
          const next = (): void => {
            const seed = control.stop ? undefined : queue.shift();
            if (seed === undefined) {
              void w.terminate();
              resolve();
              return;
            }
            w.postMessage(seed);
          };
          w.on("message", (r: RunResult) => {
            results.push(r);
            done++;
            virtualMs += r.virtualMs;
            if (!r.ok) {
              failed++;
              // At once, so that a campaign killed hard still names its failures.
              progress(`${tty ? "\n" : ""}  FAIL seed ${r.seed} hash ${r.hash} [${r.failure!.oracle}] ${r.failure!.message.split("\n")[0]!.slice(0, 200)}\n`);
            }
            tick();
            next();
          });
          w.on("error", reject);
          next();
        }),
    ),
  );
  if (tty) progress("\n");
  results.sort((a, b) => a.seed - b.seed);
  return summarize(results, performance.now() - t0, seeds.length, results.length < seeds.length);
}

export function printCampaign(s: CampaignSummary, out: (line: string) => void): void {
  if (s.interrupted)
    out(
      `campaign STOPPED EARLY by a signal: ${s.seeds} of ${s.requested} requested seeds ran; the figures below cover exactly these seeds: ${s.completedRanges}`,
    );
  out(
    `campaign: ${s.seeds} seeds in ${(s.wallMs / 1000).toFixed(1)}s wall (${((s.seeds / s.wallMs) * 60000).toFixed(0)} seeds/min), ${(s.virtualMs / 3600_000).toFixed(1)} virtual hours (${(s.virtualMs / s.wallMs).toFixed(0)}x real time), ${s.steps} core steps`,
  );
  out(
    `commands: ${s.commands}; final states: ${Object.entries(s.states)
      .sort()
      .map(([k, v]) => `${k}=${v}`)
      .join(" ")}`,
  );
  out("faults            seeds-on  occurrences");
  const kinds = new Set([...Object.keys(s.faultsEnabled), ...Object.keys(s.faultsSeen)]);
  for (const k of [...kinds].sort()) out(`  ${k.padEnd(16)} ${String(s.faultsEnabled[k] ?? 0).padStart(8)}  ${String(s.faultsSeen[k] ?? 0).padStart(11)}`);
  const interesting = [
    "acksChecked",
    "resendsCompared",
    "staleFramesRejected",
    "helloRejections",
    "rogueFrames",
    "coverageChecked",
    "bytesVerified",
    "stdinWritesChecked",
    "terminalsRun",
    "resizesApplied",
    "retentionDrops",
    "prunes",
    "splitBrainLaunches",
    "orphansLeaked",
    "net.breaks",
    "net.framesLost",
    "exec.spawns",
    "diskBatchesLost",
  ];
  out(`oracle work: ${interesting.map((k) => `${k}=${s.stats[k] ?? 0}`).join(" ")}`);
  if (s.failures.length === 0) out("failures: none");
  else {
    out(`failures: ${s.failures.length}`);
    const sig = new Map<string, number[]>();
    for (const f of s.failures) {
      const k = signature(f);
      sig.set(k, [...(sig.get(k) ?? []), f.seed]);
    }
    out("failure signatures:");
    for (const [k, seeds] of [...sig].sort((a, b) => b[1].length - a[1].length))
      out(`  ${String(seeds.length).padStart(4)}x ${k}  (seeds ${seeds.slice(0, 12).join(",")}${seeds.length > 12 ? ",..." : ""})`);
    for (const f of s.failures) out(`  seed ${f.seed} hash ${f.hash} [${f.failure!.oracle}] ${f.failure!.message.split("\n")[0]!.slice(0, 300)}`);
  }
}

/** A failure with uuids, numbers and names blanked out: groups failures by cause. */
export function signature(r: RunResult): string {
  let msg = r.failure!.message.split("\n")[0]!;
  const cut = msg.indexOf(" -- ");
  if (cut >= 0) msg = `${/retains/.test(msg) ? "agent retains commands" : "commands not terminal"}${msg.slice(cut)}`;
  return `[${r.failure!.oracle}] ${msg
    .replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, "<uuid>")
    .replace(/\b[0-9a-f]{8}\b/g, "<id>")
    .replace(/agent-\d+(~\w+)?(#\d+)?/g, "<agent>")
    .replace(/\d+/g, "N")
    .slice(0, 140)}`;
}
