/**
 * How the control source learns about fleet changes (clients, sessions,
 * claims, incidents, command lists). Swappable: the control source only sees
 * a FleetFeed pushing data into a FleetSink.
 *
 *   WatchFeed     the default: one `WatchFleet` server stream per source; a
 *                 snapshot, then only what changed, pushed by the server (no
 *                 polling). Reconnects with bounded backoff; reopens the
 *                 stream when a view wants the commands of a client the
 *                 stream does not cover. Falls back to a RefreshFeed only if
 *                 the server answers Unimplemented (a server older than
 *                 WatchFleet).
 *   RefreshFeed   the fallback: ONE internal refresher per source (never one
 *                 per view), a modest interval (1 s by default), never two
 *                 refreshes in flight, slower while the server is
 *                 unreachable, and an immediate refresh after the operator's
 *                 own actions.
 *
 * Output is not part of this: it streams through FollowOutput (control-source.ts).
 */
import { Code as ConnectCode, ConnectError, type Client as Rpc } from "@connectrpc/connect";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Client, Command, ControlService, Incident, PendingClaim, Session, WatchFleetResponse } from "../../protos/gen/rvbox/v1/control_pb.js";

export interface FleetData {
  clients: Client[];
  sessions: Session[];
  claims: PendingClaim[];
  incidents: Incident[];
}

export interface FleetSink {
  fleet(d: FleetData): void;
  /** The newest commands of one client (null: of every client). */
  commands(clientId: string | null, list: Command[]): void;
  error(err: unknown): void;
}

export interface FleetFeed {
  /** For the header: "stream", "refresh 1s". */
  readonly label: string;
  start(sink: FleetSink): void;
  stop(): void;
  /** The command lists the views want kept current (null: all clients). */
  setInterest(clients: ReadonlySet<string | null>): void;
  /** The operator just changed something: refresh soon. */
  poke(): void;
}

export const COMMAND_PAGE = 500;

export class RefreshFeed implements FleetFeed {
  private sink: FleetSink | null = null;
  private interest: ReadonlySet<string | null> = new Set();
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private again = false;
  private stopped = false;
  private failures = 0;
  readonly label: string;

  constructor(
    private readonly rpc: Rpc<typeof ControlService>,
    private readonly intervalMs = 1000,
  ) {
    this.label = `refresh ${intervalMs >= 1000 ? `${+(intervalMs / 1000).toFixed(1)}s` : `${intervalMs}ms`}`;
  }

