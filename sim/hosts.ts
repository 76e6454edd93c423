// The machines of the simulated world: one server host and N agent hosts,
// each holding a real core instance (or null while crashed), its disk, its
// clocks and its pending wake-up.
//
// Each host has two clocks, like the shells (shells/runtime/node-loop.ts
// DaemonClock): `now()`, the deadline clock (virtual time plus a fixed skew,
// plus an anchor that moves only at a restart), and `wall()`, the wall clock,
// which clock_skew steps by up to an hour either way while the deadline clock
// runs on. A restart re-anchors the deadline clock to the wall clock, as a
// real daemon does when it starts.

import type { AgentConfig, AgentEffect, AgentEnv, AgentInput, AgentState, Step } from "../core/agent/agent-types.js";
import type { ServerConfig, ServerEffect, ServerEnv, ServerInput, ServerState } from "../core/server/server-types.js";
import type { SimDisk } from "./disk.js";
import type { SimEvent } from "./event-queue.js";
import type { AgentEnd } from "./network.js";
import type { ExecHost } from "./executor.js";

/** Virtual time 0 is this wall-clock instant (node clocks add their offsets). */
export const EPOCH = 1_760_000_000_000;

export type AgentStepFn = (st: AgentState, input: AgentInput, now: number, env: AgentEnv, wall: number) => Step<AgentState, AgentEffect>;
export type ServerStepFn = (st: ServerState, input: ServerInput, now: number, env: ServerEnv, wall: number) => Step<ServerState, ServerEffect>;

/** The two clocks of a host; see the file comment. */
export class HostClock {
  /** Wall clock minus deadline clock: moved by wall-clock steps. */
  wallStep = 0;
  /** Added to the deadline clock by restarts (re-anchoring). */
  anchor = 0;
  constructor(
    private readonly nowVirtual: () => number,
    readonly clockOffset: number,
  ) {}
  now(): number {
    return EPOCH + this.nowVirtual() + this.clockOffset + this.anchor;
  }
  wall(): number {
    return this.now() + this.wallStep;
  }
  /** The wall clock is stepped by `ms` (NTP, a VM resumed); the deadline clock is not. */
  stepWall(ms: number): void {
    this.wallStep += ms;
  }
  /** A (re)start: the deadline clock starts again from the wall clock. */
  reanchor(): void {
    this.anchor += this.wallStep;
    this.wallStep = 0;
  }
}

export interface HostSink {
  nowVirtual(): number;
  agentInput(host: AgentHost, input: AgentInput): void;
}

export class AgentHost implements AgentEnd, ExecHost {
  state: AgentState | null = null;
  inc = 0;
  up = false;
  partitioned = false;
  partitions = 0;
  /** Clones and impostors are retired at the heal; a retired host never restarts. */
  retired = false;
  readonly fs = new Map<string, Uint8Array>();
  wake: SimEvent | null = null;
  fsyncFactor = 1;
  step!: AgentStepFn;
  constructor(
    private readonly sink: HostSink,
    readonly name: string,
    /** Index of the client id this host claims (agent-<client>). */
    readonly client: number,
    /** Disk lineage: incarnations that share one disk share a lineage. */
    readonly lineage: number,
    readonly kind: "agent" | "clone" | "impostor",
    readonly config: AgentConfig,
    readonly disk: SimDisk,
    readonly clockOffset: number,
  ) {
    this.clock = new HostClock(() => this.sink.nowVirtual(), clockOffset);
  }
  readonly clock: HostClock;
  /** The deadline clock. */
  now(): number {
    return this.clock.now();
  }
  /** The wall clock (timestamps). */
  wall(): number {
    return this.clock.wall();
  }
  deliver(inc: number, input: AgentInput): void {
    if (this.up && this.inc === inc && this.state) this.sink.agentInput(this, input);
  }
  get label(): string {
    return `${this.name}#${this.inc}`;
  }
}

export class ServerHost {
  readonly name = "server";
  state: ServerState | null = null;
  inc = 0;
  up = false;
  wake: SimEvent | null = null;
  fsyncFactor = 1;
  step!: ServerStepFn;
  constructor(
    private readonly sink: HostSink,
    readonly config: ServerConfig,
    readonly disk: SimDisk,
    readonly clockOffset: number,
  ) {
    this.clock = new HostClock(() => this.sink.nowVirtual(), clockOffset);
  }
  readonly clock: HostClock;
  /** The deadline clock. */
  now(): number {
    return this.clock.now();
  }
  /** The wall clock (timestamps). */
  wall(): number {
    return this.clock.wall();
  }
  get label(): string {
    return `server#${this.inc}`;
  }
}
