/**
 * `rvbox server`: runs the pure server core (core/server) for real.
 *
 *   agent endpoint   ws WebSocketServer on --listen, path /v1/agent, binary
 *                    frames only, no permessage-deflate, bearer token checked
 *                    in the HTTP upgrade (401 before the WebSocket opens);
 *   control API      ConnectRPC ControlService on --control (HTTP/1.1),
 *                    operator bearer token (401 otherwise);
 *   storage          shells/storage/server-storage (durable sql.js + segment
 *                    files) under --data, or PostgreSQL (--store);
 *   probes           /healthz and /readyz on both ports (probes.ts): ready
 *                    only once restored and while the store takes writes.
 *
 * Nothing protocol-level is decided here. The shell's jobs: stage inbound
 * frames (NodeLoop), step the reducer in one worker loop, execute its effects
 * in order (persist -> group commit -> `durable`; send -> per-connection
 * writer with a priority lane; ping/close; wake -> one timer; reply -> the
 * waiting control call; drop_output -> segment retention), answer
 * read-only queries from the state and the store, and tell the fleet
 * watchers (fleet-watch.ts) after every step.
 *
 * One check happens before the core sees a frame: a token bound to one
 * client id (not `*`) must register that client id. The first frame of such
 * a connection is decoded (core decodeFrame) and a ClientHello naming
 * another client is answered with AgentError(CODE_UNAUTHENTICATED) and a
 * close.
 */
import * as http from "node:http";
import { unreachable } from "../../core/errors.js";
import { SERVER_PRUNED_LEDGER_IN_STORE } from "../../core/limits.js";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { serveFollowFast } from "./follow-http.js";
import { type ControlHandler, ControlListener, type ControlRequest as ControlHttpRequest } from "./control-listener.js";
import { openServerStore } from "./open-store.js";
import { serveProbe, startingHandler } from "./probes.js";
import { WebSocketServer, type WebSocket } from "ws";
import {
  Code,
  decodeFrame,
  defaultServerConfig,
  encodeEnvelope,
  restoreServer,
  serverInvariants,
  serverStep,
  type ControlRequest,
  type ControlResult,
  type CorePorts,
  type ServerEffect,
  type ServerInput,
  type ServerLimits,
  type ServerState,
} from "../../core/index.js";
import { AgentErrorSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { ControlService } from "../../protos/gen/rvbox/v1/control_pb.js";
import { ConnWriter, DEFAULT_WRITER_LIMITS, execTransportEffect, type WriterLimits } from "../runtime/conn-writer.js";
import { createLogger, RateLimitedLog, type Logger } from "../runtime/log.js";
import { NodeLoop, type Staged, type StagingLimits, type TimeSource } from "../runtime/node-loop.js";
import { messageBytes, realPorts, TRANSPORT_MAX_PAYLOAD } from "../runtime/ports.js";
import { tablesView } from "../storage/kv-store.js";
import type { ServerStore } from "../storage/server-store.js";
import { HistorySweep } from "./history-sweep.js";
import type { StoreHealth, StoreWriteLimits } from "../storage/store-group.js";
import { initZstd, ZSTD_BACKEND } from "../zstd/index.js";
import { Code as ConnectCode, ConnectError, createContextValues } from "@connectrpc/connect";
import { accessInterceptor } from "./access-interceptor.js";
import { OpenStreams } from "./open-streams.js";
import { decodeErrorsAsInvalid } from "./decode-errors.js";
import { type AgentTokens, ANY_CLIENT, bearer, type OperatorToken } from "./auth.js";
import { type Identity, identify, type OperatorIdentities } from "./operators.js";
import type { AuditCall } from "../../core/index.js";
import type { VersionRange } from "../../core/codec/version.js";
import { AUTH_KEY, controlServiceImpl, IDENTITY_KEY } from "./control-service.js";
import { FleetWatch, type WatchOptions } from "./fleet-watch.js";

export const AGENT_PATH = "/v1/agent";

/** A --store value: a PostgreSQL URL, or a clear error (never echoing a password). */
export function checkStoreUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error("--store: expected a PostgreSQL URL, postgres://USER@HOST:PORT/DATABASE");
  }
  if (u.protocol !== "postgres:" && u.protocol !== "postgresql:")
    throw new Error(`--store: expected a postgres:// URL, got ${u.protocol}// (the embedded store is --data DIR)`);
  if (u.pathname.length <= 1) throw new Error("--store: the URL names no database (postgres://USER@HOST:PORT/DATABASE)");
  return url;
}

