// The machines of the simulated world: one server host and N agent hosts,
// each holding a real core instance (or null while crashed), its disk, its
// clock offset and its pending wake-up.

import type { AgentConfig, AgentEffect, AgentEnv, AgentInput, AgentState, Step } from "../core/agent/agent-types.js";
import type { ServerConfig, ServerEffect, ServerEnv, ServerInput, ServerState } from "../core/server/server-types.js";
import type { SimDisk } from "./disk.js";
import type { SimEvent } from "./event-queue.js";
import type { AgentEnd } from "./network.js";
import type { ExecHost } from "./executor.js";

/** Virtual time 0 is this wall-clock instant (node clocks add their offsets). */
export const EPOCH = 1_760_000_000_000;

export type AgentStepFn = (st: AgentState, input: AgentInput, now: number, env: AgentEnv) => Step<AgentState, AgentEffect>;
export type ServerStepFn = (st: ServerState, input: ServerInput, now: number, env: ServerEnv) => Step<ServerState, ServerEffect>;

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
  ) {}
  now(): number {
    return EPOCH + this.sink.nowVirtual() + this.clockOffset;
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
  ) {}
  now(): number {
    return EPOCH + this.sink.nowVirtual() + this.clockOffset;
  }
  get label(): string {
    return `server#${this.inc}`;
  }
}