  start(sink: FleetSink): void {
    this.sink = sink;
    this.stopped = false;
    void this.tick();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  setInterest(clients: ReadonlySet<string | null>): void {
    const added = [...clients].some((c) => !this.interest.has(c));
    this.interest = new Set(clients);
    if (added) this.poke();
  }

  poke(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    void this.tick();
  }

  private async tick(): Promise<void> {
    if (this.stopped || this.running) return;
    this.running = true;
    this.timer = null;
    try {
      const [clients, sessions, claims, incidents] = await Promise.all([
        this.rpc.listClients({}),
        this.rpc.listSessions({}),
        this.rpc.listClaims({}),
        this.rpc.listIncidents({ includeAcknowledged: true }),
      ]);
      if (this.stopped) return;
      this.sink?.fleet({ clients: clients.clients, sessions: sessions.sessions, claims: claims.claims, incidents: incidents.incidents });
      for (const c of this.interest) {
        // (The interest may change while a list is awaited: a client no longer watched is not listed.)
        if (!this.interest.has(c)) continue;
        const r = await this.rpc.listCommands({ clientId: c ?? "", pageSize: COMMAND_PAGE });
        if (this.stopped) return;
        this.sink?.commands(c, r.commands);
      }
      this.failures = 0;
    } catch (err) {
      this.failures++;
      if (!this.stopped) this.sink?.error(err);
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    if (this.again) {
      this.again = false;
      void this.tick();
      return;
    }
    // Unreachable: back off to at most 10 s between attempts.
    const wait = this.failures === 0 ? this.intervalMs : Math.min(10_000, this.intervalMs * 2 ** Math.min(this.failures, 4));
    this.timer = setTimeout(() => void this.tick(), wait);
    this.timer.unref?.();
  }
}

export interface WatchFeedOptions {
  /** Interval of the RefreshFeed used against servers without WatchFleet. */
  refreshMs?: number;
  /** Reconnect backoff after a stream error: first and longest wait (ms). */
  retryMs?: number;
  maxRetryMs?: number;
}

/** Errors the control client already explains in the operator's words (describeError). */
const EXPLAINED = new Set([ConnectCode.Unavailable, ConnectCode.Unauthenticated, ConnectCode.PermissionDenied, ConnectCode.DeadlineExceeded]);

/** The command_clients value for "every client" (WatchFleetRequest). */
const ALL = "*";

const created = (c: Command): number => (c.createdTime ? timestampMs(c.createdTime) : 0);
const newestFirst = (a: Command, b: Command): number => created(b) - created(a) || (a.issueUuid < b.issueUuid ? -1 : 1);

/**
 * The fleet over the control API's `WatchFleet` stream. Keeps the records it
 * was told about, applies each change, and hands the sink the whole picture
 * at most once per burst of messages (one macrotask), so a thousand changes
 * arriving together cost one re-render.
 */
export class WatchFeed implements FleetFeed {
  private sink: FleetSink | null = null;
  private interest: ReadonlySet<string | null> = new Set();
  /** What the open stream covers (its command_clients). */
  private streaming: ReadonlySet<string> = new Set();
  private abort: AbortController | null = null;
  private stopped = false;
  private fallback: RefreshFeed | null = null;
  private reopenScheduled = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private emitScheduled = false;
  private fleetDirty = false;
  private commandsDirty = false;
  private readonly clients = new Map<string, Client>();
  private readonly sessions = new Map<bigint, Session>();
  private readonly claims = new Map<string, PendingClaim>();
  private readonly incidents = new Map<string, Incident>();
  private readonly commandMap = new Map<string, Command>();
  /** Streams opened (tests and the header). */
  opened = 0;

  constructor(
    private readonly rpc: Rpc<typeof ControlService>,
    private readonly o: WatchFeedOptions = {},
  ) {}

  get label(): string {
    return this.fallback ? `${this.fallback.label} (server has no WatchFleet)` : "stream";
  }

  /** True once the server said it has no WatchFleet and the refresher took over. */
  get fellBack(): boolean {
    return this.fallback !== null;
  }

  start(sink: FleetSink): void {
    this.sink = sink;
    this.stopped = false;
    this.open();
  }

  stop(): void {
    this.stopped = true;
    this.abort?.abort();
    this.abort = null;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.fallback?.stop();
  }

  setInterest(clients: ReadonlySet<string | null>): void {
    this.interest = new Set(clients);
    if (this.fallback) return this.fallback.setInterest(clients);
    // Lists no longer watched are forgotten (the next emit drops their
    // commands), so the open stream no longer covers them: watching one again
    // needs a new stream, whose snapshot has it. (Keeping them "covered" left
    // a list empty after switching views and back.)
    this.streaming = new Set([...this.streaming].filter((k) => clients.has(k === ALL ? null : k)));
    // A list the stream does not cover needs a new stream (its snapshot has it).
    if (!this.covers(clients)) this.scheduleReopen();
    else {
      this.commandsDirty = true;
      this.scheduleEmit();
    }
  }

  poke(): void {
    // The stream brings the operator's own changes like everyone else's.
    this.fallback?.poke();
  }

  private wanted(): string[] {
    return [...this.interest].map((c) => c ?? ALL).sort();
  }

  /** The open stream's snapshot had every one of these lists ("*" has only the newest of all clients together, not each client's). */
  private covers(clients: ReadonlySet<string | null>): boolean {
    for (const c of clients) if (!this.streaming.has(c ?? ALL)) return false;
    return true;
  }

  private scheduleReopen(): void {
    if (this.reopenScheduled) return;
    this.reopenScheduled = true;
    // Views register their interests together: one new stream for all of them.
    setImmediate(() => {
      this.reopenScheduled = false;
      if (this.stopped || this.fallback || this.covers(this.interest)) return;
      this.abort?.abort();
      this.abort = null;
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = null;
      this.open();
    });
  }

  private open(): void {
    if (this.stopped || this.fallback) return;
    const abort = new AbortController();
    this.abort = abort;
    const wanted = this.wanted();
    this.streaming = new Set(wanted);
    this.opened++;
    void this.run(abort, wanted);
  }

  private async run(abort: AbortController, wanted: string[]): Promise<void> {
    let delay = this.o.retryMs ?? 250;
    const maxDelay = this.o.maxRetryMs ?? 10_000;
    while (!abort.signal.aborted && !this.stopped) {
      try {
        for await (const m of this.rpc.watchFleet({ commandClients: wanted }, { signal: abort.signal })) {
          delay = this.o.retryMs ?? 250;
          this.apply(m);
        }
      } catch (err) {
        if (abort.signal.aborted || this.stopped) return;
        const ce = ConnectError.from(err);
        if (ce.code === ConnectCode.Unimplemented) {
          this.fallBack();
          return;
        }
        // Refused, unreachable: said as such; anything else (a connection cut mid-stream) says what broke.
        this.sink?.error(EXPLAINED.has(ce.code) ? err : new ConnectError(`the fleet stream broke (${ce.rawMessage}); reconnecting`, ce.code));
      }
      if (abort.signal.aborted || this.stopped) return;
      // The stream ended or broke: try again, waiting longer each time (bounded).
      await new Promise<void>((resolve) => {
        this.retryTimer = setTimeout(resolve, delay);
        this.retryTimer.unref?.();
        abort.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      this.retryTimer = null;
      delay = Math.min(maxDelay, delay * 2);
    }
  }

  private fallBack(): void {
    this.abort = null;
    this.streaming = new Set();
    this.fallback = new RefreshFeed(this.rpc, this.o.refreshMs ?? 1000);
    this.fallback.setInterest(this.interest);
    this.fallback.start(this.sink!);
  }

  private apply(m: WatchFleetResponse): void {
    const c = m.change;
    switch (c.case) {
      case "snapshot": {
        const s = c.value;
        this.clients.clear();
        this.sessions.clear();
        this.claims.clear();
        this.incidents.clear();
        this.commandMap.clear();
        for (const x of s.clients) this.clients.set(x.clientId, x);
        for (const x of s.sessions) this.sessions.set(x.connection, x);
        for (const x of s.claims) this.claims.set(x.clientId, x);
        for (const x of s.incidents) this.incidents.set(x.incidentId, x);
        for (const x of s.commands) this.commandMap.set(x.issueUuid, x);
        this.fleetDirty = true;
        this.commandsDirty = true;
        break;
      }
      case "client":
        this.clients.set(c.value.clientId, c.value);
        this.fleetDirty = true;
        break;
      case "clientRemoved":
        this.clients.delete(c.value);
        this.fleetDirty = true;
        break;
      case "session":
        this.sessions.set(c.value.connection, c.value);
        this.fleetDirty = true;
        break;
      case "sessionClosed":
        this.sessions.delete(c.value);
        this.fleetDirty = true;
        break;
      case "claim":
        this.claims.set(c.value.clientId, c.value);
        this.fleetDirty = true;
        break;
      case "claimCleared":
        this.claims.delete(c.value);
        this.fleetDirty = true;
        break;
      case "incident":
        this.incidents.set(c.value.incidentId, c.value);
        this.fleetDirty = true;
        break;
      case "incidentRemoved":
        this.incidents.delete(c.value);
        this.fleetDirty = true;
        break;
      case "command":
        this.commandMap.set(c.value.issueUuid, c.value);
        this.commandsDirty = true;
        break;
      case "commandRemoved":
        this.commandMap.delete(c.value);
        this.commandsDirty = true;
        break;
      default:
        return;
    }
    this.scheduleEmit();
  }

  private scheduleEmit(): void {
    if (this.emitScheduled) return;
    this.emitScheduled = true;
    setImmediate(() => {
      this.emitScheduled = false;
      if (!this.stopped && !this.fallback) this.emit();
    });
  }

  private emit(): void {
    if (this.fleetDirty) {
      this.fleetDirty = false;
      this.sink?.fleet({
        clients: [...this.clients.values()],
        sessions: [...this.sessions.values()],
        claims: [...this.claims.values()],
        incidents: [...this.incidents.values()],
      });
    }
    if (!this.commandsDirty) return;
    this.commandsDirty = false;
    // Each watched list: the newest COMMAND_PAGE; a command in none of them is forgotten (bounded memory).
    const all = [...this.commandMap.values()].sort(newestFirst);
    const keep = new Set<string>();
    for (const key of this.interest) {
      const list: Command[] = [];
      for (const c of all) {
        if (key !== null && c.clientId !== key) continue;
        list.push(c);
        keep.add(c.issueUuid);
        if (list.length >= COMMAND_PAGE) break;
      }
      this.sink?.commands(key, list);
    }
    for (const uuid of this.commandMap.keys()) if (!keep.has(uuid)) this.commandMap.delete(uuid);
  }
}
