// Oracles: what must hold in every run, checked after every step and at the
// end. Each check names the requirement it guards (requirements.md); a
// failure throws SimFailure, which ends the run with the seed and the hash.
//
//  at-most-once   no issue_uuid is spawned twice within one disk lineage; a
//                 spawn only follows a durable launch authorization (phase
//                 "launching" on the agent's disk)
//  R-O3           an EventAck (and a ReconcileRequest's last_server_event_seq)
//                 never covers an event not durably stored on the server disk
//  R-O2           every (re)send of a (uuid, event_seq) carries identical
//                 CommandEvent bytes, equal to the agent's durable pinned copy
//  coverage       every byte a process wrote reaches durable server storage in
//                 order, or is covered by a truncation marker (checked at the
//                 end; interrupted commands only need consistent prefixes)
//  terminal       a terminal state never changes (in memory or on disk) and is
//                 never mislabeled (succeeded needs an exit 0, failed needs a
//                 launched process that did not exit 0 and was not ended by an
//                 operator signal, cancelled needs an operator request, rejected
//                 and expired need a process that never started)
//  R-F7           no stale-generation envelope is acted on: no ack, no stored
//                 event, and the connection is closed
//  R-F4           a different instance claiming a live client id is refused and
//                 recorded as the pending claim
//  R-D8           no dispatch / script / stdin / signal on a session before its
//                 ReconcileResult was sent, and that result is durable first
//  R-D13          an agent with a store incident sends no snapshot and accepts
//                 no new command
//  R-S1           a process reads each stdin write once, in request order,
//                 byte for byte (with the requested newline)
//  R-D1           an acknowledged submit survives every server restart, and one
//                 uuid is never acknowledged for two different requests
//  R-W10          a rogue connection's garbage is answered by a close, never a
//                 crash (a core exception is itself a failure)
//  R-O5           output removed by server retention is covered by a durable
//                 retention marker (after every server restart and at the end)
//  liveness       after the heal: every command terminal at the server, every
//                 event acknowledged, agents retain nothing but tombstones
//  jobs           concurrency, one launch per client, the error budget, R-D1
//                 and liveness of jobs (job-oracle.ts)

import { toBinary } from "@bufbuild/protobuf";
import type { AgentEffect, AgentInput } from "../core/agent/agent-types.js";
import { agentRow, eventKey as agentEventKey } from "../core/agent/store.js";
import { isTerminal } from "../core/dispatch/lifecycle.js";
import type { ServerCommand, ServerEffect, ServerInput, ServerState } from "../core/server/server-types.js";
import { authorizationExpired } from "../core/server/clients.js";
import { CommandLifecycle as L, ExecutionSpecSchema } from "../protos/gen/rvbox/v1/common_pb.js";
import type { PendingBatch } from "./disk.js";
import type { ExecHost, ExecObserver, ExitInfo } from "./executor.js";
import type { AgentHost } from "./hosts.js";
import type { Submitted, SubmittedJob } from "./operator.js";
import { JobOracle } from "./job-oracle.js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { decodeEnvelope, envelopeGeneration, rawField, shortDigest, PAYLOAD_FIELD } from "./wire.js";
import { coverageOf, type StoredEvent } from "./coverage.js";
import { parseEventKey, rowOf, rowsOf, type CommandRow, type EventRow, type PrunedRow } from "../core/server/store.js";
import { followCoverageOf, type RetentionSpan } from "./follow-oracle.js";
import type { World } from "./world.js";
import type { ControlRequest, ControlResult } from "../core/server/server-types.js";
import { MAX_CHUNK_BYTES } from "../core/limits.js";
import { bytesEqual, concatBytes } from "../core/bytes.js";
import type { PayloadCase } from "../core/codec/frame-codec.js";
import { speaksTerminal } from "../core/codec/version.js";
import { ENVELOPES, isReconcileGatedWork, isSentBy, type Lane, type Sender } from "../core/protocol/envelopes.js";

export class SimFailure extends Error {
  override name = "SimFailure";
  constructor(
    readonly oracle: string,
    message: string,
    readonly at: number,
  ) {
    super(message);
  }
}

interface Observed {
  stdout: Uint8Array[];
  stderr: Uint8Array[];
}

interface Pre {
  conn: number;
  connExisted: boolean;
  stale: string | null;
  mustClose: string | null;
  helloReject: { clientId: string; instanceId: string } | null;
  eventKey: string | null;
}

const DECODED_KINDS = new Set(["eventAck", "reconcileRequest", "serverWelcome", "reconcileResult", "commandDispatch", "stdinWrite"]);
const pad12 = (n: number): string => n.toString().padStart(12, "0");

