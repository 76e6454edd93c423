// The simulated network: one ordered, reliable link per agent connection
// while it is up, with latency and bandwidth; faults break it (in-flight
// frames lost, both ends told), make it half-open (frames silently dropped,
// nobody told: only heartbeats notice) or stall it (a partition: frames wait
// and flow again at heal, like TCP retransmission).
//
// Each direction is a FIFO: a frame's arrival time is never earlier than the
// previous frame's, and delivery pops the head only, so order holds through
// stalls. A close from one end travels as a marker behind the frames already
// sent (graceful close); a crash sends the marker right away (reset).

import type { EventQueue } from "./event-queue.js";
import type { Rng } from "./rng.js";

export interface NetConfig {
  /** One-way latency range, ms. */
  latencyMin: number;
  latencyMax: number;
  /** Bytes per ms (1000 = ~1 MB/s). */
  bandwidthMin: number;
  bandwidthMax: number;
  /** Time after which a connect that reaches nobody fails, ms. */
  connectTimeout: number;
}

export interface AgentEnd {
  readonly name: string;
  /** Incarnation: bumped by every crash, so old links cannot reach a new process. */
  inc: number;
  up: boolean;
  partitioned: boolean;
}

export interface NetHooks {
  serverUp(): boolean;
  serverInc(): number;
  newConnId(): number;
  toServer(
    link: Link,
    input: { type: "conn_open" } | { type: "conn_closed"; reason: string } | { type: "frame"; data: Uint8Array; binary: boolean } | { type: "activity" },
  ): void;
  toAgent(
    link: Link,
    input: { type: "transport_open" } | { type: "transport_closed"; reason: string } | { type: "frame"; data: Uint8Array } | { type: "activity" },
  ): void;
  /** A connect that reached nobody. */
  connectFailed(agent: AgentEnd, agentConn: number, agentInc: number, reason: string): void;
}

type Item = { kind: "frame"; data: Uint8Array; binary: boolean; at: number } | { kind: "close"; reason: string; at: number };

export class Direction {
  queue: Item[] = [];
  freeAt = 0;
  lastArrival = 0;
  mode: "ok" | "stalled" | "dead" = "ok";
  lost = 0;
}

export type Side = "agent" | "server";

export class Link {
  /** Server-side connection id (unique across the world). */
  id = 0;
  /** Ends: "pending" until told open, "closed" after told closed or closing. */
  agentSide: "pending" | "open" | "closed" = "pending";
  serverSide: "pending" | "open" | "closed" = "pending";
  readonly a2s = new Direction();
  readonly s2a = new Direction();
  /** Set for rogue connections (garbage senders): there is no agent core behind them. */
  rogue = false;
  constructor(
    readonly agent: AgentEnd | null,
    readonly agentConn: number,
    readonly agentInc: number,
    readonly serverInc: number,
    readonly latency: number,
    readonly bandwidth: number,
  ) {}
  get closed(): boolean {
    return this.agentSide === "closed" && this.serverSide === "closed";
  }
}

export class Network {
  readonly links = new Map<number, Link>();
  /** Agent connection lookup: `${agentName}#${inc}/${conn}` -> link. */
  private readonly byAgent = new Map<string, Link>();
  stats = { connects: 0, refused: 0, timeouts: 0, breaks: 0, halfOpen: 0, framesLost: 0, framesDelivered: 0, bytes: 0 };

  constructor(
    private readonly q: EventQueue,
    private readonly rng: Rng,
    public config: NetConfig,
    private readonly hooks: NetHooks,
  ) {}

  private key(agent: AgentEnd, inc: number, conn: number): string {
    return `${agent.name}#${inc}/${conn}`;
  }

  linkOf(agent: AgentEnd, conn: number): Link | undefined {
    return this.byAgent.get(this.key(agent, agent.inc, conn));
  }

