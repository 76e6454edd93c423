// npm run bench: RVBox's shells measured against plain baselines, each in the
// same invocation. Every daemon runs as its own process from the compiled
// tree (`npm run build`, then `node dist/bin/rvbox.js`), as the systemd units
// deploy it; the bench process is the operator (control API client).
//
//   throughput   64 MiB of log-like text from `cat` on an agent to durable
//                server storage  vs  the same bytes over a bare `ws` loopback link
//   latency      `true` through the control API to its committed terminal
//                state, p50/p99  vs  child_process spawn of `true`
//   fleet        commands/s across 200 agents  vs  bare spawns/s of `true`
//   backlog      `true` on one agent while 5,000 commands wait on the server for another,
//                full agent  vs  the same latency before the backlog (same server)
//   sessions     server RSS with 2,000 idle registered agent sessions
//   retention    server RSS before/after retaining 1 GiB of output
//   ssh          through the README's `rvbox` CLI (bin/rvbox.js) against `ssh` to a
//                throwaway loopback sshd (scripts/lib/sshd.ts), same invocation:
//                (a) 64 MiB of log text to the operator's stdout, live (`run --follow -- cat`)
//                (b) the same read back once finished (`logs ID`), both byte-exact (SHA-256)
//                (c) `run --follow -- true` from the shell to exit  vs  `ssh host true`
//                (d) `run -i --follow -- sha256sum < file`  vs  `ssh host sha256sum < file`
//   soak         (only with --only=soak) both daemons' RSS over many short commands
//
// Flags: --only=a,b  --quick (smaller sizes, for a smoke run)
//        --tsx (run the daemons from source through the tsx loader instead of dist/)
//        --no-build (use dist/ as it is, e.g. after instrumenting it by hand)
//        --repeat=N (throughput and latency N times each, then the median ratio)
//        --fleet-procs=N (the fleet's 200 agents in N processes instead of one)
//        --soak=N (commands for the soak; default 20,000), --soak-budget=MiB (the
//        server's metadata tier for the soak; default the product's 64 MiB),
//        --soak-pruned=N (its pruned-ledger bound; default 100,000)
// Internal roles (spawned by the bench itself): --fleet, --idle.
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { CommandLifecycle } from "../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../core/index.js";
import {
  bareWsSecs,
  buildDist,
  child,
  childPids,
  connected,
  cpuSecs,
  diskWriteBytes,
  type Env,
  FLEET_LIMITS,
  fleetRole,
  fleetRun,
  ingestRun,
  logLikeFile,
  MiB,
  makeEnv,
  peakRssKiB,
  pct,
  ROOT,
  rssKiB,
  settle,
  sha256File,
  sleep,
  spawnTrueMs,
  spawnTrueRate,
  startAgent,
  startFleet,
  startServer,
  timedRun,
  trueLatencies,
  waitFor,
} from "./lib/bench-harness.js";
import { ensureCliSnapshot } from "./lib/cli-snapshot.js";
import { startSshd } from "./lib/sshd.js";

const args = process.argv.slice(2);
/** The daemons' entry: the compiled tree (built at the start of main), or the tsx shim with --tsx. */
const TSX = args.includes("--tsx");
/** --repeat=N: run throughput and latency N times each and print the median ratio. */
const REPEAT = Math.max(1, Number(args.find((a) => a.startsWith("--repeat="))?.slice(9) ?? 1) || 1);
const BIN = path.join(ROOT, TSX ? "bin/rvbox.js" : "dist/bin/rvbox.js");
const QUICK = args.includes("--quick");
// RVBOX_BENCH_LOG_LEVEL=debug with RVBOX_BENCH_LOGS=DIR keeps a timestamped trace of every step;
// RVBOX_BENCH_PROF=DIR writes a V8 CPU profile of each daemon there; RVBOX_BENCH_NODE_ARGS adds
// Node/V8 flags to the daemons (e.g. --trace-gc).
const LOG_LEVEL = process.env.RVBOX_BENCH_LOG_LEVEL ?? "warn";
const ONLY = args
  .find((a) => a.startsWith("--only="))
  ?.slice(7)
  .split(",");
