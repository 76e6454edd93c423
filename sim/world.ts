// The simulated world: one server and N agents, each a real core instance,
// wired through a simulated network, disks, executor and clock, all driven
// by one seed through one event queue.
//
// Every input a core receives goes through `serverInput` / `agentInput`:
// the step runs, the node's invariants are checked (all of them every
// `checkEvery` steps of that node, before a crash drops its state and at the
// end of the run; after every step with --paranoid: see sim/run.ts for how a
// failure is localized), the oracles look at the
// input and the effects, and the effects are executed (persist -> disk,
// send/ping/close -> network, wake -> event queue, spawn... -> executor).
// No effect re-enters a core synchronously, so a step is always atomic.

import { agentInvariants, agentStep, defaultAgentConfig, restoreAgent } from "../core/agent/node.js";
import { PROTOCOL_1_0 } from "../core/codec/version.js";
import { unreachable } from "../core/errors.js";
import type { AgentConfig, AgentEffect, AgentInput } from "../core/agent/agent-types.js";
import type { PersistEffect } from "../core/effects.js";
import { MiB, KiB } from "../core/limits.js";
import { defaultServerConfig, restoreServer, serverInvariants, serverStep } from "../core/index.js";
import { restoreServerByParts } from "../core/server/client-part.js";
import type { ServerConfig, ServerEffect, ServerInput } from "../core/server/server-types.js";
import { SimDisk, type PendingBatch } from "./disk.js";
import { EventQueue } from "./event-queue.js";
import { Executor } from "./executor.js";
import { AgentHost, ServerHost, type AgentStepFn, type ServerStepFn } from "./hosts.js";
import { Network, type Link } from "./network.js";
import { Oracles, SimFailure } from "./oracles.js";
import { Operator } from "./operator.js";
import { hashLabel, Rng } from "./rng.js";
import type { Schedule } from "./schedule.js";
import { simPorts } from "./sim-ports.js";
import type { Swarm, SwarmOptions } from "./swarm.js";
import { fmtDetail, type Timeline } from "./timeline.js";
import { TraceHash } from "./trace-hash.js";
import { frameDigest, frameSummary, shortDigest } from "./wire.js";
import { applyFault, heal } from "./faults.js";

export interface Variant {
  name: string;
  description: string;
  /** Swarm settings that give the broken behaviour a chance to show. */
  swarm?: SwarmOptions;
  wrapServer?(step: ServerStepFn, w: World): ServerStepFn;
  wrapAgent?(step: AgentStepFn, host: AgentHost, w: World): AgentStepFn;
}

const env = { ports: simPorts };

/**
 * Default spacing of the full invariant check, in steps of one node. The full
 * check walks every command, connection and outbox entry, so after every step
 * it cost more than the oracles together; every 32nd step it is noise.
 */
export const CHECK_EVERY = 32;

export function agentConfigFor(client: number, sw: Swarm): AgentConfig {
  const base = defaultAgentConfig(`agent-${client}`, {
    maxRunning: sw.maxRunning,
    maxQueued: sw.maxQueued,
    ...(sw.agents10.includes(client) ? { protocol: PROTOCOL_1_0 } : {}),
  });
  if (!sw.smallLimits) return base;
  return {
    ...base,
    limits: {
      ...base.limits,
      windowPerCommand: 96 * KiB,
      windowPerSession: 256 * KiB,
      metadataReserve: 16 * KiB,
      rawHigh: 512 * KiB,
      rawLow: 256 * KiB,
      outputPerCommand: 768 * KiB,
      outputTotal: 2 * MiB,
      metadataBudget: 64 * KiB * 12,
      stdinPendingPerCommand: 128 * KiB,
      scriptTotal: 2 * MiB,
      maxRetained: 64,
      maxTombstones: 32,
    },
  };
}

export function serverConfigFor(sw: Swarm): ServerConfig {
  const d = defaultServerConfig();
  // History in the store: with small limits a few ended commands are held, so eviction runs often.
  const base = sw.historyInStore ? { ...d, limits: { ...d.limits, historyInStore: true, historyHeld: sw.smallLimits ? 4 : d.limits.historyHeld } } : d;
  if (!sw.smallLimits) return base;
  return {
    ...base,
    limits: {
      ...base.limits,
      outputPerCommand: 256 * KiB,
      outputPerClient: 1 * MiB,
      segmentBytes: 32 * KiB,
      ingressHigh: 512 * KiB,
      stdinWindow: 64 * KiB,
      stdinQueue: 512 * KiB,
      scriptWindow: 128 * KiB,
      maxInflightDispatches: 4,
      // History is pruned within a run: by the tier and by age.
      metadataBudget: 96 * KiB,
      historyMs: 60_000,
    },
  };
}