export interface HostPort {
  host: string;
  port: number;
}

export interface ServerDaemonOptions {
  /** Clock source (tests inject a fake wall clock); default the system's. */
  time?: TimeSource;
  listen: HostPort;
  control: HostPort;
  dataDir: string;
  /** The protocol range it accepts (default SUPPORTED_PROTOCOL); tests use 1.0 for a server of the spec's first version. */
  protocol?: VersionRange;
  /** `postgres://…`: the state in PostgreSQL (pg-store.ts) instead of the embedded store in dataDir. */
  store?: string;
  /** Aborting it while the start waits for the store (open-store.ts) ends the wait: start rejects. */
  signal?: AbortSignal;
  agentTokens: AgentTokens;
  /** The legacy shared operator token(s): the identity `admin` (role admin). Absent: only `operators`. */
  operatorToken?: OperatorToken;
  /** Named operator identities with roles (--identities FILE, operators.ts). */
  operators?: OperatorIdentities;
  limits?: Partial<ServerLimits>;
  /** How often the history sweep runs (ms; HISTORY_SWEEP_EVERY_MS). */
  historySweepMs?: number;
  staging?: StagingLimits;
  writer?: WriterLimits;
  log?: Logger;
  seed?: number;
  repairStore?: boolean;
  checkpointEveryBytes?: number;
  /** Run serverInvariants after every step (tests). */
  checkInvariants?: boolean;
  /** WatchFleet: per-watcher queue bound and flush interval (defaults in fleet-watch.ts). */
  watch?: WatchOptions;
  /** The store's write-side bounds (store-group.ts DEFAULT_STORE_WRITE_LIMITS): backlog, slow commit, reconnect backoff. */
  storeLimits?: Partial<StoreWriteLimits>;
  /** A broken invariant or a storage failure: the daemon cannot go on. Default: log and exit(70). */
  onFatal?: (err: unknown) => void;
}

/**
 * Per-connection staging bound. It must admit everything an agent may
 * legally have in flight, or a reconnecting agent that resends its whole
 * window at once would overflow it every time (a livelock): the session
 * window is 8 MiB of encoded events, and a very compressible output event
 * is ~100 bytes, so up to ~90 000 frames (~13 MiB with envelopes). The bound
 * is therefore on bytes (frames counted with their overhead), with a frame
 * count only as a backstop.
 */
export const DEFAULT_SERVER_STAGING: StagingLimits = { maxBytes: 24 * 1024 * 1024, maxCount: 262_144 };

interface ConnInfo {
  conn: number;
  ws: WebSocket;
  writer: ConnWriter;
  remote: string;
  /** Client id the upgrade token is bound to ("*": any). */
  tokenClient: string;
  /** The upgrade's bearer token, checked again after a token reload. */
  token: string;
  helloChecked: boolean;
  /** Closed by the shell before the core saw a hello. */
  refused: boolean;
  lastInbound: number;
  lastActivityFed: number;
}

/** `r` with its request ids scoped to operator identity `operator`. */
function ownRequestIds(r: ControlRequest, operator: string): ControlRequest {
  const own = (id: string): string => `${operator}/${id}`;
  if (r.op === "audit_refusal") return r;
  if (r.op === "stdin" && r.afterRequestId !== undefined) return { ...r, requestId: own(r.requestId), afterRequestId: own(r.afterRequestId) };
  return { ...r, requestId: own(r.requestId) };
}