/** --fleet-procs=N: how many processes the fleet bench's agents share (default 1). */
const FLEET_PROCS = Math.max(1, Number(args.find((a) => a.startsWith("--fleet-procs="))?.slice(14) ?? 1) || 1);

const results: string[] = [];
function report(line: string): void {
  results.push(line);
  console.log(line);
}

// ------------------------------------------------------------------ benches

async function benchThroughput(env: Env): Promise<void> {
  const size = QUICK ? 16 * MiB : 64 * MiB;
  const file = path.join(env.dir, "log.txt");
  await logLikeFile(file, size);
  // Baseline: the same bytes from `cat` over a bare ws loopback link (one process, no storage).
  const base = await bareWsSecs(file, size);
  // RVBox: server and agent as processes; until the command is terminal in the committed (durable) view.
  const srv = await startServer(env, "tp");
  const agent = startAgent(env, srv.url, "tp-agent");
  await connected(srv.ctl, ["tp-agent"]);
  const { secs: rv, command: c } = await ingestRun(srv.ctl, "tp-agent", file);
  const stored = Number(c.retainedOutputBytes);
  // The agent's children: its spawn helper (shells/exec/spawn-helper.ts), which reads the
  // command's pipes and relays the output to the agent over IPC.
  const helpers = childPids(agent.pid!).reduce((a, p) => a + cpuSecs(p), 0);
  const cpu = `server ${cpuSecs(srv.proc.pid!).toFixed(1)} s CPU, agent ${cpuSecs(agent.pid!).toFixed(1)} s CPU + its spawn helper ${helpers.toFixed(1)} s`;
  agent.kill("SIGTERM");
  await srv.stop();
  const mb = size / MiB;
  report(
    `throughput: rvbox ${(mb / rv).toFixed(1)} MiB/s (${mb} MiB log-like text, cat -> agent -> server, durable; ${rv.toFixed(2)} s; stored ${(stored / MiB).toFixed(1)} MiB compressed; ${cpu}) | baseline bare ws ${(mb / base).toFixed(1)} MiB/s (${base.toFixed(2)} s) | ratio ${(base / rv).toFixed(3)}x`,
  );
}

async function benchLatency(env: Env): Promise<void> {
  const n = QUICK ? 30 : 200;
  const base = await spawnTrueMs(n);
  const srv = await startServer(env, "lat");
  const agent = startAgent(env, srv.url, "lat-agent");
  await connected(srv.ctl, ["lat-agent"]);
  const lat = await trueLatencies(srv.ctl, "lat-agent", n);
  // spawn() forks the agent: its cost grows with the agent's resident memory (npm run bench:spawn).
  const agentRss = rssKiB(agent.pid!) / 1024;
  agent.kill("SIGTERM");
  await srv.stop();
  report(
    `latency: rvbox submit->terminal p50 ${pct(lat, 0.5).toFixed(1)} ms p99 ${pct(lat, 0.99).toFixed(1)} ms (n=${n}; agent RSS ${agentRss.toFixed(0)} MiB) | baseline spawn(true) p50 ${pct(base, 0.5).toFixed(1)} ms p99 ${pct(base, 0.99).toFixed(1)} ms | p50 ratio ${(pct(lat, 0.5) / pct(base, 0.5)).toFixed(1)}x`,
  );
}

