/**
 * `rvbox agent`: runs the pure agent core (core/agent) for real.
 *
 *   transport   one `ws` WebSocket client at a time to --server (ws:// or
 *               wss://), `Authorization: Bearer <token>`, binary frames, no
 *               permessage-deflate. The core decides when to connect (its
 *               `connect` effect, after its own jittered backoff); the shell
 *               reports transport_open / frame / transport_closed / activity.
 *   storage     shells/storage/spill-store: kv rows on the durable sql.js
 *               store in <state>/store, large byte fields in <state>/spill;
 *               the instance id lives there too (R-F1).
 *   execution   shells/exec: one process group per command, output chunks
 *               of at most 64 KiB -> `process_output`, stdin, signals,
 *               scripts written 0700 under <state>/scripts and verified by
 *               SHA-256 before launch.
 *
 * Compression happens in the core's `ports.compress` when an entry is
 * admitted to the send window (inside a reducer step of the worker loop),
 * never in a socket handler.
 *
 * Flow control of local pipes (a shell choice, not protocol): while the
 * session is up (or was up within `offlineGraceMs`), process output is paused
 * once the core holds `pauseRawBytes` of unsequenced raw output (or the
 * worker queue holds `pauseQueuedBytes` of unprocessed output) and resumed
 * below half of that. The process then blocks in write() instead of having
 * output summarized by the core's watermark (R-W6), which still applies when
 * the agent stays offline: then output is read at full speed and the core's
 * watermarks and budgets decide (R-O7).
 *
 * Store incidents (R-D13): a corrupt journal found at open (or a write that
 * fails later) is fed as `store_incident`; the core then accepts no work and
 * claims no snapshot. `--repair-store` acknowledges the incident at start
 * (the journal is truncated at the corruption; see shells/store).
 */
import { mkdirSync } from "node:fs";
import { unreachable } from "../../core/errors.js";
import { unlink } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { WebSocket } from "ws";
import {
  agentInvariants,
  agentStep,
  CANCEL_GRACE_MS,
  defaultAgentConfig,
  restoreAgent,
  type AgentConfig,
  type AgentEffect,
  type AgentInput,
  type AgentState,
  type CorePorts,
} from "../../core/index.js";
import type { VersionRange } from "../../core/codec/version.js";
import { ShellType, SignalKind, type ExecutionSpec } from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  killProcessGroup,
  startCommand,
  writeScriptFile,
  type ProcessHandle,
  type ProcessHooks,
  type ProcessSpec,
  type ShellName,
  type SignalName,
} from "../exec/index.js";
import { ConnWriter, DEFAULT_WRITER_LIMITS, execTransportEffect, type WriterLimits } from "../runtime/conn-writer.js";
import { createLogger, type Logger } from "../runtime/log.js";
import { NodeLoop, type Staged, type StagingLimits, type TimeSource } from "../runtime/node-loop.js";
import { messageBytes, realPorts, TRANSPORT_MAX_PAYLOAD } from "../runtime/ports.js";
import { type ConnectFailure, REFUSAL_BODY_BYTES, readStart, refusedUpgrade, socketFailure } from "./connect-cause.js";
import { orphanNotKilled, ProcRegistry } from "./proc-identity.js";
import { sharedSpawnHelper, type SpawnHelper } from "../exec/spawn-client.js";
import { stopProcesses } from "../exec/stop-processes.js";
import { tablesView } from "../storage/kv-store.js";
import { SpillStore } from "../storage/spill-store.js";
import type { DurableDb } from "../store/index.js";
import { initZstd, ZSTD_BACKEND } from "../zstd/index.js";

function spawnHelperFor(opts: AgentDaemonOptions): SpawnHelper | undefined {
  if (opts.spawnHelper === false) return undefined;
  return opts.spawnHelper ?? (process.platform === "linux" ? sharedSpawnHelper() : undefined);
}

