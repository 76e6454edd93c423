// The control API under hostile operators and hostile input
// (`npm run fuzz:control -- --seconds N`): a real server on 127.0.0.1 with an
// operator identities file (admin carol; alice and dave, operators scoped to
// role=web; viewer bob) and two real agents (web-1 labelled role=web, db-1
// role=db). For N seconds hostile workers send a bounded mix of calls
// (scripts/lib/fuzz-hostile.ts, fuzz-streams.ts): argv/env just over and far
// over the agent's limits, ids of 1 KB..15 MB, malformed bodies, floods of
// refused calls, stream floods, two identities racing with one request_id,
// odd and non-UTF-8 strings. They run in a process of their own
// (scripts/lib/fuzz-hostile-main.ts), so the admin, who meanwhile keeps running
// `echo` on web-1 and checking it (scripts/lib/fuzz-operator.ts), measures the
// server's latency and not the fuzzer's own encoding of a 15 MB id.
//
// Then it prints calls sent by kind, answers by code, the well-behaved
// operator's iterations, failures and p50/max latency, the server's RSS
// before and after, crashes, whether the admin's accepted submits are all
// still in the audit log and whether every agent is connected and runs a
// command. Exit 1 on a crash, a well-behaved failure, a lost audit entry or an
// agent that no longer runs commands.
//
// Flags: --seconds N (60), --seed S (picks the hostile mix; default from the
// clock, printed), --json, --workers N (4 hostile workers), --max-calls N
// (hostile calls in all; default 400 per second), --audit-max N (the server's
// audit bound, 2000 so that floods of refusals reach it within a short run),
// --compiled (run dist/bin/rvbox.js, after `npm run build`, instead of
// bin/rvbox.js through tsx), --keep (keep the run directory), --only KIND,...
// (pick only these hostile kinds: oversized spec, oversized id, malformed
// body, refused flood, stream flood, request-id race, odd strings),
// --log-level LEVEL (the daemons'; their logs are in the run directory).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Fleet, IDENTITIES } from "./lib/fuzz-fleet.js";
import { HOSTILE_KINDS, type HostileKind } from "./lib/fuzz-hostile.js";
import { type HostileResult, type HostileSettings, RESULT_PREFIX } from "./lib/fuzz-hostile-main.js";
import { missingFromAudit, probeAgents, wellBehavedLoop, type WellBehaved } from "./lib/fuzz-operator.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const WEB = "web-1";
const OTHER = "db-1";

export interface FuzzOptions {
  seconds: number;
  seed: number;
  json: boolean;
  workers: number;
  maxCalls: number;
  auditMax: number;
  compiled: boolean;
  keep: boolean;
  /** The daemons' log level (their logs are in the run directory: --keep). */
  logLevel: string;
  /** The hostile kinds to pick from (all by default). */
  only: HostileKind[];
  /** A well-behaved iteration not done within this fails (and the loop goes on). */
  iterationTimeoutMs: number;
  /** The end-of-run probe of each agent gives up after this. */
  probeTimeoutMs: number;
  /** A hostile call not answered within this is given up (counted as DeadlineExceeded). */
  callTimeoutMs: number;
  /** Progress lines (stderr by default). */
  log: (line: string) => void;
}

export interface FuzzReport {
  seed: number;
  seconds: number;
  sent: Record<string, number>;
  sentTotal: number;
  codes: Record<string, number>;
  anomalies: Record<string, number>;
  anomalyNotes: string[];
  wellBehaved: { iterations: number; failures: string[]; p50Ms: number | null; maxMs: number | null };
  rssKiB: { before: number | null; after: number | null };
  /** The well-behaved operator's own event-loop delay during the run (its latency includes it; the hostile side runs in another process). */
  fuzzerLoopDelayMs: { p99: number; max: number };
  crashes: string[];
  audit: { adminAccepted: number; missing: string[]; dropped: number; full?: boolean; error?: string };
  agents: Record<string, string | null>;
  problems: string[];
}