export class ServerDaemon {
  state: ServerState;
  readonly log: Logger;
  /** Lines a peer (or a busy operator) can repeat: a per-kind budget. */
  private readonly peerLog: RateLimitedLog;
  readonly loop: NodeLoop<ServerInput>;
  readonly ports: CorePorts;
  private readonly conns = new Map<number, ConnInfo>();
  private connSeq = 0;
  /** Callers waiting for a control reply, by call id (a request id may be shared by calls in flight). */
  private readonly pending = new Map<string, { resolve: (r: ControlResult) => void; reject: (err: ConnectError) => void }>();
  /** Reads a control call makes before it is fed (whileStoreUp), with when each began: failed when the store stops taking writes. */
  private readonly preReads = new Map<(err: ConnectError) => void, number>();
  /** The store's backlog is past its bound (store-group.ts). */
  private backlogOver = false;
  /** Past the bound while the store takes no writes: agents' sessions were closed and new ones are refused until it takes writes again. */
  private shedding = false;
  private callSeq = 0;
  /**
   * Readers waiting for a command's committed view to move (FollowOutput).
   * Each remembers the committed view it last saw; a notify wakes only those
   * whose command's view was replaced since (the core swaps in a new object
   * whenever it changes) or is gone, so 200 followers do not all re-read
   * their commands after every step.
   */
  private readonly waiters = new Set<{ uuid: string; seen: unknown; done: () => void }>();
  private notifyScheduled = false;
  private readonly agentHttp: http.Server;
  private readonly controlHttp: http.Server;
  /** HTTP/1.1 and h2c on the control port (control-listener.ts); controlHttp is its listening server. */
  private readonly controlListener: ControlListener;
  private readonly wss: WebSocketServer;
  private readonly deadlineTimer: NodeJS.Timeout;
  /** Deletes history past limits.historyMs from a store that keeps it. */
  readonly historySweep: HistorySweep;
  private closing = false;
  /** Last inbound activity per client id (for ListClients), deadline clock. */
  readonly lastActivity = new Map<string, number>();
  /** WatchFleet: told after every step, pushes changes to the watchers. */
  readonly watch: FleetWatch;
  /** Open FollowOutput and WatchFleet streams: their bounds, and their callers checked again on a reload. */
  readonly streams: OpenStreams;
  fatal: unknown = null;

  private constructor(
    readonly opts: ServerDaemonOptions,
    readonly storage: ServerStore,
    controlListener: ControlListener,
    route: { handler: ControlHandler },
  ) {
    this.log = opts.log ?? createLogger("server");
    this.peerLog = new RateLimitedLog(this.log);
    this.ports = realPorts();
    const config = defaultServerConfig();
    // Where the history lives is the store's: a store that keeps it leaves rows in place at prune.
    config.limits = { ...config.limits, ...storeDefaults(storage.keepsHistory), ...opts.limits, historyInStore: storage.keepsHistory };
    if (opts.protocol) config.protocol = opts.protocol;
    this.state = restoreServer(config, tablesView(storage.tables), opts.seed ?? Math.floor(Math.random() * 2 ** 31));
    // The loaded rows are only needed for the restore.
    storage.tables.clear();
    this.watch = new FleetWatch(this, opts.watch);
    this.streams = new OpenStreams(() => this.state.config.limits, opts.checkInvariants);
    this.loop = new NodeLoop<ServerInput>(
      {
        step: (input, now, wall) => this.step(input, now, wall),
        staged: (conn, item) => this.stagedInput(conn, item),
        ingressFull: (conn) => ({ type: "ingress_full", conn }),
        durable: (through) => ({ type: "durable", through }),
        tick: () => ({ type: "tick" }),
        onError: (err) => this.die(err),
      },
      opts.staging ?? DEFAULT_SERVER_STAGING,
      undefined,
      opts.time,
    );
    storage.onDurable = (through) => this.loop.feedDurable(through);
    storage.onError = (err) => this.die(err);
    storage.writeLimits = { ...storage.writeLimits, ...opts.storeLimits };
    storage.onHealth = (now, was) => this.storeHealthChanged(now, was);
    storage.onBacklog = (over) => this.storeBacklogChanged(over);

    this.wss = new WebSocketServer({ noServer: true, maxPayload: TRANSPORT_MAX_PAYLOAD, perMessageDeflate: false, clientTracking: false });
    this.agentHttp = http.createServer((req, res) => {
      if (serveProbe(() => this.notReady(), req, res)) return;
      res.writeHead(404, { "content-type": "text/plain" }).end("agents connect with a WebSocket upgrade on /v1/agent\n");
    });
    this.agentHttp.on("upgrade", (req, socket, head) => this.onUpgrade(req, socket as import("node:net").Socket, head));
    this.agentHttp.on("clientError", (_err, socket) => socket.destroy());

    // No response compression: output is mostly already-dense bytes and gzip
    // per 64 KiB message costs more than it saves on loopback/LAN.
    // Requests are bounded: a 16 MiB script plus its envelope.
    // Every call is identified here, then checked by the access interceptor
    // (access.ts) before the service reads or changes the core's state.
    const identities = new WeakMap<ControlHttpRequest, { id: Identity; auth: string }>();
    const handler = connectNodeAdapter({
      acceptCompression: [],
      readMaxBytes: 20 * 1024 * 1024,
      contextValues: (req) => {
        const v = createContextValues();
        const caller = identities.get(req);
        if (caller) v.set(IDENTITY_KEY, caller.id).set(AUTH_KEY, caller.auth);
        return v;
      },
      interceptors: [accessInterceptor(this)],
      routes: (router) => {
        router.service(ControlService, controlServiceImpl(this));
        router.handlers.forEach((h, i) => {
          router.handlers[i] = decodeErrorsAsInvalid(h);
        });
      },
    });
    this.controlListener = controlListener;
    route.handler = (req, res) => {
      const id = identify(req.headers.authorization, this.opts.operators, this.opts.operatorToken);
      if (serveProbe(() => this.notReady(), req, res)) return;
      if (!id) {
        // HTTP 401: Connect's unauthenticated; gRPC clients map it to UNAUTHENTICATED too.
        res.statusCode = 401;
        res.setHeader("content-type", "application/json");
        res.setHeader("www-authenticate", 'Bearer realm="rvbox"');
        res.end(JSON.stringify({ code: "unauthenticated", message: "operator bearer token required" }));
        return;
      }
      // FollowOutput (a read: every role may) in the CLI's and the TUI's form is served without connect-node's copies (follow-http.ts).
      if (serveFollowFast(this, req, res, id)) return;
      identities.set(req, { id, auth: req.headers.authorization ?? "" });
      handler(req, res);
    };
    this.controlHttp = this.controlListener.h1;
    this.deadlineTimer = setInterval(() => {
      const now = this.loop.now();
      for (const c of this.conns.values()) c.writer.checkDeadline(now);
    }, 1000);
    this.deadlineTimer.unref();
    this.historySweep = new HistorySweep(
      storage,
      () => this.state.config.limits,
      () => this.loop.now(),
      this.log,
      opts.historySweepMs,
    );
  }