export class Oracles implements ExecObserver {
  // server disk, as it became durable
  private readonly storedEvents = new Map<string, Map<number, StoredEvent>>();
  /** The last durable retention marker per command (outlives the record, as storedEvents does). */
  private readonly durableRetention = new Map<string, RetentionSpan>();
  private readonly durableThrough = new Map<string, number>();
  private readonly durableTerminal = new Map<string, number>();
  // server memory, per incarnation
  private seenState = new Map<string, number>();
  private readonly judged = new Set<string>();
  // connections
  private readonly fence = new Map<number, { sessionId: string; gen: number; client: string }>();
  private readonly latestGen = new Map<string, number>();
  private readonly reconciledConns = new Set<number>();
  private readonly rogue = new Map<number, string>();
  // agents and processes
  private readonly wire = new Map<string, string>();
  private readonly frames = new Map<string, Array<{ gen: number; kind: string; data: Uint8Array }>>();
  private readonly spawns = new Map<string, number>();
  private readonly spawnLineages = new Map<string, Set<number>>();
  private readonly startedBy = new Map<string, Set<number>>();
  private readonly observed = new Map<string, Observed>();
  private readonly exits = new Map<string, Array<{ lineage: number; info: ExitInfo }>>();
  private readonly endingSignals = new Set<string>();
  private readonly acked = new Map<string, Submitted>();
  private readonly okSpecs = new Map<string, Set<string>>();
  private readonly acceptedByLineage = new Set<string>();
  readonly dropped = new Map<string, number>();
  /** Commands durably pruned from the server's history: uuid -> {state, source}. */
  readonly prunedDurable = new Map<string, { state: number; terminalSource: string }>();
  /** History in the store: every command whose durable row is terminal (its rows stay when memory lets go of it). */
  readonly archived = new Map<string, { state: number; terminalSource: string }>();
  private readonly leaked = new Set<string>();
  private readonly stdinReqs = new Map<string, Uint8Array[]>();
  private readonly stdinSeen = new Map<string, { seq: number; idx: number }>();
  readonly stats = {
    acksChecked: 0,
    staleFramesRejected: 0,
    resendsCompared: 0,
    splitBrainLaunches: 0,
    helloRejections: 0,
    rogueFrames: 0,
    coverageChecked: 0,
    bytesVerified: 0,
    orphansLeaked: 0,
    stdinWritesChecked: 0,
    terminalsRun: 0,
    resizesApplied: 0,
    retentionDrops: 0,
    prunes: 0,
  };

  /** The jobs oracle (job-oracle.ts). */
  readonly jobs = new JobOracle((oracle, message) => this.fail(oracle, message));

  constructor(private readonly w: World) {}

  private get historyInStore(): boolean {
    return this.w.swarm.historyInStore;
  }

  fail(oracle: string, message: string): never {
    throw new SimFailure(oracle, message, this.w.q.now);
  }

  unexpected(oracle: string, message: string): void {
    this.fail(oracle, message);
  }

  // ================================================================ server

  beforeServer(input: ServerInput): Pre | null {
    if (input.type !== "frame") return null;
    const st = this.w.server.state!;
    const conn = st.conns.get(input.conn);
    const pre: Pre = { conn: input.conn, connExisted: conn !== undefined, stale: null, mustClose: null, helloReject: null, eventKey: null };
    const env = (input.binary ?? true) ? decodeEnvelope(input.data) : null;
    const rogueWhat = this.rogue.get(input.conn);
    if (!env) {
      if (conn) pre.mustClose = rogueWhat ?? "undecodable frame";
      return pre;
    }
    const p = env.payload;
    if (p.case === "commandEvent") pre.eventKey = `${p.value.issueUuid}/${pad12(Number(p.value.eventSeq))}`;
    if (p.case === "clientHello") {
      const h = p.value;
      if (conn && conn.phase !== "hello") pre.mustClose = "second hello";
      const client = st.clients.get(h.clientId);
      const live = client && client.conn !== 0 && st.conns.has(client.conn);
      const auth = client?.authorization;
      const authorized = auth && auth.instanceId === h.clientInstanceId && !authorizationExpired(st, auth, this.w.server.now());
      const wellFormed = /^agent-\d+$/.test(h.clientId) && h.clientInstanceId.length > 0 && h.supportedProtocol?.min?.major === 1;
      // An instance an authorized takeover displaced is refused (CODE_REPLACED), not recorded as a claim.
      const replaced = client?.replaced?.authorized === true && client.replaced.instanceId === h.clientInstanceId && client.instanceId !== h.clientInstanceId;
      if (conn && conn.phase === "hello" && live && client!.instanceId !== h.clientInstanceId && !authorized && !replaced && wellFormed) {
        pre.helloReject = { clientId: h.clientId, instanceId: h.clientInstanceId };
      }
      return pre;
    }
    const f = this.fence.get(input.conn);
    if (!f) pre.stale = "no welcome on this connection";
    else if (f.sessionId !== env.sessionId || BigInt(f.gen) !== env.sessionGeneration) pre.stale = `fence ${env.sessionGeneration} != welcomed ${f.gen}`;
    else if ((this.latestGen.get(f.client) ?? 0) > f.gen) pre.stale = `generation ${f.gen} fenced by ${this.latestGen.get(f.client)}`;
    if (pre.stale && conn) pre.mustClose = `stale frame (${pre.stale})`;
    return pre;
  }

