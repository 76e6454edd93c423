// npm run bench:store: the server's two stores in one invocation, the embedded
// store (sql.js + journal, output in segment files) against PostgreSQL
// (`--store`, a throwaway cluster on loopback, test/support/pg-cluster.ts,
// `synchronous_commit` on, a fresh database per server), each figure beside a
// baseline taken in the same invocation. The daemons run as processes from the
// compiled tree, as bench.ts runs them (scripts/lib/bench-harness.ts):
//
//   ingest   64 MiB of log-like text, `cat` on an agent -> server, until the
//            command is terminal in the committed view  vs  the same bytes over
//            a bare `ws` loopback link
//   read     the same command read back once finished: `rvbox logs ID`
//            (FollowOutput) to a pipe, byte-exact (SHA-256)  vs  bare `ws`
//   true     `true` submitted and followed to its committed end, p50  vs
//            spawn(true) p50
//   fleet    commands/s, 2,000 x `true` over 200 agents (in-process agents in
//            --fleet-procs processes), 200 in flight  vs  bare spawn(true)/s
//
// Each round measures the baselines, then embedded, then PostgreSQL; with
// --rounds=N each figure is the median over rounds. Ratios: each store against
// the baseline, and PostgreSQL against embedded (rates: higher is better; the
// p50: lower is). CPU seconds of the server, and of PostgreSQL's processes,
// are printed with each figure: where the time goes.
//
// Flags: --quick (16 MiB, 30 trues, 20 agents / 200 commands)
//        --only=ingest,true,fleet (read comes with ingest)
//        --rounds=N  --fleet-procs=N  --tsx  --no-build (as bench.ts)
// Internal role: --fleet (the agents' processes).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { type PgCluster, startPgCluster } from "../test/support/pg-cluster.js";
import {
  bareWsSecs,
  buildDist,
  childPids,
  connected,
  cpuSecs,
  type Env,
  FLEET_LIMITS,
  flagValue,
  fleetRole,
  fleetRun,
  ingestRun,
  logLikeFile,
  MiB,
  makeEnv,
  pct,
  ROOT,
  sha256File,
  spawnTrueMs,
  spawnTrueRate,
  startAgent,
  startFleet,
  startServer,
  timedRun,
  trueLatencies,
} from "./lib/bench-harness.js";

const args = process.argv.slice(2);
const QUICK = args.includes("--quick");
const TSX = args.includes("--tsx");
const BIN = path.join(ROOT, TSX ? "bin/rvbox.js" : "dist/bin/rvbox.js");
const LOG_LEVEL = process.env.RVBOX_BENCH_LOG_LEVEL ?? "warn";
const ONLY = flagValue(args, "only")?.split(",");
const ROUNDS = Math.max(1, Number(flagValue(args, "rounds") ?? 1) || 1);
const FLEET_PROCS = Math.max(1, Number(flagValue(args, "fleet-procs") ?? 1) || 1);
const SIZE = QUICK ? 16 * MiB : 64 * MiB;
const TRUES = QUICK ? 30 : 200;
const AGENTS = QUICK ? 20 : 200;
const TOTAL = QUICK ? 200 : 2000;
const CONC = 200;
const SELF = path.join(ROOT, "scripts/bench-store-compare.ts");

type StoreName = "embedded" | "postgres";
const STORES: StoreName[] = ["embedded", "postgres"];
type Figure = "ingest" | "read" | "true" | "fleet";

/** One round's figures: MiB/s, ms (p50), commands/s; the baselines under "baseline". */
type Round = Record<Figure, Record<StoreName | "baseline", number>>;
const rounds: Round[] = [];

const only = (what: string) => !ONLY || ONLY.includes(what);

/** CPU seconds of the cluster's processes (postmaster, backends, walwriter, checkpointer …). */
function pgCpu(cluster: PgCluster): number {
  const p = cluster.pid();
  return [p, ...childPids(p)].reduce((a, x) => a + cpuSecs(x), 0);
}

interface Ctx {
  env: Env;
  cluster: PgCluster;
  file: string;
  fileSha: string;
  made: number;
}

/** A fresh store for one server: undefined (its own data directory) or a new database's URL. */
async function storeFor(ctx: Ctx, store: StoreName): Promise<string | undefined> {
  return store === "postgres" ? ctx.cluster.createDatabase(`bench_${++ctx.made}`) : undefined;
}

function cpuLine(srvCpu: number, pg: number, store: StoreName): string {
  return `server ${srvCpu.toFixed(1)} s CPU${store === "postgres" ? `, PostgreSQL ${pg.toFixed(1)} s CPU` : ""}`;
}