async function benchFleet(env: Env): Promise<void> {
  const agents = QUICK ? 20 : 200;
  const total = QUICK ? 200 : 2000;
  const conc = 200;
  // Baseline: bare spawns of `true`, same concurrency.
  const baseRate = await spawnTrueRate(total, conc);
  const srv = await startServer(env, "fleet", FLEET_LIMITS);
  // The agents share FLEET_PROCS processes (--fleet-procs=N, default 1): every spawn() forks its
  // whole process, so one process holding all 200 agents pays for all of their memory per spawn.
  const { procs: fleets, ids } = startFleet(env, srv.url, agents, FLEET_PROCS, path.join(ROOT, "scripts/bench.ts"));
  try {
    await connected(srv.ctl, ids);
    const srvCpu0 = cpuSecs(srv.proc.pid!);
    const fleetsCpu = (): number => fleets.reduce((a, f) => a + cpuSecs(f.pid!), 0);
    const fleetRss = (): number => fleets.reduce((a, f) => a + rssKiB(f.pid!), 0) / 1024;
    const fleetCpu0 = fleetsCpu();
    const { secs, failed } = await fleetRun(srv.ctl, ids, total, conc);
    const cpu = `server ${(cpuSecs(srv.proc.pid!) - srvCpu0).toFixed(1)} s CPU, agents' ${fleets.length === 1 ? "process" : `${fleets.length} processes`} ${(fleetsCpu() - fleetCpu0).toFixed(1)} s CPU, ${fleetRss().toFixed(0)} MiB RSS`;
    report(
      `fleet: rvbox ${(total / secs).toFixed(0)} commands/s (${total} x true over ${agents} agents, ${conc} in flight, ${failed} not succeeded, ${secs.toFixed(1)} s; ${cpu}) | baseline bare spawn(true) ${baseRate.toFixed(0)}/s at ${conc} in flight`,
    );
  } finally {
    // Also when the run fails: the agents' processes and the server would outlive the bench.
    for (const f of fleets) f.kill("SIGTERM");
    await srv.stop();
  }
}

/**
 * A backlog: thousands of commands queued on the server for one agent that has
 * no room for them (each of its 16 running slots and 64 queue places is taken by a
 * command that waits for a stop file), against the latency of `true` on a second
 * agent of the same server, measured before the backlog and again with it in place.
 * The server parks a queued command its agent has no room for (core/server/active.ts),
 * so the backlog should cost the other agent nothing and the idle server no CPU.
 */
async function benchBacklog(env: Env): Promise<void> {
  const backlog = QUICK ? 500 : 5000;
  const n = QUICK ? 30 : 200;
  const stopFile = path.join(env.dir, "backlog-stop");
  const srv = await startServer(env, "backlog");
  const busy = startAgent(env, srv.url, "busy");
  const other = startAgent(env, srv.url, "other");
  await connected(srv.ctl, ["busy", "other"]);
  try {
    const base = await trueLatencies(srv.ctl, "other", n);
    const rss0 = rssKiB(srv.proc.pid!);
    const wait = ["sh", "-c", `while [ ! -e '${stopFile}' ]; do sleep 0.2; done`];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: 50 }, async () => {
        while (next++ < backlog) await srv.ctl.submitCommand({ clientId: "busy", program: { case: "argv", value: { argv: wait } } });
      }),
    );
    const submitSecs = (performance.now() - t0) / 1000;
    const running = await waitFor("the busy agent full", async () => {
      const cs = (await srv.ctl.listCommands({ clientId: "busy", states: [CommandLifecycle.RUNNING] })).commands;
      return cs.length >= 16 ? cs.length : undefined;
    });
    await sleep(1000);
    const cpu0 = cpuSecs(srv.proc.pid!);
    await sleep(5000);
    const idleCpu = cpuSecs(srv.proc.pid!) - cpu0;
    const withBacklog = await trueLatencies(srv.ctl, "other", n);
    const rss1 = rssKiB(srv.proc.pid!);
    const queued = (await srv.ctl.listCommands({ clientId: "busy", states: [CommandLifecycle.QUEUED], pageSize: 10_000 })).commands.length;
    report(
      `backlog: \`true\` on a second agent with ${queued} commands queued on the server for a full agent (${running} running there) p50 ${pct(withBacklog, 0.5).toFixed(1)} ms p99 ${pct(withBacklog, 0.99).toFixed(1)} ms (n=${n}; ${backlog} submitted at ${(backlog / submitSecs).toFixed(0)}/s; server ${idleCpu.toFixed(2)} s CPU over 5 s idle, RSS ${(rss0 / 1024).toFixed(0)} -> ${(rss1 / 1024).toFixed(0)} MiB) | baseline the same before the backlog p50 ${pct(base, 0.5).toFixed(1)} ms p99 ${pct(base, 0.99).toFixed(1)} ms | p50 ratio ${(pct(withBacklog, 0.5) / pct(base, 0.5)).toFixed(2)}x`,
    );
  } finally {
    busy.kill("SIGTERM");
    other.kill("SIGTERM");
    await srv.stop();
    // The agent's commands outlive it by design: the stop file ends the ones that run.
    writeFileSync(stopFile, "");
    await sleep(500);
  }
}