  afterServer(input: ServerInput, effects: ServerEffect[], pre: Pre | null): void {
    const st = this.w.server.state!;
    let closed = false;
    for (const e of effects) {
      if (e.type === "close" && pre && e.conn === pre.conn) closed = true;
      if (e.type === "persist" && pre?.stale && pre.eventKey) {
        for (const r of e.records)
          if (r.table === "event" && r.key === pre.eventKey && r.value !== null)
            this.fail("R-F7", `server stored event ${r.key} from a stale envelope (${pre.stale})`);
      }
      if (e.type !== "send") continue;
      this.checkEnvelopeRow("server", e.kind, e.lane);
      if (pre?.stale && e.conn === pre.conn && e.kind !== "error") this.fail("R-F7", `server answered a stale envelope (${pre.stale}) with ${e.kind}`);
      this.serverSend(e.conn, e.kind, e.data);
    }
    if (pre?.mustClose && !closed) {
      if (pre.stale) this.stats.staleFramesRejected += 0;
      this.fail(pre.stale ? "R-F7" : "R-W10", `server did not close connection ${pre.conn} after ${pre.mustClose}`);
    }
    if (pre?.stale && pre.connExisted) this.stats.staleFramesRejected++;
    if (pre?.helloReject) {
      const { clientId, instanceId } = pre.helloReject;
      if (!closed) this.fail("R-F4", `hello of instance ${instanceId} for live client ${clientId} was not refused`);
      const claim = st.clients.get(clientId)?.pendingClaim;
      if (claim?.instanceId !== instanceId)
        this.fail("R-F4", `refused instance ${instanceId} of ${clientId} not recorded as the pending claim (got ${claim?.instanceId})`);
      this.stats.helloRejections++;
    }
    this.checkTerminalStates();
    this.jobs.afterServer(st, effects);
    void input;
  }

  /** The envelope table (core/protocol/envelopes.ts) is what the nodes do: each kind from its sender only, on its lane. */
  private checkEnvelopeRow(sender: Sender, kind: string, lane: Lane): void {
    if (!Object.hasOwn(ENVELOPES, kind)) return this.fail("R-T5", `${sender} sent a frame of unknown kind ${kind}`);
    const row = ENVELOPES[kind as PayloadCase];
    if (!isSentBy(kind as PayloadCase, sender)) this.fail("envelopes", `${sender} sent ${kind}, which the envelope table gives to ${row.from}`);
    if (row.lane !== lane) this.fail("envelopes", `${sender} sent ${kind} on the ${lane} lane; the envelope table says ${row.lane}`);
  }

  private serverSend(conn: number, kind: string, data: Uint8Array): void {
    if (!DECODED_KINDS.has(kind)) {
      if (isReconcileGatedWork(kind as PayloadCase) && !this.reconciledConns.has(conn))
        this.fail("R-D8", `${kind} on connection ${conn} before its ReconcileResult was sent`);
      return;
    }
    const env = decodeEnvelope(data);
    if (!env) this.fail("R-W10", `server sent an undecodable ${kind} frame`);
    const p = env.payload;
    switch (p.case) {
      case "commandDispatch":
      case "stdinWrite": {
        // R-T4/R-T5: a terminal and its resizes go only to a session that negotiated 1.1.
        const carries = p.case === "commandDispatch" ? p.value.spec?.terminal !== undefined : p.value.resize !== undefined;
        const v = this.w.server.state!.conns.get(conn)?.version;
        if (carries && !speaksTerminal(v))
          this.fail("R-T5", `server sent a ${p.case} with a terminal field on connection ${conn}, protocol ${JSON.stringify(v)}`);
        if (isReconcileGatedWork(p.case) && !this.reconciledConns.has(conn))
          this.fail("R-D8", `${p.case} on connection ${conn} before its ReconcileResult was sent`);
        break;
      }
      case "eventAck": {
        const uuid = p.value.issueUuid;
        const through = Number(p.value.throughEventSeq);
        const durable = this.durableThrough.get(uuid) ?? 0;
        this.stats.acksChecked++;
        if (through > durable) this.fail("R-O3", `EventAck for ${uuid} through ${through} but the server disk holds events only through ${durable}`);
        break;
      }
      case "reconcileRequest":
        for (const t of p.value.targets) {
          const durable = this.durableThrough.get(t.issueUuid) ?? 0;
          if (Number(t.lastServerEventSeq) > durable)
            this.fail("R-O3", `ReconcileRequest claims ${t.issueUuid} stored through ${t.lastServerEventSeq}, disk through ${durable}`);
        }
        break;
      case "serverWelcome": {
        const cs = this.w.server.state!.conns.get(conn);
        const client = cs?.clientId ?? "";
        const gen = Number(env.sessionGeneration);
        const rec = rowOf(this.w.server.disk.tables, "client", client);
        if (!rec || rec.generation < gen)
          this.fail("R-F2", `welcome with generation ${gen} for ${client} before the client record is durable (disk: ${rec?.generation})`);
        this.fence.set(conn, { sessionId: env.sessionId, gen, client });
        // Timestamps come from the wall clock, deadlines from the deadline
        // clock; clock_skew steps the first by up to an hour.
        const serverTime = p.value.serverTime ? timestampMs(p.value.serverTime) : 0;
        if (serverTime !== this.w.server.wall())
          this.fail(
            "wall-clock",
            `ServerWelcome server_time ${serverTime} is not the server's wall clock ${this.w.server.wall()} (deadline clock ${this.w.server.now()})`,
          );
        if (gen > (this.latestGen.get(client) ?? 0)) this.latestGen.set(client, gen);
        break;
      }
      case "reconcileResult": {
        const f = this.fence.get(conn);
        const rec = f && rowOf(this.w.server.disk.tables, "reconcile", f.client);
        if (!rec || rec.generation !== f!.gen) this.fail("R-D8", `ReconcileResult on connection ${conn} before it is durable`);
        this.reconciledConns.add(conn);
        break;
      }
      default:
        if (isReconcileGatedWork(p.case) && !this.reconciledConns.has(conn))
          this.fail("R-D8", `${p.case} on connection ${conn} before its ReconcileResult was sent`);
    }
  }