async function ingestAndRead(ctx: Ctx, store: StoreName, round: Round): Promise<void> {
  const name = `ingest-${store}-${ctx.made}`;
  const srv = await startServer(ctx.env, name, undefined, await storeFor(ctx, store));
  const agent = startAgent(ctx.env, srv.url, `${name}-agent`);
  try {
    await connected(srv.ctl, [`${name}-agent`]);
    const [c0, p0] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster)];
    const { secs, command } = await ingestRun(srv.ctl, `${name}-agent`, ctx.file);
    const [c1, p1] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster)];
    const mb = SIZE / MiB;
    round.ingest[store] = mb / secs;
    console.log(
      `  ingest ${store}: ${(mb / secs).toFixed(1)} MiB/s (${mb} MiB, ${secs.toFixed(2)} s; stored ${(Number(command.retainedOutputBytes) / MiB).toFixed(1)} MiB compressed; ${cpuLine(c1 - c0, p1 - p0, store)})`,
    );
    // Read back once finished, as an operator would: `rvbox logs ID` (the README's rvbox), to a pipe.
    const cliEnv = { ...process.env, RVBOX_SERVER: srv.controlUrl, RVBOX_TOKEN_FILE: path.join(ctx.env.dir, "operator-token"), RVBOX_PERSIST: "" };
    const r = await timedRun([path.join(ROOT, "bin/rvbox.js"), "logs", command.issueUuid], cliEnv);
    const [c2, p2] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster)];
    if (r.code !== 0 || r.sha !== ctx.fileSha)
      throw new Error(`read ${store}: rvbox logs exited ${r.code} with ${r.bytes} bytes not the file's (${r.stderr.slice(-500)})`);
    round.read[store] = mb / r.secs;
    console.log(`  read ${store}: ${(mb / r.secs).toFixed(1)} MiB/s (rvbox logs, byte-exact, ${r.secs.toFixed(2)} s; ${cpuLine(c2 - c1, p2 - p1, store)})`);
  } finally {
    agent.kill("SIGTERM");
    await srv.stop();
  }
}

async function latency(ctx: Ctx, store: StoreName, round: Round): Promise<void> {
  const name = `lat-${store}-${ctx.made}`;
  const srv = await startServer(ctx.env, name, undefined, await storeFor(ctx, store));
  const agent = startAgent(ctx.env, srv.url, `${name}-agent`);
  try {
    await connected(srv.ctl, [`${name}-agent`]);
    const [c0, p0] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster)];
    const lat = await trueLatencies(srv.ctl, `${name}-agent`, TRUES);
    const [c1, p1] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster)];
    round.true[store] = pct(lat, 0.5);
    console.log(
      `  true ${store}: p50 ${pct(lat, 0.5).toFixed(1)} ms p99 ${pct(lat, 0.99).toFixed(1)} ms (n=${TRUES}; ${cpuLine(c1 - c0, p1 - p0, store)} over ${TRUES + 10} commands)`,
    );
  } finally {
    agent.kill("SIGTERM");
    await srv.stop();
  }
}

async function fleet(ctx: Ctx, store: StoreName, round: Round): Promise<void> {
  const srv = await startServer(ctx.env, `fleet-${store}-${ctx.made}`, FLEET_LIMITS, await storeFor(ctx, store));
  const { procs, ids } = startFleet(ctx.env, srv.url, AGENTS, FLEET_PROCS, SELF);
  try {
    await connected(srv.ctl, ids);
    const fleetCpu = () => procs.reduce((a, f) => a + cpuSecs(f.pid!), 0);
    const [c0, p0, f0] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster), fleetCpu()];
    const { secs, failed } = await fleetRun(srv.ctl, ids, TOTAL, CONC);
    const [c1, p1, f1] = [cpuSecs(srv.proc.pid!), pgCpu(ctx.cluster), fleetCpu()];
    if (failed > 0) throw new Error(`fleet ${store}: ${failed} commands did not succeed`);
    round.fleet[store] = TOTAL / secs;
    console.log(
      `  fleet ${store}: ${(TOTAL / secs).toFixed(0)} commands/s (${TOTAL} x true over ${AGENTS} agents, ${CONC} in flight, ${secs.toFixed(1)} s; ${cpuLine(c1 - c0, p1 - p0, store)}, agents ${(f1 - f0).toFixed(1)} s CPU)`,
    );
  } finally {
    for (const p of procs) p.kill("SIGTERM");
    await Promise.all(procs.map((p) => new Promise((r) => (p.exitCode !== null ? r(null) : p.once("exit", r)))));
    await srv.stop();
  }
}