  static async start(opts: ServerDaemonOptions): Promise<ServerDaemon> {
    await initZstd();
    const limits = { ...defaultServerConfig().limits, ...storeDefaults(opts.store !== undefined), ...opts.limits };
    // A reserve as large as the total would leave non-admins no FollowOutput at all.
    if (limits.followStreamsAdminReserve >= limits.maxFollowStreams)
      throw new Error(
        `limits: followStreamsAdminReserve (${limits.followStreamsAdminReserve}) must be less than maxFollowStreams (${limits.maxFollowStreams})`,
      );
    // The control port listens from the start: /readyz says what the start waits for, every call is UNAVAILABLE until then.
    let starting = "restoring";
    const route: { handler: ControlHandler } = { handler: startingHandler(() => starting) };
    const listener = new ControlListener((req, res) => route.handler(req, res));
    await listen(listener.h1, opts.control);
    let d: ServerDaemon;
    try {
      const log = opts.log ?? createLogger("server");
      const store = opts.store === undefined ? undefined : checkStoreUrl(opts.store);
      const storage = await openServerStore({ ...opts, store }, limits, log, (why) => (starting = why));
      starting = "restoring: rebuilding the state from the store";
      d = new ServerDaemon(opts, storage, listener, route);
    } catch (err) {
      listener.destroyAll();
      await closeServer(listener.h1);
      throw err;
    }
    d.log.info("store opened", d.storage.opened);
    await listen(d.agentHttp, opts.listen);
    // First tick arms the timers (heartbeats, expiry, redelivery).
    d.loop.feed({ type: "tick" });
    d.log.info("listening", {
      agents: addr(d.agentHttp),
      control: addr(d.controlHttp),
      commands: d.state.commands.size,
      clients: d.state.clients.size,
      node: process.version,
      // V8/Node flags, e.g. the young generation's bound that bin/rvbox.js and the units give the daemons (bin/cli-child.js).
      nodeFlags: process.execArgv.join(" "),
      mallocArenaMax: process.env.MALLOC_ARENA_MAX ?? "glibc default",
      zstd: ZSTD_BACKEND,
    });
    return d;
  }

  get agentAddress(): AddressInfo {
    return this.agentHttp.address() as AddressInfo;
  }

  get controlAddress(): AddressInfo {
    return this.controlHttp.address() as AddressInfo;
  }

  // ------------------------------------------------------------------ agent endpoint