  private checkTerminalStates(): void {
    const st = this.w.server.state!;
    for (const c of st.commands.values()) {
      const prev = this.seenState.get(c.uuid);
      if (prev !== c.state) {
        if (prev !== undefined && isTerminal(prev)) this.fail("terminal", `${c.uuid} changed from terminal ${L[prev]} to ${L[c.state]}`);
        const dt = this.durableTerminal.get(c.uuid);
        if (dt !== undefined && dt !== c.state) this.fail("terminal", `${c.uuid} is ${L[c.state]} but durably ${L[dt]}`);
        this.seenState.set(c.uuid, c.state);
        if (isTerminal(c.state)) this.judge(c);
      }
    }
  }

  /** Is this terminal label consistent with what the processes did? */
  private judge(c: ServerCommand): void {
    if (this.judged.has(c.uuid)) return;
    this.judged.add(c.uuid);
    const exits = this.exits.get(c.uuid) ?? [];
    const started = this.startedBy.get(c.uuid);
    const strict = !this.w.identityFaults;
    const clean = (x: ExitInfo): boolean => x.exitCode === 0 && !x.timedOut;
    const name = L[c.state];
    switch (c.state) {
      case L.SUCCEEDED:
        if (!exits.some((x) => clean(x.info))) this.fail("terminal", `${c.uuid} succeeded but no process of it exited 0`);
        break;
      case L.FAILED:
        if (!started) this.fail("terminal", `${c.uuid} failed but it never started (never launched must not be failed)`);
        if (!exits.some((x) => !clean(x.info)))
          this.fail("terminal", `${c.uuid} failed but every process of it exited 0 (${JSON.stringify(exits.map((x) => x.info))})`);
        if (strict && exits.length > 0 && exits.every((x) => x.info.signalled) && this.endingSignals.has(c.uuid))
          this.fail("terminal", `${c.uuid} failed but its process was ended by an operator's signal (must be cancelled)`);
        break;
      case L.CANCELLED:
        if (!this.endingSignals.has(c.uuid)) this.fail("terminal", `${c.uuid} cancelled without an operator cancel/signal request`);
        if (strict && exits.length > 0 && exits.every((x) => clean(x.info)))
          this.fail("terminal", `${c.uuid} cancelled but its process exited 0 (must be succeeded)`);
        break;
      case L.REJECTED:
      case L.EXPIRED:
        if (strict && started) this.fail("terminal", `${c.uuid} ${name?.toLowerCase()} but its process started`);
        break;
      default:
        break;
    }
  }

  serverDurable(batches: PendingBatch[]): void {
    for (const b of batches) {
      for (const r of b.records) {
        if (r.value === null) continue;
        if (r.table === "event") {
          const { uuid, seq } = parseEventKey(r.key)!;
          let m = this.storedEvents.get(uuid);
          if (!m) this.storedEvents.set(uuid, (m = new Map()));
          const v: StoredEvent = r.value as EventRow;
          const prev = m.get(seq);
          if (prev && prev.kind !== v.kind) this.fail("R-O2", `server stored event ${r.key} twice with different content`);
          m.set(seq, v);
          let through = this.durableThrough.get(uuid) ?? 0;
          while (m.has(through + 1)) through++;
          this.durableThrough.set(uuid, through);
        } else if (r.table === "retention") {
          // One cumulative marker per command (key: its uuid), for the reader oracle.
          this.durableRetention.set(r.key, r.value as RetentionSpan);
        } else if (r.table === "pruned") {
          const v = r.value as PrunedRow;
          const dt = this.durableTerminal.get(r.key);
          if (dt === undefined || dt !== v.state)
            this.fail("terminal", `${r.key} pruned as ${L[v.state]} but its durable terminal state is ${dt === undefined ? "none" : L[dt]}`);
          this.prunedDurable.set(r.key, { state: v.state, terminalSource: v.terminalSource });
        } else if (r.table === "command") {
          const v = r.value as CommandRow;
          const dt = this.durableTerminal.get(r.key);
          if (dt !== undefined && v.state !== dt) this.fail("terminal", `durable record of ${r.key} changed from terminal ${L[dt]} to ${L[v.state]}`);
          if (isTerminal(v.state)) {
            this.durableTerminal.set(r.key, v.state);
            if (this.historyInStore) this.archived.set(r.key, { state: v.state, terminalSource: v.terminalSource });
          }
        }
      }
    }
  }