export interface AgentDaemonOptions {
  /** Clock source (tests inject a fake wall clock); default the system's. */
  time?: TimeSource;
  serverUrl: string;
  clientId: string;
  stateDir: string;
  token: string;
  /** The protocol range it announces (default SUPPORTED_PROTOCOL); tests use 1.0 for an agent of the spec's first version. */
  protocol?: VersionRange;
  maxRunning?: number;
  maxQueued?: number;
  /** Working directory for commands that name none. Default: the daemon's current directory. */
  cwd?: string;
  log?: Logger;
  seed?: number;
  /** PEM CA bundle for wss:// to a server with a private CA. */
  ca?: string | Buffer;
  /** Accept any TLS certificate (tests only). */
  insecure?: boolean;
  repairStore?: boolean;
  limits?: Partial<AgentConfig["limits"]>;
  staging?: StagingLimits;
  writer?: WriterLimits;
  pauseRawBytes?: number;
  pauseQueuedBytes?: number;
  offlineGraceMs?: number;
  killGraceMs?: number;
  zstdLevel?: number;
  checkpointEveryBytes?: number;
  checkInvariants?: boolean;
  onFatal?: (err: unknown) => void;
  /**
   * Who spawns the commands: a small helper process (default on Linux: one
   * per process, shells/exec/spawn-client.ts), so that a spawn does not block
   * this thread for longer as the agent's RSS grows; false spawns from this
   * process (process-runner.ts directly, the default elsewhere).
   */
  spawnHelper?: SpawnHelper | false;
}

/**
 * The zstd level the agent compresses output at (`zstdLevel` overrides it).
 * Level 1, not libzstd's default 3: on log text cut into 64 KiB chunks it
 * compresses as well (4.65:1 against 4.60:1 on the bench's text) for about
 * 0.7x the CPU (scripts/bench-zstd.ts --level=N), and compression is the
 * agent's largest cost in the ingest profile (docs/PERFORMANCE.md).
 */
export const AGENT_ZSTD_LEVEL = 1;

/** Per-connection staging bound; large enough for the server's windows (stdin and script: 256 KiB per command, even as tiny writes). */
/** `close({killProcesses})`: how long commands get between SIGTERM and SIGKILL (ms). Below systemd's TimeoutStopSec (90 s). */
export const STOP_KILL_GRACE_MS = 5000;
/** How often `close()` looks whether the commands it sent SIGTERM have exited (ms). */
const STOP_POLL_MS = 50;
export const DEFAULT_AGENT_STAGING: StagingLimits = { maxBytes: 24 * 1024 * 1024, maxCount: 262_144 };

const SHELLS: Partial<Record<ShellType, ShellName>> = {
  [ShellType.SH]: "sh",
  [ShellType.BASH]: "bash",
  [ShellType.ZSH]: "zsh",
  [ShellType.POWERSHELL]: "powershell",
  [ShellType.CMD]: "cmd",
};

const SIGNALS: Partial<Record<SignalKind, SignalName>> = {
  [SignalKind.INTERRUPT]: "SIGINT",
  [SignalKind.TERMINATE]: "SIGTERM",
  [SignalKind.KILL]: "SIGKILL",
  [SignalKind.HANGUP]: "SIGHUP",
  [SignalKind.QUIT]: "SIGQUIT",
  [SignalKind.USER1]: "SIGUSR1",
  [SignalKind.USER2]: "SIGUSR2",
};

interface Link {
  conn: number;
  ws: WebSocket;
  writer: ConnWriter;
  open: boolean;
}

export class AgentDaemon {
  state: AgentState;
  readonly log: Logger;
  readonly loop: NodeLoop<AgentInput>;
  readonly ports: CorePorts;
  readonly db: DurableDb;
  private readonly links = new Map<number, Link>();
  /** The cause of the last failed connection said at warn ("" once one opened): see saidWhy. */
  private lastConnectCause = "";
  private readonly procs = new Map<string, ProcessHandle>();
  private readonly scriptDir: string;
  private readonly procIds: ProcRegistry;
  private readonly procsDir: string;
  private readonly helper: SpawnHelper | false;
  private paused = false;
  private queuedOutput = 0;
  private lastOnline = 0;
  private readonly pauseRaw: number;
  private readonly pauseQueued: number;
  private readonly offlineGrace: number;
  private readonly deadlineTimer: NodeJS.Timeout;
  private stopped = false;
  fatal: unknown = null;
  /** Counters for tests and the bench. */
  readonly stats = { spawned: 0, connects: 0, framesIn: 0, framesOut: 0 };

