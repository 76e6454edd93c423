// What the benches share (scripts/bench.ts, scripts/bench-store-compare.ts):
// the daemons as child processes from the compiled tree (or the tsx shim),
// a control API client, /proc readings, percentiles, and the measured paths
// and their baselines (bare `ws`, spawn of `true`). Each bench keeps its own
// report format; what is measured, and how, lives here once.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { appendFileSync, closeSync, createWriteStream, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { WebSocket, WebSocketServer } from "ws";
import { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import { ControlService, type Command } from "../../protos/gen/rvbox/v1/control_pb.js";
import { DAEMON_ENV, DAEMON_NODE_FLAGS } from "../../bin/cli-child.js";
import { logLikeChunks } from "./log-text.js";

export const ROOT = path.resolve(import.meta.dirname, "../..");
export const MiB = 1024 * 1024;

export type Ctl = Client<typeof ControlService>;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The value of `--name=V` among `args`, or undefined. */
export function flagValue(args: readonly string[], name: string): string | undefined {
  return args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

export function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

/** The highest RSS a process has had so far (VmHWM), in KiB. */
export function peakRssKiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

/** Bytes a process has sent towards the storage layer so far (/proc/PID/io write_bytes; 0 on tmpfs). */
export function diskWriteBytes(pid: number): number {
  const m = /write_bytes:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/io`, "utf8"));
  return m ? Number(m[1]) : 0;
}

/** CPU seconds (user + system) a process has used so far (0 once it is gone). */
export function cpuSecs(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

/** Live child processes of `pid`. */
export function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * p))]!;
}

export async function freePort(): Promise<number> {
  const net = await import("node:net");
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return p;
}

export async function waitFor<T>(what: string, fn: () => T | Promise<T>, ms = 60_000, every = 20): Promise<NonNullable<T>> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch {
      // retry
    }
    if (Date.now() > end) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(every);
  }
}

/** One bench invocation: its directory and tokens, and how its daemons run. */
export interface Env {
  dir: string;
  operator: string;
  fleet: string;
  tokenFile: string;
  /** The daemons' entry: dist/bin/rvbox.js, or bin/rvbox.js (--tsx). */
  bin: string;
  /** The daemons' --log-level. */
  logLevel: string;
}

/** A fresh Env in `dir`: random operator and fleet tokens, their files, the fleet's state dir. */
export function makeEnv(dir: string, bin: string, logLevel: string, token: () => string): Env {
  const env: Env = { dir, operator: token(), fleet: token(), tokenFile: path.join(dir, "agent-token"), bin, logLevel };
  writeFileSync(path.join(dir, "operator-token"), `${env.operator}\n`);
  writeFileSync(path.join(dir, "agent-tokens"), `* ${env.fleet}\n`);
  writeFileSync(env.tokenFile, `${env.fleet}\n`);
  mkdirSync(path.join(dir, "fleet"), { recursive: true });
  return env;
}

/** `npm run build`'s tsc, so the daemons measured are the sources as they stand. */
export function buildDist(): void {
  execFileSync(process.execPath, [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", path.join(ROOT, "tsconfig.build.json")], {
    cwd: ROOT,
    stdio: "inherit",
  });
}

export interface ServerProc {
  proc: ChildProcess;
  url: string;
  /** http://127.0.0.1:PORT of its control API. */
  controlUrl: string;
  ctl: Ctl;
  stop(): Promise<void>;
}

export function controlClient(base: string, token: string): Ctl {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(ControlService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [auth] }));
}

/**
 * A child Node process. A daemon (`daemon`: argv[0] is the rvbox entry) runs with the flags
 * and environment its systemd unit gives it (bin/cli-child.js). RVBOX_BENCH_PROF=DIR writes a
 * V8 CPU profile of each child there; RVBOX_BENCH_NODE_ARGS adds Node/V8 flags (after the
 * units' flags, so they override them); RVBOX_BENCH_LOGS=DIR keeps each child's stderr there.
 */
export function child(argv: string[], name: string, daemon = false): ChildProcess {
  const prof = process.env.RVBOX_BENCH_PROF;
  if (prof) argv = ["--cpu-prof", `--cpu-prof-dir=${prof}`, ...argv];
  const extra = process.env.RVBOX_BENCH_NODE_ARGS;
  if (extra) argv = [...extra.split(/\s+/).filter(Boolean), ...argv];
  if (daemon) argv = [...DAEMON_NODE_FLAGS, ...argv];
  const p = spawn(process.execPath, argv, { cwd: ROOT, stdio: ["ignore", "inherit", "pipe"], env: daemon ? { ...DAEMON_ENV, ...process.env } : process.env });
  let err = "";
  const keep = process.env.RVBOX_BENCH_LOGS;
  if (keep) mkdirSync(keep, { recursive: true });
  p.stderr!.on("data", (d: Buffer) => {
    if (keep) appendFileSync(path.join(keep, `${name.replace(/\W+/g, "-")}.log`), d);
    err += d.toString();
    if (err.length > 20000) err = err.slice(-10000);
  });
  p.on("exit", (code, sig) => {
    if (code !== 0 && code !== 143 && code !== 137 && sig !== "SIGTERM" && sig !== "SIGKILL" && code !== null)
      process.stderr.write(`bench: ${name} exited ${code}\n${err}\n`);
  });
  return p;
}

/** `rvbox server` from a config file named after it; `store` (a postgres:// URL) keeps its state in PostgreSQL instead of `<dir>/<name>`. */
export async function startServer(env: Env, name: string, limits?: Record<string, number>, store?: string): Promise<ServerProc> {
  const [ap, cp] = [await freePort(), await freePort()];
  const cfg = path.join(env.dir, `${name}.json`);
  writeFileSync(
    cfg,
    JSON.stringify({
      listen: `127.0.0.1:${ap}`,
      control: `127.0.0.1:${cp}`,
      data: path.join(env.dir, name),
      ...(store ? { store } : {}),
      "agent-tokens": path.join(env.dir, "agent-tokens"),
      "operator-token": path.join(env.dir, "operator-token"),
      "log-level": env.logLevel,
      ...(limits ? { limits } : {}),
    }),
  );
  const proc = child([env.bin, "server", "--config", cfg], `server ${name}`, true);
  const ctl = controlClient(`http://127.0.0.1:${cp}`, env.operator);
  await waitFor("server", async () => (await ctl.listClients({})) !== undefined);
  return {
    proc,
    url: `ws://127.0.0.1:${ap}/v1/agent`,
    controlUrl: `http://127.0.0.1:${cp}`,
    ctl,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
    },
  };
}

export function startAgent(env: Env, url: string, id: string): ChildProcess {
  return child(
    [
      env.bin,
      "agent",
      "--server",
      url,
      "--client-id",
      id,
      "--state",
      path.join(env.dir, `agent-${id}`),
      "--token",
      env.tokenFile,
      "--log-level",
      env.logLevel,
      "--max-running",
      "16",
      "--max-queued",
      "64",
    ],
    `agent ${id}`,
    true,
  );
}

export async function connected(ctl: Ctl, ids: string[]): Promise<void> {
  await waitFor(
    `${ids.length} agents connected`,
    async () => {
      const cs = (await ctl.listClients({})).clients;
      const set = new Set(cs.filter((c) => c.connected).map((c) => c.clientId));
      return ids.every((i) => set.has(i));
    },
    120_000,
    100,
  );
}

export async function settle(ctl: Ctl, uuid: string): Promise<number> {
  for await (const m of ctl.followOutput({ issueUuid: uuid, follow: true })) {
    if (m.item.case === "finished") return m.item.value.state;
  }
  throw new Error("follow ended without finished");
}

/**
 * The command as the server's committed (durable) view has it once terminal, told by the
 * server itself: a FollowOutput from past any event it can have sends no output, only
 * `finished` when the command is terminal with everything stored. (Polling GetCommand every
 * 10 ms, as bench.ts did until 2026-12-01, cost the server ~0.5 ms of CPU per poll on a
 * 2-core machine that the transfer needs: ~10 % of its busy time in the ingest profile.)
 */
export async function terminal(ctl: Ctl, uuid: string): Promise<Command> {
  for await (const m of ctl.followOutput({ issueUuid: uuid, follow: true, fromEventSeq: BigInt(Number.MAX_SAFE_INTEGER) })) {
    if (m.item.case === "finished") return m.item.value;
  }
  throw new Error("follow ended without finished");
}

export function logLikeFile(file: string, bytes: number): Promise<void> {
  return new Promise((resolve) => {
    const out = createWriteStream(file);
    let n = 0;
    const next = logLikeChunks();
    const write = (): void => {
      let ok = true;
      while (n < bytes && ok) {
        const chunk = next(n);
        const b = Buffer.from(chunk).subarray(0, Math.min(Buffer.byteLength(chunk), bytes - n));
        n += b.length;
        ok = out.write(b);
      }
      if (n >= bytes) out.end(resolve);
      else out.once("drain", write);
    };
    write();
  });
}

export function sha256File(file: string): string {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

/** Runs argv to exit; stdout hashed (and counted), never buffered whole. */
export function timedRun(
  argv: string[],
  env?: NodeJS.ProcessEnv,
  stdinFile?: string,
): Promise<{ secs: number; code: number | null; bytes: number; sha: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const stdin = stdinFile === undefined ? "ignore" : openSync(stdinFile, "r");
    const p = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, stdio: [stdin, "pipe", "pipe"], env: env ?? process.env });
    if (typeof stdin === "number") closeSync(stdin);
    const h = createHash("sha256");
    let bytes = 0;
    let err = "";
    p.stdout!.on("data", (d: Buffer) => {
      bytes += d.length;
      h.update(d);
    });
    p.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    p.on("error", reject);
    p.on("close", (code) => {
      const secs = (performance.now() - t0) / 1000;
      if (code !== 0) process.stderr.write(`bench: ${argv.slice(0, 4).join(" ")} ... exited ${code}: ${err.trim()}\n`);
      resolve({ secs, code, bytes, sha: h.digest("hex"), stderr: err.trim() });
    });
  });
}