export class World {
  readonly q = new EventQueue();
  readonly root: Rng;
  readonly rNet: Rng;
  readonly rDisk: Rng;
  readonly rFault: Rng;
  readonly server: ServerHost;
  readonly hosts: AgentHost[] = [];
  readonly net: Network;
  readonly exec: Executor;
  readonly oracles: Oracles;
  readonly ops: Operator;
  readonly hash = new TraceHash();
  phase: "faults" | "heal" | "done" = "faults";
  healAt: number;
  endAt: number;
  connSeq = 0;
  lineageSeq = 0;
  steps = 0;
  /** Fault kinds that actually happened (for campaign tables). */
  readonly faultsSeen = new Map<string, number>();
  /** Set when an identity fault (clone/impostor/replayed hello) happened: cross-lineage checks relax. */
  identityFaults = false;
  private sameTimeSteps = 0;
  private lastStepTime = -1;
  /** Full invariants of a node after every `checkEvery`-th of its steps (1: after every step, --paranoid). */
  checkEvery = CHECK_EVERY;
  /** Persist batches so far (which of them are frozen: sim/disk.ts). */
  private persists = 0;
  /** Steps of each node until its next full invariant check (the server is keyed by its host too). */
  private readonly checkDue = new Map<object, number>();
  /** Full invariant checks run (for the bench and tests). */
  fullChecks = 0;

  constructor(
    readonly seed: number,
    readonly swarm: Swarm,
    readonly schedule: Schedule,
    readonly variant: Variant | null = null,
    readonly timeline: Timeline | null = null,
  ) {
    this.root = new Rng(seed);
    this.rNet = this.root.fork("net");
    this.rDisk = this.root.fork("disk");
    this.rFault = this.root.fork("fault");
    const sink = { nowVirtual: () => this.q.now, agentInput: (h: AgentHost, i: AgentInput) => this.agentInput(h, i) };
    this.server = new ServerHost(sink, serverConfigFor(swarm), new SimDisk(), 0);
    this.server.step = variant?.wrapServer ? variant.wrapServer(serverStep, this) : serverStep;
    this.oracles = new Oracles(this);
    this.net = new Network(this.q, this.rNet, swarm.net, {
      serverUp: () => this.server.up,
      serverInc: () => this.server.inc,
      newConnId: () => ++this.connSeq,
      toServer: (link, input) => this.serverInput({ ...input, conn: link.id } as ServerInput),
      toAgent: (link, input) => link.agent && (link.agent as AgentHost).deliver(link.agentInc, { ...input, conn: link.agentConn } as AgentInput),
      connectFailed: (agent, conn, inc, reason) => (agent as AgentHost).deliver(inc, { type: "transport_closed", conn, reason }),
    });
    this.exec = new Executor(this.q, this.root.fork("exec"), { pScriptFail: swarm.pScriptFail, orphansSurvive: swarm.orphansSurvive }, this.oracles);
    this.ops = new Operator(this);
    this.healAt = swarm.faultPhaseMs;
    this.endAt = swarm.faultPhaseMs + swarm.livenessMs;
    const skew = this.root.fork("clock");
    if (swarm.clockSkewMs > 0) this.noteFault("clock_skew");
    for (let i = 0; i < swarm.agents; i++) {
      const off = swarm.clockSkewMs > 0 ? skew.range(-swarm.clockSkewMs, swarm.clockSkewMs) : 0;
      this.hosts.push(this.newHost(`agent-${i}`, i, "agent", new SimDisk(), off));
    }
  }

  newHost(name: string, client: number, kind: AgentHost["kind"], disk: SimDisk, clockOffset: number): AgentHost {
    const sink = { nowVirtual: () => this.q.now, agentInput: (h: AgentHost, i: AgentInput) => this.agentInput(h, i) };
    const h = new AgentHost(sink, name, client, ++this.lineageSeq, kind, agentConfigFor(client, this.swarm), disk, clockOffset);
    h.step = this.variant?.wrapAgent ? this.variant.wrapAgent(agentStep, h, this) : agentStep;
    return h;
  }