  serverRestored(): void {
    const st = this.w.server.state!;
    this.checkRetention();
    this.seenState = new Map();
    for (const [uuid, s] of this.acked) {
      if (!st.commands.has(uuid) && !this.prunedDurable.has(uuid) && !this.archived.has(uuid))
        this.fail("R-D1", `acknowledged submit ${uuid} (${s.clientId}) lost across a server restart`);
    }
    for (const [uuid, dt] of this.durableTerminal) {
      const c = st.commands.get(uuid);
      const p = this.prunedDurable.get(uuid) ?? this.archived.get(uuid);
      if (!c && p && p.state === dt && st.pruned.get(uuid)?.state === dt) continue;
      if (!c || c.state !== dt) this.fail("terminal", `${uuid} durably ${L[dt]} restored as ${c ? L[c.state] : "missing"}`);
    }
    this.checkTerminalStates();
    this.jobs.serverRestored(st);
  }

  /**
   * Commands pruned from the server's history and no longer held: those whose
   * pruning is durable, and those pruned in memory whose batch is not yet.
   */
  private prunedNow(st: ServerState): Map<string, { state: number; terminalSource: string }> {
    const out = new Map(this.prunedDurable);
    // History in the store: an ended command memory let go of is still there, in its durable row.
    for (const [uuid, p] of this.archived) out.set(uuid, p);
    for (const [uuid, p] of st.pruned) out.set(uuid, p);
    for (const uuid of st.commands.keys()) out.delete(uuid);
    return out;
  }

  /** The server shell deletes every segment file of `uuid` now: it was pruned from history. */
  pruneOutput(uuid: string): void {
    this.stats.prunes++;
    if (this.historyInStore) this.fail("terminal", `output of ${uuid} deleted though the store keeps the history`);
    if (!this.prunedDurable.has(uuid)) this.fail("terminal", `output of ${uuid} deleted before its pruning was durable`);
  }

  /** The server shell deletes the segment files of `uuid` through `throughSeq` now. */
  dropOutput(uuid: string, throughSeq: number): void {
    this.stats.retentionDrops++;
    this.dropped.set(uuid, Math.max(throughSeq, this.dropped.get(uuid) ?? 0));
  }

  /**
   * R-O5: output the server durably stored is either still in its segment
   * files or covered by a durable retention marker; never silently gone
   * (checked after every server restart and at the end).
   */
  checkRetention(): void {
    const covered = new Map<string, number>();
    for (const [, m] of rowsOf(this.w.server.disk.tables, "retention")) {
      covered.set(m.uuid, Math.max(m.lastSeq, covered.get(m.uuid) ?? 0));
    }
    for (const [uuid, through] of this.dropped) {
      if (this.prunedDurable.has(uuid)) continue; // the whole command is gone, marker and all, on purpose
      const marked = covered.get(uuid) ?? 0;
      if (marked >= through) continue;
      const events = this.storedEvents.get(uuid);
      for (let seq = marked + 1; seq <= through; seq++) {
        if (events?.get(seq)?.kind === "output")
          this.fail(
            "R-O5",
            `output event ${seq} of ${uuid} was deleted by retention (drop_output through ${through}) but the durable retention marker covers only through ${marked}`,
          );
      }
    }
  }

  rogueFrame(conn: number, what: string): void {
    this.rogue.set(conn, what);
    this.stats.rogueFrames++;
  }

  // ================================================================ operators

  submitAcked(s: Submitted): void {
    this.acked.set(s.uuid, s);
  }

  jobSubmitted(j: SubmittedJob): void {
    this.jobs.jobSubmitted(j);
  }

  jobAcked(j: SubmittedJob): void {
    this.jobs.jobAcked(j);
  }

  endingSignal(uuid: string): void {
    this.endingSignals.add(uuid);
  }

  controlReply(request: ControlRequest | null, result: ControlResult): void {
    if (!request || request.op !== "submit" || !result.ok) return;
    const d = shortDigest(toBinary(ExecutionSpecSchema, request.spec));
    let set = this.okSpecs.get(request.uuid);
    if (!set) this.okSpecs.set(request.uuid, (set = new Set()));
    set.add(d);
    if (set.size > 1) this.fail("R-D1", `uuid ${request.uuid} acknowledged for two different requests`);
  }

