// Shared helpers for the end-to-end tests: temp dirs, in-process and
// child-process daemons, a control client, output collection, and the
// server store a test runs on (describeStores: embedded and PostgreSQL).
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fsp, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ControlService, type Command } from "../../../protos/gen/rvbox/v1/control_pb.js";
import { OutputStream } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { AgentDaemon, type AgentDaemonOptions } from "../../../shells/agent/agent-daemon.js";
import { AgentTokens, OperatorToken } from "../../../shells/server/auth.js";
import { ServerDaemon, type ServerDaemonOptions } from "../../../shells/server/server-daemon.js";
import { createLogger, type LogLevel } from "../../../shells/runtime/log.js";
import { SEGMENT_DIR } from "../../../shells/storage/server-storage.js";
import pg from "pg";
import { describe } from "vitest";
import { type SharedPgCluster, sharedPgCluster } from "../../support/pg-shared.js";

export const ROOT = path.resolve(import.meta.dirname, "../../..");
export const BIN = path.join(ROOT, "bin/rvbox.js");
export const LOG_LEVEL: LogLevel = (process.env.RVBOX_TEST_LOG as LogLevel | undefined) ?? "silent";

const made: string[] = [];
export async function tempDir(prefix = "rvbox-e2e-"): Promise<string> {
  const d = await fsp.mkdtemp(path.join(os.tmpdir(), prefix));
  made.push(d);
  return d;
}
export async function cleanupTemp(): Promise<void> {
  for (const d of made.splice(0)) await fsp.rm(d, { recursive: true, force: true }).catch(() => {});
}

export const OPERATOR_TOKEN = `operator-${randomBytes(8).toString("hex")}`;
export const FLEET_TOKEN = `fleet-${randomBytes(8).toString("hex")}`;

export interface TestServer {
  daemon: ServerDaemon;
  url: string;
  controlUrl: string;
  client: Client<typeof ControlService>;
  dataDir: string;
  /** The PostgreSQL URL it keeps its state in (--store), or undefined: the embedded store in dataDir. */
  store: string | undefined;
  close(): Promise<void>;
}

export function controlClient(baseUrl: string, token = OPERATOR_TOKEN): Client<typeof ControlService> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(ControlService, createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [auth] }));
}

export async function startServer(opts: Partial<ServerDaemonOptions> & { dataDir?: string; tokens?: string } = {}): Promise<TestServer> {
  const dataDir = opts.dataDir ?? (await tempDir("rvbox-server-"));
  const tokens = AgentTokens.parse(opts.tokens ?? `* ${FLEET_TOKEN}\n`);
  const errors: unknown[] = [];
  const daemon = await ServerDaemon.start({
    listen: { host: "127.0.0.1", port: 0 },
    control: { host: "127.0.0.1", port: 0 },
    agentTokens: tokens,
    operatorToken: new OperatorToken(OPERATOR_TOKEN),
    log: createLogger("server", LOG_LEVEL),
    checkInvariants: true,
    onFatal: (err) => errors.push(err),
    ...opts,
    dataDir,
  });
  const url = `ws://127.0.0.1:${daemon.agentAddress.port}/v1/agent`;
  const controlUrl = `http://127.0.0.1:${daemon.controlAddress.port}`;
  return { daemon, url, controlUrl, client: controlClient(controlUrl), dataDir, store: opts.store, close: () => daemon.close() };
}

export async function startAgent(serverUrl: string, clientId: string, opts: Partial<AgentDaemonOptions> = {}): Promise<AgentDaemon> {
  const stateDir = opts.stateDir ?? (await tempDir(`rvbox-agent-${clientId}-`));
  return AgentDaemon.start({
    serverUrl,
    clientId,
    stateDir,
    token: FLEET_TOKEN,
    log: createLogger(`agent ${clientId}`, LOG_LEVEL),
    checkInvariants: true,
    onFatal: (err) => {
      throw err;
    },
    ...opts,
  });
}

export async function waitFor<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 20_000, everyMs = 25): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await sleep(everyMs);
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether a process with this pid exists (signal 0). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The non-empty lines of a file ([] if it does not exist yet): marker files that count launches. */
export async function fileLines(file: string): Promise<string[]> {
  try {
    return (await fsp.readFile(file, "utf8")).split("\n").filter((l) => l !== "");
  } catch {
    return [];
  }
}

