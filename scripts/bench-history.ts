// `npm run bench:history`: the server's command history at scale on the
// PostgreSQL store (issue 39, item 7 and its targets: RSS at 1,000,000
// finished commands within 1.2x of RSS at 1,000; GetCommand and a page of
// ListCommands p50 within 2x).
//
// How the history gets into the databases (scripts/lib/history-load.ts):
//   1. seed: a real server (ServerDaemon on the PostgreSQL store, in this
//      process) and 4 real agents run --seed=N real commands (a mix of
//      `true`, short output, a few KiB, stderr, failures), so every row is
//      one the server wrote;
//   2. bulk load: those rows are replicated into each measured database with
//      one COPY per table, decoded and re-encoded with value-codec.ts, each
//      copy with a new uuid, one of --clients=N client ids (round robin),
//      its own creation time (the history spread over the last 7 days,
//      ending an hour ago: creation order = `ord` order), every absolute
//      time of its command, event and output rows shifted alike, its request
//      hash recomputed and new request ids; typed columns from pg-schema.ts's
//      own extractors. Client rows (and their reconcile results) for the
//      client ids; the audit log as a server that took those submits keeps
//      it (the newest auditMax = 50,000 entries, the audit_dropped counter).
//      Secondary indexes are dropped for the load, made again by the
//      schema's own statements, then VACUUM ANALYZE. The cluster runs with
//      max_wal_size = 4GB (set for the load).
// Nothing else is in the databases: every command is finished, no agent is
// connected while measuring.
//
// Each database is then measured with a real server in a child process
// (`./bin/rvbox.js server --store URL`, the README's way: the project's Node
// with the daemons' flags, the sources through tsx), so the bench's own
// memory is not in the figures:
//   start      spawn -> the server's "listening" log line (store opened, rows
//              restored, ports bound)
//   RSS        VmRSS of that process once listening, and after a full GC
//              (NODE_OPTIONS --expose-gc and scripts/lib/gc-on-signal.mjs:
//              SIGUSR2), with V8's live heap then; peak = VmHWM
//   GetCommand p50/p90 of --calls=N calls on uuids spread over the history
//              (none held in memory: a restart holds no ended command)
//   list       p50/p90 of one page (100) of ListCommands for a random
//              client (`ls --client X`), and one page without a filter
// through the control API client (client/control-client.ts), after 20
// warm-up calls of each, the kinds interleaved call by call.
// The large database is measured again with prunedMax lowered to the small
// size (the ledger's share of RSS), and once with auto_explain on, whose
// plans of the store's own queries (load, readCommand, listCommands) are
// printed.
//
// Env: RVBOX_BENCH_NODE_ARGS (more Node flags for the servers), RVBOX_BENCH_VERBOSE=1 (their heap after GC).
// Flags: --quick (1,000 vs 30,000, one server run each, 50 calls: about a minute on a busy 2-core machine)
//        --sizes=SMALL,LARGE  --clients=N (200)  --calls=N (200)  --seed=N (320)
//        --repeat=N (3: server runs per configuration)  --no-explain  --keep (leave the cluster running, print its URL, wait for Ctrl-C)
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createControlClient, type ControlClient } from "../client/control-client.js";
import { isTerminal } from "../core/index.js";
import { type PgCluster, startPgCluster } from "../test/support/pg-cluster.js";
import { cleanupTemp } from "../test/shells/e2e/helpers.js";
import { type Loaded, readSeed, replicateHistory, seedHistory } from "./lib/history-load.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const args = process.argv.slice(2);
const QUICK = args.includes("--quick");
const flag = (name: string, dflt: string): string => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt;
const [SMALL, LARGE] = flag("sizes", QUICK ? "1000,30000" : "1000,1000000")
  .split(",")
  .map(Number) as [number, number];
const CLIENTS = Number(flag("clients", "200"));
const CALLS = Number(flag("calls", QUICK ? "50" : "200"));
const SEED = Number(flag("seed", QUICK ? "48" : "320"));
const EXPLAIN = !args.includes("--no-explain");
const REPEAT = Number(flag("repeat", QUICK ? "1" : "3"));
const WARMUP = 20;
const PAGE = 100;
const DAY = 86_400_000;

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
};
const mib = (kib: number): number => kib / 1024;