  // ================================================================ agents

  afterAgent(h: AgentHost, input: AgentInput, effects: AgentEffect[]): void {
    const st = h.state!;
    // R-F7 (agent side): a dispatch for another generation is refused.
    if (input.type === "frame") {
      const env = decodeEnvelope(input.data);
      if (env?.payload.case === "commandDispatch" && Number(env.payload.value.targetSessionGeneration) !== (st.session.fence?.generation ?? -1)) {
        const uuid = env.payload.value.issueUuid;
        for (const e of effects) {
          if (e.type !== "send" || e.kind !== "commandAccepted") continue;
          const a = decodeEnvelope(e.data);
          if (a?.payload.case === "commandAccepted" && a.payload.value.issueUuid === uuid && a.payload.value.accepted)
            this.fail(
              "R-F7",
              `${h.label} accepted dispatch of ${uuid} aimed at generation ${env.payload.value.targetSessionGeneration} (its session: ${st.session.fence?.generation})`,
            );
        }
      }
    }
    for (const e of effects) {
      if (e.type === "spawn") {
        const rec = agentRow(h.disk.tables, "command", e.uuid);
        if (rec?.phase !== "launching")
          this.fail("at-most-once", `${h.label} spawned ${e.uuid} without a durable launch authorization (disk phase ${rec?.phase})`);
        // Never a terminal on an agent of 1.0 (R-T4/R-T5; admission, on a session that negotiated 1.1,
        // is checked with the server's sends below: the launch itself may come with no session up).
        if (e.spec.terminal && !speaksTerminal(h.config.protocol.max))
          this.fail("R-T5", `${h.label} spawned terminal command ${e.uuid} though it speaks only ${JSON.stringify(h.config.protocol)}`);
        if (e.spec.terminal) this.stats.terminalsRun++;
      }
      if (e.type === "write_stdin" && e.resize) {
        if (!st.commands.get(e.uuid)?.spec.terminal) this.fail("R-T5", `${h.label} resized ${e.uuid}, which has no terminal`);
        this.stats.resizesApplied++;
      }
      if (e.type !== "send") continue;
      this.checkEnvelopeRow("agent", e.kind, e.lane);
      if (e.kind === "reconcileSnapshot" && st.storeIncident !== null)
        this.fail("R-D13", `${h.label} sent a reconcile snapshot while its store has an incident`);
      if (e.kind === "commandAccepted") {
        const env = decodeEnvelope(e.data);
        if (env?.payload.case === "commandAccepted" && env.payload.value.accepted) {
          const uuid = env.payload.value.issueUuid;
          const key = `${h.lineage}/${uuid}`;
          if (!agentRow(h.disk.tables, "command", uuid) && !agentRow(h.disk.tables, "tombstone", uuid))
            this.fail("R-D2", `${h.label} accepted ${uuid} before its command record is durable`);
          if (st.storeIncident !== null && !this.acceptedByLineage.has(key))
            this.fail("R-D13", `${h.label} accepted new command ${uuid} during a store incident`);
          this.acceptedByLineage.add(key);
        }
      }
    }
    void input;
  }

  /**
   * After restore + start: a process left running by the previous
   * incarnation must have been killed (kill_orphan, by pid or, with pid 0,
   * by the command's marker) whenever its command is durably launching or
   * running. Any other survivor is counted as a leak.
   */
  afterStart(h: AgentHost): void {
    for (const uuid of this.w.exec.liveOrphans(h)) {
      const rec = agentRow(h.disk.tables, "command", uuid);
      if (rec && (rec.phase === "launching" || rec.phase === "running"))
        this.fail("orphan", `${h.label} restarted but did not kill the orphaned process of ${uuid} (durable phase ${rec.phase}, pid ${rec.pid})`);
      if (!this.leaked.has(`${h.name}/${uuid}`)) this.stats.orphansLeaked++;
      this.leaked.add(`${h.name}/${uuid}`);
    }
  }