async function benchSessions(env: Env): Promise<void> {
  const n = QUICK ? 200 : 2000;
  const srv = await startServer(env, "idle");
  await sleep(1500);
  const before = rssKiB(srv.proc.pid!);
  const idle = child(["--import", "tsx", path.join(ROOT, "scripts/bench.ts"), "--idle", srv.url, String(n), env.fleet], "idle sessions");
  await waitFor(`${n} sessions ready`, async () => (await srv.ctl.listSessions({})).sessions.filter((s) => s.phase === "ready").length >= n, 300_000, 500);
  await sleep(5000);
  const after = rssKiB(srv.proc.pid!);
  idle.kill("SIGTERM");
  await srv.stop();
  report(
    `sessions: server RSS ${(before / 1024).toFixed(1)} MiB idle with 0 sessions -> ${(after / 1024).toFixed(1)} MiB with ${n} registered idle sessions | ${(((after - before) * 1024) / n / 1024).toFixed(1)} KiB per session (target <= 64 KiB)`,
  );
}

async function benchRetention(env: Env): Promise<void> {
  const per = QUICK ? 32 * MiB : 256 * MiB;
  const steps = 4;
  const srv = await startServer(env, "ret");
  const agent = startAgent(env, srv.url, "ret-agent");
  await connected(srv.ctl, ["ret-agent"]);
  // Warm-up: one command as large as each measured one, so the first point already has the
  // streaming path's buffers, JIT code and a heap sized for a command of this size (a 64 MiB
  // warm-up left a one-time step of ~35 MiB at the first 256 MiB command, then no trend).
  const warm = per;
  const r0 = await srv.ctl.submitCommand({ clientId: "ret-agent", program: { case: "shell", value: { commandLine: `head -c ${warm} /dev/urandom` } } });
  await waitFor("warm-up terminal", async () => isTerminal((await srv.ctl.getCommand({ issueUuid: r0.command!.issueUuid })).command!.state), 600_000, 50);
  await sleep(2000);
  let retained = Number((await srv.ctl.getCommand({ issueUuid: r0.command!.issueUuid })).command!.retainedOutputBytes);
  const points: string[] = [`${(rssKiB(srv.proc.pid!) / 1024).toFixed(1)} MiB at ${(retained / MiB).toFixed(0)} MiB`];
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) {
    const r = await srv.ctl.submitCommand({ clientId: "ret-agent", program: { case: "shell", value: { commandLine: `head -c ${per} /dev/urandom` } } });
    await waitFor(
      "retention command terminal",
      async () => isTerminal((await srv.ctl.getCommand({ issueUuid: r.command!.issueUuid })).command!.state),
      900_000,
      50,
    );
    const c = (await srv.ctl.getCommand({ issueUuid: r.command!.issueUuid })).command!;
    retained += Number(c.retainedOutputBytes);
    await sleep(2000);
    points.push(`${(rssKiB(srv.proc.pid!) / 1024).toFixed(1)} MiB at ${(retained / MiB).toFixed(0)} MiB`);
  }
  const secs = (performance.now() - t0) / 1000;
  agent.kill("SIGTERM");
  await srv.stop();
  const segs = readdirSync(path.join(env.dir, "ret", "segments")).length;
  report(
    `retention: server RSS ${points.join(" -> ")} retained (random bytes, default caps 256 MiB/command and 4 GiB/client, ${segs} segment+index files on disk, ${secs.toFixed(0)} s to push)`,
  );
}