  private onUpgrade(req: http.IncomingMessage, socket: import("node:net").Socket, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    if (this.closing) return refuse(socket, 503, "shutting down");
    if (this.shedding) return refuse(socket, 503, "the server's store is not taking writes: try again later");
    const path = (req.url ?? "/").split("?")[0];
    if (path !== AGENT_PATH) return refuse(socket, 404, "not found");
    const token = bearer(req.headers.authorization);
    const client = token === null ? null : this.opts.agentTokens.check(token);
    if (client === null) {
      this.peerLog.write("warn", "bad_token", "agent refused: bad or missing bearer token", { remote: remoteOf(req) });
      return refuse(socket, 401, "unauthorized");
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, req, client, token!));
  }

  /**
   * After the agent tokens were replaced (SIGHUP): close every session whose
   * upgrade token is no longer valid, or now bound differently; its agent
   * reconnects with the token it has now. Returns how many were closed.
   */
  closeRevokedSessions(): number {
    let n = 0;
    for (const c of this.conns.values()) {
      if (c.refused || this.opts.agentTokens.check(c.token) === c.tokenClient) continue;
      n++;
      this.log.warn("closing session: its token is no longer in --agent-tokens", { conn: c.conn, remote: c.remote, token: c.tokenClient });
      c.ws.close(1008, "token revoked");
    }
    return n;
  }

  /**
   * After the operator files were re-read (SIGHUP): take the new identities
   * and legacy tokens (those given), then end every open stream whose token no
   * longer maps to an identity (UNAUTHENTICATED) or whose identity may no
   * longer make its call (PERMISSION_DENIED). Returns how many streams ended.
   */
  reloadOperators(ids: OperatorIdentities | undefined, legacy: OperatorToken | undefined): number {
    if (ids) this.opts.operators?.replaceWith(ids);
    if (legacy) this.opts.operatorToken?.replaceWith(legacy);
    const ended = this.streams.recheck((auth) => identify(auth, this.opts.operators, this.opts.operatorToken), this.state);
    if (ended > 0) this.log.warn("operator streams ended: their caller was revoked by the reload", { streams: ended });
    return ended;
  }

  private onConnection(ws: WebSocket, req: http.IncomingMessage, tokenClient: string, token: string): void {
    const conn = ++this.connSeq;
    const info: ConnInfo = {
      conn,
      ws,
      writer: new ConnWriter(ws, this.opts.writer ?? DEFAULT_WRITER_LIMITS, (why) => this.log.warn("connection terminated", { conn, why })),
      remote: remoteOf(req),
      tokenClient,
      token,
      helloChecked: tokenClient === ANY_CLIENT,
      refused: false,
      lastInbound: this.loop.now(),
      lastActivityFed: 0,
    };
    this.conns.set(conn, info);
    // conn_open, the frames and conn_closed go through one ordered queue.
    this.loop.openStaging(conn);
    ws.on("message", (data, isBinary) => {
      const now = this.loop.now();
      info.lastInbound = now;
      this.loop.stage(conn, messageBytes(data), isBinary);
      if (now - info.lastActivityFed > 1000) {
        info.lastActivityFed = now;
        this.loop.feed({ type: "activity", conn });
      }
    });
    const activity = (): void => {
      info.lastInbound = this.loop.now();
      info.lastActivityFed = info.lastInbound;
      this.loop.feed({ type: "activity", conn });
    };
    ws.on("pong", activity);
    ws.on("ping", activity);
    ws.on("error", (err) => this.log.debug("socket error", { conn, err: String(err) }));
    ws.on("close", (code, reason) => this.loop.stageClosed(conn, `websocket closed (${code}${reason.length ? ` ${reason.toString()}` : ""})`));
  }

  private stagedInput(conn: number, item: Staged): ServerInput | null {
    const info = this.conns.get(conn);
    if (item.kind === "open") return { type: "conn_open", conn };
    if (item.kind === "closed") {
      this.conns.delete(conn);
      return { type: "conn_closed", conn, reason: item.reason };
    }
    if (!info || info.refused) return null;
    if (!info.helloChecked) {
      info.helloChecked = true;
      const d = decodeFrame(item.data, item.binary);
      if (d.ok && d.envelope.payload.case === "clientHello" && d.envelope.payload.value.clientId !== info.tokenClient) {
        info.refused = true;
        this.log.warn("agent refused: token bound to another client id", { conn, token: info.tokenClient, hello: d.envelope.payload.value.clientId });
        const err = encodeEnvelope(null, {
          case: "error",
          value: create(AgentErrorSchema, {
            error: create(ControlErrorSchema, {
              code: Code.UNAUTHENTICATED,
              message: `this token is not valid for client id ${d.envelope.payload.value.clientId}`,
            }),
            closeSession: true,
          }),
        });
        info.writer.send(err, "priority");
        info.writer.close("UNAUTHENTICATED: token bound to another client id");
        return null;
      }
    }
    return { type: "frame", conn, data: item.data, binary: item.binary };
  }

  // ------------------------------------------------------------------ the step

  private step(input: ServerInput, now: number, wall: number): void {
    if (this.fatal) return;
    const r = serverStep(this.state, input, now, { ports: this.ports }, wall);
    if (this.opts.checkInvariants) serverInvariants(this.state);
    for (const e of r.effects) this.exec(e);
    if (input.type === "frame") {
      const info = this.conns.get(input.conn);
      const c = this.state.conns.get(input.conn);
      if (info && c?.clientId) this.lastActivity.set(c.clientId, now);
    }
    this.watch.afterStep(input, r.effects);
    if (this.waiters.size > 0 && (input.type === "durable" || input.type === "control" || input.type === "tick" || input.type === "frame"))
      this.scheduleNotify();
  }

  private exec(e: ServerEffect): void {
    switch (e.type) {
      case "persist":
        this.storage.persist(e);
        break;
      case "send":
      case "ping":
      case "close":
      case "wake":
        execTransportEffect(
          e,
          (c) => this.conns.get(c)?.writer,
          (at) => this.loop.setWake(at),
          this.log,
          "closing agent session",
        );
        break;
      case "reply": {
        const waiting = this.pending.get(e.requestId);
        if (waiting) {
          this.pending.delete(e.requestId);
          waiting.resolve(e.result);
        }
        break;
      }
      case "drop_output":
        this.storage.dropOutput(e.uuid, e.throughSeq);
        break;
      case "prune_output":
        this.storage.pruneOutput(e.uuid);
        break;
      case "trace":
        if (this.log.level === "debug") this.log.debug(e.event, e.detail);
        else this.logFleetEvent(e.event, e.detail);
        break;
      default:
        unreachable(e, "server effect");
    }
  }

  /**
   * What an operator wants in the journal at INFO: registrations, fencing,
   * identity claims, authorizations used, forgotten clients and incidents.
   * Everything a peer can repeat at will goes through the rate-limited log.
   */
  private logFleetEvent(event: string, d: Record<string, unknown>): void {
    switch (event) {
      case "registered":
        return this.peerLog.write("info", "registered", "client registered", { client: d.client, generation: d.generation, conn: d.conn });
      case "conn_closed": {
        const code = String(d.code ?? "");
        if (code === "STALE_GENERATION")
          return this.peerLog.write("info", "fenced", "session fenced by a newer registration", { client: d.client, conn: d.conn });
        if (code === "IDENTITY_CONFLICT")
          return this.peerLog.write("warn", "claim", "identity claim: another instance tried a live client id (rvbox claims)", {
            client: d.client,
            conn: d.conn,
          });
        if (code === "UNSPECIFIED") return this.peerLog.write("info", "disconnected", "session closed", { client: d.client, conn: d.conn, why: d.message });
        return this.peerLog.write("warn", "refused", "connection closed with an error", { client: d.client, conn: d.conn, code, why: d.message });
      }
      case "authorization_consumed":
        return this.peerLog.write("info", "authorization", "one-shot authorization consumed", { client: d.client, instance: d.instance });
      case "client_forgotten":
        return this.log.info("client forgotten", d);
      case "incident":
        return this.peerLog.write("warn", "incident", "incident opened", { id: d.id, client: d.client, uuid: d.uuid, kind: d.kind });
      case "incident_dropped":
        return this.peerLog.write("warn", "incident_dropped", "incident counted, not stored (incident bounds)", d);
      default:
        return;
    }
  }

  /**
   * Log one operator call at INFO (`operator` in the detail: the identity;
   * the audit log is the complete record). A call that did what it asked is
   * always logged; a failed one is rate-limited per identity and kind, so
   * one caller's failures never hide another's (or its own) actions.
   */
  logOperatorAction(method: string, detail: Record<string, unknown>, outcome: string): void {
    if (outcome === "ok") return this.log.info(`operator ${method}`, { ...detail, outcome });
    this.peerLog.write("info", `operator:${String(detail.operator ?? "")}:${method}`, `operator ${method}`, { ...detail, outcome });
  }

  private die(err: unknown): void {
    if (this.fatal) return;
    if (this.closing) {
      // A store closing while its database takes no writes drops what it holds: never acknowledged.
      this.log.warn("store closed with writes it could not commit (never acknowledged)", { err: err instanceof Error ? err.message : String(err) });
      return;
    }
    this.fatal = err;
    this.log.error("fatal", { err: err instanceof Error ? (err.stack ?? err.message) : String(err) });
    if (this.opts.onFatal) this.opts.onFatal(err);
    else process.exit(70);
  }

  // ------------------------------------------------------------------ control plane

  /**
   * Feed one control request and wait for its reply (after its persist is
   * durable). `audit`: who made it; the core appends the audit entry, with
   * the result, before the reply. The reply comes back under a call id of
   * its own, so calls in flight with the same request id each get theirs;
   * an identified caller's request ids are its own (R-S5 idempotency holds
   * per operator identity: another operator's request with the same id is
   * another request).
   */
  control(request: ControlRequest, audit?: AuditCall): Promise<ControlResult> {
    return new Promise((resolve, reject) => {
      const health = this.storage.health;
      if (!health.ok) {
        // Not in the audit log (the store takes no writes): the journal has it, rate-limited per identity.
        const operator = audit?.operator ?? "";
        this.peerLog.write("info", `store-down:${operator}`, "operator call refused: store unavailable", { operator, op: request.op });
        return reject(storeUnavailable(health, "this call was not made"));
      }
      const callId = `call-${++this.callSeq}`;
      this.pending.set(callId, { resolve, reject });
      if (!audit) this.loop.feed({ type: "control", request, callId });
      else this.loop.feed({ type: "control", request: ownRequestIds(request, audit.operator), audit, callId });
    });
  }

  /**
   * `read` (a read a control call needs before it is fed, such as the store's
   * record of a resubmitted uuid), unless the store stops taking writes
   * first, or is not taking them now: then UNAVAILABLE, "this call was not
   * made". A read PostgreSQL holds behind a lock would otherwise keep the
   * call waiting past the point where every other call is told.
   */
  whileStoreUp<T>(read: () => Promise<T>): Promise<T> {
    const health = this.storage.health;
    if (!health.ok) return Promise.reject(storeUnavailable(health, "this call was not made"));
    const ms = this.storage.writeLimits.slowCommitMs;
    return new Promise((resolve, reject) => {
      const fail = (err: ConnectError): void => reject(err);
      // A read held longer than a commit may take is the store being slow, as for a commit.
      const slow = setTimeout(
        () => fail(storeUnavailable({ ok: false, reason: `a read has waited more than ${ms} ms`, since: Date.now() - ms }, "this call was not made")),
        ms,
      );
      this.preReads.set(fail, Date.now());
      read()
        .then(resolve, reject)
        .finally(() => {
          clearTimeout(slow);
          this.preReads.delete(fail);
        });
    });
  }

  /**
   * The store stopped taking writes, or takes them again: logged once per
   * change. While it takes none nothing is acknowledged (the core releases
   * replies, acks and dispatches only on `durable`), so the calls waiting
   * for a reply are answered UNAVAILABLE now rather than left hanging; the
   * core may still carry them out once the store is back, and the same call
   * repeated with the same ids (a submit's issue uuid, a request id) returns
   * that outcome instead of acting twice (R-S5).
   */
  private storeHealthChanged(now: StoreHealth, was: StoreHealth): void {
    if (!now.ok) {
      this.log.warn("store unavailable: acknowledging nothing until it is back", { reason: now.reason });
      const waiting = [...this.pending.values()];
      this.pending.clear();
      for (const w of waiting)
        w.reject(
          storeUnavailable(now, "this call may still take effect once it is back: repeat it with the same ids (issue uuid, request id) to learn its outcome"),
        );
      const reads = [...this.preReads.keys()];
      this.preReads.clear();
      for (const f of reads) f(storeUnavailable(now, "this call was not made"));
    } else if (!was.ok) this.log.info("store available again", { after_s: Math.round((Date.now() - was.since) / 100) / 10, reason_was: was.reason });
    this.shed();
  }

  /**
   * Writes queued for the store passed its backlog bound while it takes
   * none: agents' sessions are closed, with a reason they log, and new ones
   * refused (HTTP 503), so that no more output piles up in memory; agents
   * keep what they have not had acknowledged and send it again once they
   * are back. Taken back as soon as the store takes writes again (its
   * backlog then drains; agents resending their windows at once may pass the
   * bound meanwhile, which is load, not an outage).
   */
  private storeBacklogChanged(over: boolean): void {
    this.backlogOver = over;
    this.shed();
  }

  private shed(): void {
    const shed = this.backlogOver && !this.storage.health.ok;
    if (shed === this.shedding) return;
    this.shedding = shed;
    if (!shed) {
      this.log.info("store takes writes again: accepting agents", { backlogBytes: this.storage.backlogBytes });
      return;
    }
    this.log.warn("store backlog past its bound while the store takes no writes: closing agents' sessions until it does", {
      backlogBytes: this.storage.backlogBytes,
      bound: this.storage.writeLimits.backlogMaxBytes,
      sessions: this.conns.size,
    });
    for (const c of this.conns.values()) c.ws.close(1013, "server store unavailable: try again later");
  }

  /** Why the server is not ready (for /readyz), or null when it is. */
  notReady(): string | null {
    if (this.closing) return "shutting down";
    const h = this.storage.health;
    if (!h.ok) return `store unavailable for ${Math.round((Date.now() - h.since) / 1000)} s: ${h.reason}`;
    if (this.shedding) return "store backlog past its bound: agents refused";
    // A read held as long as a commit may take is the store being slow, as for a commit.
    const ms = this.storage.writeLimits.slowCommitMs;
    for (const began of this.preReads.values()) if (Date.now() - began > ms) return `store slow: a read has waited more than ${ms} ms`;
    return null;
  }

  /**
   * Resolves once the committed view of command `uuid` is no longer the one
   * it is now (it moved, or the command is gone), on abort, or at close.
   */
  waitForCommand(uuid: string, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const w = {
        uuid,
        seen: this.state.commands.get(uuid)?.committed,
        done: (): void => {
          this.waiters.delete(w);
          signal?.removeEventListener("abort", w.done);
          resolve();
        },
      };
      if (signal?.aborted) return resolve();
      this.waiters.add(w);
      signal?.addEventListener("abort", w.done, { once: true });
    });
  }

  private scheduleNotify(): void {
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(() => {
      this.notifyScheduled = false;
      // No copy of the set per notify (this runs after most loop slices): only the woken are collected.
      let wake: Array<() => void> | null = null;
      const commands = this.state.commands;
      for (const w of this.waiters) {
        const c = commands.get(w.uuid);
        if (c === undefined || c.committed !== w.seen) (wake ??= []).push(w.done);
      }
      if (wake) for (const f of wake) f();
    });
  }

  /** A deadline-clock instant (the core's deadlines, heartbeat times) as wall time, for display. */
  toWall(t: number): number {
    return this.loop.clock.toWall(t);
  }

  sessionInfo(conn: number): { remote: string; lastInbound: number } | undefined {
    const i = this.conns.get(conn);
    return i ? { remote: i.remote, lastInbound: i.lastInbound } : undefined;
  }

  get connectionCount(): number {
    return this.conns.size;
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.deadlineTimer);
    await this.historySweep.close();
    for (const c of this.conns.values()) c.ws.terminate();
    this.controlListener.destroyAll();
    await Promise.all([closeServer(this.agentHttp), closeServer(this.controlHttp)]);
    this.loop.stop();
    this.watch.close();
    for (const w of [...this.waiters]) w.done();
    await this.storage.close();
  }
}