  /** Every frame an agent puts on the wire. */
  agentWire(h: AgentHost, link: { id: number }, kind: string, data: Uint8Array): void {
    let list = this.frames.get(h.name);
    if (!list) this.frames.set(h.name, (list = []));
    list.push({ gen: envelopeGeneration(data), kind, data });
    if (list.length > 40) list.shift();
    if (kind !== "commandEvent") return;
    const env = decodeEnvelope(data);
    if (!env) this.fail("R-W10", `${h.label} sent an undecodable frame`);
    const p = env.payload;
    if (p.case !== "commandEvent") this.fail("R-O2", `${h.label}: a send of kind commandEvent carries ${p.case}`);
    const raw = rawField(data, PAYLOAD_FIELD.commandEvent);
    if (!raw) this.fail("R-O2", `${h.label}: commandEvent without its field`);
    const uuid = p.value.issueUuid;
    const seq = Number(p.value.eventSeq);
    const key = `${h.lineage}/${uuid}/${seq}`;
    const dig = `${raw.length}:${shortDigest(raw)}`;
    const prev = this.wire.get(key);
    if (prev === undefined) this.wire.set(key, dig);
    else {
      this.stats.resendsCompared++;
      if (prev !== dig) this.fail("R-O2", `${h.label} resent event ${uuid}#${seq} with different bytes (${prev} then ${dig})`);
    }
    const pinned = agentRow(h.disk.tables, "event", agentEventKey(uuid, seq));
    if (!pinned) this.fail("R-O2", `${h.label} sent event ${uuid}#${seq} that is not durably pinned`);
    if (!bytesEqual(pinned.bytes, raw)) this.fail("R-O2", `${h.label} sent event ${uuid}#${seq} whose bytes differ from its durable pinned copy`);
    void link;
  }

  /** An old frame of this host, from a generation below `belowGen` (for replays). */
  oldFrame(h: AgentHost, belowGen: number, pick: number): { gen: number; kind: string; data: Uint8Array } | null {
    const list = (this.frames.get(h.name) ?? []).filter((f) => f.gen < belowGen);
    const usable = belowGen === Number.MAX_SAFE_INTEGER ? list : list.filter((f) => f.gen > 0);
    if (usable.length === 0) return null;
    return usable[pick % usable.length]!;
  }

  // ================================================================ processes

  spawned(host: ExecHost, uuid: string): void {
    this.jobs.spawned(host, uuid);
    const key = `${host.lineage}/${uuid}`;
    const n = (this.spawns.get(key) ?? 0) + 1;
    this.spawns.set(key, n);
    if (n > 1) this.fail("at-most-once", `${uuid} spawned ${n} times by disk lineage of ${host.name}`);
    let ls = this.spawnLineages.get(uuid);
    if (!ls) this.spawnLineages.set(uuid, (ls = new Set()));
    ls.add(host.lineage);
    if (ls.size > 1) {
      this.stats.splitBrainLaunches++;
      if (!this.w.identityFaults) this.fail("at-most-once", `${uuid} spawned by two disk lineages without any identity fault`);
    }
  }

  started(host: ExecHost, uuid: string): void {
    let s = this.startedBy.get(uuid);
    if (!s) this.startedBy.set(uuid, (s = new Set()));
    s.add(host.lineage);
  }

  output(host: ExecHost, uuid: string, stream: "stdout" | "stderr", data: Uint8Array): void {
    const key = `${host.lineage}/${uuid}`;
    let o = this.observed.get(key);
    if (!o) this.observed.set(key, (o = { stdout: [], stderr: [] }));
    o[stream].push(data);
  }

  exited(host: ExecHost, uuid: string, info: ExitInfo): void {
    let l = this.exits.get(uuid);
    if (!l) this.exits.set(uuid, (l = []));
    l.push({ lineage: host.lineage, info });
  }

  /**
   * What operators asked to write to a command's stdin, in request order, as
   * the writes that must reach the process: the control API stores a request
   * over MAX_CHUNK_BYTES as consecutive pieces of at most that size, with the
   * newline (if asked for) after the last (control.proto, WriteStdinRequest).
   */
  stdinRequested(uuid: string, data: Uint8Array, appendNewline: boolean): void {
    let l = this.stdinReqs.get(uuid);
    if (!l) this.stdinReqs.set(uuid, (l = []));
    const pieces = Math.max(1, Math.ceil(data.length / MAX_CHUNK_BYTES));
    for (let i = 0; i < pieces; i++) {
      const piece = data.subarray(i * MAX_CHUNK_BYTES, Math.min(data.length, (i + 1) * MAX_CHUNK_BYTES));
      l.push(appendNewline && i === pieces - 1 ? concatBytes([piece, new Uint8Array([10])]) : piece);
    }
  }

  /** R-S1: a process reads each write once, in request order, byte for byte. */
  stdinData(host: ExecHost, uuid: string, seq: number, data: Uint8Array): void {
    const key = `${host.lineage}/${uuid}`;
    const st = this.stdinSeen.get(key) ?? { seq: 0, idx: 0 };
    if (seq <= st.seq) this.fail("R-S1", `${host.name}: stdin write ${seq} of ${uuid} reached the process after write ${st.seq}`);
    const reqs = this.stdinReqs.get(uuid) ?? [];
    let i = st.idx;
    while (i < reqs.length && !bytesEqual(reqs[i]!, data)) i++;
    if (i >= reqs.length)
      this.fail(
        "R-S1",
        `${host.name}: stdin write ${seq} of ${uuid} (${data.length} bytes) matches no later operator request (duplicate, reordered or altered)`,
      );
    this.stdinSeen.set(key, { seq, idx: i + 1 });
    this.stats.stdinWritesChecked++;
  }

  // ================================================================ the end