  private constructor(
    readonly opts: AgentDaemonOptions,
    readonly store: SpillStore,
    config: AgentConfig,
  ) {
    this.db = store.db;
    this.log = opts.log ?? createLogger(`agent ${opts.clientId}`);
    this.ports = realPorts(opts.zstdLevel ?? AGENT_ZSTD_LEVEL);
    this.scriptDir = path.join(opts.stateDir, "scripts");
    this.procsDir = path.join(opts.stateDir, "procs");
    this.procIds = new ProcRegistry(this.procsDir);
    this.helper = spawnHelperFor(opts) ?? false;
    this.pauseRaw = opts.pauseRawBytes ?? 8 * 1024 * 1024;
    this.pauseQueued = opts.pauseQueuedBytes ?? 4 * 1024 * 1024;
    this.offlineGrace = opts.offlineGraceMs ?? 30_000;
    this.state = restoreAgent(config, tablesView(store.tables), opts.seed ?? Math.floor(Math.random() * 2 ** 31));
    store.tables.clear();
    this.loop = new NodeLoop<AgentInput>(
      {
        step: (input, now, wall) => this.step(input, now, wall),
        staged: (conn, item) => this.stagedInput(conn, item),
        ingressFull: (conn) => ({ type: "ingress_full", conn }),
        durable: (through) => ({ type: "durable", through }),
        tick: () => ({ type: "tick" }),
        onError: (err) => this.die(err),
      },
      opts.staging ?? DEFAULT_AGENT_STAGING,
      undefined,
      opts.time,
    );
    store.onDurable = (through) => this.loop.feedDurable(through);
    store.onError = (err) => {
      // The store refuses writes (incident) or a write/fsync failed: nothing
      // more becomes durable; the core must stop claiming completeness.
      if (this.state.storeIncident === null && !this.stopped) {
        this.log.error("store write failed: essential-store incident", { err: String(err) });
        this.loop.feed({ type: "store_incident", detail: `store write failed: ${String((err as Error)?.message ?? err)}` });
      }
    };
    this.deadlineTimer = setInterval(() => {
      const now = this.loop.now();
      for (const l of this.links.values()) l.writer.checkDeadline(now);
    }, 1000);
    this.deadlineTimer.unref();
  }

  static async start(opts: AgentDaemonOptions): Promise<AgentDaemon> {
    // Fork the spawn helper first, while this process is at its smallest (that
    // one fork still copies its page tables), so the first command does not wait for it to start.
    spawnHelperFor(opts)?.warm();
    await initZstd();
    mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
    const store = await SpillStore.open({ dir: opts.stateDir, checkpointEveryBytes: opts.checkpointEveryBytes, repair: opts.repairStore });
    let incident: string | null = null;
    if (store.db.readOnlyIncident) {
      incident = `essential store is corrupt: ${store.db.incidentInfo?.reason ?? "unknown"}; restart with --repair-store after inspection`;
    } else if (store.damage.length > 0 && !opts.repairStore) {
      incident = `essential store is damaged: spilled bytes of ${store.damage.length} rows are missing (${store.damage.slice(0, 3).join(", ")}); restart with --repair-store after inspection`;
    }
    const config = defaultAgentConfig(opts.clientId, {
      daemonVersion: "rvbox-agent/0.1.0",
      architecture: os.arch(),
      daemonCwd: opts.cwd ?? process.cwd(),
      maxRunning: opts.maxRunning ?? 4,
      maxQueued: opts.maxQueued ?? 16,
      ...(opts.protocol ? { protocol: opts.protocol } : {}),
    });
    config.limits = { ...config.limits, ...opts.limits };
    const d = new AgentDaemon(opts, store, config);
    const r = store.recovery;
    d.log.info("store opened", {
      dir: opts.stateDir,
      snapshot: r.snapshotLoaded,
      replayed: r.recordsReplayed,
      tornTail: r.tornTail ? r.tornTail.reason : "none",
      commands: d.state.commands.size,
      instance: d.state.instanceId || "(new)",
      node: process.version,
      // V8/Node flags, e.g. the young generation's bound that bin/rvbox.js and the units give the daemons (bin/cli-child.js).
      nodeFlags: process.execArgv.join(" "),
      mallocArenaMax: process.env.MALLOC_ARENA_MAX ?? "glibc default",
      zstd: ZSTD_BACKEND,
    });
    d.loop.feed({ type: "start" });
    if (incident) {
      d.log.error(incident);
      d.loop.feed({ type: "store_incident", detail: incident });
    }
    return d;
  }