function procStatus(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)?.[1] ?? Number.NaN);
  return { rss: kib("VmRSS"), hwm: kib("VmHWM") };
}

interface Run {
  label: string;
  startMs: number;
  rssStart: number;
  rssGc: number;
  heapGc: number;
  externalGc: number;
  rssEnd: number;
  hwm: number;
  get: number[];
  listClient: number[];
  listAll: number[];
}

const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-history-"));
const token = `operator-${randomBytes(8).toString("hex")}`;
writeFileSync(path.join(dir, "agent-tokens"), `* fleet-${randomBytes(8).toString("hex")}\n`, { mode: 0o600 });
writeFileSync(path.join(dir, "operator-token"), `${token}\n`, { mode: 0o600 });

interface Child {
  proc: ChildProcess;
  control: string;
  startMs: number;
  lines: string[];
  /** The first line from now on that matches `re`. */
  next(re: RegExp, timeoutMs?: number): Promise<string>;
}

/** `./bin/rvbox.js server --store url` as a child; resolves once it logged "listening". */
async function startChild(url: string, limits: Record<string, number>): Promise<Child> {
  const config = path.join(dir, "config.json");
  writeFileSync(config, JSON.stringify({ limits }));
  const env = {
    ...process.env,
    // RVBOX_BENCH_NODE_ARGS: more Node flags for the server (e.g. --cpu-prof --cpu-prof-dir=DIR).
    NODE_OPTIONS: [process.env.NODE_OPTIONS, "--expose-gc", `--import=${path.join(ROOT, "scripts/lib/gc-on-signal.mjs")}`, process.env.RVBOX_BENCH_NODE_ARGS]
      .filter((x) => x)
      .join(" "),
  };
  const argv = ["server", "--store", url, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--data", path.join(dir, "data")];
  argv.push("--agent-tokens", path.join(dir, "agent-tokens"), "--operator-token", path.join(dir, "operator-token"), "--config", config, "--log-level", "info");
  const t0 = performance.now();
  const proc = spawn(path.join(ROOT, "bin/rvbox.js"), argv, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  const lines: string[] = [];
  const waiters: Array<{ re: RegExp; resolve: (l: string) => void }> = [];
  let exit: Error | null = null;
  let buf = "";
  const onData = (d: Buffer) => {
    buf += d.toString();
    for (let at = buf.indexOf("\n"); at >= 0; at = buf.indexOf("\n")) {
      const line = buf.slice(0, at);
      buf = buf.slice(at + 1);
      lines.push(line);
      for (const w of waiters.splice(0))
        if (w.re.test(line)) w.resolve(line);
        else waiters.push(w);
    }
  };
  proc.stdout!.on("data", onData);
  proc.stderr!.on("data", onData);
  proc.on("exit", (code) => {
    exit = new Error(`server exited ${code}:\n${lines.slice(-20).join("\n")}`);
  });
  const next = (re: RegExp, timeoutMs = 600_000): Promise<string> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(exit ?? new Error(`no line ${re} from the server in ${timeoutMs} ms`)), timeoutMs);
      const poll = setInterval(() => {
        if (exit) {
          clearInterval(poll);
          clearTimeout(timer);
          reject(exit);
        }
      }, 50);
      waiters.push({
        re,
        resolve: (l) => {
          clearInterval(poll);
          clearTimeout(timer);
          resolve(l);
        },
      });
    });
  const listening = await next(/ listening /);
  const startMs = performance.now() - t0;
  const port = /control="?[^"\s]*:(\d+)/.exec(listening)?.[1];
  if (!port) throw new Error(`no control port in: ${listening}`);
  return { proc, control: `http://127.0.0.1:${port}`, startMs, lines, next };
}

async function timed(xs: number[], f: () => Promise<void>): Promise<void> {
  const t = performance.now();
  await f();
  xs.push(performance.now() - t);
}