  /** Every byte accounted for, per terminal command (R-O1, R-O4, R-O7, R-O8). */
  checkCoverage(): void {
    const st = this.w.server.state;
    if (!st) return;
    // Pruned commands are checked too: the oracle keeps its own copy of what
    // the server stored, so a command's coverage outlives its server record.
    const ended: Array<{ uuid: string; state: L; terminalSource: string }> = [...st.commands.values()]
      .filter((c) => isTerminal(c.state))
      .map((c) => ({ uuid: c.uuid, state: c.state, terminalSource: c.exit.terminalSource }));
    for (const [uuid, p] of this.prunedNow(st)) ended.push({ uuid, state: p.state, terminalSource: p.terminalSource });
    for (const c of ended) {
      const lineages = [...(this.startedBy.get(c.uuid) ?? [])];
      const events = this.storedEvents.get(c.uuid) ?? new Map<number, StoredEvent>();
      const through = this.durableThrough.get(c.uuid) ?? 0;
      if (events.size !== through) this.fail("coverage", `${c.uuid}: durable events are not contiguous (${events.size} stored, contiguous through ${through})`);
      if (lineages.length === 0) {
        for (const e of events.values()) if (e.kind === "output") this.fail("coverage", `${c.uuid} stored output but its process never started`);
        continue;
      }
      const full = c.terminalSource === "agent" && (c.state === L.SUCCEEDED || c.state === L.FAILED || c.state === L.CANCELLED);
      const problems: string[] = [];
      // With identity faults another copy of the instance (which never started
      // the process) may be the one whose history the server holds.
      const candidates: Array<number | null> = this.w.identityFaults ? [...lineages, null] : lineages;
      for (const lin of candidates) {
        const o = (lin !== null && this.observed.get(`${lin}/${c.uuid}`)) || { stdout: [], stderr: [] };
        const seen = { stdout: concatBytes(o.stdout), stderr: concatBytes(o.stderr) };
        const p = coverageOf(events, through, seen, full, this.stats);
        if (p === null) {
          // What a reader is shown of it (the core's follow cursor, redelivered batches) must agree too.
          const r = followCoverageOf(
            events,
            through,
            [this.durableRetention.get(c.uuid)].filter((m) => m !== undefined),
            seen,
            full,
          );
          if (r !== null) this.fail("reader", `${c.uuid} (${L[c.state]}), lineage ${lin}: ${r}`);
          problems.length = 0;
          break;
        }
        problems.push(`${lin === null ? "a copy that never started it" : `lineage ${lin}`}: ${p}`);
      }
      this.stats.coverageChecked++;
      if (problems.length > 0) this.fail("coverage", `${c.uuid} (${L[c.state]}): ${problems.join("; ")}`);
    }
  }

  /** After the heal and the liveness window: everything settled. */
  checkLiveness(): void {
    try {
      this.checkSettled();
    } catch (e) {
      if (!(e instanceof SimFailure)) throw e;
      const top = [...this.w.healCloses].sort((a, b) => b[1] - a[1])[0];
      throw new SimFailure(e.oracle, top ? `${e.message} -- commonest session end after the heal: ${top[1]}x "${top[0]}"` : e.message, e.at);
    }
  }

  private checkSettled(): void {
    const st = this.w.server.state;
    if (!st) this.fail("liveness", "server is down at the end");
    const stuck: string[] = [];
    for (const c of st.commands.values()) if (!isTerminal(c.committed.state)) stuck.push(`${c.uuid.slice(0, 8)}:${L[c.committed.state]}@${c.clientId}`);
    const pruned = this.prunedNow(st);
    for (const [uuid, s] of this.acked) if (!st.commands.has(uuid) && !pruned.has(uuid)) stuck.push(`${uuid.slice(0, 8)}:missing@${s.clientId}`);
    if (stuck.length > 0) this.fail("liveness", `${stuck.length} commands not terminal after the heal: ${stuck.slice(0, 8).join(", ")}`);
    this.jobs.checkLiveness(st);
    for (const h of this.w.hosts) {
      if (h.kind !== "agent") continue;
      if (!h.up || !h.state) this.fail("liveness", `${h.name} is down at the end`);
      if (h.state.commands.size > 0) {
        const what = [...h.state.commands.values()].slice(0, 5).map((c) => `${c.uuid.slice(0, 8)}:${c.phase}/${L[c.lifecycle]}`);
        this.fail("liveness", `${h.label} still retains ${h.state.commands.size} commands after the heal: ${what.join(", ")}`);
      }
    }
  }

  /** Final state per command, for campaign tables. */
  finalStates(): Map<string, number> {
    const out = new Map<string, number>();
    const st = this.w.server.state;
    if (!st) return out;
    const states = [...st.commands.values()].map((c) => c.state);
    for (const p of this.prunedNow(st).values()) states.push(p.state);
    for (const state of states) {
      const k = (L[state] ?? String(state)).toLowerCase();
      out.set(k, (out.get(k) ?? 0) + 1);
    }
    return out;
  }
}