  /** A new bearer token (the token file was re-read on SIGHUP): the next connection uses it; the session that is up stays up. */
  setToken(token: string): void {
    this.opts.token = token;
  }

  get instanceId(): string {
    return this.state.instanceId;
  }

  get connected(): boolean {
    return this.state.session.phase === "established";
  }

  // ------------------------------------------------------------------ the step

  private step(input: AgentInput, now: number, wall: number): void {
    if (this.fatal || this.stopped) return;
    if (input.type === "process_output") this.queuedOutput -= input.data.length;
    const r = agentStep(this.state, input, now, { ports: this.ports }, wall);
    if (this.opts.checkInvariants) agentInvariants(this.state);
    // A step that sends several frames (every event a group commit made durable) writes
    // them to the socket as one writev instead of a write() each (cork/uncork: the same
    // bytes in the same order, flushed before this step returns).
    const corked = this.corkForSends(r.effects);
    try {
      for (const e of r.effects) this.exec(e);
    } finally {
      for (const sock of corked) sock.uncork();
    }
    this.flowControl(now);
  }

  /** Cork the sockets of the links this step sends at least two frames on. */
  private corkForSends(effects: readonly AgentEffect[]): Array<{ uncork(): void }> {
    let sends = 0;
    for (const e of effects) if (e.type === "send" && ++sends > 1) break;
    if (sends < 2) return [];
    const out: Array<{ uncork(): void }> = [];
    for (const l of this.links.values()) {
      // `ws` keeps its net.Socket in `_socket` (not public API): without it, no cork.
      const sock = (l.ws as unknown as { _socket?: { cork?: () => void; uncork?: () => void } })._socket;
      if (!l.open || typeof sock?.cork !== "function" || typeof sock.uncork !== "function") continue;
      sock.cork();
      out.push(sock as { uncork(): void });
    }
    return out;
  }