  private draw(): { latency: number; bandwidth: number } {
    const c = this.config;
    return { latency: this.rng.range(c.latencyMin, c.latencyMax), bandwidth: this.rng.range(c.bandwidthMin, c.bandwidthMax) };
  }

  /** The agent core asked to connect with its connection number `conn`. */
  connect(agent: AgentEnd, conn: number): void {
    this.stats.connects++;
    const inc = agent.inc;
    const { latency, bandwidth } = this.draw();
    if (agent.partitioned) {
      this.stats.timeouts++;
      this.q.after(this.config.connectTimeout, () => this.hooks.connectFailed(agent, conn, inc, "connect timed out"));
      return;
    }
    if (!this.hooks.serverUp()) {
      this.stats.refused++;
      this.q.after(2 * latency, () => this.hooks.connectFailed(agent, conn, inc, "connection refused"));
      return;
    }
    const link = new Link(agent, conn, inc, this.hooks.serverInc(), latency, bandwidth);
    this.byAgent.set(this.key(agent, inc, conn), link);
    // SYN reaches the server: it accepts (conn_open); the handshake completes at the agent.
    this.q.after(latency, () => {
      if (link.agentSide === "closed" || agent.inc !== inc) return;
      if (!this.hooks.serverUp() || this.hooks.serverInc() !== link.serverInc || agent.partitioned) {
        link.serverSide = "closed";
        this.finishAgentSide(link, agent.partitioned ? "connect timed out" : "connection refused", agent.partitioned ? this.config.connectTimeout : latency);
        return;
      }
      link.id = this.hooks.newConnId();
      this.links.set(link.id, link);
      link.serverSide = "open";
      this.hooks.toServer(link, { type: "conn_open" });
      this.q.after(latency, () => {
        if (link.agentSide !== "pending" || agent.inc !== inc) return;
        if (link.serverSide === "closed") {
          // The server closed it before the handshake finished.
          this.finishAgentSide(link, "connection reset", 0);
          return;
        }
        link.agentSide = "open";
        this.hooks.toAgent(link, { type: "transport_open" });
      });
    });
  }

  private finishAgentSide(link: Link, reason: string, delay: number): void {
    const agent = link.agent!;
    this.q.after(delay, () => {
      if (link.agentSide === "closed") return;
      link.agentSide = "closed";
      this.hooks.connectFailed(agent, link.agentConn, link.agentInc, reason);
    });
  }

  /** A rogue client opens a connection straight to the server (no agent core). */
  openRogue(): Link | null {
    if (!this.hooks.serverUp()) return null;
    const { latency, bandwidth } = this.draw();
    const link = new Link(null, 0, 0, this.hooks.serverInc(), latency, bandwidth);
    link.rogue = true;
    link.id = this.hooks.newConnId();
    this.links.set(link.id, link);
    link.serverSide = "open";
    link.agentSide = "open";
    this.hooks.toServer(link, { type: "conn_open" });
    return link;
  }

  send(link: Link, from: Side, data: Uint8Array, binary = true): void {
    const sideState = from === "agent" ? link.agentSide : link.serverSide;
    if (sideState !== "open") return;
    const dir = from === "agent" ? link.a2s : link.s2a;
    if (dir.mode === "dead") {
      dir.lost++;
      this.stats.framesLost++;
      return;
    }
    const now = this.q.now;
    const start = Math.max(now, dir.freeAt);
    dir.freeAt = start + Math.ceil(data.length / link.bandwidth);
    const at = Math.max(dir.freeAt + link.latency, dir.lastArrival);
    dir.lastArrival = at;
    dir.queue.push({ kind: "frame", data, binary, at });
    this.stats.bytes += data.length;
    this.q.schedule(at, () => this.pump(link, dir, from === "agent" ? "server" : "agent"));
  }

