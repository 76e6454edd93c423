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
//   RSS        VmRSS of that process 1 s after "listening", after a full GC
//              (NODE_OPTIONS --expose-gc and scripts/lib/gc-on-signal.mjs:
//              SIGUSR2), after the calls, and settled: after --settle=S s
//              idle and another GC (V8 shrinks an idle heap on its own); V8's
//              heap used/committed then; peak = VmHWM
//   GetCommand p50/p90 of --calls=N calls on uuids spread over the history
//              (none held in memory: a restart holds no ended command)
//   list       p50/p90 of one page of ListCommands for a random client
//              (`ls --client X`): of 100, and of SMALL/clients (5: at the small
//              size a client has only that many, so its page of 100 holds 5
//              rows; this one is the same work at both sizes), and one page
//              (100) without a filter
// through the control API client (client/control-client.ts), after 20
// warm-up calls of each, the kinds interleaved call by call.
// The large database is measured again with prunedMax lowered to the small
// size (the ledger's share of RSS), once with auto_explain on, whose
// plans of the store's own queries (load, readCommand, listCommands) are
// printed, and last with its audit log trimmed to the small size's count
// as well (the audit log's share: it is restored whole).
//
// Env: RVBOX_BENCH_NODE_ARGS (more Node flags for the servers), RVBOX_BENCH_VERBOSE=1 (each server's heap after
// each GC, and its resident memory by kind of mapping: V8's 256 KiB pages, the brk heap, files).
// Flags: --quick (1,000 vs 30,000, one server run each, 50 calls: 25-60 s on this busy 2-core machine)
//        --sizes=SMALL,LARGE  --clients=N (200)  --calls=N (200)  --seed=N (320)
//        --repeat=N (3: server runs per configuration)  --settle=S (20; quick 0: idle seconds before the settled RSS)  --no-explain  --keep (leave the cluster running, print its URL, wait for Ctrl-C)
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createControlClient, type ControlClient } from "../client/control-client.js";
import { isTerminal } from "../core/index.js";
import { type PgCluster, startPgCluster } from "../test/support/pg-cluster.js";
import { cleanupTemp } from "../test/shells/e2e/helpers.js";
import { encodeValue } from "../shells/storage/value-codec.js";
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
/** A page as long as a client's history at the small size: the same rows at both sizes. */
const SMALL_PAGE = Math.max(1, Math.floor(SMALL / CLIENTS));
const SETTLE = Number(flag("settle", QUICK ? "0" : "20"));
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

/** Latency samples (ms) of one kind of call. */
const KINDS = ["get", "listClient", "listClientSmall", "listAll"] as const;
type Kind = (typeof KINDS)[number];

interface Run {
  label: string;
  startMs: number;
  /** KiB: VmRSS 1 s after "listening"; after a GC; after the calls; after SETTLE s idle and a GC; VmHWM. */
  rssStart: number;
  rssGc: number;
  rssEnd: number;
  rssSettled: number;
  hwm: number;
  /** MiB of V8's heap after the GCs: used, and committed (heapTotal). */
  heapGc: number;
  heapTotalGc: number;
  heapSettled: number;
  heapTotalSettled: number;
  ms: Record<Kind, number[]>;
}

const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-history-"));
const token = `operator-${randomBytes(8).toString("hex")}`;
writeFileSync(path.join(dir, "agent-tokens"), `* fleet-${randomBytes(8).toString("hex")}\n`, { mode: 0o600 });
writeFileSync(path.join(dir, "operator-token"), `${token}\n`, { mode: 0o600 });