  private exec(e: AgentEffect): void {
    switch (e.type) {
      case "persist":
        this.store.persist(e);
        break;
      case "send":
      case "ping":
      case "close":
      case "wake":
        if (
          execTransportEffect(
            e,
            (c) => this.links.get(c)?.writer,
            (at) => this.loop.setWake(at),
            this.log,
            "closing session",
          )
        )
          this.stats.framesOut++;
        break;
      case "trace":
        if (e.event === "replaced")
          this.log.warn(
            "replaced: another instance took over this client id; local commands ended, retrying only every 60 s until an operator authorizes this instance again",
            e.detail,
          );
        else if (this.log.level === "debug") this.log.debug(e.event, e.detail);
        else if (e.event === "established" || e.event === "session_lost" || e.event === "protocol_failure") this.log.info(e.event, e.detail);
        break;
      case "connect":
        this.connect(e.conn);
        break;
      case "spawn":
        this.spawn(e.uuid, e.spec, e.scriptPath);
        break;
      case "write_stdin": {
        const h = this.procs.get(e.uuid);
        if (!h) {
          this.loop.feed({ type: "stdin_written", uuid: e.uuid, seq: e.seq, failure: "process is not running" });
          break;
        }
        // A terminal's resize first: the size changes before the keystrokes of this write.
        if (e.resize) h.resize?.(e.resize.rows, e.resize.cols);
        h.writeStdin(e.data).then(
          () => this.loop.feed({ type: "stdin_written", uuid: e.uuid, seq: e.seq }),
          (err: Error) => this.loop.feed({ type: "stdin_written", uuid: e.uuid, seq: e.seq, failure: err.message }),
        );
        break;
      }
      case "close_stdin": {
        const h = this.procs.get(e.uuid);
        h?.closeStdin();
        this.loop.feed(
          h ? { type: "stdin_written", uuid: e.uuid, seq: e.seq } : { type: "stdin_written", uuid: e.uuid, seq: e.seq, failure: "process is not running" },
        );
        break;
      }
      case "signal": {
        const h = this.procs.get(e.uuid);
        if (!h) break;
        if (e.signal === SignalKind.CANCEL) h.terminate();
        else {
          const sig = SIGNALS[e.signal];
          if (sig) h.signal(sig);
        }
        break;
      }
      case "kill_orphan": {
        // pid 0: the spawn happened but its pid never became durable in the core;
        // the spawn-time identity record still names it.
        const pid = e.pid > 0 ? e.pid : (this.procIds.recordedPid(e.uuid) ?? 0);
        if (pid === 0) {
          this.log.warn("no process group recorded for a command launched before the restart", { uuid: e.uuid });
          break;
        }
        const who = this.procIds.confirm(e.uuid, pid);
        if (!who.ok) {
          const note = orphanNotKilled(who);
          this.log[note.level](note.msg, { uuid: e.uuid, pgid: pid, why: who.why });
          this.procIds.forget(e.uuid);
          break;
        }
        try {
          const hit = killProcessGroup(pid, "SIGKILL");
          this.log.warn("killed orphan process group from before a restart", { uuid: e.uuid, pgid: pid, found: hit });
        } catch (err) {
          this.log.warn("could not kill orphan process group", { uuid: e.uuid, pgid: pid, err: String(err) });
        }
        this.procIds.forget(e.uuid);
        break;
      }
      case "write_script": {
        const name = `script-${e.uuid.replace(/[^A-Za-z0-9._-]/g, "_")}`;
        writeScriptFile(this.scriptDir, name, e.data, e.sha256).then(
          (r) =>
            this.loop.feed(
              r.ok ? { type: "script_prepared", uuid: e.uuid, path: r.path } : { type: "script_failed", uuid: e.uuid, reason: `${r.code}: ${r.message}` },
            ),
          (err: unknown) => this.loop.feed({ type: "script_failed", uuid: e.uuid, reason: String(err) }),
        );
        break;
      }
      case "discard_script":
        void unlink(e.path).catch(() => {});
        break;
      default:
        unreachable(e, "agent effect");
    }
  }

  // ------------------------------------------------------------------ transport