  /** Close from one end: a marker follows the frames already sent. */
  close(link: Link, from: Side, reason: string, reset = false): void {
    const sideState = from === "agent" ? link.agentSide : link.serverSide;
    if (sideState === "closed") return;
    if (from === "agent") link.agentSide = "closed";
    else link.serverSide = "closed";
    const dir = from === "agent" ? link.a2s : link.s2a;
    const back = from === "agent" ? link.s2a : link.a2s;
    // Frames still on their way to the closing end are dropped on arrival.
    back.lost += back.queue.length;
    if (dir.mode === "dead") return;
    const now = this.q.now;
    if (reset) {
      this.stats.framesLost += dir.queue.filter((i) => i.kind === "frame").length;
      dir.queue = [];
    }
    const at = Math.max(now + link.latency, reset ? 0 : dir.lastArrival);
    dir.lastArrival = Math.max(dir.lastArrival, at);
    dir.queue.push({ kind: "close", reason, at });
    this.q.schedule(at, () => this.pump(link, dir, from === "agent" ? "server" : "agent"));
  }

  private pump(link: Link, dir: Direction, to: Side): void {
    const now = this.q.now;
    while (dir.queue.length > 0 && dir.queue[0]!.at <= now && dir.mode === "ok") {
      const item = dir.queue.shift()!;
      const state = to === "agent" ? link.agentSide : link.serverSide;
      if (state !== "open") {
        if (item.kind === "frame") this.stats.framesLost++;
        continue;
      }
      if (to === "agent" && (link.agent === null || link.agent.inc !== link.agentInc || !link.agent.up)) continue;
      if (to === "server" && (!this.hooks.serverUp() || this.hooks.serverInc() !== link.serverInc)) continue;
      if (item.kind === "frame") {
        this.stats.framesDelivered++;
        if (to === "agent") this.hooks.toAgent(link, { type: "frame", data: item.data });
        else this.hooks.toServer(link, { type: "frame", data: item.data, binary: item.binary });
      } else {
        if (to === "agent") {
          link.agentSide = "closed";
          this.hooks.toAgent(link, { type: "transport_closed", reason: item.reason });
        } else {
          link.serverSide = "closed";
          this.hooks.toServer(link, { type: "conn_closed", reason: item.reason });
        }
      }
    }
  }

  /** WebSocket ping from one end: the peer sees activity, the pong brings activity back. */
  ping(link: Link, from: Side): void {
    const there = from === "agent" ? link.a2s : link.s2a;
    const back = from === "agent" ? link.s2a : link.a2s;
    if (there.mode !== "ok" || link.closed) return;
    this.q.after(link.latency, () => {
      if (there.mode !== "ok") return;
      const peer = from === "agent" ? "server" : "agent";
      if ((peer === "agent" ? link.agentSide : link.serverSide) !== "open") return;
      if (peer === "server") this.hooks.toServer(link, { type: "activity" });
      else if (link.agent && link.agent.inc === link.agentInc && link.agent.up) this.hooks.toAgent(link, { type: "activity" });
      else return; // a rogue client (or a dead agent process) sends no pong
      if (back.mode !== "ok") return;
      this.q.after(link.latency, () => {
        if (back.mode !== "ok") return;
        if ((from === "agent" ? link.agentSide : link.serverSide) !== "open") return;
        if (from === "server") this.hooks.toServer(link, { type: "activity" });
        else if (link.agent && link.agent.inc === link.agentInc && link.agent.up) this.hooks.toAgent(link, { type: "activity" });
      });
    });
  }

  // ------------------------------------------------------------ faults

