// The server node reducer stepped by hand, with fake agents that are just
// connection numbers: shared by the server-node tests. A thin layer on the
// Pair rig's parts (test/support/pair.ts): its disk, its checked step and
// its operator observation helpers (command, clientList, sessions, claims,
// incidents, outputOf).
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { expect } from "vitest";
import {
  ClientHelloSchema,
  CommandAcceptedSchema,
  ReconcileCommandStateSchema,
  ReconcileSnapshotSchema,
  type AgentError,
  type ClientHello,
  type ReconcileCommandState,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandEventSchema,
  CommandLifecycle as L,
  ControlErrorSchema,
  ExecutionSpecSchema,
  LifecycleTransitionSchema,
  OutputChunkSchema,
  type OutputStream,
  type ExecutionSpec,
  type LifecycleTransition,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  defaultServerConfig,
  newServer,
  type ControlRequest,
  type ControlResult,
  type ServerConfig,
  type ServerEffect,
  type ServerInput,
  type ServerLimits,
  type ServerState,
} from "../../core/index.js";
import type { Code } from "../../core/errors.js";
import { encodeEnvelope, type Fence, type Payload } from "../../core/codec/frame-codec.js";
import { rangeToWire, SUPPORTED_PROTOCOL } from "../../core/codec/version.js";
import type { CommandInfo } from "../../core/reader/command-view.js";
import { missingMessage } from "../../core/server/history.js";
import {
  auditOf,
  refusalsOf,
  claimsOf,
  clientListOf,
  commandOf,
  decode,
  Disk,
  droppedIncidentsOf,
  fleetOf,
  followOf,
  incidentDropsOf,
  incidentsOf,
  jobOf,
  jobsOf,
  lenient,
  listCommandsOf,
  sessionsOf,
  stepServerChecked,
  T0,
  type Followed,
} from "./pair.js";
import { testPorts } from "./ports.js";
import { sessionView } from "../../shells/server/control-service.js";

export { decode, enc, lenient, sha, T0 } from "./pair.js";
export type SpecInit = Exclude<MessageInitShape<typeof ExecutionSpecSchema>, ExecutionSpec>;
export type HelloInit = Exclude<MessageInitShape<typeof ClientHelloSchema>, ClientHello>;
export type StateInit = Exclude<MessageInitShape<typeof ReconcileCommandStateSchema>, ReconcileCommandState>;
export type LifecycleInit = Exclude<MessageInitShape<typeof LifecycleTransitionSchema>, LifecycleTransition>;
export type EventInit = MessageInitShape<typeof CommandEventSchema>["event"];
export const argv = (...a: string[]): SpecInit => ({ program: { case: "argv", value: { argv: a.length ? a : ["true"] } } });
export const of = <T extends ServerEffect["type"]>(effects: ServerEffect[], type: T) =>
  effects.filter((e) => e.type === type) as Array<Extract<ServerEffect, { type: T }>>;

export const lifecycle = (state: L, extra: Partial<LifecycleInit> = {}): EventInit => ({
  case: "lifecycle",
  value: create(LifecycleTransitionSchema, { state, ...extra }),
});
export const output = (stream: OutputStream, offset: number, raw: Uint8Array, over: Partial<MessageInitShape<typeof OutputChunkSchema>> = {}): EventInit => ({
  case: "output",
  value: create(OutputChunkSchema, { stream, streamOffset: BigInt(offset), originalSize: raw.length, zstdData: testPorts.compress(raw), ...over }),
});

/** One server, stepped by hand, with fake agents that are just connection numbers. */
export class ServerRig {
  /** The deadline clock. */
  now = T0;
  /** Wall clock minus deadline clock. */
  wallStep = 0;
  st: ServerState;
  cfg: ServerConfig;
  disk = new Disk();
  log: ServerEffect[] = [];
  replies = new Map<string, ControlResult>();
  autoDurable = true;
  /** Keep a copy of what is persisted (off for long loops: it clones every record). */
  store = true;
  private nextConn = 1;

  constructor(over: Partial<ServerLimits> = {}, seed = 1) {
    const d = defaultServerConfig();
    this.cfg = { ...d, limits: { ...d.limits, ...over } };
    this.st = newServer(this.cfg, seed);
  }