/** Limits whose default depends on where the history lives (the store keeps it: a smaller ledger). */
function storeDefaults(keepsHistory: boolean): Partial<ServerLimits> {
  return keepsHistory ? { prunedMax: SERVER_PRUNED_LEDGER_IN_STORE } : {};
}

/** UNAVAILABLE for a control call while the store takes no writes: why, since when, and what became of the call. */
function storeUnavailable(h: Exclude<StoreHealth, { ok: true }>, outcome: string): ConnectError {
  const secs = Math.round((Date.now() - h.since) / 1000);
  return new ConnectError(`the server's store is not taking writes (for ${secs} s: ${h.reason}); ${outcome}`, ConnectCode.Unavailable);
}

function refuse(socket: import("node:net").Socket, status: number, text: string): void {
  const body = `${text}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? "Error"}\r\n` +
      (status === 401 ? 'WWW-Authenticate: Bearer realm="rvbox"\r\n' : "") +
      `Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function remoteOf(req: http.IncomingMessage): string {
  const fwd = req.headers["x-forwarded-for"];
  const direct = `${req.socket.remoteAddress ?? "?"}:${req.socket.remotePort ?? 0}`;
  return typeof fwd === "string" && fwd !== "" ? `${fwd.split(",")[0]!.trim()} via ${direct}` : direct;
}

function listen(server: http.Server, hp: HostPort): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(hp.port, hp.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
}

function addr(s: http.Server): string {
  const a = s.address() as AddressInfo;
  return `${a.address}:${a.port}`;
}