  /** Connection reset by the network: in-flight frames lost, both ends told. */
  breakLink(link: Link, reason = "connection reset by network"): void {
    if (link.closed) return;
    this.stats.breaks++;
    for (const dir of [link.a2s, link.s2a]) {
      this.stats.framesLost += dir.queue.filter((i) => i.kind === "frame").length;
      dir.queue = [];
      dir.mode = "ok";
    }
    const tell = (side: Side): void => {
      const delay = this.rng.range(0, 2 * link.latency);
      this.q.after(delay, () => {
        if (side === "agent") {
          if (link.agentSide === "closed") return;
          const wasPending = link.agentSide === "pending";
          link.agentSide = "closed";
          if (link.agent && link.agent.inc === link.agentInc && link.agent.up) {
            if (wasPending) this.hooks.connectFailed(link.agent, link.agentConn, link.agentInc, reason);
            else this.hooks.toAgent(link, { type: "transport_closed", reason });
          }
        } else {
          if (link.serverSide !== "open") {
            link.serverSide = "closed";
            return;
          }
          link.serverSide = "closed";
          if (this.hooks.serverUp() && this.hooks.serverInc() === link.serverInc) this.hooks.toServer(link, { type: "conn_closed", reason });
        }
      });
    };
    // Mark both directions unusable now; notifications follow.
    link.a2s.mode = "dead";
    link.s2a.mode = "dead";
    tell("agent");
    tell("server");
  }

  /** Half-open: frames in the given directions vanish silently from now on. */
  halfOpen(link: Link, dirs: Array<"a2s" | "s2a">): void {
    if (link.closed) return;
    this.stats.halfOpen++;
    for (const d of dirs) {
      const dir = link[d];
      this.stats.framesLost += dir.queue.filter((i) => i.kind === "frame").length;
      dir.queue = [];
      dir.mode = "dead";
    }
  }

  stall(link: Link): void {
    for (const dir of [link.a2s, link.s2a]) if (dir.mode === "ok") dir.mode = "stalled";
  }

  unstall(link: Link): void {
    const now = this.q.now;
    for (const [dir, to] of [
      [link.a2s, "server"],
      [link.s2a, "agent"],
    ] as const) {
      if (dir.mode !== "stalled") continue;
      dir.mode = "ok";
      // Held frames flow again, in order, after one latency.
      const at = now + link.latency;
      for (const item of dir.queue) if (item.at < at) item.at = at;
      dir.lastArrival = Math.max(dir.lastArrival, at);
      this.q.schedule(at, () => this.pump(link, dir, to));
    }
  }

  /** Every link touching this agent incarnation. */
  linksOf(agent: AgentEnd): Link[] {
    return [...this.byAgent.values()].filter((l) => l.agent === agent && !l.closed);
  }

  liveLinks(): Link[] {
    return [...this.byAgent.values(), ...[...this.links.values()].filter((l) => l.rogue)].filter((l) => !l.closed);
  }

  /** Forget closed links (memory). */
  gc(): void {
    for (const [k, l] of this.byAgent) if (l.closed) this.byAgent.delete(k);
    for (const [k, l] of this.links) if (l.closed) this.links.delete(k);
  }

  /** The server crashed: every link resets; agents hear of it one latency later. */
  serverCrashed(): void {
    for (const link of this.liveLinks()) {
      link.serverSide = "closed";
      link.a2s.queue = [];
      if (link.rogue) {
        link.agentSide = "closed";
        continue;
      }
      if (link.s2a.mode === "dead") continue;
      // In-flight frames toward the agent are lost with the process.
      link.s2a.queue = [];
      const at = this.q.now + link.latency;
      link.s2a.queue.push({ kind: "close", reason: "server connection reset", at });
      link.s2a.lastArrival = Math.max(link.s2a.lastArrival, at);
      if (link.s2a.mode === "ok") this.q.schedule(at, () => this.pump(link, link.s2a, "agent"));
      if (link.agentSide === "pending") {
        link.agentSide = "closed";
        const a = link.agent!;
        this.q.after(link.latency, () => this.hooks.connectFailed(a, link.agentConn, link.agentInc, "connection reset"));
      }
    }
  }

  /** An agent process crashed: its links reset toward the server. */
  agentCrashed(agent: AgentEnd): void {
    for (const link of this.linksOf(agent)) this.close(link, "agent", "agent connection reset", true);
  }
}