export function defaultFuzzOptions(): FuzzOptions {
  return {
    seconds: 60,
    seed: Date.now() % 1_000_000,
    json: false,
    workers: 4,
    maxCalls: 0,
    auditMax: 2000,
    compiled: false,
    keep: false,
    logLevel: "warn",
    only: Object.keys(HOSTILE_KINDS) as HostileKind[],
    iterationTimeoutMs: 15_000,
    probeTimeoutMs: 15_000,
    callTimeoutMs: 30_000,
    log: (l) => void process.stderr.write(`${l}\n`),
  };
}

const USAGE =
  "usage: npm run fuzz:control -- [--seconds N] [--seed S] [--json] [--workers N] [--max-calls N] [--audit-max N] [--compiled] [--keep] [--only KIND,...] [--log-level LEVEL]";

function parseKinds(v: string | undefined): HostileKind[] {
  if (v === undefined) throw new Error("--only needs a value");
  const all = Object.keys(HOSTILE_KINDS);
  const kinds = v.split(",").map((k) => k.trim());
  const bad = kinds.find((k) => !all.includes(k));
  if (bad !== undefined) throw new Error(`--only: unknown kind ${JSON.stringify(bad)} (kinds: ${all.join(", ")})`);
  return kinds as HostileKind[];
}

export function parseFuzzArgs(argv: string[]): FuzzOptions {
  const o = defaultFuzzOptions();
  const ints: Record<string, [keyof FuzzOptions, number, number]> = {
    "--seconds": ["seconds", 1, 86_400],
    "--seed": ["seed", 0, 2 ** 32 - 1],
    "--workers": ["workers", 1, 64],
    "--max-calls": ["maxCalls", 1, 10_000_000],
    "--audit-max": ["auditMax", 1, 10_000_000],
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--json") o.json = true;
    else if (a === "--compiled") o.compiled = true;
    else if (a === "--keep") o.keep = true;
    else if (a === "--only") o.only = parseKinds(argv[++i]);
    else if (a === "--log-level") o.logLevel = argv[++i] ?? "warn";
    else if (a in ints) {
      const [key, lo, hi] = ints[a]!;
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      const n = Number(v);
      if (!Number.isInteger(n) || n < lo || n > hi) throw new Error(`${a} must be an integer from ${lo} to ${hi}, got ${JSON.stringify(v)}`);
      (o as unknown as Record<string, number>)[key] = n;
    } else throw new Error(`unknown flag ${JSON.stringify(a)}\n${USAGE}`);
  }
  return o;
}

const pct = (xs: number[], p: number): number | null => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};

interface Campaign {
  hostile: HostileResult | null;
  /** Why the hostile process gave no result. */
  hostileError?: string;
  wb: WellBehaved;
  delay: ReturnType<typeof monitorEventLoopDelay>;
}

/** The hostile process (scripts/lib/fuzz-hostile-main.ts) until it ends by itself; SIGKILL if it is still there well after its deadline. */
async function hostileProcess(s: HostileSettings): Promise<{ result: HostileResult | null; error?: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/lib/fuzz-hostile-main.ts")], {
    cwd: ROOT,
    env: { ...process.env, RVBOX_FUZZ_HOSTILE: JSON.stringify(s) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (err = (err + b.toString()).slice(-4000)));
  const late = setTimeout(() => child.kill("SIGKILL"), s.seconds * 1000 + s.callTimeoutMs + 30_000);
  const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
  clearTimeout(late);
  const line = out.split("\n").find((l) => l.startsWith(RESULT_PREFIX));
  if (!line) return { result: null, error: `exit ${code}, no result: ${err.slice(-1500)}` };
  return { result: JSON.parse(line.slice(RESULT_PREFIX.length)) as HostileResult };
}

