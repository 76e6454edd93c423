/**
 * WatchFleet's engine: one per server daemon, shared by every watcher.
 *
 * Nothing polls. The daemon calls `afterStep` after every reducer step; if
 * anyone watches, that arms one flush (at most one per `flushMs`). A flush
 * works out what changed since the previous one and queues one message per
 * changed record to every watcher:
 *
 *   commands, incidents   dirty sets: the keys of the `command` and `incident`
 *                         rows of each persist batch, released when the
 *                         `durable` input for that batch has been applied,
 *                         which is exactly when the core updates a command's
 *                         committed view (the view readers may see);
 *   clients, sessions,    a fingerprint per record compared with the one last
 *   claims                published (these change without a persist: a
 *                         connection, a phase, the capacity counters, the
 *                         activity times); bounded by the fleet's size, and
 *                         activity times count at 1 s resolution so a chatty
 *                         session is not a change every frame.
 *
 * A record that changed many times between two flushes is sent once, as it
 * stands (coalescing). Each watcher has a bounded queue: if a flush would
 * push it past `queueLimit` messages (a reader slower than the fleet
 * changes), the queue is dropped and replaced by one fresh snapshot, so the
 * reader catches up with the present instead of the server buffering its
 * backlog. A new watcher's snapshot is taken right after a flush, so the
 * snapshot and the changes that follow it line up with no gap.
 */