  private connect(conn: number): void {
    this.stats.connects++;
    let ws: WebSocket;
    try {
      ws = new WebSocket(this.opts.serverUrl, {
        headers: { Authorization: `Bearer ${this.opts.token}` },
        perMessageDeflate: false,
        maxPayload: TRANSPORT_MAX_PAYLOAD,
        handshakeTimeout: 15_000,
        ca: this.opts.ca,
        rejectUnauthorized: !this.opts.insecure,
      });
    } catch (err) {
      this.log.warn("cannot connect", { err: String(err) });
      this.loop.feed({ type: "transport_closed", conn, reason: String(err) });
      return;
    }
    const link: Link = {
      conn,
      ws,
      writer: new ConnWriter(ws, this.opts.writer ?? DEFAULT_WRITER_LIMITS, (why) => this.log.warn("connection terminated", { why })),
      open: false,
    };
    this.links.set(conn, link);
    // The first concrete reason this connection failed (a refusal, a socket error); see connect-cause.ts.
    let failure: ConnectFailure | undefined;
    ws.on("open", () => {
      link.open = true;
      this.lastConnectCause = "";
      // transport_open, the frames and transport_closed go through one ordered queue.
      this.loop.openStaging(conn);
    });
    ws.on("message", (data, isBinary) => {
      this.stats.framesIn++;
      this.loop.stage(conn, messageBytes(data), isBinary);
    });
    ws.on("pong", () => this.loop.feed({ type: "activity", conn }));
    ws.on("ping", () => this.loop.feed({ type: "activity", conn }));
    ws.on("unexpected-response", (_req, res) => {
      readStart(res, REFUSAL_BODY_BYTES).then((body) => {
        failure ??= refusedUpgrade(res.statusCode ?? 0, body, this.opts.serverUrl);
        ws.terminate();
      });
    });
    ws.on("error", (err: Error & { code?: string }) => {
      this.log.debug("socket error", { conn, err: String(err) });
      // This side ended the attempt (a refusal read above, a stop, the core closing it): not a cause.
      if (this.stopped || /closed before the connection was established/.test(err.message)) return;
      failure ??= socketFailure(err, this.opts.serverUrl);
    });
    ws.on("close", (code, reason) => {
      this.links.delete(conn);
      const closed = `websocket closed (${code}${reason.length ? ` ${reason.toString()}` : ""})`;
      const why = !link.open && failure ? failure.cause : closed;
      if (!link.open && failure) this.saidWhy(failure);
      // Never opened (refused, unreachable): no queue exists yet.
      if (link.open) this.loop.stageClosed(conn, why);
      else this.loop.feed({ type: "transport_closed", conn, reason: why });
    });
  }

  /** A failed connection's cause and hint at warn, once until it changes or a connection opens (a retrying agent repeats it at debug). */
  private saidWhy(f: ConnectFailure): void {
    if (f.cause === this.lastConnectCause) {
      this.log.debug("cannot connect to the server", { cause: f.cause });
      return;
    }
    this.lastConnectCause = f.cause;
    this.log.warn(`cannot connect to the server: ${f.cause}`, f.hint ? { server: this.opts.serverUrl, hint: f.hint } : { server: this.opts.serverUrl });
  }

  private stagedInput(conn: number, item: Staged): AgentInput | null {
    if (item.kind === "open") return { type: "transport_open", conn };
    if (item.kind === "closed") return { type: "transport_closed", conn, reason: item.reason };
    return { type: "frame", conn, data: item.data, binary: item.binary };
  }

  // ------------------------------------------------------------------ processes

  private spawn(uuid: string, spec: ExecutionSpec, scriptPath: string): void {
    const base = {
      cwd: spec.cwd !== "" ? spec.cwd : this.state.config.daemonCwd,
      env: Object.fromEntries(spec.environment.map((e) => [e.name, e.value])),
      timeoutMs: Number(spec.timeoutMs),
      stdinOpen: spec.stdinOpen,
      killGraceMs: this.opts.killGraceMs ?? CANCEL_GRACE_MS,
      // Protocol 1.1 (`rvbox run -t`): a pseudo-terminal (shells/exec/pty-runner.ts).
      ...(spec.terminal?.size ? { terminal: { rows: spec.terminal.size.rows, cols: spec.terminal.size.cols, term: spec.terminal.term } } : {}),
    };
    let ps: ProcessSpec;
    const p = spec.program;
    switch (p.case) {
      case "argv":
        ps = { kind: "argv", argv: p.value.argv, ...base };
        break;
      case "shell":
        ps = { kind: "shell", shell: SHELLS[p.value.shell] ?? "sh", commandLine: p.value.commandLine, ...base };
        break;
      case "script":
        ps = { kind: "script", path: scriptPath, interpreter: p.value.interpreter !== "" ? p.value.interpreter : undefined, args: p.value.args, ...base };
        break;
      default:
        this.loop.feed({ type: "spawn_failed", uuid, reason: "no program" });
        return;
    }
    this.stats.spawned++;
    const helper = this.helper;
    const hooks = {
      onSpawn: (pid: number) => {
        if (!helper) this.procIds.record(uuid, pid); // the helper wrote it before reporting the pid
        this.loop.feed({ type: "process_started", uuid, pid });
      },
      onSpawnError: (err) => {
        this.procs.delete(uuid);
        this.loop.feed({ type: "spawn_failed", uuid, reason: `${err.code}: ${err.message}` });
      },
      onOutput: (stream, chunk) => {
        this.queuedOutput += chunk.length;
        this.loop.feed({ type: "process_output", uuid, stream, data: chunk });
        if (!this.paused && this.queuedOutput > this.pauseQueued) this.setPaused(true);
      },
      onExit: (info) => {
        this.procs.delete(uuid);
        this.procIds.forget(uuid);
        const incompleteStreams: Array<"stdout" | "stderr"> = [];
        if (!info.outputComplete.stdout) incompleteStreams.push("stdout");
        if (!info.outputComplete.stderr) incompleteStreams.push("stderr");
        this.loop.feed({ type: "process_exited", uuid, exitCode: info.exitCode, signal: info.signal, timedOut: info.timedOut, incompleteStreams });
      },
    } satisfies ProcessHooks;
    const h = helper
      ? helper.startProcess(
          ps,
          {
            ...hooks,
            // The helper died with this command launching or running: whether it
            // started, and how it ended, is unknown here. That is this agent's
            // crash: the restart ends it `interrupted` (R-C4) with its output
            // incomplete (R-O8) and kills what is left of it (kill_orphan).
            onLost: (why) => {
              if (!this.stopped) this.die(new Error(`${why} while command ${uuid} was launching or running; its outcome is unknown`));
            },
          },
          { dir: this.procsDir, uuid },
        )
      : startCommand(ps, hooks);
    this.procs.set(uuid, h);
    if (this.paused) h.pauseOutput();
  }