/** The hostile process and the well-behaved operator, side by side until the deadline. */
async function campaign(fleet: Fleet, o: FuzzOptions, accepted: string[]): Promise<Campaign> {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const hostile = hostileProcess({
    controlUrl: fleet.controlUrl,
    tokens: fleet.tokens,
    web: WEB,
    other: OTHER,
    seed: o.seed,
    seconds: o.seconds,
    workers: o.workers,
    maxCalls: o.maxCalls || 400 * o.seconds,
    callTimeoutMs: o.callTimeoutMs,
    only: o.only,
  });
  const deadline = Date.now() + o.seconds * 1000;
  const wb = await wellBehavedLoop({ client: fleet.client("admin"), web: WEB, seed: o.seed, deadline, iterationTimeoutMs: o.iterationTimeoutMs, accepted });
  const h = await hostile;
  delay.disable();
  if (h.result) accepted.push(...h.result.adminAccepted);
  return { hostile: h.result, ...(h.error ? { hostileError: h.error } : {}), wb, delay };
}

async function checks(fleet: Fleet, o: FuzzOptions, r: FuzzReport, accepted: string[]): Promise<void> {
  for (const d of [fleet.server, ...fleet.agents]) if (!fleet.alive(d) && !fleet.crashes.some((c) => c.startsWith(d.name))) r.crashes.push(`${d.name} is gone`);
  r.crashes.push(...fleet.crashes);
  const admin = fleet.client("admin");
  r.agents = await probeAgents(admin, [WEB, OTHER], o.seed, o.probeTimeoutMs, accepted).catch((err) => ({
    all: `ListClients failed: ${(err as Error).message}`,
  }));
  try {
    const a = await missingFromAudit(admin, IDENTITIES.admin.name, accepted, o.auditMax);
    r.audit = { adminAccepted: accepted.length, ...a };
  } catch (err) {
    r.audit = { adminAccepted: accepted.length, missing: [], dropped: 0, error: (err as Error).message };
  }
  if (r.crashes.length > 0) r.problems.push(`${r.crashes.length} crash(es)`);
  if (r.wellBehaved.failures.length > 0) r.problems.push(`${r.wellBehaved.failures.length} well-behaved failure(s)`);
  if (r.audit.error) r.problems.push(`audit log unreadable: ${r.audit.error}`);
  // Missing entries are lost only if the log is not full of accepted entries, or more are missing than were dropped.
  const lost = r.audit.missing.length > 0 && (!r.audit.full || r.audit.missing.length > r.audit.dropped);
  if (lost) r.problems.push(`${r.audit.missing.length} admin call(s) missing from the audit log (not explained by newer accepted entries)`);
  for (const [id, why] of Object.entries(r.agents)) if (why !== null) r.problems.push(`agent ${id} does not run commands: ${why}`);
}

/** One fuzz run against a fleet it starts and stops itself; never throws for what it finds (see `problems`). */
export async function runFuzz(over: Partial<FuzzOptions> = {}): Promise<FuzzReport> {
  const o = { ...defaultFuzzOptions(), ...over };
  const entry = path.join(ROOT, o.compiled ? "dist/bin/rvbox.js" : "bin/rvbox.js");
  if (!existsSync(entry)) throw new Error(`${entry} does not exist: run npm run build (or drop --compiled)`);
  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-fuzz-"));
  const agents = [
    { id: WEB, labels: { role: "web" } },
    { id: OTHER, labels: { role: "db" } },
  ];
  const fleet = new Fleet({ dir, entry, agents, auditMax: o.auditMax, logLevel: o.logLevel });
  try {
    o.log(`fuzz:control: seed ${o.seed}, ${o.seconds} s, fleet in ${dir}`);
    await fleet.start();
    const before = fleet.serverRss();
    const accepted: string[] = [];
    const { hostile: h, hostileError, wb, delay } = await campaign(fleet, o, accepted);
    const r: FuzzReport = {
      seed: o.seed,
      seconds: o.seconds,
      sent: h?.sent ?? {},
      sentTotal: h?.total ?? 0,
      codes: h?.codes ?? {},
      anomalies: h?.anomalies ?? {},
      anomalyNotes: h?.anomalyNotes ?? [],
      wellBehaved: { iterations: wb.iterations, failures: wb.failures, p50Ms: pct(wb.latenciesMs, 0.5), maxMs: pct(wb.latenciesMs, 1) },
      rssKiB: { before, after: fleet.serverRss() },
      fuzzerLoopDelayMs: { p99: delay.percentile(99) / 1e6, max: delay.max / 1e6 },
      crashes: [],
      audit: { adminAccepted: 0, missing: [], dropped: 0 },
      agents: {},
      problems: hostileError ? [`the hostile process failed: ${hostileError}`] : [],
    };
    await checks(fleet, o, r, accepted);
    return r;
  } finally {
    await fleet.stop();
    if (!o.keep) rmSync(dir, { recursive: true, force: true });
  }
}