/**
 * The operator's view against ssh's, in one invocation: a throwaway sshd on a
 * loopback port (scripts/lib/sshd.ts) and a compiled server and agent on the
 * same machine. The rvbox side is the README's `rvbox` (bin/rvbox.js, started
 * by the project's Node), its stdout a pipe into this process, hashed; the
 * ssh side is `ssh host CMD` over a multiplexed master connection, hashed
 * the same way. Runs alternate (ssh, rvbox, ssh, rvbox, ...).
 */
async function benchSsh(env: Env): Promise<void> {
  const size = QUICK ? 16 * MiB : 64 * MiB;
  const rounds = QUICK ? 1 : 3;
  const trues = QUICK ? 5 : 15;
  const file = path.join(env.dir, "ssh-log.txt");
  await logLikeFile(file, size);
  const want = sha256File(file);
  const sshd = await startSshd();
  const srv = await startServer(env, "ssh");
  const agent = startAgent(env, srv.url, "ssh-agent");
  try {
    await connected(srv.ctl, ["ssh-agent"]);
    // RVBOX_PERSIST off unless asked for below: (a), (b), (d) and the first (c) measure rvbox as it starts by default.
    const cliEnv = { ...process.env, RVBOX_SERVER: srv.controlUrl, RVBOX_TOKEN_FILE: path.join(env.dir, "operator-token"), RVBOX_PERSIST: "" };
    // The README's `rvbox`: bin/rvbox.js executed (its first line starts the project's Node, from the
    // CLI's start-up snapshot when it is current: made sure of here, before any run is timed).
    const rvbox = (...a: string[]) => [path.join(ROOT, "bin/rvbox.js"), ...a];
    report(`ssh: rvbox is bin/rvbox.js executed; start-up snapshot ${await ensureCliSnapshot(ROOT)}`);
    const mb = size / MiB;
    const exact = (r: { sha: string; bytes: number; stderr: string }, who: string) => {
      if (r.sha !== want)
        throw new Error(
          `${who}: received ${r.bytes} bytes whose SHA-256 differs from the file's (${size} bytes); its stderr: ${r.stderr.slice(-1500) || "(empty)"}`,
        );
    };
    // (a) live and (b) read back, alternating with ssh's `cat`.
    const live: number[] = [];
    const back: number[] = [];
    const sshCat: number[] = [];
    let srvCpuBack = 0;
    let lastId = "";
    for (let i = 0; i < rounds; i++) {
      const s1 = await timedRun([...sshd.ssh, "--", `cat ${file}`]);
      exact(s1, "ssh cat");
      sshCat.push(s1.secs);
      const a = await timedRun(rvbox("run", "ssh-agent", "--follow", "--", "cat", file), cliEnv);
      exact(a, "rvbox run --follow");
      live.push(a.secs);
      // The id of the command just run: the newest of this client's.
      const cs = (await srv.ctl.listCommands({ clientId: "ssh-agent" })).commands;
      lastId = cs[0]!.issueUuid;
      const s2 = await timedRun([...sshd.ssh, "--", `cat ${file}`]);
      exact(s2, "ssh cat");
      sshCat.push(s2.secs);
      const cpu0 = cpuSecs(srv.proc.pid!);
      const b = await timedRun(rvbox("logs", lastId), cliEnv);
      srvCpuBack = cpuSecs(srv.proc.pid!) - cpu0;
      exact(b, "rvbox logs");
      back.push(b.secs);
    }
    const med = (xs: number[]) => pct(xs, 0.5);
    const sshRate = mb / med(sshCat);
    report(
      `ssh(a): rvbox run --follow -- cat ${mb} MiB to stdout, live, byte-exact: ${(mb / med(live)).toFixed(1)} MiB/s (median of ${rounds}: ${live.map((x) => x.toFixed(2)).join(", ")} s) | baseline ssh cat ${sshRate.toFixed(1)} MiB/s (median of ${sshCat.length}: ${sshCat.map((x) => x.toFixed(2)).join(", ")} s) | ratio ${(med(sshCat) / med(live)).toFixed(3)}x (target >= 1.0x)`,
    );
    report(
      `ssh(b): rvbox logs ID (finished, ${mb} MiB) to stdout, byte-exact: ${(mb / med(back)).toFixed(1)} MiB/s (median of ${rounds}: ${back.map((x) => x.toFixed(2)).join(", ")} s; server ${srvCpuBack.toFixed(2)} s CPU in the last) | baseline ssh cat ${sshRate.toFixed(1)} MiB/s | ratio ${(med(sshCat) / med(back)).toFixed(3)}x (target >= 2x)`,
    );
    // (c) `true`, shell to exit: rvbox as it starts by default, and with RVBOX_PERSIST (the
    // resident client, shells/operator/resident.ts), which is to rvbox what the baseline's
    // ControlMaster/ControlPersist is to ssh. Its own socket directory, removed at the end.
    const runtime = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-run-"));
    const persistEnv = { ...cliEnv, RVBOX_PERSIST: "60s", XDG_RUNTIME_DIR: runtime };
    const rt: number[] = [];
    const pt: number[] = [];
    const st: number[] = [];
    try {
      for (let i = 0; i < trues + 1; i++) {
        const s = await timedRun([...sshd.ssh, "--", "true"]);
        const r = await timedRun(rvbox("run", "ssh-agent", "--follow", "--", "true"), { ...cliEnv, RVBOX_PERSIST: "" });
        const q = await timedRun(rvbox("run", "ssh-agent", "--follow", "--", "true"), persistEnv);
        if (r.code !== 0 || s.code !== 0 || q.code !== 0) throw new Error(`true: rvbox exited ${r.code}, with RVBOX_PERSIST ${q.code}, ssh ${s.code}`);
        if (i === 0) continue; // warm-up (the resident starts here)
        rt.push(r.secs * 1000);
        pt.push(q.secs * 1000);
        st.push(s.secs * 1000);
      }
    } finally {
      rmSync(runtime, { recursive: true, force: true }); // its socket gone, the resident leaves (within 2 s)
    }
    report(
      `ssh(c): rvbox run --follow -- true, shell to exit: p50 ${med(rt).toFixed(0)} ms (min ${Math.min(...rt).toFixed(0)}, n=${rt.length}) | baseline ssh host true p50 ${med(st).toFixed(0)} ms (min ${Math.min(...st).toFixed(0)}) | ratio ${(med(rt) / med(st)).toFixed(3)}x (target <= 0.5x)`,
    );
    report(
      `ssh(c) with RVBOX_PERSIST=60s (resident client; ssh runs with ControlPersist): p50 ${med(pt).toFixed(0)} ms (min ${Math.min(...pt).toFixed(0)}, n=${pt.length}) | baseline ssh host true p50 ${med(st).toFixed(0)} ms | ratio ${(med(pt) / med(st)).toFixed(3)}x (target <= 0.5x)`,
    );
    // (d) The same file into a command's stdin: `rvbox run -i -- sha256sum < file` against `ssh host sha256sum < file`.
    const inR: number[] = [];
    const inS: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const s = await timedRun([...sshd.ssh, "--", "sha256sum"], undefined, file);
      const r = await timedRun(rvbox("run", "ssh-agent", "-i", "--follow", "--", "sha256sum"), cliEnv, file);
      // Both must print the file's own digest: every byte arrived, in order.
      const line = createHash("sha256").update(`${want}  -\n`).digest("hex");
      for (const [who, x] of [
        ["ssh", s],
        ["rvbox", r],
      ] as const)
        if (x.code !== 0 || x.sha !== line) throw new Error(`stdin: ${who} exited ${x.code} without the file's digest: ${x.stderr}`);
      inS.push(s.secs);
      inR.push(r.secs);
    }
    report(
      `ssh(d): rvbox run -i --follow -- sha256sum < ${mb} MiB file: ${(mb / med(inR)).toFixed(1)} MiB/s (median of ${rounds}: ${inR.map((x) => x.toFixed(2)).join(", ")} s) | baseline ssh host sha256sum < file ${(mb / med(inS)).toFixed(1)} MiB/s (${inS.map((x) => x.toFixed(2)).join(", ")} s) | ratio ${(med(inS) / med(inR)).toFixed(3)}x`,
    );
  } finally {
    agent.kill("SIGTERM");
    await srv.stop();
    await sshd.close();
  }
}