// ------------------------------------------------------------------ measured paths and their baselines

/** Seconds to send `size` bytes of `file` from `cat` over a bare `ws` loopback link (one process, no storage): the ingest baseline. */
export async function bareWsSecs(file: string, size: number): Promise<number> {
  const wss = new WebSocketServer({ port: 0, host: "127.0.0.1", perMessageDeflate: false, maxPayload: 2 * MiB });
  await new Promise<void>((r) => wss.once("listening", () => r()));
  const port = (wss.address() as { port: number }).port;
  let got = 0;
  const done = new Promise<void>((resolve) =>
    wss.on("connection", (ws) => ws.on("message", (d: Buffer) => ((got += d.length) >= size ? resolve() : undefined))),
  );
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
  await new Promise((r) => ws.once("open", r));
  const t0 = performance.now();
  const cat = spawn("cat", [file]);
  cat.stdout.on("data", (d: Buffer) => {
    for (let o = 0; o < d.length; o += 65536) ws.send(d.subarray(o, o + 65536));
  });
  await done;
  const secs = (performance.now() - t0) / 1000;
  ws.close();
  wss.close();
  return secs;
}

/** `cat file` on `clientId`, submitted until its terminal state is committed (durable): seconds and the command. */
export async function ingestRun(ctl: Ctl, clientId: string, file: string): Promise<{ secs: number; command: Command }> {
  const t = performance.now();
  const r = await ctl.submitCommand({ clientId, program: { case: "argv", value: { argv: ["cat", file] } } });
  const command = await terminal(ctl, r.command!.issueUuid);
  return { secs: (performance.now() - t) / 1000, command };
}