const ms = (x: number | null) => (x === null ? "-" : `${x.toFixed(1)} ms`);
const mib = (k: number | null) => (k === null ? "gone" : `${(k / 1024).toFixed(1)} MiB`);
const row = (a: string, b: string | number) => `  ${a.padEnd(40)} ${b}`;

export function formatReport(r: FuzzReport): string {
  const out = [`fuzz:control  seed ${r.seed}, ${r.seconds} s, ${r.sentTotal} hostile calls`, "calls sent by kind"];
  for (const [k, v] of Object.entries(r.sent)) out.push(row(k, v));
  out.push("answers by code");
  for (const [k, v] of Object.entries(r.codes)) out.push(row(k, v));
  const wb = r.wellBehaved;
  out.push("well-behaved operator (admin: echo on web-1, follow, ListCommands)");
  out.push(row("iterations / failures", `${wb.iterations} / ${wb.failures.length}`));
  out.push(row("latency p50 / max", `${ms(wb.p50Ms)} / ${ms(wb.maxMs)}`));
  for (const f of wb.failures.slice(0, 5)) out.push(`    failure: ${f}`);
  out.push(row("its own event-loop delay p99 / max", `${ms(r.fuzzerLoopDelayMs.p99)} / ${ms(r.fuzzerLoopDelayMs.max)}`));
  out.push(row("server RSS before / after", `${mib(r.rssKiB.before)} / ${mib(r.rssKiB.after)}`));
  out.push(row("crashes", r.crashes.length === 0 ? "none" : r.crashes.join("; ")));
  const au = r.audit;
  out.push(
    row(
      "admin submits in the audit log",
      au.error
        ? `unreadable: ${au.error}`
        : `${au.adminAccepted - au.missing.length} of ${au.adminAccepted} (${au.dropped} older entries dropped${au.full ? ", the log full of accepted entries" : ""})`,
    ),
  );
  for (const [id, why] of Object.entries(r.agents)) out.push(row(`agent ${id}`, why === null ? "connected, runs commands" : why));
  for (const [k, v] of Object.entries(r.anomalies)) out.push(row(`anomaly: ${k}`, v));
  for (const n of r.anomalyNotes.slice(0, 3)) out.push(`    ${n}`);
  out.push(r.problems.length === 0 ? "result: PASS" : `result: FAIL (${r.problems.join("; ")})`);
  return out.join("\n");
}

async function main(): Promise<void> {
  let o: FuzzOptions;
  try {
    o = parseFuzzArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`fuzz:control: ${(err as Error).message}\n`);
    process.exit(2);
  }
  let r: FuzzReport;
  try {
    r = await runFuzz(o);
  } catch (err) {
    process.stderr.write(`fuzz:control: run failed: ${(err as Error).message}\n`);
    process.exit(1);
  }
  process.stdout.write(`${o.json ? JSON.stringify(r, null, 2) : formatReport(r)}\n`);
  process.exit(r.problems.length === 0 ? 0 : 1);
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) void main();