/** What `seq FROM TO` prints. */
export function seqText(from: number, to: number): string {
  let s = "";
  for (let i = from; i <= to; i++) s += `${i}\n`;
  return s;
}

export interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  items: Array<{ seq: number; kind: string; value: unknown }>;
  finished: Command | undefined;
}

/** FollowOutput to the end, reassembling stdout/stderr and checking offsets are contiguous. */
export async function collect(
  client: Client<typeof ControlService>,
  uuid: string,
  opts: { from?: number; signal?: AbortSignal; keepData?: boolean } = {},
): Promise<Collected> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const next = { stdout: 0, stderr: 0 };
  const res: Collected = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), items: [], finished: undefined };
  for await (const m of client.followOutput({ issueUuid: uuid, fromEventSeq: BigInt(opts.from ?? 1), follow: true }, { signal: opts.signal })) {
    const it = m.item;
    if (it.case === "output") {
      const s = it.value.stream === OutputStream.STDOUT ? "stdout" : "stderr";
      if (Number(it.value.streamOffset) !== next[s]) throw new Error(`${s} offset ${it.value.streamOffset}, expected ${next[s]}`);
      next[s] += it.value.data.length;
      (s === "stdout" ? out : err).push(Buffer.from(it.value.data));
      res.items.push({
        seq: Number(m.eventSeq),
        kind: "output",
        value: opts.keepData ? it.value : { stream: s, offset: Number(it.value.streamOffset), length: it.value.data.length },
      });
    } else if (it.case === "retention" || it.case === "truncation") {
      // Removed bytes: the stream continues after them.
      for (const r of it.value.removedBytes) {
        const s = r.stream === OutputStream.STDOUT ? "stdout" : "stderr";
        const end = Number(r.offset) + Number(r.length);
        if (Number(r.offset) <= next[s] && end > next[s]) next[s] = end;
      }
      res.items.push({ seq: Number(m.eventSeq), kind: it.case, value: it.value });
    } else if (it.case === "finished") {
      res.finished = it.value;
    } else if (it.case !== undefined) {
      res.items.push({ seq: Number(m.eventSeq), kind: it.case, value: it.value });
    }
  }
  res.stdout = Buffer.concat(out);
  res.stderr = Buffer.concat(err);
  return res;
}

