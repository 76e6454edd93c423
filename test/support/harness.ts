// A small deterministic runner for core tests: one server, any number of
// agents, an in-memory disk per node (durable on demand or immediately), an
// instant ordered network and a scripted executor. Every step runs the
// reducers' invariants. The simulator in sim/ is the full-fault version.
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { AgentEnvelopeSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { ExecutionSpecSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  agentInvariants,
  applyRecord,
  agentStep,
  defaultAgentConfig,
  defaultServerConfig,
  newServer,
  restoreAgent,
  restoreServer,
  serverInvariants,
  serverStep,
  type AgentConfig,
  type AgentEffect,
  type AgentInput,
  type AgentState,
  type ControlRequest,
  type ControlResult,
  type PersistEffect,
  type ServerConfig,
  type ServerEffect,
  type ServerInput,
  type ServerState,
} from "../../core/index.js";
import { testPorts } from "./ports.js";

export class Disk {
  durable = new Map<string, Map<string, unknown>>();
  pending: PersistEffect[] = [];
  apply(p: PersistEffect): void {
    for (const r of p.records) applyRecord(this.durable, r, (v) => structuredClone(v));
  }
  tables(): { get(t: string): ReadonlyMap<string, unknown> | undefined } {
    const snap = structuredClone(this.durable);
    return { get: (t) => snap.get(t) };
  }
}

export type Envelope = ReturnType<typeof decode>;
export const decode = (data: Uint8Array) => fromBinary(AgentEnvelopeSchema, data);

export interface Proc {
  uuid: string;
  pid: number;
  stdin: Uint8Array[];
  stdinClosed: boolean;
  signals: number[];
}

export class Harness {
  /** The deadline clock every node is stepped with. */
  now = 1_700_000_000_000;
  /** Wall clock minus deadline clock (every node's wall clock is `now + wallStep`). */
  wallStep = 0;
  server: ServerState;
  serverDisk = new Disk();
  agents = new Map<
    string,
    { st: AgentState; disk: Disk; conn: number; serverConn: number; closedServerConn?: number; cfg: AgentConfig; procs: Map<string, Proc>; spawns: string[] }
  >();
  /** Every envelope sent, in order, with its direction. */
  wire: Array<{ from: string; to: string; env: Envelope; data: Uint8Array }> = [];
  replies = new Map<string, ControlResult>();
  serverEffects: ServerEffect[] = [];
  agentEffects: Array<{ client: string; e: AgentEffect }> = [];
  /** When false, persists stay pending until flush() is called. */
  autoDurable = true;
  /** Commands whose spawn fails (ENOENT), and whose script preparation fails. */
  spawnFails = new Set<string>();
  prepareFails = new Set<string>();
  /** When false, frames are queued until deliver() is called. */
  autoDeliver = true;
  queue: Array<() => void> = [];
  private nextServerConn = 1;
  private connMap = new Map<number, string>(); // server conn -> client id
  private nextPid = 100;

  constructor(readonly serverConfig: ServerConfig = defaultServerConfig()) {
    this.server = newServer(serverConfig, 1);
  }

  /**
   * Add an agent node. `name` is the harness's handle; the client id is
   * `overrides.clientId ?? name`. Pass `from` to start with a copy of another
   * node's durable disk (a clone: same instance id).
   */
  addAgent(name: string, overrides: Partial<AgentConfig> = {}, seed = 7, from?: string): void {
    const cfg = defaultAgentConfig(overrides.clientId ?? name, overrides);
    const disk = new Disk();
    if (from) disk.durable = structuredClone(this.agents.get(from)!.disk.durable);
    const clientId = name;
    const st = restoreAgent(cfg, disk.tables(), seed);
    this.agents.set(clientId, { st, disk, conn: 0, serverConn: 0, cfg, procs: new Map(), spawns: [] });
    this.agentInput(clientId, { type: "start" });
  }

  /** Crash the node (unsynced persists are lost) and restart it from its disk. */
  restartAgent(clientId: string, seed = 8): void {
    const a = this.agents.get(clientId)!;
    a.disk.pending = [];
    if (a.serverConn) this.serverInput({ type: "conn_closed", conn: a.serverConn, reason: "agent crashed" });
    a.serverConn = 0;
    a.conn = 0;
    a.procs.clear();
    this.local.delete(clientId);
    a.st = restoreAgent(a.cfg, a.disk.tables(), seed);
    this.agentInput(clientId, { type: "start" });
  }

  restartServer(seed = 2): void {
    this.serverDisk.pending = [];
    this.server = restoreServer(this.serverConfig, this.serverDisk.tables(), seed);
    for (const [id, a] of this.agents) {
      if (a.conn) {
        const c = a.conn;
        a.conn = 0;
        a.serverConn = 0;
        this.agentInput(id, { type: "transport_closed", conn: c, reason: "server restarted" });
      }
    }
  }

  serverInput(input: ServerInput): void {
    const r = serverStep(this.server, input, this.now, { ports: testPorts }, this.now + this.wallStep);
    serverInvariants(this.server);
    for (const e of r.effects) this.serverEffect(e);
  }

  /** Executor reports are local to the agent: they follow its step, not the network. */
  private local = new Map<string, AgentInput[]>();
  private inAgent = new Set<string>();

  agentInput(clientId: string, input: AgentInput): void {
    const a = this.agents.get(clientId)!;
    const r = agentStep(a.st, input, this.now, { ports: testPorts }, this.now + this.wallStep);
    agentInvariants(a.st);
    if (this.inAgent.has(clientId)) {
      for (const e of r.effects) this.agentEffect(clientId, e);
      return;
    }
    this.inAgent.add(clientId);
    try {
      for (const e of r.effects) this.agentEffect(clientId, e);
      const q = this.local.get(clientId) ?? [];
      while (q.length > 0) {
        const next = q.shift()!;
        const r2 = agentStep(a.st, next, this.now, { ports: testPorts }, this.now + this.wallStep);
        agentInvariants(a.st);
        for (const e of r2.effects) this.agentEffect(clientId, e);
      }
    } finally {
      this.inAgent.delete(clientId);
    }
  }

  private executor(clientId: string, input: AgentInput): void {
    let q = this.local.get(clientId);
    if (!q) this.local.set(clientId, (q = []));
    q.push(input);
  }

  control(request: ControlRequest): ControlResult | undefined {
    this.serverInput({ type: "control", request: lenient(request) });
    return this.replies.get(request.requestId);
  }

  private draining = false;

  /** The network: one FIFO for every frame, so no frame overtakes an earlier one. */
  private later(f: () => void): void {
    this.queue.push(f);
    if (this.autoDeliver) this.deliver();
  }

  deliver(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.queue.length > 0) this.queue.shift()!();
    } finally {
      this.draining = false;
    }
  }

  private serverEffect(e: ServerEffect): void {
    this.serverEffects.push(e);
    switch (e.type) {
      case "persist":
        if (this.autoDurable) {
          this.serverDisk.apply(e);
          this.serverInput({ type: "durable", through: e.id });
        } else this.serverDisk.pending.push(e);
        break;
      case "send": {
        const client = this.connMap.get(e.conn);
        if (!client) break;
        const a = this.agents.get(client);
        this.wire.push({ from: "server", to: client, env: decode(e.data), data: e.data });
        if (a && a.serverConn === e.conn) {
          const conn = a.conn;
          // A priority frame sent just before a close (an AgentError) still
          // arrives: the writer flushes the priority lane before it closes.
          const flushed = e.lane === "priority";
          this.later(() => {
            if (a.serverConn === e.conn || (flushed && a.closedServerConn === e.conn)) this.agentInput(client, { type: "frame", conn, data: e.data });
          });
        }
        break;
      }
      case "close": {
        const client = this.connMap.get(e.conn);
        const a = client ? this.agents.get(client) : undefined;
        if (a && a.serverConn === e.conn) {
          const conn = a.conn;
          a.closedServerConn = e.conn;
          a.serverConn = 0;
          a.conn = 0;
          this.later(() => this.agentInput(client!, { type: "transport_closed", conn, reason: e.reason }));
        }
        break;
      }
      case "reply":
        this.replies.set(e.requestId, e.result);
        break;
      default:
        break;
    }
  }

  private agentEffect(clientId: string, e: AgentEffect): void {
    const a = this.agents.get(clientId)!;
    this.agentEffects.push({ client: clientId, e });
    switch (e.type) {
      case "persist":
        if (this.autoDurable) {
          a.disk.apply(e);
          this.agentInput(clientId, { type: "durable", through: e.id });
        } else a.disk.pending.push(e);
        break;
      case "connect": {
        const sc = this.nextServerConn++;
        this.connMap.set(sc, clientId);
        a.conn = e.conn;
        a.serverConn = sc;
        this.serverInput({ type: "conn_open", conn: sc });
        this.agentInput(clientId, { type: "transport_open", conn: e.conn });
        break;
      }
      case "send": {
        if (e.conn !== a.conn || !a.serverConn) break;
        const sc = a.serverConn;
        this.wire.push({ from: clientId, to: "server", env: decode(e.data), data: e.data });
        this.later(() => {
          if (a.serverConn === sc) this.serverInput({ type: "frame", conn: sc, data: e.data });
        });
        break;
      }
      case "close":
        if (e.conn === a.conn && a.serverConn) {
          const sc = a.serverConn;
          a.serverConn = 0;
          a.conn = 0;
          this.later(() => this.serverInput({ type: "conn_closed", conn: sc, reason: e.reason }));
        }
        break;
      case "spawn": {
        if (this.spawnFails.has(e.uuid)) {
          this.executor(clientId, { type: "spawn_failed", uuid: e.uuid, reason: "ENOENT: no such file" });
          break;
        }
        a.spawns.push(e.uuid);
        const pid = this.nextPid++;
        a.procs.set(e.uuid, { uuid: e.uuid, pid, stdin: [], stdinClosed: false, signals: [] });
        this.executor(clientId, { type: "process_started", uuid: e.uuid, pid });
        break;
      }
      case "write_stdin": {
        const p = a.procs.get(e.uuid);
        p?.stdin.push(e.data);
        this.executor(clientId, { type: "stdin_written", uuid: e.uuid, seq: e.seq });
        break;
      }
      case "close_stdin": {
        const p = a.procs.get(e.uuid);
        if (p) p.stdinClosed = true;
        this.executor(clientId, { type: "stdin_written", uuid: e.uuid, seq: e.seq });
        break;
      }
      case "signal":
        a.procs.get(e.uuid)?.signals.push(e.signal);
        break;
      case "write_script":
        if (this.prepareFails.has(e.uuid)) this.executor(clientId, { type: "script_failed", uuid: e.uuid, reason: "EACCES" });
        else this.executor(clientId, { type: "script_prepared", uuid: e.uuid, path: `/scripts/${e.uuid}` });
        break;
      default:
        break;
    }
  }

  /** Break an agent's link (both ends see it close; frames in flight are lost with it). */
  cutLink(name: string): void {
    const a = this.agents.get(name)!;
    if (!a.conn) return;
    const sc = a.serverConn;
    a.serverConn = 0;
    if (sc) this.serverInput({ type: "conn_closed", conn: sc, reason: "cut" });
    this.agentInput(name, { type: "transport_closed", conn: a.conn, reason: "cut" });
  }

  /** Let an agent's backoff expire now, so it reconnects (and reconciles). */
  reconnectNow(name: string): void {
    const a = this.agents.get(name)!;
    this.now = Math.max(this.now, a.st.session.retryAt);
    this.agentInput(name, { type: "tick" });
  }

  /** Make pending persists durable (all, or the first n batches) on a node. */
  flush(node: "server" | string, n = Infinity): void {
    const disk = node === "server" ? this.serverDisk : this.agents.get(node)!.disk;
    let last = 0;
    while (disk.pending.length > 0 && n-- > 0) {
      const p = disk.pending.shift()!;
      disk.apply(p);
      last = p.id;
    }
    if (last === 0) return;
    if (node === "server") this.serverInput({ type: "durable", through: last });
    else this.agentInput(node, { type: "durable", through: last });
  }

  advance(ms: number): void {
    this.now += ms;
    this.serverInput({ type: "tick" });
    for (const id of this.agents.keys()) this.agentInput(id, { type: "tick" });
  }

  output(clientId: string, uuid: string, text: string, stream: "stdout" | "stderr" = "stdout"): void {
    this.agentInput(clientId, { type: "process_output", uuid, stream, data: new TextEncoder().encode(text) });
  }

  exit(clientId: string, uuid: string, exitCode: number | null, signal: string | null = null): void {
    this.agentInput(clientId, { type: "process_exited", uuid, exitCode, signal, timedOut: false, incompleteStreams: [] });
  }

  submit(
    clientId: string,
    uuid: string,
    spec: Omit<MessageInitShape<typeof ExecutionSpecSchema>, "$typeName"> & { argv?: string[] } = {},
    extra: Partial<Extract<ControlRequest, { op: "submit" }>> = {},
  ): ControlResult | undefined {
    const { argv, ...rest } = spec;
    const full = create(ExecutionSpecSchema, {
      program: { case: "argv", value: { argv: argv ?? ["echo", "hi"] } },
      ...rest,
    } as MessageInitShape<typeof ExecutionSpecSchema>);
    return this.control({ op: "submit", requestId: `submit-${uuid}`, uuid, clientId, spec: full, ...extra });
  }

  sent(kind: string, to?: string): Envelope[] {
    return this.wire.filter((w) => w.env.payload.case === kind && (to === undefined || w.to === to)).map((w) => w.env);
  }

  /** Server-side stored event records of a command, in order. */
  storedEvents(uuid: string): Array<Record<string, unknown>> {
    const t = this.serverDisk.durable.get("event") ?? new Map();
    return [...t.entries()]
      .filter(([k]) => k.startsWith(`${uuid}/`))
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([, v]) => v as Record<string, unknown>);
  }

  cmd(uuid: string) {
    return this.server.commands.get(uuid)!;
  }
}

/**
 * Most unit tests submit to a client before (or without) registering it and
 * authorize instances that never tried: the rig opts those requests in to
 * `allowUnknownClient` / `instanceNotYetSeen` unless the test sets the field
 * itself (the tests of those refusals set it to false).
 */
export function lenient(r: ControlRequest): ControlRequest {
  if (r.op === "submit" && r.allowUnknownClient === undefined) return { ...r, allowUnknownClient: true };
  if (r.op === "authorize" && r.instanceNotYetSeen === undefined) return { ...r, instanceNotYetSeen: true };
  return r;
}