  step(input: ServerInput): ServerEffect[] {
    const effects = stepServerChecked(this.st, input, this.now, this.now + this.wallStep);
    this.log.push(...effects);
    const out = [...effects];
    for (const e of effects) {
      if (e.type === "reply") this.replies.set(e.requestId, e.result);
      if (e.type === "persist" && this.store) this.autoDurable ? this.disk.apply(e) : this.disk.pending.push(e);
    }
    const last = of(effects, "persist").at(-1);
    if (this.autoDurable && last) out.push(...this.step({ type: "durable", through: last.id }));
    return out;
  }

  flush(): ServerEffect[] {
    for (const p of this.disk.pending) this.disk.apply(p);
    this.disk.pending = [];
    return this.step({ type: "durable", through: this.st.gate.lastId });
  }

  open(): number {
    const c = this.nextConn++;
    this.step({ type: "conn_open", conn: c });
    return c;
  }

  fenceOf(conn: number): Fence | null {
    const c = this.st.conns.get(conn);
    return c && c.sessionId ? { sessionId: c.sessionId, generation: c.generation } : null;
  }

  frame(conn: number, payload: Payload, fence: Fence | null = this.fenceOf(conn)): ServerEffect[] {
    return this.step({ type: "frame", conn, data: encodeEnvelope(fence, payload) });
  }