/** Milliseconds of each of `n` child_process spawns of `true` to exit: the latency baseline. */
export async function spawnTrueMs(n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await new Promise<void>((r) => spawn("true").on("exit", () => r()));
    out.push(performance.now() - t);
  }
  return out;
}

/** `true` on `clientId`, submitted through the control API until its terminal state is committed, `n` times after 10 warm-up runs (ms each). */
export async function trueLatencies(ctl: Ctl, clientId: string, n: number): Promise<number[]> {
  const lat: number[] = [];
  for (let i = 0; i < n + 10; i++) {
    const t = performance.now();
    const r = await ctl.submitCommand({ clientId, program: { case: "argv", value: { argv: ["true"] } } });
    const st = await settle(ctl, r.command!.issueUuid);
    if (st !== CommandLifecycle.SUCCEEDED) throw new Error(`\`true\` on ${clientId} ended ${CommandLifecycle[st]}`);
    if (i >= 10) lat.push(performance.now() - t);
  }
  return lat;
}

/** Bare spawns of `true`, `conc` at a time, `total` in all: per second (the fleet baseline). */
export async function spawnTrueRate(total: number, conc: number): Promise<number> {
  let next = 0;
  const t = performance.now();
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next++ < total) await new Promise<void>((r) => spawn("true").on("exit", () => r()));
    }),
  );
  return total / ((performance.now() - t) / 1000);
}