async function measure(label: string, url: string, loaded: Loaded, limits: Record<string, number> = {}, calls = CALLS): Promise<Run> {
  const child = await startChild(url, limits);
  const { proc } = child;
  const pid = proc.pid!;
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const rssStart = procStatus(pid).rss;
    const gcDone = child.next(/^gc-on-signal: done/, 60_000);
    proc.kill("SIGUSR2");
    const gcLine = await gcDone;
    if (process.env.RVBOX_BENCH_VERBOSE) console.log(`  ${label}: ${gcLine}`);
    await new Promise((r) => setTimeout(r, 200));
    const rssGc = procStatus(pid).rss;
    const heapGc = Number(/heapUsed=([\d.]+)/.exec(gcLine)?.[1]);
    const externalGc = Number(/external=([\d.]+)/.exec(gcLine)?.[1]);
    const client: ControlClient = createControlClient({ baseUrl: child.control, token });
    const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
    const run: Run = { label, startMs: child.startMs, rssStart, rssGc, heapGc, externalGc, rssEnd: 0, hwm: 0, get: [], listClient: [], listAll: [] };
    const one = async (record: boolean) => {
      const uuid = pick(loaded.sample);
      await timed(record ? run.get : [], async () => {
        const r = await client.getCommand({ issueUuid: uuid });
        if (r.command?.issueUuid !== uuid || !isTerminal(r.command.state)) throw new Error(`GetCommand ${uuid}: ${JSON.stringify(r.command?.state)}`);
      });
      const clientId = pick(loaded.clientIds);
      await timed(record ? run.listClient : [], async () => {
        const r = await client.listCommands({ clientId, pageSize: PAGE });
        if (
          r.commands.length !== Math.min(PAGE, Math.floor(loaded.rows.commands! / loaded.clientIds.length)) ||
          r.commands.some((c) => c.clientId !== clientId)
        )
          throw new Error(`ListCommands --client ${clientId}: ${r.commands.length} commands`);
      });
      await timed(record ? run.listAll : [], async () => {
        const r = await client.listCommands({ pageSize: PAGE });
        if (r.commands.length !== PAGE) throw new Error(`ListCommands: ${r.commands.length} commands`);
      });
    };
    for (let i = 0; i < WARMUP; i++) await one(false);
    for (let i = 0; i < calls; i++) await one(true);
    const end = procStatus(pid);
    run.rssEnd = end.rss;
    run.hwm = end.hwm;
    return run;
  } finally {
    const gone = new Promise((r) => proc.once("exit", r));
    proc.kill("SIGTERM");
    await gone;
  }
}

/** One more run of the large database with auto_explain on: the plans of the store's own queries, from the cluster's log. */
async function explain(cluster: PgCluster, url: string, loaded: Loaded): Promise<string[]> {
  const admin = cluster.url();
  const pg = (await import("pg")).default;
  const c = new pg.Client({ connectionString: admin });
  c.on("error", () => {});
  await c.connect();
  // ALTER SYSTEM checks the module's settings: the module must be loaded in this session.
  await c.query("LOAD 'auto_explain'");
  const set = async (on: boolean) => {
    for (const [k, v] of [
      ["session_preload_libraries", "'auto_explain'"],
      ["auto_explain.log_min_duration", "0"],
      ["auto_explain.log_analyze", "on"],
      ["auto_explain.log_buffers", "on"],
    ] as const)
      await c.query(on ? `ALTER SYSTEM SET ${k} = ${v}` : `ALTER SYSTEM RESET ${k}`);
    await c.query("SELECT pg_reload_conf()");
  };
  const log = path.join(cluster.dir, "log");
  const before = readFileSync(log, "utf8").length;
  await set(true);
  try {
    await measure("explain", url, loaded, {}, 3);
  } catch (err) {
    throw new Error(`${(err as Error).message}\ncluster log:\n${readFileSync(log, "utf8").slice(before).split("\n").slice(-40).join("\n")}`);
  } finally {
    await set(false);
    await c.end();
  }
  const text = readFileSync(log, "utf8").slice(before);
  const plans = text.split(/\n(?=\S+ \S+ \S+ \[\d+\] LOG: {2}duration: )/).filter((p) => / plan:/.test(p));
  const want = [
    /FROM commands WHERE NOT/,
    /SELECT key, row FROM (events|stdin_writes|retention_markers|scripts) x JOIN/,
    /o\.digest FROM output/,
    /FROM commands WHERE key = \$1/,
    /FROM commands WHERE client_id = ANY/,
    /SELECT row FROM commands\s+ORDER BY/,
  ];
  const out: string[] = [];
  for (const re of want) {
    const p = plans.find((x) => re.test(x));
    if (p) out.push(p.replace(/^\S+ \S+ \S+ \[\d+\] /, "").trimEnd());
  }
  return out;
}