  /** Why sessions ended during the heal (a liveness failure names the commonest). */
  readonly healCloses = new Map<string, number>();
  private noteClose(why: string): void {
    if (this.phase !== "heal") return;
    const k = why
      .replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, "<uuid>")
      .replace(/\d+/g, "N")
      .slice(0, 120);
    this.healCloses.set(k, (this.healCloses.get(k) ?? 0) + 1);
  }

  noteFault(kind: string): void {
    this.faultsSeen.set(kind, (this.faultsSeen.get(kind) ?? 0) + 1);
  }

  // ------------------------------------------------------------------ boot

  start(): void {
    this.startServer();
    for (const h of this.hosts) this.startAgent(h);
    for (const a of this.schedule.actions) {
      this.q.schedule(a.at, () => {
        if (this.phase !== "faults") return;
        if (a.k === "fault") applyFault(this, a);
        else this.ops.apply(a);
      });
    }
    this.q.schedule(this.healAt, () => heal(this));
    this.scheduleWallSteps();
  }

  /**
   * clock_skew: besides the fixed offsets between the nodes' clocks, each
   * node's wall clock is stepped 1 to 3 times during the fault phase, by an
   * hour or by a random amount up to an hour, forward or back, while its
   * deadline clock runs on (NTP, a VM resumed). Only timestamps see it, and
   * the deadline clock at the node's next restart (re-anchoring).
   */
  private scheduleWallSteps(): void {
    if (this.swarm.clockSkewMs <= 0) return;
    const r = this.root.fork("clock-steps");
    const HOUR = 3_600_000;
    for (const h of [this.server, ...this.hosts]) {
      const n = r.range(1, 3);
      for (let i = 0; i < n; i++) {
        const at = r.range(0, this.swarm.faultPhaseMs);
        const ms = (r.chance(0.5) ? 1 : -1) * (r.chance(0.5) ? HOUR : r.range(1_000, HOUR));
        this.q.schedule(at, () => {
          h.clock.stepWall(ms);
          this.noteFault("clock_skew(step)");
          this.timeline?.add(this.q.now, h.label, `FAULT wall clock stepped ${ms > 0 ? "+" : ""}${ms} ms (deadline clock unmoved)`);
        });
      }
    }
  }

  startServer(): void {
    const h = this.server;
    if (h.up) throw new Error("server started twice");
    h.up = true;
    if (h.inc > 0) h.clock.reanchor();
    // With the history in the store, the disk is restored client by client, as a server that owns clients would load them.
    const restore = h.config.limits.historyInStore ? restoreServerByParts : restoreServer;
    h.state = restore(h.config, h.disk.snapshot(), hashLabel(this.seed, `server#${h.inc}`));
    this.oracles.serverRestored();
    this.timeline?.add(this.q.now, h.label, "START (restored from disk)");
    this.serverInput({ type: "tick" });
  }

  startAgent(h: AgentHost): void {
    if (h.retired) return;
    if (h.up) throw new Error(`${h.name} started twice`);
    h.up = true;
    if (h.inc > 0) h.clock.reanchor();
    h.state = restoreAgent(h.config, h.disk.snapshot(), hashLabel(this.seed, `${h.name}#${h.inc}`));
    this.timeline?.add(this.q.now, h.label, `START (restored: ${h.state.commands.size} commands, ${h.state.tombstones.size} tombstones)`);
    if (h.disk.corruption !== null) this.agentInput(h, { type: "store_incident", detail: h.disk.corruption });
    this.agentInput(h, { type: "start" });
    if (h.up) this.oracles.afterStart(h);
  }

  crashServer(downMs: number, why: string): void {
    const h = this.server;
    if (!h.up) return;
    this.checkServerNow("before a crash");
    this.timeline?.add(this.q.now, h.label, `CRASH (${why}); ${h.disk.pending.length} unsynced batches lost`);
    h.up = false;
    h.state = null;
    h.disk.crash();
    if (h.wake) h.wake.cancelled = true;
    h.wake = null;
    this.net.serverCrashed();
    h.inc++;
    this.ops.serverCrashed();
    const inc = h.inc;
    if (Number.isFinite(downMs)) this.q.after(downMs, () => !h.up && h.inc === inc && this.startServer());
  }

  crashAgent(h: AgentHost, downMs: number, why: string, corrupt: string | null = null): void {
    if (!h.up) return;
    this.checkAgentNow(h, "before a crash");
    this.timeline?.add(this.q.now, h.label, `CRASH (${why}); ${h.disk.pending.length} unsynced batches lost`);
    h.up = false;
    h.state = null;
    h.disk.crash();
    if (corrupt !== null) h.disk.corruption = corrupt;
    if (h.wake) h.wake.cancelled = true;
    h.wake = null;
    this.net.agentCrashed(h);
    this.exec.agentCrashed(h);
    h.inc++;
    const inc = h.inc;
    if (Number.isFinite(downMs) && !h.retired) this.q.after(downMs, () => !h.up && h.inc === inc && this.startAgent(h));
  }

  // ------------------------------------------------------------------ invariants

  /** Is a full check of `node` due after this step? Counts the step. */
  private checkDueNow(node: object): boolean {
    const due = (this.checkDue.get(node) ?? 1) - 1;
    if (due > 0) {
      this.checkDue.set(node, due);
      return false;
    }
    this.checkDue.set(node, this.checkEvery);
    this.fullChecks++;
    return true;
  }

  /** The server's full invariants now (outside a step: before a crash, at the end). */
  checkServerNow(when: string): void {
    const h = this.server;
    if (!h.up || !h.state || this.checkEvery <= 1) return;
    this.fullChecks++;
    try {
      serverInvariants(h.state);
    } catch (e) {
      throw new SimFailure("server-core-threw", `${(e as Error).name}: ${(e as Error).message} (full invariant check ${when})`, this.q.now);
    }
  }

  /** An agent's full invariants now (outside a step: before a crash, at the end). */
  checkAgentNow(h: AgentHost, when: string): void {
    if (!h.up || !h.state || this.checkEvery <= 1) return;
    this.fullChecks++;
    try {
      agentInvariants(h.state);
    } catch (e) {
      throw new SimFailure("agent-core-threw", `${h.label}: ${(e as Error).name}: ${(e as Error).message} (full invariant check ${when})`, this.q.now);
    }
  }

  /** Every live node's full invariants (the end of a run). */
  checkAllNow(when: string): void {
    this.checkServerNow(when);
    for (const h of this.hosts) this.checkAgentNow(h, when);
  }

  // ------------------------------------------------------------------ stepping

  private guardLivelock(): void {
    this.steps++;
    if (this.q.now === this.lastStepTime) {
      if (++this.sameTimeSteps > 200_000) throw new SimFailure("livelock", `more than 200000 steps at virtual time ${this.q.now}`, this.q.now);
    } else {
      this.lastStepTime = this.q.now;
      this.sameTimeSteps = 0;
    }
  }

  serverInput(input: ServerInput): void {
    const h = this.server;
    if (!h.up || !h.state) return;
    this.guardLivelock();
    const now = h.now();
    const desc = describe(input);
    this.hash.add(`S${h.inc}@${now} ${desc}`);
    if (this.timeline && input.type !== "tick" && input.type !== "durable" && input.type !== "activity")
      this.timeline.add(
        this.q.now,
        h.label,
        `<- ${input.type === "frame" ? `frame conn=${input.conn} ${(input.binary ?? true) ? frameSummary(input.data) : "<text frame>"}` : desc}`,
      );
    const pre = this.oracles.beforeServer(input);
    let res;
    try {
      res = h.step(h.state, input, now, env, h.wall());
      h.state = res.state;
      if (this.checkDueNow(h)) serverInvariants(h.state);
    } catch (e) {
      if (e instanceof SimFailure) throw e;
      throw new SimFailure(
        "server-core-threw",
        `${(e as Error).name}: ${(e as Error).message} (input ${desc})\n${(e as Error).stack?.split("\n").slice(1, 6).join("\n")}`,
        this.q.now,
      );
    }
    this.oracles.afterServer(input, res.effects, pre);
    for (const e of res.effects) {
      this.hash.add(effectLine(e as unknown as { type: string } & Record<string, unknown>));
      if (!this.serverEffect(e)) return;
    }
  }

  private serverEffect(e: ServerEffect): boolean {
    const h = this.server;
    switch (e.type) {
      case "persist":
        if (
          !this.persist(
            h,
            e,
            (b) => this.oracles.serverDurable(b),
            (through) => this.serverInput({ type: "durable", through }),
          )
        ) {
          this.noteFault("disk_full(hit)");
          this.crashServer(this.rFault.range(this.swarm.downMinMs, this.swarm.downMaxMs), "disk full: persist failed");
          return false;
        }
        return true;
      case "send": {
        const link = this.net.links.get(e.conn);
        if (link) this.net.send(link, "server", e.data);
        return true;
      }
      case "ping": {
        const link = this.net.links.get(e.conn);
        if (link) this.net.ping(link, "server");
        return true;
      }
      case "close": {
        const link = this.net.links.get(e.conn);
        if (link) this.net.close(link, "server", e.reason);
        return true;
      }
      case "wake":
        if (h.wake) h.wake.cancelled = true;
        h.wake = this.q.schedule(Math.max(this.q.now, e.at - (h.now() - this.q.now)), () => {
          h.wake = null;
          this.serverInput({ type: "tick" });
        });
        return true;
      case "trace":
        this.timeline?.add(this.q.now, h.label, `trace ${e.event} ${fmtDetail(e.detail)}`);
        if (e.event === "conn_closed") this.noteClose(`server closed: ${e.detail.code} ${e.detail.message}`);
        return true;
      case "reply":
        this.ops.onReply(e.requestId, e.result);
        return true;
      case "drop_output":
        this.oracles.dropOutput(e.uuid, e.throughSeq);
        return true;
      case "prune_output":
        this.oracles.pruneOutput(e.uuid);
        return true;
      default:
        return unreachable(e, "server effect");
    }
  }

  agentInput(h: AgentHost, input: AgentInput): void {
    if (!h.up || !h.state) return;
    this.guardLivelock();
    const now = h.now();
    const desc = describe(input);
    this.hash.add(`${h.label}@${now} ${desc}`);
    if (this.timeline && input.type !== "tick" && input.type !== "durable" && input.type !== "activity" && input.type !== "process_output")
      this.timeline.add(this.q.now, h.label, `<- ${input.type === "frame" ? `frame conn=${input.conn} ${frameSummary(input.data)}` : desc}`);
    let res;
    let full = false;
    try {
      res = h.step(h.state, input, now, env, h.wall());
      h.state = res.state;
      full = this.checkDueNow(h);
      if (full) agentInvariants(h.state);
    } catch (e) {
      if (e instanceof SimFailure) throw e;
      throw new SimFailure(
        "agent-core-threw",
        `${h.label}: ${(e as Error).name}: ${(e as Error).message} (input ${desc})\n${(e as Error).stack?.split("\n").slice(1, 6).join("\n")}`,
        this.q.now,
      );
    }
    this.oracles.afterAgent(h, input, res.effects);
    for (const e of res.effects) {
      this.hash.add(effectLine(e as unknown as { type: string } & Record<string, unknown>));
      if (!this.agentEffect(h, e)) return;
    }
    // Only a started agent is judged: between a restore and its `start` (e.g. the
    // store_incident input that precedes it), a `preparing` row is still the
    // previous incarnation's and `start` is what re-queues it.
    if ((full || input.type === "start") && h.up && h.state?.started) this.checkScriptsInFlight(h);
  }

  /**
   * A command the agent holds as `preparing` waits for its script file, so a
   * write of it must be under way for this incarnation; else nothing will ever
   * answer it and it holds a run slot until its queue expiry (an agent restarted
   * mid-write used to do that). Checked with the full invariants and at every start.
   */
  private checkScriptsInFlight(h: AgentHost): void {
    for (const c of h.state!.commands.values())
      if (c.phase === "preparing" && !this.exec.scriptWriteInFlight(h, c.uuid))
        throw new SimFailure(
          "script-stuck",
          `${h.label}: ${c.uuid} is preparing but no write of its script is under way: it would hold a run slot until its queue expiry`,
          this.q.now,
        );
  }

  private agentEffect(h: AgentHost, e: AgentEffect): boolean {
    switch (e.type) {
      case "persist": {
        const inc = h.inc;
        if (
          !this.persist(
            h,
            e,
            () => {},
            (through) => h.deliver(inc, { type: "durable", through }),
          )
        ) {
          this.noteFault("disk_full(hit)");
          this.crashAgent(h, this.rFault.range(this.swarm.downMinMs, this.swarm.downMaxMs), "disk full: persist failed");
          return false;
        }
        return true;
      }
      case "send": {
        const link = this.net.linkOf(h, e.conn);
        if (link) {
          this.oracles.agentWire(h, link, e.kind, e.data);
          this.net.send(link, "agent", e.data);
        }
        return true;
      }
      case "ping": {
        const link = this.net.linkOf(h, e.conn);
        if (link) this.net.ping(link, "agent");
        return true;
      }
      case "close": {
        const link = this.net.linkOf(h, e.conn);
        if (link) this.net.close(link, "agent", e.reason);
        return true;
      }
      case "connect":
        this.net.connect(h, e.conn);
        return true;
      case "wake": {
        if (h.wake) h.wake.cancelled = true;
        const incNow = h.inc;
        h.wake = this.q.schedule(Math.max(this.q.now, e.at - (h.now() - this.q.now)), () => {
          h.wake = null;
          h.deliver(incNow, { type: "tick" });
        });
        return true;
      }
      case "trace":
        this.timeline?.add(this.q.now, h.label, `trace ${e.event} ${fmtDetail(e.detail)}`);
        if (e.event === "protocol_failure") this.noteClose(`agent closed: ${e.detail.code} ${e.detail.message}`);
        return true;
      default:
        this.timeline?.add(this.q.now, h.label, `-> ${e.type} ${"uuid" in e ? e.uuid : ""}${e.type === "signal" ? ` ${e.signal}` : ""}`);
        this.exec.handle(h, e);
        return true;
    }
  }

  private persist(
    h: { disk: SimDisk; fsyncFactor: number; inc: number },
    e: PersistEffect,
    onDurable: (batches: PendingBatch[]) => void,
    deliver: (through: number) => void,
  ): boolean {
    const disk = h.disk;
    if (disk.spaceLeft <= 0) return false;
    if (Number.isFinite(disk.spaceLeft)) disk.spaceLeft--;
    const lat = Math.round(this.rDisk.range(this.swarm.fsyncMinMs, this.swarm.fsyncMaxMs) * h.fsyncFactor);
    // Emitted values are frozen in every batch when paranoid, in every checkEvery-th batch otherwise (sim/disk.ts).
    const at = disk.append(e.id, e.records, this.q.now, lat, this.checkEvery <= 1 || ++this.persists % this.checkEvery === 0);
    const epoch = disk.epoch;
    this.q.schedule(at, () => {
      if (disk.epoch !== epoch) return;
      const done = disk.sync(this.q.now);
      if (done.length === 0) return;
      onDurable(done);
      deliver(done[done.length - 1]!.id);
    });
    return true;
  }

  liveLink(h: AgentHost): Link | undefined {
    const conn = h.state?.session.conn ?? 0;
    return conn ? this.net.linkOf(h, conn) : undefined;
  }
}