/**
 * Not in the default set (`--only=soak`, or `npm run soak`): many short commands through one
 * server and agent, both daemons' RSS sampled as they accumulate. The agent should level off
 * (its per-command state is bounded by MAX_TOMBSTONES); the server's by its reserved metadata
 * tier, which prunes settled history once full (core/server/history.ts). A small
 * --soak-budget makes the server reach that plateau within the run. --soak=N commands.
 */
async function benchSoak(env: Env): Promise<void> {
  const total = Number(args.find((a) => a.startsWith("--soak="))?.slice(7) ?? (QUICK ? 1000 : 20_000));
  const inFlight = 8;
  // --soak-budget=MiB: the server's reserved metadata tier (default: the product's 64 MiB).
  const budgetMiB = Number(args.find((a) => a.startsWith("--soak-budget="))?.slice(14) ?? 0);
  // --soak-pruned=N: the server's pruned ledger bound (default: the product's 100,000).
  const prunedMax = Number(args.find((a) => a.startsWith("--soak-pruned="))?.slice(14) ?? 0);
  const limits = { ...(budgetMiB > 0 ? { metadataBudget: budgetMiB * MiB } : {}), ...(prunedMax > 0 ? { prunedMax } : {}) };
  const srv = await startServer(env, "soak", limits);
  const agent = startAgent(env, srv.url, "soak-agent");
  const mib = (pid: number) => (rssKiB(pid) / 1024).toFixed(1);
  try {
    await connected(srv.ctl, ["soak-agent"]);
    const points = [`idle: agent ${mib(agent.pid!)} MiB, server ${mib(srv.proc.pid!)} MiB`];
    const every = Math.max(1, Math.floor(total / 10));
    let next = 0;
    let done = 0;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next++ < total) {
          const r = await srv.ctl.submitCommand({ clientId: "soak-agent", program: { case: "argv", value: { argv: ["true"] } } });
          const st = await settle(srv.ctl, r.command!.issueUuid);
          if (st !== CommandLifecycle.SUCCEEDED) throw new Error(`soak: command ended ${CommandLifecycle[st]}`);
          if (++done % every === 0) points.push(`${done}: agent ${mib(agent.pid!)} MiB, server ${mib(srv.proc.pid!)} MiB`);
        }
      }),
    );
    const tier = budgetMiB > 0 ? `${budgetMiB} MiB` : "default";
    // Peak RSS catches what the samples fall between (e.g. a store checkpoint's database image);
    // the bytes written are dominated by the stores' journals and snapshots.
    const peak = (pid: number) => `peak ${(peakRssKiB(pid) / 1024).toFixed(1)} MiB, wrote ${(diskWriteBytes(pid) / MiB).toFixed(0)} MiB`;
    report(
      `soak: ${total} x true, ${inFlight} in flight, metadata tier ${tier}, pruned ledger ${prunedMax > 0 ? prunedMax : "default"}; RSS ${points.join(" -> ")}; ` +
        `agent ${peak(agent.pid!)}; server ${peak(srv.proc.pid!)}`,
    );
  } finally {
    agent.kill("SIGTERM");
    await srv.stop();
  }
}