/** The process's resident memory by kind of mapping (/proc/PID/smaps): the brk heap (glibc's main arena), anonymous mappings by size, files. */
function smapsSummary(pid: number): string {
  const sums = new Map<string, number>();
  let kind = "";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const kib = (Number.parseInt(head[2]!, 16) - Number.parseInt(head[1]!, 16)) / 1024;
      const name = head[4]!;
      kind =
        name === "[heap]"
          ? "brk heap"
          : name.startsWith("/")
            ? "files"
            : name.startsWith("[")
              ? name
              : `anon ${kib >= 1024 ? ">= 1 MiB" : `${kib} KiB ${head[3]}`}`;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) sums.set(kind, (sums.get(kind) ?? 0) + Number(rss[1]));
  }
  return [...sums]
    .filter(([, v]) => v >= 512)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${(v / 1024).toFixed(1)}`)
    .join(", ");
}

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

/** A full GC in the server (SIGUSR2, gc-on-signal.mjs); its heap figures (MiB) and the process's VmRSS (KiB) after it. */
async function gcNow(child: Child, label: string): Promise<{ rss: number; heap: number; heapTotal: number }> {
  const done = child.next(/^gc-on-signal: done/, 60_000);
  child.proc.kill("SIGUSR2");
  const line = await done;
  if (process.env.RVBOX_BENCH_VERBOSE) console.log(`  ${label}: ${line}`);
  await new Promise((r) => setTimeout(r, 200));
  const num = (k: string) => Number(new RegExp(`${k}=([\\d.]+)`).exec(line)?.[1]);
  return { rss: procStatus(child.proc.pid!).rss, heap: num("heapUsed"), heapTotal: num("heapTotal") };
}

async function measure(label: string, url: string, loaded: Loaded, limits: Record<string, number> = {}, calls = CALLS, settle = SETTLE): Promise<Run> {
  const child = await startChild(url, limits);
  const { proc } = child;
  const pid = proc.pid!;
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const rssStart = procStatus(pid).rss;
    const gc = await gcNow(child, label);
    const client: ControlClient = createControlClient({ baseUrl: child.control, token });
    const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
    const ms: Record<Kind, number[]> = { get: [], listClient: [], listClientSmall: [], listAll: [] };
    const perClient = Math.floor(loaded.rows.commands! / loaded.clientIds.length);
    const one = async (record: boolean) => {
      const into = (k: Kind) => (record ? ms[k] : []);
      const uuid = pick(loaded.sample);
      await timed(into("get"), async () => {
        const r = await client.getCommand({ issueUuid: uuid });
        if (r.command?.issueUuid !== uuid || !isTerminal(r.command.state)) throw new Error(`GetCommand ${uuid}: ${JSON.stringify(r.command?.state)}`);
      });
      for (const [k, size] of [
        ["listClient", PAGE],
        ["listClientSmall", SMALL_PAGE],
      ] as const) {
        const clientId = pick(loaded.clientIds);
        await timed(into(k), async () => {
          const r = await client.listCommands({ clientId, pageSize: size });
          if (r.commands.length !== Math.min(size, perClient) || r.commands.some((c) => c.clientId !== clientId))
            throw new Error(`ListCommands --client ${clientId}: ${r.commands.length} commands`);
        });
      }
      await timed(into("listAll"), async () => {
        const r = await client.listCommands({ pageSize: PAGE });
        if (r.commands.length !== PAGE) throw new Error(`ListCommands: ${r.commands.length} commands`);
      });
    };
    for (let i = 0; i < WARMUP; i++) await one(false);
    for (let i = 0; i < calls; i++) await one(true);
    const rssEnd = procStatus(pid).rss;
    // A server runs for days: its memory once the start's garbage is gone (V8 shrinks an idle heap on its own).
    if (settle > 0) await new Promise((r) => setTimeout(r, settle * 1000));
    const settled = settle > 0 ? await gcNow(child, `${label}, settled`) : gc;
    if (process.env.RVBOX_BENCH_VERBOSE) console.log(`  ${label}: resident by mapping kind (MiB): ${smapsSummary(pid)}`);
    return {
      label,
      startMs: child.startMs,
      rssStart,
      rssGc: gc.rss,
      rssEnd,
      rssSettled: settled.rss,
      hwm: procStatus(pid).hwm,
      heapGc: gc.heap,
      heapTotalGc: gc.heapTotal,
      heapSettled: settled.heap,
      heapTotalSettled: settled.heapTotal,
      ms,
    };
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
    await measure("explain", url, loaded, {}, 3, 0);
  } catch (err) {
    throw new Error(`${(err as Error).message}\ncluster log:\n${readFileSync(log, "utf8").slice(before).split("\n").slice(-40).join("\n")}`);
  } finally {
    await set(false);
    await c.end();
  }
  const text = readFileSync(log, "utf8").slice(before);
  const plans = text.split(/\n(?=\S+ \S+ \S+ \[\d+\] LOG: {2}duration: )/).filter((p) => / plan:/.test(p));
  const want = [
    /FROM commands WHERE NOT \(state = ANY/,
    /DECLARE ledger/,
    /CROSS JOIN LATERAL\s+\(SELECT key, row, ord FROM events/,
    /SELECT uuid, seq, digest FROM output/,
    /FROM commands WHERE key = \$1/,
    /FROM commands WHERE client_id = \$1\s+ORDER BY/,
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
  const m = (k: Exclude<keyof Run, "label" | "ms">) => median(rs.map((r) => r[k]));
  return {
    label,
    startMs: m("startMs"),
    rssStart: m("rssStart"),
    rssGc: m("rssGc"),
    rssEnd: m("rssEnd"),
    rssSettled: m("rssSettled"),
    hwm: m("hwm"),
    heapGc: m("heapGc"),
    heapTotalGc: m("heapTotalGc"),
    heapSettled: m("heapSettled"),
    heapTotalSettled: m("heapTotalSettled"),
    ms: Object.fromEntries(KINDS.map((k) => [k, rs.flatMap((r) => r.ms[k])])) as Record<Kind, number[]>,
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
    const [s, l, led] = runs as [Run, Run, Run];
    const lat = (r: Run, k: Kind) => `${f1(pct(r.ms[k], 0.5))} / ${f1(pct(r.ms[k], 0.9))}`;
    console.log(`\n${REPEAT} server run(s) per row: medians of the memory and start figures, latency percentiles over all ${REPEAT} x ${CALLS} calls`);
    console.log(
      `${"history".padEnd(24)} ${"start s".padStart(7)} | RSS MiB: start  GC  (heap used/committed)  calls  settled ${SETTLE} s (heap) peak | p50 / p90 ms: GetCommand | ls --client, page ${PAGE} | page ${SMALL_PAGE} | ls, page ${PAGE}`,
    );
    for (const r of runs)
      console.log(
        `${r.label.padEnd(24)} ${(r.startMs / 1000).toFixed(2).padStart(7)} | ${mib(r.rssStart).toFixed(0).padStart(5)} ${mib(r.rssGc).toFixed(0).padStart(4)} (${f1(r.heapGc)}/${f1(r.heapTotalGc)}) ${mib(r.rssEnd).toFixed(0).padStart(5)} ${mib(r.rssSettled).toFixed(0).padStart(5)} (${f1(r.heapSettled)}/${f1(r.heapTotalSettled)}) ${mib(r.hwm).toFixed(0).padStart(5)} | ${lat(r, "get")} | ${lat(r, "listClient")} | ${lat(r, "listClientSmall")} | ${lat(r, "listAll")}`,
      );
    for (const c of configs)
      console.log(
        `  ${c.label}: per run RSS after GC ${c.runs.map((x) => mib(x.rssGc).toFixed(0)).join(", ")} MiB, settled ${c.runs.map((x) => mib(x.rssSettled).toFixed(0)).join(", ")} MiB; start ${c.runs.map((x) => (x.startMs / 1000).toFixed(2)).join(", ")} s`,
      );
    const target = (what: string, a: number, b: number, max?: number) =>
      console.log(`  ${what.padEnd(44)} ${ratio(a, b).padStart(7)}${max === undefined ? "" : `  target <= ${max}x: ${a / b <= max ? "met" : "MISSED"}`}`);
    console.log(`\nratios ${l.label} / ${s.label}:`);
    target("RSS 1 s after start", l.rssStart, s.rssStart, 1.2);
    target("RSS after a GC", l.rssGc, s.rssGc, 1.2);
    target(`RSS settled (${SETTLE} s idle, GC)`, l.rssSettled, s.rssSettled, 1.2);
    target("GetCommand p50", pct(l.ms.get, 0.5), pct(s.ms.get, 0.5), 2);
    target(`ListCommands --client p50, page ${PAGE}`, pct(l.ms.listClient, 0.5), pct(s.ms.listClient, 0.5), 2);
    target(`ListCommands --client p50, page ${SMALL_PAGE}`, pct(l.ms.listClientSmall, 0.5), pct(s.ms.listClientSmall, 0.5), 2);
    target(`ListCommands p50, page ${PAGE}`, pct(l.ms.listAll, 0.5), pct(s.ms.listAll, 0.5), 2);
    target("start-up", l.startMs, s.startMs);
    console.log(
      `  (at ${s.label} a client has ${Math.floor(SMALL / CLIENTS)} commands: its page of ${PAGE} holds ${Math.min(PAGE, Math.floor(SMALL / CLIENTS))} rows, at ${l.label} ${Math.min(PAGE, Math.floor(LARGE / CLIENTS))}; the page of ${SMALL_PAGE} is the same work at both sizes)`,
    );
    const ledgerEntries = Math.min(LARGE, 100_000) - SMALL;
    console.log(
      `ledger: with prunedMax ${SMALL} the ${l.label} server's RSS after GC is ${mib(led.rssGc).toFixed(0)} MiB, settled ${mib(led.rssSettled).toFixed(0)} MiB (${ratio(led.rssSettled, s.rssSettled)} of ${s.label}); the ledger's ${ledgerEntries.toLocaleString("en")} more entries hold ${(mib(l.rssGc) - mib(led.rssGc)).toFixed(0)} MiB of RSS after GC, ${(mib(l.rssSettled) - mib(led.rssSettled)).toFixed(0)} settled, ${f1(l.heapSettled - led.heapSettled)} MiB of live heap (${(((l.heapSettled - led.heapSettled) * 1048576) / ledgerEntries).toFixed(0)} bytes an entry)`,
    );
    if (EXPLAIN) {
      console.log(`\nplans at ${LARGE.toLocaleString("en")} (auto_explain, the store's own statements):`);
      for (const p of await explain(cluster, large.url, large.loaded)) console.log(`${p}\n`);
    }
    // What is left once the ledger is as small as at the small size: the audit log, restored whole (the
    // newest auditMax = 50,000 entries a server that took the submits keeps). Trimmed here to the small
    // size's count (as a server with that many submits keeps it), the large database is measured once more.
    if (LARGE > SMALL) {
      const pg = (await import("pg")).default;
      const c = new pg.Client({ connectionString: large.url });
      await c.connect();
      const cut = LARGE - SMALL;
      await c.query("DELETE FROM audit WHERE seq <= $1", [cut]);
      await c.query("UPDATE counters SET row = $1 WHERE key = 'audit_dropped'", [encodeValue({ count: cut, throughSeq: cut })]);
      await c.query("VACUUM ANALYZE audit");
      await c.end();
      const a = await measure(`${LARGE.toLocaleString("en")}, prunedMax ${SMALL}, audit ${SMALL}`, large.url, large.loaded, { prunedMax: SMALL });
      console.log(
        `audit: with the audit log trimmed to ${SMALL.toLocaleString("en")} entries as well, RSS after GC ${mib(a.rssGc).toFixed(0)} MiB, settled ${mib(a.rssSettled).toFixed(0)} MiB (${ratio(a.rssSettled, s.rssSettled)} of ${s.label}), live heap ${f1(a.heapSettled)} MiB (${s.label}: ${f1(s.heapSettled)}); start ${(a.startMs / 1000).toFixed(2)} s; so the audit log's ${(Math.min(LARGE, 50_000) - SMALL).toLocaleString("en")} more entries held ${(mib(led.rssSettled) - mib(a.rssSettled)).toFixed(0)} MiB of RSS settled, ${f1(led.heapSettled - a.heapSettled)} MiB of live heap`,
      );
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