async function oneRound(ctx: Ctx): Promise<Round> {
  const blank = () => ({ baseline: Number.NaN, embedded: Number.NaN, postgres: Number.NaN });
  const round: Round = { ingest: blank(), read: blank(), true: blank(), fleet: blank() };
  if (only("ingest")) {
    const secs = await bareWsSecs(ctx.file, SIZE);
    round.ingest.baseline = round.read.baseline = SIZE / MiB / secs;
    console.log(`  baseline bare ws: ${(SIZE / MiB / secs).toFixed(1)} MiB/s (${secs.toFixed(2)} s)`);
    for (const s of STORES) await ingestAndRead(ctx, s, round);
  }
  if (only("true")) {
    round.true.baseline = pct(await spawnTrueMs(TRUES), 0.5);
    console.log(`  baseline spawn(true): p50 ${round.true.baseline.toFixed(1)} ms`);
    for (const s of STORES) await latency(ctx, s, round);
  }
  if (only("fleet")) {
    round.fleet.baseline = await spawnTrueRate(TOTAL, CONC);
    console.log(`  baseline bare spawn(true): ${round.fleet.baseline.toFixed(0)}/s at ${CONC} in flight`);
    for (const s of STORES) await fleet(ctx, s, round);
  }
  return round;
}

function table(): void {
  const med = (f: Figure, k: StoreName | "baseline") => {
    const xs = rounds.map((r) => r[f][k]).filter((x) => !Number.isNaN(x));
    return xs.length > 0 ? pct(xs, 0.5) : Number.NaN;
  };
  const rows: Array<[Figure, string, string, string]> = [
    ["ingest", `ingest MiB/s (${SIZE / MiB} MiB log text, durable)`, "bare ws", " (target ≥ 0.8×)"],
    ["read", "read-back MiB/s (`rvbox logs` of it, byte-exact)", "bare ws", ""],
    ["true", "`true` p50 ms (submit, follow to the end)", "spawn(true)", " (a time: lower is faster)"],
    ["fleet", `commands/s (${TOTAL} × true, ${AGENTS} agents, ${CONC} in flight)`, "bare spawn(true)", " (target ≥ 0.8×)"],
  ];
  const f = (x: number, d = 1) => (Number.isNaN(x) ? "–" : x.toFixed(d));
  console.log(
    `\n| figure${ROUNDS > 1 ? ` (median of ${ROUNDS} rounds)` : ""} | baseline | embedded | PostgreSQL | embedded / baseline | PostgreSQL / baseline | PostgreSQL / embedded |`,
  );
  console.log("|---|---|---|---|---|---|---|");
  for (const [fig, label, base, note] of rows) {
    const [b, e, p] = [med(fig, "baseline"), med(fig, "embedded"), med(fig, "postgres")];
    if ([b, e, p].every(Number.isNaN)) continue;
    console.log(`| ${label} | ${f(b)} (${base}) | ${f(e)} | ${f(p)} | ${f(e / b, 3)}× | ${f(p / b, 3)}× | ${f(p / e, 3)}×${note} |`);
  }
}

async function main(): Promise<void> {
  if (args[0] === "--fleet") return fleetRole(args[1]!, Number(args[2]), args[3]!, args[4]!, Number(args[5] ?? 0));
  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-store-"));
  const env = makeEnv(dir, BIN, LOG_LEVEL, () => randomBytes(16).toString("hex"));
  if (!TSX && !args.includes("--no-build")) buildDist();
  let cluster: PgCluster | undefined;
  try {
    cluster = await startPgCluster();
    const version = await import("pg").then(async ({ default: pg }) => {
      const c = new pg.Client({ connectionString: cluster!.url() });
      await c.connect();
      const r = await c.query<{ v: string; s: string }>("SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS s");
      await c.end();
      return `PostgreSQL ${r.rows[0]!.v} (synchronous_commit ${r.rows[0]!.s})`;
    });
    console.log(
      `rvbox bench:store${QUICK ? " (--quick)" : ""}: daemons from ${path.relative(ROOT, BIN)}, node ${process.version}, ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? "?"}), ${version} on loopback, load ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );
    const file = path.join(dir, "log.txt");
    await logLikeFile(file, SIZE);
    const ctx: Ctx = { env, cluster, file, fileSha: sha256File(file), made: 0 };
    for (let i = 0; i < ROUNDS; i++) {
      console.log(`round ${i + 1} of ${ROUNDS}:`);
      rounds.push(await oneRound(ctx));
    }
    table();
  } finally {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

void main();