export function writeTokenFiles(dir: string, lines: string): { agentTokens: string; operatorToken: string } {
  const agentTokens = path.join(dir, "agent-tokens");
  const operatorToken = path.join(dir, "operator-token");
  writeFileSync(agentTokens, lines, { mode: 0o600 });
  writeFileSync(operatorToken, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  return { agentTokens, operatorToken };
}

/** `rvbox server` on loopback ports with a data directory and token files, logging at warn (plus `extra` flags). */
export function serverArgv(
  o: { agentPort: number; controlPort: number; data: string; files: { agentTokens: string; operatorToken: string } },
  ...extra: string[]
): string[] {
  return [
    "server",
    "--listen",
    `127.0.0.1:${o.agentPort}`,
    "--control",
    `127.0.0.1:${o.controlPort}`,
    "--data",
    o.data,
    "--agent-tokens",
    o.files.agentTokens,
    "--operator-token",
    o.files.operatorToken,
    "--log-level",
    "warn",
    ...extra,
  ];
}

export interface Child {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Run `rvbox <args>` as a child process (node + tsx loader, or `entry`, e.g. the compiled dist/bin/rvbox.js). */
export function spawnRvbox(args: string[], env: Record<string, string> = {}, entry: string = BIN): Child {
  const proc = spawn(process.execPath, [entry, ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let text = "";
  proc.stdout!.on("data", (d: Buffer) => (text += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (text += d.toString()));
  const exited = new Promise<number | null>((r) => proc.on("exit", (code, sig) => r(code ?? (sig ? -1 : null))));
  return { proc, output: () => text, exited };
}

// ------------------------------------------------------------------ the server's store

export type StoreKind = "embedded" | "postgres";

/**
 * The server store a test runs on. A test written against it runs the same
 * steps and the same assertions on the embedded store (sql.js + journal,
 * output in segment files) and on PostgreSQL (`--store postgres://…`, one
 * throwaway cluster for the file, a fresh database per `fresh()`).
 */
export interface StoreUnderTest {
  readonly kind: StoreKind;
  /** startServer options naming a new, empty store: {} (startServer makes a data directory) or { store: URL }. A restart passes the same again (with the same dataDir). */
  fresh(): Promise<{ store?: string }>;
  /** `rvbox server` flags for a store fresh() named: [] (serverArgv's --data is the store) or ["--store", URL]. */
  flags(o: { store?: string }): string[];
}

const EMBEDDED: StoreUnderTest = { kind: "embedded", fresh: async () => ({}), flags: () => [] };

function postgresStore(pgc: SharedPgCluster, name: string): StoreUnderTest {
  return { kind: "postgres", fresh: async () => ({ store: await pgc.database(name) }), flags: (o) => (o.store ? ["--store", o.store] : []) };
}

/**
 * describe.each over both server stores: `body` runs once on the embedded
 * store and once on PostgreSQL, in describes titled `title [embedded store]`
 * and `title [postgres store]`. One cluster serves the file, started when its
 * first PostgreSQL test asks for a database and stopped after the last.
 * `dbName` prefixes the databases (one per fresh()).
 */
export function describeStores(title: string, body: (st: StoreUnderTest) => void, dbName = "e2e"): void {
  const pgc = sharedPgCluster();
  describe.each([EMBEDDED, postgresStore(pgc, dbName)])(`${title} [$kind store]`, (st) => body(st));
}

/**
 * The compressed output bytes a server's store holds now, all commands (or
 * `uuid`'s only): for the embedded store the segment files on disk
 * (whole files, so a file a drop only partly covered counts whole), for
 * PostgreSQL the frames in the `output` table. Call after
 * `daemon.storage.whenIdle()` for a settled figure.
 */
export async function storedOutputBytes(s: TestServer, uuid?: string): Promise<number> {
  if (s.store) {
    const c = new pg.Client({ connectionString: s.store });
    await c.connect();
    try {
      const r = uuid
        ? await c.query<{ n: string }>("SELECT coalesce(sum(length(zstd)), 0) AS n FROM output WHERE uuid = $1", [uuid])
        : await c.query<{ n: string }>("SELECT coalesce(sum(length(zstd)), 0) AS n FROM output");
      return Number(r.rows[0]!.n);
    } finally {
      await c.end();
    }
  }
  if (uuid) throw new Error("storedOutputBytes: per command only on PostgreSQL (segment files may hold several commands)");
  const dir = path.join(s.dataDir, SEGMENT_DIR);
  let n = 0;
  for (const f of await fsp.readdir(dir)) if (f.endsWith(".seg")) n += (await fsp.stat(path.join(dir, f))).size;
  return n;
}

/**
 * Submit the crash tests' steady stream to `clientId`: about 2.8 MB in bursts
 * over about 3 s (`seq` 1..300,000, 60 bursts), appending "start" to `mark`
 * each time it is launched; returns its uuid once some of its output is
 * stored, and the uuid of a short command acknowledged right after (both
 * must survive whatever the test does next, R-D1).
 */
export async function steadyStream(client: ReturnType<typeof controlClient>, clientId: string, mark: string): Promise<{ uuid: string; late: string }> {
  const r = await client.submitCommand({
    clientId,
    program: {
      case: "shell",
      value: { commandLine: `echo start >> ${mark}; i=0; while [ $i -lt 60 ]; do seq $((i*5000+1)) $((i*5000+5000)); i=$((i+1)); sleep 0.05; done` },
    },
  });
  const uuid = r.command!.issueUuid;
  await waitFor("some output stored", async () => (await client.getCommand({ issueUuid: uuid })).command!.storedThroughEventSeq > 5n);
  const late = await client.submitCommand({ clientId, program: { case: "argv", value: { argv: ["echo", "after the crash"] } } });
  return { uuid, late: late.command!.issueUuid };
}