// ------------------------------------------------------------------ roles

async function idleRole(url: string, n: number, token: string): Promise<void> {
  const { RawAgent } = await import("../test/shells/e2e/raw-client.js");
  const conns = [];
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, n - i) }, async (_, j) => {
        const r = await RawAgent.connect(url, token);
        if (!(r instanceof RawAgent)) throw new Error(`refused ${r.status}`);
        await r.register(`idle-${i + j}`, `inst-${i + j}`);
        return r;
      }),
    );
    conns.push(...batch);
  }
  await new Promise<void>((r) => process.once("SIGTERM", () => r()));
  for (const c of conns) c.close();
  process.exit(0);
}

// ------------------------------------------------------------------ main

async function main(): Promise<void> {
  if (args[0] === "--fleet") return fleetRole(args[1]!, Number(args[2]), args[3]!, args[4]!, Number(args[5] ?? 0));
  if (args[0] === "--idle") return idleRole(args[1]!, Number(args[2]), args[3]!);
  const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-bench-"));
  const env = makeEnv(dir, BIN, LOG_LEVEL, () => randomBytes(16).toString("hex"));
  const mem = os.totalmem() / 1024 ** 3;
  if (!TSX && !args.includes("--no-build")) {
    // Build the deployable tree so the daemons measured are the sources as they stand.
    buildDist();
  }
  console.log(
    `rvbox bench${QUICK ? " (--quick)" : ""}${TSX ? " (--tsx)" : ""}: daemons from ${path.relative(ROOT, BIN)}, node ${process.version}, ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? "?"}), ${mem.toFixed(1)} GiB RAM, ${os.platform()} ${os.release()}, data in ${dir}`,
  );
  const KEEP = new Set(["operator-token", "agent-tokens", "agent-token", "fleet"]);
  const benches: Array<[string, (e: Env) => Promise<void>]> = [
    ["throughput", benchThroughput],
    ["latency", benchLatency],
    ["fleet", benchFleet],
    ["backlog", benchBacklog],
    ["sessions", benchSessions],
    ["retention", benchRetention],
    ["ssh", benchSsh],
    ["soak", benchSoak],
  ];
  try {
    for (const [name, fn] of benches) {
      if (ONLY ? !ONLY.includes(name) : name === "soak") continue;
      // The ratio benches can be repeated: this machine's speed moves between runs, and each
      // run pairs RVBox with its own baseline, so the median of the ratios is the figure to quote.
      const times = name === "throughput" || name === "latency" ? REPEAT : 1;
      const ratios: number[] = [];
      for (let i = 0; i < times; i++) {
        // Each repetition starts from empty data and state directories, like the first.
        if (i > 0) for (const f of readdirSync(dir)) if (!KEEP.has(f)) rmSync(path.join(dir, f), { recursive: true, force: true });
        try {
          const before = results.length;
          await fn(env);
          const m = /ratio ([0-9.]+)x/.exec(results[before] ?? "");
          if (m) ratios.push(Number(m[1]));
        } catch (err) {
          report(`${name}: FAILED ${err instanceof Error ? err.message : String(err)}`);
        }
      }
      if (times > 1 && ratios.length > 0)
        report(`${name}: median ratio ${pct(ratios, 0.5).toFixed(3)}x over ${ratios.length} runs (${ratios.map((r) => r.toFixed(3)).join(", ")})`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

void main();
