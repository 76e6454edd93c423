// Real chaos (`npm run chaos -- --minutes N`): the compiled daemons
// (`node dist/bin/rvbox.js`), one server and 4 agents, each agent behind a TCP
// proxy, all on loopback. A stream of commands of every kind goes through the
// control API while a fault loop kills daemons with SIGKILL (and restarts
// them on the same data), cuts and stalls links, and fills one agent's disk
// (a small tmpfs). Then faults stop and everything must settle (liveness).
//
// The run keeps its own ledger: every command prints checksummed, numbered
// lines (scripts/lib/chaos-output.ts) and appends its nonce to a per-agent
// launches file before printing anything. At the end it checks that every
// command is terminal, none launched twice, every byte read back through
// FollowOutput is exactly what the process printed, in order, with every gap
// covered by a truncation, retention or incomplete marker, and nothing was
// invented. Exit status 1 on any violation.
//
// Flags: --minutes N (required), --agents N (4), --rate R commands/s (1),
// --postgres (the server's state in a throwaway PostgreSQL cluster, and
// kill -9 of PostgreSQL among the faults),
// --seed S, --light (small outputs, for the test), --drain-minutes M (6),
// --fault-every S (mean seconds between faults: 8, light 5), --dir DIR (keep the run there), --keep, --no-build,
// --dist DIR (build into / run from DIR instead of dist/), --no-disk-full.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { setMaxListeners } from "node:events";
import * as os from "node:os";
import * as path from "node:path";
import { Code as ConnectCode, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { CommandLifecycle as L, ControlErrorSchema, OutputStream, ShellType, SignalKind } from "../protos/gen/rvbox/v1/common_pb.js";
import { ControlService, TerminalSource, type Command, type SubmitCommandRequestSchema } from "../protos/gen/rvbox/v1/control_pb.js";
import { checkEcho, echoAwk, genAwk, genExpected, type GenParams, tickerExpected, tickerSh } from "./lib/chaos-output.js";
import { Rng } from "./lib/rng.js";
import { freePort, TcpProxy } from "./lib/tcp-proxy.js";
import { type PgCluster, startPgCluster } from "../test/support/pg-cluster.js";

const ROOT = path.resolve(import.meta.dirname, "..");
const MiB = 1024 * 1024;

// ------------------------------------------------------------------ flags

interface Opts {
  minutes: number;
  agents: number;
  rate: number;
  seed: number;
  light: boolean;
  drainMinutes: number;
  faultEvery: number;
  dir: string | null;
  keep: boolean;
  build: boolean;
  dist: string;
  diskFull: boolean;
  /** The server's state in a throwaway PostgreSQL cluster (and kill -9 of PostgreSQL among the faults). */
  postgres: boolean;
}

const USAGE =
  "usage: npm run chaos -- --minutes N [--agents N] [--rate R] [--seed S] [--light] [--drain-minutes M] [--fault-every S] [--dir DIR] [--keep] [--no-build] [--dist DIR] [--no-disk-full] [--postgres]";

function fail(msg: string): never {
  process.stderr.write(`chaos: ${msg}\n`);
  process.exit(2);
}

export function parseChaosArgs(argv: string[]): Opts {
  const o: Opts = {
    minutes: NaN,
    agents: 4,
    rate: 1,
    seed: Date.now() % 1_000_000,
    light: false,
    drainMinutes: 6,
    faultEvery: 12,
    dir: null,
    keep: false,
    build: true,
    dist: "dist",
    diskFull: true,
    postgres: false,
  };
  const num = (flag: string, v: string | undefined, lo: number, hi: number, int: boolean): number => {
    if (v === undefined || v === "" || v.startsWith("--")) fail(`${flag} needs a value (${USAGE})`);
    const n = Number(v);
    if (!Number.isFinite(n) || (int && !Number.isInteger(n)) || n < lo || n > hi)
      fail(`${flag} must be ${int ? "an integer" : "a number"} from ${lo} to ${hi}, got ${JSON.stringify(v)}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i]!;
    const eq = raw.indexOf("=");
    const flag = eq > 0 ? raw.slice(0, eq) : raw;
    const val = (): string | undefined => (eq > 0 ? raw.slice(eq + 1) : argv[++i]);
    switch (flag) {
      case "--minutes":
        o.minutes = num(flag, val(), 0.1, 1440, false);
        break;
      case "--agents":
        o.agents = num(flag, val(), 1, 16, true);
        break;
      case "--rate":
        o.rate = num(flag, val(), 0.05, 20, false);
        break;
      case "--seed":
        o.seed = num(flag, val(), 0, 2 ** 31 - 1, true);
        break;
      case "--drain-minutes":
        o.drainMinutes = num(flag, val(), 0.5, 120, false);
        break;
      case "--fault-every":
        o.faultEvery = num(flag, val(), 1, 3600, false);
        break;
      case "--light":
        o.light = true;
        break;
      case "--keep":
        o.keep = true;
        break;
      case "--no-build":
        o.build = false;
        break;
      case "--no-disk-full":
        o.diskFull = false;
        break;
      case "--postgres":
        o.postgres = true;
        break;
      case "--dir": {
        const v = val();
        if (!v || v.startsWith("--")) fail(`--dir needs a directory`);
        o.dir = path.resolve(v);
        break;
      }
      case "--dist": {
        const v = val();
        if (!v || v.startsWith("--")) fail(`--dist needs a directory`);
        o.dist = v;
        break;
      }
      case "--help":
      case "-h":
        process.stdout.write(`${USAGE}\n`);
        return process.exit(0);
      default:
        fail(`unknown flag ${JSON.stringify(raw)} (${USAGE})`);
    }
  }
  if (Number.isNaN(o.minutes)) fail(`--minutes is required (${USAGE})`);
  if (!argv.some((a) => a === "--fault-every" || a.startsWith("--fault-every="))) o.faultEvery = o.light ? 5 : 8;
  return o;
}

// ------------------------------------------------------------------ small tools

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Ctl = Client<typeof ControlService>;

function controlClient(base: string, token: string): Ctl {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(ControlService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [auth] }));
}

/** A refusal by the core (it carries a ControlError), as opposed to a transport failure while a daemon is down. */
function coreRefusal(err: unknown): ConnectError | null {
  if (!(err instanceof ConnectError)) return null;
  if (err.findDetails(ControlErrorSchema).length > 0) return err;
  if (
    [
      ConnectCode.InvalidArgument,
      ConnectCode.NotFound,
      ConnectCode.AlreadyExists,
      ConnectCode.FailedPrecondition,
      ConnectCode.DataLoss,
      ConnectCode.Unauthenticated,
      ConnectCode.PermissionDenied,
    ].includes(err.code)
  )
    return err;
  return null;
}

const TERMINAL = new Set([L.SUCCEEDED, L.FAILED, L.REJECTED, L.CANCELLED, L.INTERRUPTED, L.EXPIRED]);
const stateName = (s: L): string => L[s] ?? String(s);

// ------------------------------------------------------------------ the world

interface Daemon {
  name: string;
  argv: string[];
  proc: ChildProcess | null;
  /** We killed or stopped it: an exit now is expected. */
  expectExit: boolean;
  log: string;
  starts: number;
}

type Kind = "tiny" | "small" | "medium" | "large" | "fail" | "stderr" | "stdin" | "signal" | "cancel" | "timeout";
type Variant = "argv" | "sh" | "bash" | "script" | "shebang";

interface StreamCheck {
  /** Covered through this offset (data or marker). */
  next: number;
  dataBytes: number;
  markerBytes: number;
}

interface Cmd {
  n: number;
  nonce: string;
  uuid: string;
  agent: number;
  kind: Kind;
  variant: Variant;
  gen?: GenParams;
  ticks?: number;
  tickSeed?: number;
  exitWant: number;
  timeoutMs: number;
  acked: boolean;
  stdin: Array<{ data: string; acked: boolean }>;
  closeAcked: boolean;
  signals: Array<{ kind: SignalKind; acked: boolean }>;
  expected?: { stdout: Buffer; stderr: Buffer };
  echo?: Buffer[];
  out: StreamCheck;
  err: StreamCheck;
  incomplete: boolean;
  markers: number;
  finished?: Command;
  followErrors: number;
}

interface Violation {
  kind: string;
  uuid?: string;
  detail: string;
}

class Chaos {
  readonly rng: Rng;
  readonly dir: string;
  readonly bin: string;
  readonly operator = randomBytes(16).toString("hex");
  readonly fleet = randomBytes(16).toString("hex");
  agentPort = 0;
  controlPort = 0;
  ctl!: Ctl;
  server!: Daemon;
  /** --postgres: the cluster the server's state lives in. */
  pg: PgCluster | null = null;
  agents: Daemon[] = [];
  proxies: TcpProxy[] = [];
  clientIds: string[] = [];
  mounted: string | null = null;
  mountNote = "";
  cmds: Cmd[] = [];
  violations: Violation[] = [];
  notes: string[] = [];
  faults = new Map<string, number>();
  /** sha256 of every CommandEvent seen on the wire, by uuid/seq: resends must be identical (R-O2). */
  wire = new Map<string, string>();
  resends = 0;
  wireEvents = 0;
  faultsOn = true;
  submitting = true;
  stopping = false;
  deadline = 0;
  inflight = 0;
  maxInflight: number;
  // One abort for every FollowOutput stream of the run (hence the raised listener limit).
  aborter = withListenerLimit(new AbortController(), 100_000);
  repairs = 0;
  bytesVerified = 0;
  bytesMarked = 0;
  startedAt = Date.now();

  constructor(readonly o: Opts) {
    this.rng = new Rng((o.seed ^ 0x9e3779b9) >>> 0); // the mixing chaos always used: a seed replays as before
    this.dir = o.dir ?? mkdtempSync(path.join(os.tmpdir(), "rvbox-chaos-"));
    mkdirSync(this.dir, { recursive: true });
    this.bin = path.resolve(ROOT, o.dist, "bin/rvbox.js");
    this.maxInflight = o.light ? 12 : 24;
  }

  log(line: string): void {
    const t = ((Date.now() - this.startedAt) / 1000).toFixed(0).padStart(5);
    process.stdout.write(`[${t}s] ${line}\n`);
  }

  violation(kind: string, detail: string, uuid?: string): void {
    this.violations.push({ kind, uuid, detail });
    this.log(`VIOLATION ${kind}${uuid ? ` ${uuid}` : ""}: ${detail}`);
  }

  fault(kind: string): void {
    this.faults.set(kind, (this.faults.get(kind) ?? 0) + 1);
  }

  // ---------------------------------------------------------------- processes

  spawnDaemon(d: Daemon, extra: string[] = []): void {
    const logFile = path.join(this.dir, "logs", `${d.name}.log`);
    appendFileSync(logFile, `--- start ${d.starts + 1} at ${new Date().toISOString()} ${extra.join(" ")}\n`);
    const p = spawn(process.execPath, [this.bin, ...d.argv, ...extra], { cwd: this.dir, stdio: ["ignore", "ignore", "pipe"] });
    d.proc = p;
    d.expectExit = false;
    d.starts++;
    p.stderr!.on("data", (b: Buffer) => {
      appendFileSync(logFile, b);
      d.log = (d.log + b.toString()).slice(-20_000);
    });
    p.on("exit", (code, sig) => {
      if (d.proc === p) d.proc = null;
      if (!d.expectExit && !this.stopping)
        this.violation("daemon-exit", `${d.name} exited by itself (code ${code}, signal ${sig}); log tail: ${d.log.slice(-600).replace(/\s+/g, " ")}`);
    });
  }

  async killDaemon(d: Daemon, sig: NodeJS.Signals): Promise<void> {
    const p = d.proc;
    if (!p) return;
    d.expectExit = true;
    const gone = new Promise<void>((r) => (p.exitCode !== null || p.signalCode !== null ? r() : p.once("exit", () => r())));
    p.kill(sig);
    const t = setTimeout(() => p.kill("SIGKILL"), 20_000);
    await gone;
    clearTimeout(t);
  }

  async serverUp(timeoutMs = 60_000): Promise<boolean> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      try {
        await this.ctl.listClients({}, { timeoutMs: 5000 });
        return true;
      } catch {
        await sleep(200);
      }
    }
    return false;
  }

  async setup(): Promise<void> {
    mkdirSync(path.join(this.dir, "logs"), { recursive: true });
    writeFileSync(path.join(this.dir, "operator-token"), `${this.operator}\n`, { mode: 0o600 });
    writeFileSync(path.join(this.dir, "agent-tokens"), `* ${this.fleet}\n`, { mode: 0o600 });
    writeFileSync(path.join(this.dir, "agent-token"), `${this.fleet}\n`, { mode: 0o600 });
    if (this.o.build) {
      this.log(`building ${this.o.dist}/ (tsc -p tsconfig.build.json)`);
      execFileSync(
        process.execPath,
        [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", path.join(ROOT, "tsconfig.build.json"), "--outDir", path.resolve(ROOT, this.o.dist)],
        { cwd: ROOT, stdio: "inherit" },
      );
    }
    if (!existsSync(this.bin)) fail(`${this.bin} does not exist: run npm run build (or drop --no-build)`);
    this.agentPort = await freePort();
    this.controlPort = await freePort();
    const light = this.o.light;
    if (this.o.postgres) this.pg = await startPgCluster();
    const cfg = path.join(this.dir, "server.json");
    writeFileSync(
      cfg,
      JSON.stringify({
        listen: `127.0.0.1:${this.agentPort}`,
        control: `127.0.0.1:${this.controlPort}`,
        ...(this.pg ? { store: await this.pg.createDatabase("chaos") } : { data: path.join(this.dir, "server") }),
        "agent-tokens": path.join(this.dir, "agent-tokens"),
        "operator-token": path.join(this.dir, "operator-token"),
        "log-level": "warn",
        // Small retention so server retention markers are part of the run.
        limits: light ? { outputPerCommand: MiB / 2, outputPerClient: 2 * MiB } : { outputPerCommand: 6 * MiB, outputPerClient: 48 * MiB },
      }),
    );
    this.server = { name: "server", argv: ["server", "--config", cfg], proc: null, expectExit: false, log: "", starts: 0 };
    this.ctl = controlClient(`http://127.0.0.1:${this.controlPort}`, this.operator);
    this.spawnDaemon(this.server);
    if (!(await this.serverUp())) throw new Error(`server did not come up: ${this.server.log.slice(-2000)}`);
    for (let i = 0; i < this.o.agents; i++) {
      const id = `chaos-a${i}`;
      this.clientIds.push(id);
      const proxy = new TcpProxy(this.agentPort, "127.0.0.1", { onEvent: (e) => this.onWire(e.uuid, e.seq, e.bytes) });
      await proxy.start();
      this.proxies.push(proxy);
      const state = path.join(this.dir, `agent-${i}`);
      mkdirSync(state, { recursive: true });
      if (i === 0 && this.o.diskFull) this.mountTmpfs(state);
      writeFileSync(path.join(this.dir, `launches-${i}`), "");
      // Small raw watermarks and budgets, so an agent cut off from the server summarizes output (R-W6, R-O7).
      const agentCfg = path.join(this.dir, `agent-${i}.json`);
      writeFileSync(agentCfg, JSON.stringify({ limits: { rawHigh: 4 * MiB, rawLow: 2 * MiB, outputPerCommand: 16 * MiB, outputTotal: 96 * MiB } }));
      const d: Daemon = {
        name: `agent-${i}`,
        argv: [
          "agent",
          "--config",
          agentCfg,
          "--server",
          `ws://127.0.0.1:${proxy.port}/v1/agent`,
          "--client-id",
          id,
          "--state",
          state,
          "--token",
          path.join(this.dir, "agent-token"),
          "--log-level",
          "warn",
          "--max-running",
          "8",
          "--max-queued",
          "32",
          "--cwd",
          this.dir,
        ],
        proc: null,
        expectExit: false,
        log: "",
        starts: 0,
      };
      this.agents.push(d);
      this.spawnDaemon(d);
    }
    const end = Date.now() + 60_000;
    while (Date.now() < end) {
      const cs = await this.ctl.listClients({}).catch(() => null);
      if (cs && this.clientIds.every((id) => cs.clients.some((c) => c.clientId === id && c.connected))) break;
      await sleep(200);
    }
  }

  onWire(uuid: string, seq: number, bytes: Buffer): void {
    this.wireEvents++;
    const k = `${uuid}/${seq}`;
    const h = createHash("sha256").update(bytes).digest("base64");
    const prev = this.wire.get(k);
    if (prev === undefined) this.wire.set(k, h);
    else {
      this.resends++;
      if (prev !== h) this.violation("resend-differs", `event ${seq} was resent with different bytes`, uuid);
    }
  }

  mountTmpfs(dir: string): void {
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=256m,mode=0700", "tmpfs", dir], { stdio: ["ignore", "ignore", "pipe"] });
      this.mounted = dir;
      this.mountNote = `disk-full: agent-0's state dir is a 256 MiB tmpfs (${dir})`;
    } catch (err) {
      this.mountNote = `disk-full: NOT RUN: mounting a tmpfs on ${dir} is not permitted here (${String((err as Error).message).split("\n")[0]}); continuing without that fault`;
    }
    this.log(this.mountNote);
  }

  unmount(): void {
    if (!this.mounted) return;
    try {
      execFileSync("umount", [this.mounted], { stdio: "ignore" });
    } catch {
      try {
        execFileSync("umount", ["-l", this.mounted], { stdio: "ignore" });
      } catch {
        // reported below
      }
    }
    this.mounted = null;
  }

  // ---------------------------------------------------------------- commands

  plan(n: number): Cmd {
    const r = this.rng;
    const light = this.o.light;
    const kind = r.weighted<Kind>({ tiny: 25, small: 20, medium: 9, large: light ? 2 : 2, fail: 6, stderr: 6, stdin: 12, signal: 8, cancel: 4, timeout: 5 });
    // Large outputs never go to the agent whose data is a small tmpfs.
    const agent = kind === "large" && this.o.agents > 1 && this.mounted ? r.int(1, this.o.agents - 1) : r.int(0, this.o.agents - 1);
    const nonce = `c${this.o.seed.toString(36)}x${n.toString(36)}`;
    const c: Cmd = {
      n,
      nonce,
      uuid: `chaos-${this.o.seed}-${n}`,
      agent,
      kind,
      variant: r.weighted<Variant>({ argv: 3, sh: 3, bash: 1, script: 2, shebang: 1 }),
      exitWant: 0,
      timeoutMs: 150_000,
      acked: false,
      stdin: [],
      closeAcked: false,
      signals: [],
      out: { next: 0, dataBytes: 0, markerBytes: 0 },
      err: { next: 0, dataBytes: 0, markerBytes: 0 },
      incomplete: false,
      markers: 0,
      followErrors: 0,
    };
    const seed = r.int(1, 2 ** 31 - 2);
    const g = (lines: number, minLen: number, maxLen: number, noisy: 0 | 1 = 0, errEvery = 0): GenParams => ({ lines, minLen, maxLen, seed, noisy, errEvery });
    switch (kind) {
      case "tiny":
        c.gen = g(1, 1, 40);
        break;
      case "small":
        c.gen = g(r.int(2, 200), 10, 300, r.next() < 0.3 ? 1 : 0);
        break;
      case "medium":
        c.gen = light ? g(r.int(100, 600), 200, 2000, r.next() < 0.3 ? 1 : 0) : g(r.int(200, 2000), 200, 2000, r.next() < 0.3 ? 1 : 0);
        break;
      case "large": {
        // light: 2-4 MiB; full: 8-40 MiB
        const mib = light ? r.int(2, 4) : r.int(8, 40);
        c.gen = g(Math.round((mib * MiB) / 4030), 1000, 7000, r.next() < 0.5 ? 1 : 0, r.next() < 0.2 ? 7 : 0);
        c.timeoutMs = 600_000;
        break;
      }
      case "fail":
        c.gen = g(r.int(1, 50), 1, 200);
        c.exitWant = r.pick([1, 3, 42, 99]);
        break;
      case "stderr":
        c.gen = g(r.int(2, 300), 1, 500, 0, r.int(1, 4));
        break;
      case "stdin":
        break;
      case "signal":
      case "cancel":
        c.ticks = 600;
        c.tickSeed = seed;
        break;
      case "timeout":
        c.ticks = 600;
        c.tickSeed = seed;
        c.timeoutMs = r.int(500, 4000);
        break;
    }
    return c;
  }

  body(c: Cmd): string {
    const lf = path.join(this.dir, `launches-${c.agent}`);
    let main: string;
    if (c.gen) main = genAwk(c.nonce, c.gen);
    else if (c.kind === "stdin") main = echoAwk(c.nonce);
    else main = tickerSh(c.nonce, c.ticks!, c.tickSeed!);
    return `printf 'L %s\\n' ${c.nonce} >> ${lf}\n${main}\nrc=$?\nprintf 'D %s %s\\n' ${c.nonce} $rc >> ${lf}\nexit ${c.gen ? c.exitWant : "$rc"}\n`;
  }

  request(c: Cmd): MessageInitShape<typeof SubmitCommandRequestSchema> {
    const text = this.body(c);
    let program: MessageInitShape<typeof SubmitCommandRequestSchema>["program"];
    switch (c.variant) {
      case "argv":
        program = { case: "argv", value: { argv: ["sh", "-c", text] } };
        break;
      case "sh":
        program = { case: "shell", value: { shell: ShellType.SH, commandLine: text } };
        break;
      case "bash":
        program = { case: "shell", value: { shell: ShellType.BASH, commandLine: text } };
        break;
      case "script":
        program = { case: "script", value: { content: Buffer.from(text), interpreter: "sh", args: [], sha256: new Uint8Array() } };
        break;
      case "shebang":
        program = { case: "script", value: { content: Buffer.from(`#!/bin/sh\n${text}`), interpreter: "", args: [], sha256: new Uint8Array() } };
        break;
    }
    return {
      clientId: this.clientIds[c.agent]!,
      program,
      timeoutMs: BigInt(c.timeoutMs),
      stdinOpen: c.kind === "stdin",
      issueUuid: c.uuid,
      requestId: `${c.uuid}/submit`,
    };
  }

  /** Retry a mutation with the same request id until the core answers (or refuses). */
  async call<T>(what: string, fn: () => Promise<T>, maxMs = 300_000): Promise<{ ok: T } | { refused: ConnectError } | { gaveUp: string }> {
    const end = Date.now() + maxMs;
    let last = "";
    let wait = 200;
    while (Date.now() < end && !this.aborter.signal.aborted) {
      try {
        return { ok: await fn() };
      } catch (err) {
        const refusal = coreRefusal(err);
        if (refusal && !/CAPACITY/.test(refusal.message) && refusal.code !== ConnectCode.ResourceExhausted) return { refused: refusal };
        last = String((err as Error).message ?? err);
        await sleep(wait);
        wait = Math.min(wait * 2, 3000);
      }
    }
    return { gaveUp: `${what}: ${last}` };
  }

  async drive(c: Cmd): Promise<void> {
    const r = this.rng;
    const sub = await this.call("submit", () => this.ctl.submitCommand(this.request(c), { timeoutMs: 30_000 }));
    if ("refused" in sub) {
      this.violation("submit-refused", `${sub.refused.message}`, c.uuid);
      return;
    }
    if ("gaveUp" in sub) {
      this.notes.push(`${c.uuid}: submit never answered (${sub.gaveUp}); checked at the end`);
      return;
    }
    c.acked = true;
    const following = this.follow(c);
    if (c.kind === "stdin") {
      const writes = r.int(1, 20);
      for (let k = 1; k <= writes; k++) {
        const data = `w${k}-${randomBytes(r.int(1, 40)).toString("hex")}`;
        const at = { data, acked: false };
        c.stdin.push(at);
        const w = await this.call("stdin", () =>
          this.ctl.writeStdin({ issueUuid: c.uuid, data: Buffer.from(data), appendNewline: true, requestId: `${c.uuid}/w${k}` }, { timeoutMs: 30_000 }),
        );
        if ("ok" in w) at.acked = true;
        else if ("refused" in w)
          break; // the command ended (or the window is full); fate of this write is known: not applied
        else break;
        await sleep(r.int(0, 400));
      }
      if (r.next() < 0.85) {
        const cl = await this.call("close", () => this.ctl.closeStdin({ issueUuid: c.uuid, requestId: `${c.uuid}/close` }, { timeoutMs: 30_000 }));
        c.closeAcked = "ok" in cl;
      } else await this.signal(c, SignalKind.CANCEL);
    } else if (c.kind === "signal") {
      await sleep(r.int(300, 5000));
      await this.signal(
        c,
        r.pick([
          SignalKind.CANCEL,
          SignalKind.TERMINATE,
          SignalKind.KILL,
          SignalKind.INTERRUPT,
          SignalKind.HANGUP,
          SignalKind.USER1,
          SignalKind.USER2,
          SignalKind.QUIT,
        ]),
      );
    } else if (c.kind === "cancel") {
      await this.signal(c, SignalKind.CANCEL);
    }
    await following;
  }

  async signal(c: Cmd, kind: SignalKind): Promise<void> {
    const at = { kind, acked: false };
    c.signals.push(at);
    const k = c.signals.length;
    const s = await this.call("signal", () => this.ctl.signalCommand({ issueUuid: c.uuid, signal: kind, requestId: `${c.uuid}/s${k}` }, { timeoutMs: 30_000 }));
    at.acked = "ok" in s;
  }

  /** FollowOutput to `finished`, resuming after every broken stream; checks each byte as it arrives. */
  async follow(c: Cmd): Promise<void> {
    let from = 1;
    while (!c.finished && !this.aborter.signal.aborted) {
      try {
        for await (const m of this.ctl.followOutput({ issueUuid: c.uuid, fromEventSeq: BigInt(from), follow: true }, { signal: this.aborter.signal })) {
          const it = m.item;
          const seq = Number(m.eventSeq);
          if (it.case === "output") {
            this.onData(c, it.value.stream === OutputStream.STDERR ? "err" : "out", Number(it.value.streamOffset), Buffer.from(it.value.data), seq, from);
            from = Math.max(from, seq + 1);
          } else if (it.case === "truncation" || it.case === "retention") {
            c.markers++;
            const info = `${it.case} marker at seq ${seq}${it.value.removedEvents ? ` removing events ${it.value.removedEvents.firstEventSeq}..${it.value.removedEvents.lastEventSeq}` : ""}, read from seq ${from}`;
            for (const b of it.value.removedBytes) this.onMarker(c, b.stream === OutputStream.STDERR ? "err" : "out", Number(b.offset), Number(b.length), info);
            // Resume after the marker's own position, not after its removed range: events inside
            // that range that were not removed (agent markers, lifecycle) still follow it.
            from = Math.max(from, seq + 1);
          } else if (it.case === "incomplete") {
            c.incomplete = true;
            from = Math.max(from, seq + 1);
          } else if (it.case === "finished") {
            c.finished = it.value;
          } else if (seq > 0) {
            from = Math.max(from, seq + 1);
          }
        }
      } catch (err) {
        if (this.aborter.signal.aborted) return;
        const e = err instanceof ConnectError ? err : null;
        if (e?.code === ConnectCode.DataLoss) {
          this.violation("data-loss", e.message, c.uuid);
          return;
        }
        c.followErrors++;
        await sleep(300 + this.rng.int(0, 700));
      }
    }
    if (c.finished) this.onFinished(c);
  }

  expected(c: Cmd): { stdout: Buffer; stderr: Buffer } | null {
    if (c.gen) return (c.expected ??= genExpected(c.nonce, c.gen));
    if (c.ticks) return (c.expected ??= { stdout: tickerExpected(c.nonce, c.ticks, c.tickSeed!), stderr: Buffer.alloc(0) });
    return null;
  }

  onData(c: Cmd, s: "out" | "err", off: number, data: Buffer, seq: number, from: number): void {
    const st = c[s];
    if (off > st.next) this.violation("gap", `${s} bytes ${st.next}..${off} missing with no marker (output event ${seq}, read from seq ${from})`, c.uuid);
    const exp = this.expected(c);
    if (c.ticks && s === "err") {
      // The ticker prints nothing on stderr itself, but a shell that survives a signal
      // reports its killed `sleep` there (bash ignores SIGQUIT, and says "Quit"): checked at the end.
      if (off + data.length > st.next) (c.echo ??= []).push(data.subarray(Math.max(0, st.next - off)));
    } else if (exp) {
      const want = (s === "out" ? exp.stdout : exp.stderr).subarray(off, off + data.length);
      if (want.length < data.length)
        this.violation(
          "invented",
          `${s} has ${off + data.length} bytes, the process printed at most ${(s === "out" ? exp.stdout : exp.stderr).length}`,
          c.uuid,
        );
      else if (!want.equals(data)) {
        let i = 0;
        while (i < data.length && want[i] === data[i]) i++;
        this.violation(
          "corrupt",
          `${s} byte ${off + i} differs: got ${JSON.stringify(data.subarray(i, i + 40).toString("latin1"))}, printed ${JSON.stringify(want.subarray(i, i + 40).toString("latin1"))}`,
          c.uuid,
        );
      }
    } else if (s === "out") {
      if (off === st.next) (c.echo ??= []).push(data);
      else if (off + data.length > st.next) (c.echo ??= []).push(data.subarray(st.next - off));
    } else {
      this.violation("invented", `stderr from the stdin echo command: ${JSON.stringify(data.subarray(0, 60).toString("latin1"))}`, c.uuid);
    }
    const fresh = Math.max(0, off + data.length - Math.max(st.next, off));
    st.dataBytes += fresh;
    this.bytesVerified += fresh;
    st.next = Math.max(st.next, off + data.length);
  }

  onMarker(c: Cmd, s: "out" | "err", off: number, len: number, info: string): void {
    const st = c[s];
    if (off > st.next) this.violation("gap", `${s} bytes ${st.next}..${off} missing before a marker at ${off} (${info})`, c.uuid);
    const fresh = Math.max(0, off + len - Math.max(st.next, off));
    st.markerBytes += fresh;
    this.bytesMarked += fresh;
    st.next = Math.max(st.next, off + len);
    if (c.kind === "stdin") c.echo = undefined; // the echo can no longer be checked line by line
  }

  onFinished(c: Cmd): void {
    const f = c.finished!;
    if (!TERMINAL.has(f.state)) this.violation("not-terminal", `FollowOutput finished with state ${stateName(f.state)}`, c.uuid);
    if (c.ticks && c.echo) {
      const bad = Buffer.concat(c.echo)
        .toString("latin1")
        .split("\n")
        // bash pads the job's pid to five columns ("line 2:  8794 Quit   sleep 0.2"), so a short pid has two spaces.
        .filter((l) => l !== "" && !/^(?:ba)?sh: (?:line \d+: +)?\d+ [A-Za-z ()]+?\s+sleep 0\.2$/.test(l));
      if (bad.length > 0)
        this.violation("invented", `ticker stderr has ${JSON.stringify(bad[0]!.slice(0, 80))}, not a shell's report of a signalled sleep`, c.uuid);
      c.echo = undefined;
    }
    if (c.kind === "stdin" && c.echo && c.out.markerBytes === 0) {
      const got = Buffer.concat(c.echo);
      const r = checkEcho(c.nonce, got, c.stdin);
      if (r.error) this.violation("stdin", r.error, c.uuid);
      (c as Cmd & { echoMatched?: number; echoLastAcked?: number }).echoMatched = r.matched;
      (c as Cmd & { echoLastAcked?: number }).echoLastAcked = r.lastAckedMatched;
    }
    c.echo = c.echo && c.kind === "stdin" ? [Buffer.concat(c.echo)] : undefined;
    c.expected = undefined;
  }

  // ---------------------------------------------------------------- loops

  async submitLoop(): Promise<void> {
    let n = 0;
    const running = new Set<Promise<void>>();
    while (this.submitting && !this.aborter.signal.aborted) {
      const gap = (-Math.log(1 - this.rng.next()) * 1000) / this.o.rate;
      await sleep(Math.min(gap, 10_000 / this.o.rate));
      if (!this.submitting) break;
      if (this.inflight >= this.maxInflight) continue;
      const c = this.plan(++n);
      this.cmds.push(c);
      this.inflight++;
      const p = this.drive(c)
        .catch((err) => this.violation("chaos-error", `driver failed: ${String((err as Error)?.stack ?? err)}`, c.uuid))
        .finally(() => {
          this.inflight--;
          running.delete(p);
        });
      running.add(p);
    }
  }

  async restart(d: Daemon, how: "kill9" | "term"): Promise<void> {
    await this.killDaemon(d, how === "kill9" ? "SIGKILL" : "SIGTERM");
    await sleep(this.rng.int(200, 3000));
    if (this.stopping) return;
    this.spawnDaemon(d);
    if (d === this.server) {
      if (!(await this.serverUp(90_000))) this.violation("restart", `server did not answer within 90 s after restart: ${d.log.slice(-800)}`);
    }
  }

  async faultLoop(): Promise<void> {
    const r = this.rng;
    let lastDiskFull = 0;
    const weights = {
      "kill9-server": 14,
      "kill9-agent": 20,
      "term-restart": 4,
      cut: 18,
      "cut-all": 5,
      stall: 12,
      "stall-up": 6,
      "stall-down": 6,
      "disk-full": 8,
      "kill9-postgres": this.pg ? 8 : 0,
    };
    // Every kind once first, the crashes first, so even a one-minute run sees each of them.
    const order: Array<keyof typeof weights> = [
      "kill9-server",
      "kill9-agent",
      "disk-full",
      "cut",
      "stall",
      "stall-up",
      "stall-down",
      "cut-all",
      "term-restart",
      "kill9-postgres",
    ];
    const first = order.filter((k) => (k !== "disk-full" || this.mounted !== null) && (k !== "kill9-postgres" || this.pg !== null));
    while (this.faultsOn && !this.aborter.signal.aborted) {
      await sleep(r.int(this.o.faultEvery * 500, this.o.faultEvery * 1500));
      if (!this.faultsOn) break;
      const canDisk = this.mounted !== null && Date.now() - lastDiskFull > (this.o.light ? 20_000 : 180_000);
      const { "disk-full": diskWeight, ...rest } = weights;
      const kind = first.shift() ?? r.weighted<keyof typeof weights>(canDisk ? { ...rest, "disk-full": diskWeight } : rest);
      const a = r.int(0, this.o.agents - 1);
      this.fault(kind);
      this.log(`fault ${kind}${kind.includes("agent") || (kind.startsWith("cut") && kind !== "cut-all") || kind.startsWith("stall") ? ` agent-${a}` : ""}`);
      switch (kind) {
        case "kill9-server":
          await this.restart(this.server, "kill9");
          break;
        case "kill9-agent":
          await this.restart(this.agents[a]!, "kill9");
          break;
        case "term-restart":
          await this.restart(r.next() < 0.3 ? this.server : this.agents[a]!, "term");
          break;
        case "cut":
          this.proxies[a]!.cutAll();
          break;
        case "cut-all":
          for (const p of this.proxies) p.cutAll();
          break;
        case "stall":
        case "stall-up":
        case "stall-down": {
          const p = this.proxies[a]!;
          if (kind === "stall") p.stall();
          else if (kind === "stall-up") p.stallUpstream();
          else p.stallDownstream();
          // Below and above the 30 s heartbeat deadline.
          await sleep(this.o.light ? r.int(1000, 6000) : r.next() < 0.75 ? r.int(1000, 12_000) : r.int(31_000, 45_000));
          p.resume();
          break;
        }
        case "kill9-postgres":
          // The server waits it out (not ready, nothing acknowledged) and carries on: no restart of its own.
          await this.pg!.crashAndRestart();
          break;
        case "disk-full": {
          lastDiskFull = Date.now();
          await this.diskFull(this.o.light ? r.int(2000, 5000) : r.int(3000, 15_000));
          break;
        }
      }
    }
  }

  /** Fill agent-0's tmpfs, hold, free it, then restart the agent (its store is fail-stop after a failed write). */
  async diskFull(holdMs: number): Promise<void> {
    const dir = this.mounted!;
    const ballast = path.join(dir, "chaos-ballast");
    let wrote = 0;
    try {
      const fd = openSync(ballast, "w");
      const big = Buffer.alloc(MiB, 0x5a);
      const small = Buffer.alloc(4096, 0x5a);
      try {
        for (;;) wrote += writeSync(fd, big);
      } catch {
        try {
          for (;;) wrote += writeSync(fd, small);
        } catch {
          // full
        }
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      this.notes.push(`disk-full: could not write ballast: ${String(err)}`);
    }
    await sleep(holdMs);
    try {
      unlinkSync(ballast);
    } catch {
      // gone
    }
    const d = this.agents[0]!;
    const incident = /store write failed|essential-store incident/.test(d.log);
    this.log(
      `disk-full: ${(wrote / MiB).toFixed(0)} MiB ballast held ${holdMs} ms; agent-0 ${incident ? "raised a store incident" : "did not write meanwhile"}; restarting it`,
    );
    d.log = "";
    await this.restart(d, "kill9");
    await sleep(3000);
    if (/corrupt|damaged|--repair-store/.test(d.log)) {
      this.repairs++;
      this.notes.push(`disk-full: agent-0 refused its store after the disk filled and needed --repair-store (${d.log.slice(-300).replace(/\s+/g, " ")})`);
      this.log("disk-full: agent-0 needs --repair-store; restarting with it");
      await this.killDaemon(d, "SIGTERM");
      this.spawnDaemon(d, ["--repair-store"]);
    }
  }

  async progressLoop(): Promise<void> {
    while (!this.stopping) {
      await sleep(30_000);
      if (this.stopping) break;
      const done = this.cmds.filter((c) => c.finished).length;
      this.log(
        `progress: ${this.cmds.length} submitted, ${done} finished, ${this.inflight} in flight, faults ${[...this.faults.values()].reduce((a, b) => a + b, 0)}, ${(this.bytesVerified / MiB).toFixed(1)} MiB verified, ${this.violations.length} violations`,
      );
    }
  }

  // ---------------------------------------------------------------- end checks

  readLaunches(): Map<string, { agent: number; launches: number; done: number[] }> {
    const m = new Map<string, { agent: number; launches: number; done: number[] }>();
    for (let i = 0; i < this.o.agents; i++) {
      const f = path.join(this.dir, `launches-${i}`);
      for (const line of readFileSync(f, "utf8").split("\n")) {
        if (line === "") continue;
        const [t, nonce, rc] = line.split(" ");
        const e = m.get(nonce!) ?? { agent: i, launches: 0, done: [] };
        if (e.agent !== i) this.violation("wrong-agent", `nonce ${nonce} appears in launches-${e.agent} and launches-${i}`);
        if (t === "L") e.launches++;
        else if (t === "D") e.done.push(Number(rc));
        else this.violation("ledger", `bad line in launches-${i}: ${JSON.stringify(line)}`);
        m.set(nonce!, e);
      }
    }
    return m;
  }

  async finalChecks(): Promise<void> {
    const ledger = this.readLaunches();
    const byNonce = new Map(this.cmds.map((c) => [c.nonce, c]));
    for (const [nonce, e] of ledger) {
      const c = byNonce.get(nonce);
      if (!c) this.violation("invented-launch", `nonce ${nonce} launched on agent-${e.agent} but was never submitted`);
      else if (c.agent !== e.agent) this.violation("wrong-agent", `${nonce} was for agent-${c.agent}, launched on agent-${e.agent}`, c.uuid);
      if (e.launches > 1) this.violation("launched-twice", `nonce ${nonce} launched ${e.launches} times`, c?.uuid);
    }
    for (const c of this.cmds) {
      const e = ledger.get(c.nonce);
      if (!c.acked) {
        // The submit was never answered: the command may exist or not, but must be consistent.
        let cmd: Command | undefined;
        try {
          cmd = (await this.ctl.getCommand({ issueUuid: c.uuid })).command;
        } catch {
          cmd = undefined;
        }
        if (!cmd && e) this.violation("invented-launch", `unacknowledged submit ${c.uuid} is unknown to the server but launched`, c.uuid);
        if (cmd && !TERMINAL.has(cmd.state))
          this.violation("not-terminal", `unacknowledged but stored command is ${stateName(cmd.state)} after the drain`, c.uuid);
        continue;
      }
      const f = c.finished;
      if (!f) {
        let st = "unknown";
        try {
          const g = (await this.ctl.getCommand({ issueUuid: c.uuid })).command;
          st = g ? stateName(g.state) : "missing";
        } catch (err) {
          st = `GetCommand failed: ${String((err as Error).message)}`;
        }
        this.violation("not-terminal", `${c.kind} command not finished after the drain (server says ${st})`, c.uuid);
        continue;
      }
      // Terminal states never change.
      try {
        const g = (await this.ctl.getCommand({ issueUuid: c.uuid })).command;
        if (!g) this.violation("lost", `acknowledged command is gone`, c.uuid);
        else if (g.state !== f.state) this.violation("terminal-changed", `finished ${stateName(f.state)}, now ${stateName(g.state)}`, c.uuid);
      } catch (err) {
        if (err instanceof ConnectError && err.code === ConnectCode.NotFound) this.violation("lost", `acknowledged command is unknown to the server`, c.uuid);
      }
      const launched = (e?.launches ?? 0) > 0;
      const exited = f.exitCode !== undefined;
      if ((f.state === L.SUCCEEDED || exited) && !launched)
        this.violation("never-launched", `${stateName(f.state)} (exit ${f.exitCode}) but the process never ran`, c.uuid);
      if ((f.state === L.REJECTED || f.state === L.EXPIRED) && launched) this.violation("mislabeled", `${stateName(f.state)} but the process ran`, c.uuid);
      if ((c.out.dataBytes > 0 || c.err.dataBytes > 0) && !launched) this.violation("invented", `output stored but the process never ran`, c.uuid);
      // An agent that restarted under a running command never drained its pipes: R-O8 wants a marker.
      if (f.state === L.INTERRUPTED && f.terminalSource === TerminalSource.AGENT && launched && !c.incomplete)
        this.violation("R-O8", `interrupted by an agent restart after launch, but no OutputIncomplete marker`, c.uuid);
      const cleanExit = e?.done.includes(0) ?? false;
      if (c.gen) {
        const exp = genExpected(c.nonce, c.gen);
        if (cleanExit && exited && f.exitCode !== c.exitWant) this.violation("exit-code", `exit ${f.exitCode}, the script exited ${c.exitWant}`, c.uuid);
        if (f.state === L.SUCCEEDED && c.exitWant !== 0) this.violation("mislabeled", `SUCCEEDED, the script exited ${c.exitWant}`, c.uuid);
        if (exited && cleanExit && !c.incomplete) {
          for (const [s, len] of [
            ["out", exp.stdout.length],
            ["err", exp.stderr.length],
          ] as const) {
            if (c[s].next < len)
              this.violation(
                "missing",
                `${s} ends at ${c[s].next} of ${len} bytes printed, no incomplete marker (${stateName(f.state)}, exit ${f.exitCode})`,
                c.uuid,
              );
          }
        }
      } else if (c.ticks) {
        if (c.kind === "timeout" && f.state === L.SUCCEEDED)
          this.violation("timeout", `timeout ${c.timeoutMs} ms but the ${c.ticks * 0.2} s ticker succeeded`, c.uuid);
        if (exited && cleanExit && !c.incomplete && c.out.next < tickerExpected(c.nonce, c.ticks, c.tickSeed!).length)
          this.violation("missing", `ticker exited cleanly but its output ends at ${c.out.next}`, c.uuid);
        if (c.signals.some((s) => s.acked) && f.state === L.SUCCEEDED)
          this.notes.push(`${c.uuid}: a signal was acknowledged but the ${c.ticks * 0.2} s ticker still ran to the end`);
      } else if (c.kind === "stdin") {
        const lastAcked = c.stdin.map((w) => w.acked).lastIndexOf(true);
        const m = c as Cmd & { echoLastAcked?: number };
        if (f.state === L.SUCCEEDED && cleanExit && c.closeAcked && c.echo && c.out.markerBytes === 0 && (m.echoLastAcked ?? -1) < lastAcked && !c.incomplete) {
          this.violation(
            "stdin",
            `stdin closed and the echo exited 0, but acknowledged write ${lastAcked + 1} never came back (matched through ${(m.echoLastAcked ?? -1) + 1})`,
            c.uuid,
          );
        }
      }
    }
  }

  // ---------------------------------------------------------------- run

  async run(): Promise<number> {
    await this.setup();
    this.log(
      `chaos: seed ${this.o.seed}, ${this.o.agents} agents behind proxies, ${this.o.minutes} min of faults at ~${this.o.rate} commands/s${this.o.light ? " (light)" : ""}; daemons ${path.relative(ROOT, this.bin)}; run dir ${this.dir}`,
    );
    this.deadline = Date.now() + this.o.minutes * 60_000;
    const progress = this.progressLoop();
    const submit = this.submitLoop();
    const faults = this.faultLoop();
    while (Date.now() < this.deadline && !this.aborter.signal.aborted) await sleep(500);
    // Safety phase over: no new commands, no new faults; heal everything.
    this.submitting = false;
    this.faultsOn = false;
    this.log("faults off: healing and draining");
    await faults;
    for (const p of this.proxies) p.resume();
    for (const d of [this.server, ...this.agents]) if (!d.proc) this.spawnDaemon(d);
    await submit;
    // Liveness phase: everything acknowledged must finish.
    const drainEnd = Date.now() + this.o.drainMinutes * 60_000;
    while (Date.now() < drainEnd && (this.inflight > 0 || this.cmds.some((c) => c.acked && !c.finished))) await sleep(500);
    const drainSecs = ((Date.now() - this.deadline) / 1000).toFixed(0);
    this.aborter.abort();
    await sleep(200);
    await this.finalChecks();
    // Daemon logs: an invariant violation or a fatal error is a bug even if nothing else noticed.
    for (const d of [this.server, ...this.agents]) {
      const text = readFileSync(path.join(this.dir, "logs", `${d.name}.log`), "utf8");
      const bad = text.split("\n").filter((l) => /InvariantViolation|invariant violated|"fatal"|\bfatal\b/i.test(l));
      if (bad.length > 0) this.violation("daemon-log", `${d.name}: ${bad.length} fatal/invariant lines, first: ${bad[0]!.slice(0, 300)}`);
    }
    this.stopping = true;
    await progress.catch(() => {});
    return this.report(drainSecs);
  }

  report(drainSecs: string): number {
    const byKind = new Map<string, number>();
    const byState = new Map<string, number>();
    for (const c of this.cmds) {
      byKind.set(c.kind, (byKind.get(c.kind) ?? 0) + 1);
      const s = c.finished ? stateName(c.finished.state) : c.acked ? "UNFINISHED" : "UNACKNOWLEDGED";
      byState.set(s, (byState.get(s) ?? 0) + 1);
    }
    const fmt = (m: Map<string, number>) =>
      [...m]
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${k} ${v}`)
        .join(", ");
    const faults = [...this.faults.values()].reduce((a, b) => a + b, 0);
    const markers = this.cmds.reduce((s, c) => s + c.markers, 0);
    const incompletes = this.cmds.filter((c) => c.incomplete).length;
    const lines = [
      `commands: ${this.cmds.length} submitted (${this.cmds.filter((c) => c.acked).length} acknowledged) over ${this.o.minutes} min; drain ${drainSecs} s`,
      `  by kind: ${fmt(byKind)}`,
      `  final states: ${fmt(byState)}`,
      `faults: ${faults} (${fmt(this.faults) || "none"})${this.repairs ? `; --repair-store needed ${this.repairs} times` : ""}`,
      `  ${this.mountNote}`,
      `  daemon starts: server ${this.server.starts}, ${this.agents.map((a) => `${a.name} ${a.starts}`).join(", ")}`,
      `bytes verified: ${this.bytesVerified} (${(this.bytesVerified / MiB).toFixed(1)} MiB) byte for byte against what the processes printed; ${this.bytesMarked} bytes (${(this.bytesMarked / MiB).toFixed(1)} MiB) covered by ${markers} truncation/retention markers; ${incompletes} commands with an incomplete marker`,
      `wire: ${this.wireEvents} CommandEvents seen by the proxies, ${this.resends} resends, each byte-identical to the first send unless listed below (R-O2)`,
      `followers resumed ${this.cmds.reduce((s, c) => s + c.followErrors, 0)} times after a broken FollowOutput stream`,
      `notes: ${this.notes.length}${this.notes.length ? `\n  ${this.notes.slice(0, 20).join("\n  ")}` : ""}`,
      `violations: ${this.violations.length}`,
      ...this.violations.slice(0, 50).map((v) => `  ${v.kind}${v.uuid ? ` ${v.uuid}` : ""}: ${v.detail}`),
    ];
    for (const l of lines) process.stdout.write(`${l}\n`);
    const summary = {
      seed: this.o.seed,
      minutes: this.o.minutes,
      commands: this.cmds.length,
      acknowledged: this.cmds.filter((c) => c.acked).length,
      byKind: Object.fromEntries(byKind),
      byState: Object.fromEntries(byState),
      faults: Object.fromEntries(this.faults),
      faultTotal: faults,
      diskFull: this.mountNote,
      wireEvents: this.wireEvents,
      resends: this.resends,
      bytesVerified: this.bytesVerified,
      bytesMarked: this.bytesMarked,
      markers,
      incompletes,
      violations: this.violations,
      notes: this.notes.length,
      runDir: this.dir,
    };
    writeFileSync(path.join(this.dir, "summary.json"), JSON.stringify(summary, null, 2));
    process.stdout.write(`CHAOS-SUMMARY ${JSON.stringify({ ...summary, violations: this.violations.length })}\n`);
    return this.violations.length > 0 ? 1 : 0;
  }

  /** Stop everything we started; unmount; remove the run directory unless asked to keep it. */
  async cleanup(keep: boolean): Promise<void> {
    this.stopping = true;
    this.faultsOn = false;
    this.submitting = false;
    this.aborter.abort();
    for (const p of this.proxies) p.resume();
    await Promise.all(this.agents.map((a) => this.killDaemon(a, "SIGTERM")));
    await this.killDaemon(this.server, "SIGTERM").catch(() => {});
    for (const p of this.proxies) await p.close().catch(() => {});
    await this.pg?.stop().catch(() => {});
    this.killStrays();
    this.unmount();
    if (!keep) rmSync(this.dir, { recursive: true, force: true });
    else process.stdout.write(`run directory kept: ${this.dir}\n`);
  }

  /** Commands orphaned by a SIGKILLed agent that nobody restarted: found by this run's directory in their command line. */
  killStrays(): void {
    for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
      if (Number(pid) === process.pid) continue;
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
        if (cmdline.includes(`${this.dir}/launches-`) || cmdline.includes(`${path.join(this.dir, "agent-") + path.sep}scripts`))
          process.kill(Number(pid), "SIGKILL");
      } catch {
        // gone
      }
    }
  }
}

async function main(): Promise<void> {
  const o = parseChaosArgs(process.argv.slice(2));
  const chaos = new Chaos(o);
  let cleaning = false;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (cleaning) return;
    cleaning = true;
    process.stdout.write(`chaos: ${sig}: stopping daemons, unmounting, cleaning up\n`);
    void chaos.cleanup(o.keep || o.dir !== null).finally(() => process.exit(130));
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  process.on("exit", () => chaos.unmount());
  let code = 1;
  try {
    code = await chaos.run();
  } catch (err) {
    process.stderr.write(`chaos: run failed: ${String((err as Error)?.stack ?? err)}\n`);
    code = 1;
  }
  if (cleaning) return;
  cleaning = true;
  await chaos.cleanup(o.keep || o.dir !== null || code !== 0);
  process.exit(code);
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) void main();

function withListenerLimit(a: AbortController, n: number): AbortController {
  setMaxListeners(n, a.signal);
  return a;
}