  hello(conn: number, clientId = "a", instanceId = `inst-${clientId}`, over: Partial<HelloInit> = {}): ServerEffect[] {
    return this.frame(
      conn,
      {
        case: "clientHello",
        value: create(ClientHelloSchema, {
          clientId,
          clientInstanceId: instanceId,
          supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL),
          maxRunningCommands: 8,
          maxQueuedCommands: 8,
          ...over,
        }),
      },
      null,
    );
  }

  snapshot(conn: number, retained: StateInit[] = []): ServerEffect[] {
    return this.frame(conn, {
      case: "reconcileSnapshot",
      value: create(ReconcileSnapshotSchema, { retainedCommands: retained.map((r) => create(ReconcileCommandStateSchema, r)) }),
    });
  }

  /** A registered, reconciled session. */
  connect(clientId = "a", instanceId = `inst-${clientId}`, over: Partial<HelloInit> = {}): number {
    const c = this.open();
    this.hello(c, clientId, instanceId, over);
    expect(this.session(c)?.phase).toBe("reconciling");
    this.snapshot(c);
    expect(this.session(c)?.phase).toBe("ready");
    return c;
  }

  control(request: ControlRequest): ControlResult | undefined {
    this.step({ type: "control", request: lenient(request) });
    return this.replies.get(request.requestId);
  }

  submit(clientId: string, uuid: string, spec: SpecInit = argv(), extra: Partial<Extract<ControlRequest, { op: "submit" }>> = {}): ControlResult | undefined {
    return this.control({ op: "submit", requestId: `submit-${uuid}`, uuid, clientId, spec: create(ExecutionSpecSchema, spec), ...extra });
  }

  accept(conn: number, uuid: string, accepted = true, code?: Code, message = ""): ServerEffect[] {
    return this.frame(conn, {
      case: "commandAccepted",
      value: create(CommandAcceptedSchema, {
        issueUuid: uuid,
        commandRevision: 1n,
        accepted,
        ...(code !== undefined ? { rejection: create(ControlErrorSchema, { code, message }) } : {}),
      }),
    });
  }

  event(conn: number, uuid: string, seq: number | bigint, event: EventInit, rev = 1n): ServerEffect[] {
    return this.frame(conn, {
      case: "commandEvent",
      value: create(CommandEventSchema, { issueUuid: uuid, eventSeq: BigInt(seq), commandRevision: rev, event }),
    });
  }

  /** Submit, dispatch, accept and start a command on `conn`. */
  running(conn: number, uuid: string, spec: SpecInit = argv()): void {
    const client = this.st.conns.get(conn)!.clientId;
    this.submit(client, uuid, spec);
    expect(this.command(uuid).state).toBe("dispatched");
    this.accept(conn, uuid);
    this.event(conn, uuid, 1, lifecycle(L.RUNNING));
    expect(this.command(uuid).state).toBe("running");
  }

  /** The server's working record of a command: internal state, for invariant-level checks only (prefer `command`). */
  cmd(uuid: string) {
    return this.st.commands.get(uuid)!;
  }

  // ------------------------------------------------------------ what an operator sees (pair.ts)

  /** GetCommand: the operator's view (committed state, exit code, …); throws if the server does not know it. */
  command(uuid: string): CommandInfo {
    const c = commandOf(this.st, uuid, this.wallStep, this.disk.view());
    if (!c) throw new Error(`GetCommand ${uuid}: NOT_FOUND`);
    return c;
  }

  /** GetCommand's NOT_FOUND message (`no command …`, or how a pruned command ended); undefined when it is found. */
  notFound(uuid: string): string | undefined {
    return this.findCommand(uuid) ? undefined : missingMessage(this.st, uuid);
  }

  /** GetCommand, undefined for NOT_FOUND. */
  findCommand(uuid: string): CommandInfo | undefined {
    return commandOf(this.st, uuid, this.wallStep, this.disk.view());
  }

  /** What a follower is shown of a command's durable events (needs `store`). */
  outputOf(uuid: string): Followed {
    return followOf(this.disk.durable, uuid);
  }

  clientList() {
    return clientListOf(this.st, this.wallStep);
  }

  client(clientId: string) {
    return this.clientList().find((c) => c.clientId === clientId);
  }

  sessions() {
    return sessionsOf(this.st, this.wallStep);
  }

  /** ListSessions' entry for a connection. */
  session(conn: number) {
    const c = this.st.conns.get(conn); // ListSessions' entry, without listing every session (rigs with thousands of agents)
    return c ? sessionView(fleetOf(this.st, this.wallStep), c) : undefined;
  }

  claims() {
    return claimsOf(this.st);
  }

  /** A client's pending claim as ListClaims shows it, undefined when it has none. */
  claimOf(clientId: string) {
    return this.claims().find((c) => c.clientId === clientId);
  }

  incidents(open = false) {
    return incidentsOf(this.st, open);
  }

  /** ListIncidents' dropped_total. */
  incidentsDropped(): number {
    return this.st.incidentsDropped;
  }

  /** ListIncidents' per-client dropped count. */
  droppedIncidents(clientId: string): number {
    return droppedIncidentsOf(this.st, clientId);
  }

  /** ListIncidents' dropped list (per client: count, last time, last kind). */
  incidentDrops() {
    return incidentDropsOf(this.st);
  }

  /** GetJob (the committed view), undefined for NOT_FOUND. */
  getJob(jobId: string) {
    return jobOf(this.st, jobId, this.wallStep);
  }

  /** ListAudit: the entries kept and how many were dropped. */
  listAudit() {
    return auditOf(this.st, this.disk.view());
  }

  /** ListAudit's refusals: the aggregated refusal entries kept and how many were dropped. */
  listRefusals() {
    return refusalsOf(this.st);
  }

  /** ListJobs. */
  listJobs() {
    return jobsOf(this.st, this.wallStep);
  }

  /** ListCommands: every command with a committed state. */
  listCommands(): CommandInfo[] {
    return listCommandsOf(this.st, this.wallStep, this.disk.view());
  }

  sent(effects: ServerEffect[], conn?: number, kind?: string) {
    return of(effects, "send")
      .filter((s) => conn === undefined || s.conn === conn)
      .map((s) => ({ env: decode(s.data), lane: s.lane, conn: s.conn }))
      .filter((s) => !kind || s.env.payload.case === kind);
  }

  errors(effects: ServerEffect[], conn?: number) {
    return this.sent(effects, conn, "error").map((s) => s.env.payload.value as AgentError);
  }
}

export function expectClosed(r: ServerRig, effects: ServerEffect[], conn: number, code: Code, message?: string): void {
  const errs = r.sent(effects, conn, "error");
  expect(errs.map((s) => [(s.env.payload.value as AgentError).error?.code, (s.env.payload.value as AgentError).closeSession, s.lane])).toEqual([
    [code, true, "priority"],
  ]);
  if (message !== undefined) expect((errs[0]!.env.payload.value as AgentError).error?.message).toBe(message);
  expect(of(effects, "close").filter((c) => c.conn === conn)).toHaveLength(1);
  expect(r.session(conn), "the session is gone from ListSessions").toBeUndefined();
}

export function expectRefused(r: ServerRig, effects: ServerEffect[], conn: number, code: Code, message?: string): void {
  if (message !== undefined) expect(r.errors(effects, conn)[0]?.error?.message).toBe(message);
  expect(r.errors(effects, conn).map((e) => [e.error?.code, e.closeSession])).toEqual([[code, false]]);
  expect(of(effects, "close")).toEqual([]);
  expect(r.session(conn), "the session is still listed").toBeDefined();
}