function describe(input: { type: string } & Record<string, unknown>): string {
  if (input.type === "control") {
    const r = input.request as { op: string; requestId: string; uuid?: string; signal?: number; clientId?: string; instanceId?: string };
    return `control ${r.op} ${r.requestId} ${r.uuid ?? r.clientId ?? ""}${r.signal !== undefined ? ` sig=${r.signal}` : ""}${r.instanceId ? ` instance=${r.instanceId.slice(0, 12)}` : ""}`;
  }
  let s = input.type;
  // for-in: the same keys in the same order as Object.entries (inputs are literals), without the arrays.
  for (const k in input) {
    if (k === "type") continue;
    const v = input[k];
    if (v instanceof Uint8Array) s += ` ${k}=${v.length}:${input.type === "frame" ? frameDigest(v) : shortDigest(v)}`;
    else if (typeof v === "object" && v !== null) s += ` ${k}=${JSON.stringify(v)}`;
    else s += ` ${k}=${String(v)}`;
  }
  return s;
}

function effectLine(e: { type: string } & Record<string, unknown>): string {
  switch (e.type) {
    case "send":
      return `> send ${e.conn} ${e.kind} ${(e.data as Uint8Array).length}:${frameDigest(e.data as Uint8Array)}`;
    case "persist":
      return `> persist ${e.id} ${(e.records as Array<{ table: string; key: string }>).map((r) => `${r.table}/${r.key}`).join(",")}`;
    case "trace":
      return `> trace ${e.event}`;
    case "write_stdin":
    case "write_script":
      return `> ${e.type} ${e.uuid} ${(e.data as Uint8Array).length}`;
    case "spawn":
      return `> spawn ${e.uuid}`;
    default:
      return `> ${describe(e)}`;
  }
}