/**
 * `agents` in-process agents (fleet-0 … fleet-N-1) shared by `procs` processes, each running
 * `script --fleet URL N TOKENFILE DIR FIRST` (fleetRole below). Every spawn() forks its whole
 * process, so one process holding all of them pays for all of their memory per spawn.
 */
export function startFleet(env: Env, url: string, agents: number, procs: number, script: string): { procs: ChildProcess[]; ids: string[] } {
  const per = Math.ceil(agents / procs);
  const fleet = path.join(env.dir, "fleet", path.basename(url.replace(/\W+/g, "-")));
  mkdirSync(fleet, { recursive: true });
  const ps = Array.from({ length: Math.ceil(agents / per) }, (_, p) =>
    child(["--import", "tsx", script, "--fleet", url, String(Math.min(per, agents - p * per)), env.tokenFile, fleet, String(p * per)], `fleet ${p}`),
  );
  return { procs: ps, ids: Array.from({ length: agents }, (_, i) => `fleet-${i}`) };
}

/**
 * The server limits a fleet run needs: each command in flight is followed to its end by one
 * FollowOutput stream of the one operator identity, past the product's bounds of 64 per identity
 * and 128 in all (issue 38), which refused the fleet bench's 200 from then on.
 */
export const FLEET_LIMITS = { maxFollowStreams: 1024, maxFollowStreamsPerIdentity: 512 };

/** `total` x `true` across `ids`, `conc` in flight, each to its committed end: seconds and how many did not succeed. */
export async function fleetRun(ctl: Ctl, ids: string[], total: number, conc: number): Promise<{ secs: number; failed: number }> {
  let next = 0;
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: conc }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const r = await ctl.submitCommand({ clientId: ids[i % ids.length]!, program: { case: "argv", value: { argv: ["true"] } } });
        if ((await settle(ctl, r.command!.issueUuid)) !== CommandLifecycle.SUCCEEDED) failed++;
      }
    }),
  );
  return { secs: (performance.now() - t0) / 1000, failed };
}

/** The `--fleet` role: N in-process agents until SIGTERM. */
export async function fleetRole(url: string, n: number, tokenFile: string, dir: string, first: number): Promise<void> {
  const { AgentDaemon } = await import("../../shells/agent/agent-daemon.js");
  const { createLogger } = await import("../../shells/runtime/log.js");
  const token = readFileSync(tokenFile, "utf8").trim();
  const agents = [];
  for (let i = first; i < first + n; i++) {
    agents.push(
      await AgentDaemon.start({
        serverUrl: url,
        clientId: `fleet-${i}`,
        stateDir: path.join(dir, String(i)),
        token,
        maxRunning: 8,
        maxQueued: 32,
        log: createLogger(`fleet-${i}`, "warn"),
      }),
    );
  }
  await new Promise<void>((r) => process.once("SIGTERM", () => r()));
  await Promise.all(agents.map((a) => a.close({ killProcesses: true })));
  process.exit(0);
}
