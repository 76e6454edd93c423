/**
 * How the control source learns about fleet changes (clients, sessions,
 * claims, incidents, command lists). Swappable: the control source only sees
 * a FleetFeed pushing data into a FleetSink.
 *
 * Today the control API has no watch RPC, so `RefreshFeed` is the interim:
 * ONE internal refresher per source (never one per view), a modest interval
 * (1 s by default), never two refreshes in flight, slower while the server
 * is unreachable, and an immediate refresh after the operator's own actions.
 * Output is not polled: it streams through FollowOutput (control-source.ts).
 *
 * When the server grows `WatchFleet` (see docs/OPERATOR.md, "Streaming the
 * fleet"), a `WatchFeed` implementing this same interface replaces
 * RefreshFeed in `ControlSource`'s constructor; no view changes.
 */
import type { Client as Rpc } from "@connectrpc/connect";
import type { Client, Command, ControlService, Incident, PendingClaim, Session } from "../../protos/gen/rvbox/v1/control_pb.js";

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