import { create } from "@bufbuild/protobuf";
import { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import { FleetSnapshotSchema, WatchFleetResponseSchema, type Command, type WatchFleetResponse } from "../../protos/gen/rvbox/v1/control_pb.js";
import { type ClientRecord, type ConnState, type ServerCommand, type ServerEffect, type ServerInput, formatLabels } from "../../core/index.js";
import {
  activeCounts,
  claimView,
  clientActivity,
  clientView,
  incidentView,
  sessionInbound,
  sessionView,
  toCommand,
  type FleetReader,
} from "./control-service.js";

/** Messages a watcher may have queued; past it the queue is replaced by a fresh snapshot. */
export const WATCH_QUEUE_LIMIT = 4096;
/** Concurrent WatchFleet streams per server; one more is refused with ResourceExhausted. */
export const MAX_WATCHERS = 256;
/** At most one flush (one message per changed record) per this many ms. */
export const WATCH_FLUSH_MS = 100;
/** Activity times change a record only when they move to another second. */
export const WATCH_ACTIVITY_RESOLUTION_MS = 1000;
/** Commands per watched client in a snapshot (and for "*", of all clients together). */
export const WATCH_COMMANDS_PER_CLIENT = 500;
/** command_clients value meaning every client. */
export const ALL_CLIENTS = "*";

export interface WatchOptions {
  /** Queue bound per watcher (messages). Default WATCH_QUEUE_LIMIT. */
  queueLimit?: number;
  /** Minimum ms between two flushes. Default WATCH_FLUSH_MS. */
  flushMs?: number;
  /** Concurrent watchers. Default MAX_WATCHERS. */
  maxWatchers?: number;
}

interface Change {
  msg: WatchFleetResponse;
  /** Set for commands: only watchers of this client get it. */
  commandOf: string | null;
}

export class Watcher {
  readonly queue: WatchFleetResponse[] = [];
  closed = false;
  /** Snapshots sent because the queue overflowed (tests, logs). */
  overflows = 0;
  private wakeUp: (() => void) | null = null;
  private readonly all: boolean;
  private readonly clients: ReadonlySet<string>;

  constructor(commandClients: readonly string[]) {
    this.all = commandClients.includes(ALL_CLIENTS);
    this.clients = new Set(commandClients.filter((c) => c !== ALL_CLIENTS));
  }

  wantsAll(): boolean {
    return this.all;
  }

  watchedClients(): ReadonlySet<string> {
    return this.clients;
  }

  wants(clientId: string): boolean {
    return this.all || this.clients.has(clientId);
  }

  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = null;
    w?.();
  }

  /** The next queued message, waiting for one; null once closed or aborted. */
  async next(signal: AbortSignal): Promise<WatchFleetResponse | null> {
    for (;;) {
      if (this.closed || signal.aborted) return null;
      const m = this.queue.shift();
      if (m) return m;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener("abort", done);
          this.wakeUp = null;
          resolve();
        };
        this.wakeUp = done;
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
}

export class FleetWatch {
  private readonly watchers = new Set<Watcher>();
  readonly queueLimit: number;
  readonly maxWatchers: number;
  readonly flushMs: number;
  /** Persist batches not yet durable: their command and incident keys. */
  private readonly inFlight: Array<{ id: number; commands: string[]; incidents: string[] }> = [];
  private readonly dirtyCommands = new Set<string>();
  private readonly dirtyIncidents = new Set<string>();
  private readonly clientPrints = new Map<string, string>();
  private readonly sessionPrints = new Map<number, string>();
  private readonly claimPrints = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;
  private lastFlush = 0;
  /** Flushes that found something to send (tests, logs). */
  flushes = 0;

  constructor(
    private readonly d: FleetReader,
    opts: WatchOptions = {},
  ) {
    this.queueLimit = Math.max(1, opts.queueLimit ?? WATCH_QUEUE_LIMIT);
    this.maxWatchers = Math.max(1, opts.maxWatchers ?? MAX_WATCHERS);
    this.flushMs = opts.flushMs ?? WATCH_FLUSH_MS;
  }

  get watcherCount(): number {
    return this.watchers.size;
  }

  /** After every reducer step: remember which rows the step persisted; after a `durable`, they are visible. */
  afterStep(input: ServerInput, effects: readonly ServerEffect[]): void {
    for (const e of effects) {
      if (e.type !== "persist") continue;
      let commands: string[] | null = null;
      let incidents: string[] | null = null;
      for (const r of e.records) {
        if (r.table === "command") (commands ??= []).push(r.key);
        else if (r.table === "incident") (incidents ??= []).push(r.key);
      }
      if (commands || incidents) this.inFlight.push({ id: e.id, commands: commands ?? [], incidents: incidents ?? [] });
    }
    if (input.type === "durable") {
      while (this.inFlight.length > 0 && this.inFlight[0]!.id <= input.through) {
        const b = this.inFlight.shift()!;
        if (this.watchers.size === 0) continue;
        for (const k of b.commands) this.dirtyCommands.add(k);
        for (const k of b.incidents) this.dirtyIncidents.add(k);
      }
    }
    if (this.watchers.size > 0) this.schedule();
  }

  /** A new watcher, or null when `maxWatchers` streams are already open. */
  subscribe(commandClients: readonly string[]): Watcher | null {
    if (this.watchers.size >= this.maxWatchers) return null;
    // Publish what is pending first, so this snapshot is exactly the state the next changes start from.
    this.flush();
    const w = new Watcher(commandClients);
    w.queue.push(this.snapshot(w));
    this.watchers.add(w);
    return w;
  }

  unsubscribe(w: Watcher): void {
    this.watchers.delete(w);
    w.closed = true;
    w.wake();
    if (this.watchers.size === 0) {
      this.dirtyCommands.clear();
      this.dirtyIncidents.clear();
    }
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const w of [...this.watchers]) this.unsubscribe(w);
  }

  private schedule(): void {
    if (this.timer) return;
    // Monotonic: a wall clock stepped back must not hold the flush for as long.
    const wait = Math.max(0, this.lastFlush + this.flushMs - performance.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flush();
    }, wait);
  }

  /** Work out what changed since the last flush and queue it to every watcher. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.lastFlush = performance.now();
    const st = this.d.state;
    const changes: Change[] = [];
    const change = (c: WatchFleetResponse["change"], commandOf: string | null = null): void => {
      changes.push({ msg: create(WatchFleetResponseSchema, { change: c }), commandOf });
    };

    const active = activeCounts(st);
    for (const c of st.clients.values()) {
      const fp = this.clientPrint(c, active);
      if (this.clientPrints.get(c.clientId) === fp) continue;
      this.clientPrints.set(c.clientId, fp);
      change({ case: "client", value: clientView(this.d, c, active) });
    }
    for (const id of this.clientPrints.keys()) {
      if (st.clients.has(id)) continue;
      this.clientPrints.delete(id);
      change({ case: "clientRemoved", value: id });
    }

    const live = new Set<number>();
    for (const c of st.conns.values()) {
      live.add(c.conn);
      const fp = this.sessionPrint(c);
      if (this.sessionPrints.get(c.conn) === fp) continue;
      this.sessionPrints.set(c.conn, fp);
      change({ case: "session", value: sessionView(this.d, c) });
    }
    for (const conn of this.sessionPrints.keys()) {
      if (live.has(conn)) continue;
      this.sessionPrints.delete(conn);
      change({ case: "sessionClosed", value: BigInt(conn) });
    }

    const claimed = new Set<string>();
    for (const c of st.clients.values()) {
      const p = c.pendingClaim;
      if (!p) continue;
      claimed.add(c.clientId);
      const fp = `${p.instanceId}|${c.instanceId}|${p.at}|${p.attempts}`;
      if (this.claimPrints.get(c.clientId) === fp) continue;
      this.claimPrints.set(c.clientId, fp);
      change({ case: "claim", value: claimView(c) });
    }
    for (const id of this.claimPrints.keys()) {
      if (claimed.has(id)) continue;
      this.claimPrints.delete(id);
      change({ case: "claimCleared", value: id });
    }

    for (const id of this.dirtyIncidents) {
      const i = st.incidents.get(id);
      change(i ? { case: "incident", value: incidentView(i) } : { case: "incidentRemoved", value: id });
    }
    this.dirtyIncidents.clear();

    for (const uuid of this.dirtyCommands) {
      const c = st.commands.get(uuid);
      if (!c) {
        const gone = st.pruned.get(uuid);
        if (gone) change({ case: "commandRemoved", value: uuid }, gone.clientId);
        continue;
      }
      if (c.committed.state === CommandLifecycle.UNSPECIFIED) continue;
      change({ case: "command", value: toCommand(c, this.d, false) }, c.clientId);
    }
    this.dirtyCommands.clear();

    if (changes.length === 0) return;
    this.flushes++;
    for (const w of this.watchers) {
      const mine = changes.filter((ch) => ch.commandOf === null || w.wants(ch.commandOf));
      if (mine.length === 0) continue;
      if (w.queue.length + mine.length > this.queueLimit) {
        // The reader is too far behind: forget its backlog, tell it the present.
        w.queue.length = 0;
        w.queue.push(this.snapshot(w));
        w.overflows++;
      } else {
        for (const ch of mine) w.queue.push(ch.msg);
      }
      w.wake();
    }
  }

  private clientPrint(c: ClientRecord, active: ReadonlyMap<string, number>): string {
    const st = this.d.state;
    const act = Math.floor(clientActivity(this.d, c) / WATCH_ACTIVITY_RESOLUTION_MS);
    const cap = c.capacity;
    const auth = c.authorization ? `${c.authorization.instanceId}@${c.authorization.expiresAt}` : "";
    return `${c.instanceId}|${c.generation}|${c.conn !== 0}|${act}|${cap.running}/${cap.maxRunning}|${cap.queued}/${cap.maxQueued}|${active.get(c.clientId) ?? 0}|${auth}|${st.clientOutput.get(c.clientId)?.bytes ?? 0}|${st.incidentDrops.get(c.clientId)?.count ?? 0}|${c.draining}|${formatLabels(c.labels)}`;
  }

  private sessionPrint(c: ConnState): string {
    const inbound = Math.floor(sessionInbound(this.d, c) / WATCH_ACTIVITY_RESOLUTION_MS);
    return `${c.phase}|${c.clientId}|${c.instanceId}|${c.sessionId}|${c.generation}|${inbound}`;
  }

  /** The fleet as it stands, with the newest commands of what `w` watches. */
  private snapshot(w: Watcher): WatchFleetResponse {
    const st = this.d.state;
    const active = activeCounts(st);
    return create(WatchFleetResponseSchema, {
      change: {
        case: "snapshot",
        value: create(FleetSnapshotSchema, {
          clients: [...st.clients.values()].map((c) => clientView(this.d, c, active)),
          sessions: [...st.conns.values()].map((c) => sessionView(this.d, c)),
          claims: [...st.clients.values()].filter((c) => c.pendingClaim !== null).map(claimView),
          incidents: [...st.incidents.values()].map(incidentView),
          commands: this.newestCommands(w),
        }),
      },
    });
  }

  private newestCommands(w: Watcher): Command[] {
    const clients = w.watchedClients();
    if (!w.wantsAll() && clients.size === 0) return [];
    const all: ServerCommand[] = [];
    for (const c of this.d.state.commands.values()) {
      if (c.committed.state === CommandLifecycle.UNSPECIFIED) continue;
      if (w.wants(c.clientId)) all.push(c);
    }
    all.sort((a, b) => b.createdAt - a.createdAt || (a.uuid < b.uuid ? -1 : 1));
    const picked = new Set<string>();
    const per = new Map<string, number>();
    for (let i = 0; i < all.length; i++) {
      const c = all[i]!;
      const n = per.get(c.clientId) ?? 0;
      if ((w.wantsAll() && i < WATCH_COMMANDS_PER_CLIENT) || (clients.has(c.clientId) && n < WATCH_COMMANDS_PER_CLIENT)) picked.add(c.uuid);
      per.set(c.clientId, n + 1);
    }
    return all.filter((c) => picked.has(c.uuid)).map((c) => toCommand(c, this.d, false));
  }
}