const median = (xs: number[]): number => pct(xs, 0.5);

function combine(label: string, rs: Run[]): Run {
  const m = (k: "startMs" | "rssStart" | "rssGc" | "heapGc" | "externalGc" | "rssEnd" | "hwm") => median(rs.map((r) => r[k]));
  return {
    label,
    startMs: m("startMs"),
    rssStart: m("rssStart"),
    rssGc: m("rssGc"),
    heapGc: m("heapGc"),
    externalGc: m("externalGc"),
    rssEnd: m("rssEnd"),
    hwm: m("hwm"),
    get: rs.flatMap((r) => r.get),
    listClient: rs.flatMap((r) => r.listClient),
    listAll: rs.flatMap((r) => r.listAll),
  };
}

const f1 = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : "-");
const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}x`;

async function main(): Promise<void> {
  const t0 = performance.now();
  console.log(
    `bench:history${QUICK ? " --quick" : ""}: ${SMALL.toLocaleString("en")} vs ${LARGE.toLocaleString("en")} finished commands over ${CLIENTS} clients, ${CALLS} calls each; node ${process.version}, ${os.cpus().length} cpus, load ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}, ${new Date().toISOString()}`,
  );
  const cluster = await startPgCluster();
  try {
    const seedUrl = await cluster.createDatabase("seed");
    let t = performance.now();
    await seedHistory(seedUrl, SEED, 4);
    const seed = await readSeed(seedUrl);
    console.log(
      `seed: ${seed.templates.length} real commands on 4 agents through a real server (${((performance.now() - t) / 1000).toFixed(1)} s): ${seed.templates.reduce((n, x) => n + x.events.length, 0)} event rows, ${seed.templates.reduce((n, x) => n + x.output.length, 0)} output rows`,
    );
    const loaded = new Map<number, { url: string; loaded: Loaded }>();
    for (const n of [SMALL, LARGE]) {
      t = performance.now();
      const url = await cluster.createDatabase(`history_${n}`);
      const l = await replicateHistory(url, seed, { commands: n, clients: CLIENTS, spanMs: 7 * DAY, endsAgoMs: 3_600_000, sample: 1000 });
      const size = await dbSize(cluster, `history_${n}`);
      console.log(
        `loaded ${n.toLocaleString("en")}: ${Object.entries(l.rows)
          .map(([k, v]) => `${k} ${v.toLocaleString("en")}`)
          .join(", ")}; database ${size} (${((performance.now() - t) / 1000).toFixed(1)} s)`,
      );
      loaded.set(n, { url, loaded: l });
    }
    const small = loaded.get(SMALL)!;
    const large = loaded.get(LARGE)!;
    // Each configuration REPEAT times, round robin (a busy machine slows all alike); medians of the
    // memory and start-up figures, latency percentiles over every recorded call.
    const configs: Array<{ label: string; url: string; loaded: Loaded; limits: Record<string, number>; runs: Run[] }> = [
      { label: SMALL.toLocaleString("en"), url: small.url, loaded: small.loaded, limits: {}, runs: [] },
      { label: LARGE.toLocaleString("en"), url: large.url, loaded: large.loaded, limits: {}, runs: [] },
      { label: `${LARGE.toLocaleString("en")}, prunedMax ${SMALL}`, url: large.url, loaded: large.loaded, limits: { prunedMax: SMALL }, runs: [] },
    ];
    for (let r = 0; r < REPEAT; r++) for (const c of configs) c.runs.push(await measure(c.label, c.url, c.loaded, c.limits));
    const runs = configs.map((c) => combine(c.label, c.runs));
    const [s, l] = runs as [Run, Run];
    console.log(`\n${REPEAT} server runs per row (medians; latencies over all ${REPEAT} x ${CALLS} calls)`);
    console.log(
      "history                        start ms  RSS MiB  after GC (heap)   peak  after calls | GetCommand p50/p90 ms | list --client p50/p90 | list p50/p90",
    );
    for (const r of runs)
      console.log(
        `${r.label.padEnd(30)} ${r.startMs.toFixed(0).padStart(8)} ${mib(r.rssStart).toFixed(1).padStart(8)} ${mib(r.rssGc).toFixed(1).padStart(9)} (${f1(r.heapGc).padStart(5)}) ${mib(r.hwm).toFixed(0).padStart(6)} ${mib(r.rssEnd).toFixed(1).padStart(12)} | ${f1(pct(r.get, 0.5)).padStart(8)} / ${f1(pct(r.get, 0.9)).padEnd(10)} | ${f1(pct(r.listClient, 0.5)).padStart(8)} / ${f1(pct(r.listClient, 0.9)).padEnd(10)} | ${f1(pct(r.listAll, 0.5)).padStart(6)} / ${f1(pct(r.listAll, 0.9))}`,
      );
    for (const c of configs)
      console.log(
        `  ${c.label}: RSS after GC per run ${c.runs.map((x) => mib(x.rssGc).toFixed(1)).join(", ")} MiB; start ${c.runs.map((x) => x.startMs.toFixed(0)).join(", ")} ms`,
      );
    const target = (what: string, a: number, b: number, max: number) =>
      console.log(`  ${what.padEnd(36)} ${ratio(a, b).padStart(7)}  target <= ${max}x: ${a / b <= max ? "met" : "MISSED"}`);
    console.log(`\nratios ${l.label} / ${s.label}:`);
    target("RSS after start", l.rssStart, s.rssStart, 1.2);
    target("RSS after GC", l.rssGc, s.rssGc, 1.2);
    target("GetCommand p50", pct(l.get, 0.5), pct(s.get, 0.5), 2);
    target("ListCommands --client p50 (page 100)", pct(l.listClient, 0.5), pct(s.listClient, 0.5), 2);
    target("ListCommands p50 (page 100)", pct(l.listAll, 0.5), pct(s.listAll, 0.5), 2);
    console.log(`  ${"start-up".padEnd(36)} ${ratio(l.startMs, s.startMs).padStart(7)}`);
    const led = runs[2]!;
    console.log(
      `ledger: with prunedMax ${SMALL} the ${l.label} server's RSS after GC is ${mib(led.rssGc).toFixed(1)} MiB (${ratio(led.rssGc, s.rssGc)} of ${s.label}), heap ${f1(led.heapGc)} MiB: the ledger's ${Math.min(LARGE, 100_000).toLocaleString("en")} entries hold ${(mib(l.rssGc) - mib(led.rssGc)).toFixed(1)} MiB of RSS, ${f1(l.heapGc - led.heapGc)} MiB of heap`,
    );
    if (EXPLAIN) {
      console.log(`\nplans at ${LARGE.toLocaleString("en")} (auto_explain, the store's own statements):`);
      for (const p of await explain(cluster, large.url, large.loaded)) console.log(`${p}\n`);
    }
    console.log(`total ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    if (args.includes("--keep")) {
      console.log(`cluster kept: ${cluster.url()} (Ctrl-C to stop it)`);
      await new Promise((r) => process.once("SIGINT", r));
    }
  } finally {
    await cluster.stop();
    await cleanupTemp();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function dbSize(cluster: PgCluster, db: string): Promise<string> {
  const pg = (await import("pg")).default;
  const c = new pg.Client({ connectionString: cluster.url() });
  await c.connect();
  try {
    return (await c.query<{ s: string }>("SELECT pg_size_pretty(pg_database_size($1)) AS s", [db])).rows[0]!.s;
  } finally {
    await c.end();
  }
}

await main();