  private flowControl(now: number): void {
    const online = this.state.session.phase === "established";
    if (online) this.lastOnline = now;
    const recentlyOnline = online || now - this.lastOnline < this.offlineGrace;
    const raw = this.state.outbox.rawTotal;
    if (!this.paused) {
      if (this.queuedOutput > this.pauseQueued || (recentlyOnline && raw > this.pauseRaw)) this.setPaused(true);
    } else if (this.queuedOutput <= this.pauseQueued / 2 && (!recentlyOnline || raw <= this.pauseRaw / 2)) {
      this.setPaused(false);
    }
  }

  private setPaused(p: boolean): void {
    this.paused = p;
    for (const h of this.procs.values()) p ? h.pauseOutput() : h.resumeOutput();
  }

  get runningProcesses(): number {
    return this.procs.size;
  }

  private die(err: unknown): void {
    if (this.fatal) return;
    this.fatal = err;
    this.log.error("fatal", { err: err instanceof Error ? (err.stack ?? err.message) : String(err) });
    if (this.opts.onFatal) this.opts.onFatal(err);
    else process.exit(70);
  }

  /**
   * Stop: close the link, then either leave processes running (a restart
   * reports them interrupted) or, with `killProcesses`, stop them as an
   * admin expects of `systemctl stop`: SIGTERM to every command's process
   * group, up to `killGraceMs` (default STOP_KILL_GRACE_MS) for them to
   * exit, then SIGKILL to whatever is left. The core no longer runs while
   * they exit, so their ends are not recorded: after a restart they are
   * `interrupted` (the agent lost them), never relaunched.
   */
  async close(opts: { killProcesses?: boolean; killGraceMs?: number } = {}): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.deadlineTimer);
    this.loop.stop();
    for (const l of this.links.values()) l.ws.terminate();
    if (opts.killProcesses) await this.stopProcesses(opts.killGraceMs ?? STOP_KILL_GRACE_MS);
    if (this.helper) for (const h of this.procs.values()) this.helper.abandon(h);
    await this.store.close();
  }

  private async stopProcesses(graceMs: number): Promise<void> {
    const out = await stopProcesses(() => this.procs.values(), graceMs, STOP_POLL_MS);
    if (out.killed > 0) this.log.info("stopped commands that outlived the grace", { sigkilled: out.killed, graceMs });
    if (out.unsignalled > 0) this.log.warn("commands still launching when the stop grace ended could not be signalled", { count: out.unsignalled, graceMs });
  }
}
