/**
 * DataSource over a live server's control API (ConnectRPC, bearer token).
 *
 *   fleet + command lists   a FleetFeed (fleet-feed.ts): the WatchFleet server
 *                           stream, or one internal refresher against servers
 *                           that do not have it
 *   output                  FollowOutput server stream per watched command,
 *                           resumed from the next event_seq after a drop
 *   actions                 the control RPCs, each with its own request_id
 */
import { randomUUID } from "node:crypto";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Command } from "../../protos/gen/rvbox/v1/control_pb.js";
import { createControlClient, describeError, isTransient, type ControlClient } from "../../client/control-client.js";
import { claimInfo, commandInfo, incidentInfo, jobInfo, outputItem, sessionInfos, signalKind, type JobInfo } from "../../client/model.js";
import { OutputBuffer, PANE_MAX_LINES } from "../output-buffer.js";
import {
  Emitter,
  type CommandInfo,
  type DataSource,
  type FleetSnapshot,
  type OutputMove,
  type OutputSnapshot,
  type SignalName,
  type SourceStatus,
  type SubmitSpec,
} from "../source.js";
import { WatchFeed, type FleetData, type FleetFeed } from "./fleet-feed.js";

export interface ControlSourceOptions {
  baseUrl: string;
  token: string;
  httpVersion?: "1.1" | "2";
  /** Interval of the fleet refresher used only against servers without WatchFleet (ms). */
  refreshMs?: number;
  /** Replace the RPC client (tests). */
  client?: ControlClient;
  /** Replace the fleet feed (default: a WatchFeed; tests pass a RefreshFeed or their own). */
  feed?: FleetFeed;
  /** Output buffers kept for commands no longer watched. */
  keepOutputs?: number;
  /** Shown in the header (e.g. where a demo fleet keeps its logs). */
  notes?: string[];
}

interface OutputWatch {
  buf: OutputBuffer;
  refs: number;
  abort: AbortController | null;
  /** The pane follows the tail (the window may let old lines go). */
  following: boolean;
  /** Stop pulling once the window reaches this event ("earlier": it ends where the previous one began). */
  stopBefore: number | null;
  /** Wakes a reader that stopped pulling. */
  wake: (() => void) | null;
  /** Bumped by every new window: an older reader ends. */
  gen: number;
}

const TERMINAL_STATES: ReadonlySet<string> = new Set(["succeeded", "failed", "rejected", "cancelled", "interrupted", "expired"]);

/**
 * Events a window over the end starts with: at most 16 chunks of 64 KiB, so
 * the end shows after reading at most 1 MiB, which fills the pane unless the
 * lines are long; ↑ at the top loads more.
 */
export const TAIL_EVENTS = 16;
/** Events an "earlier" step reads at least, and at most (the number aims at half a pane at the window's lines per event). */
export const EARLIER_EVENTS = { min: 8, max: 4096 } as const;

/** How often the jobs tab re-reads the job list, and how many jobs it shows with their clients. */
const JOB_POLL_MS = 1000;
const JOB_DETAIL_MAX = 50;

export class ControlSource implements DataSource {
  private readonly em = new Emitter();
  private readonly rpc: ControlClient;
  private readonly feed: FleetFeed;
  private snapshot: FleetSnapshot;
  private readonly lists = new Map<string | null, readonly CommandInfo[]>();
  private readonly interest = new Map<string | null, number>();
  private readonly outputs = new Map<string, OutputWatch>();
  private closed = false;
  private jobList: readonly JobInfo[] = [];
  private jobWatchers = 0;
  private jobTimer: ReturnType<typeof setTimeout> | null = null;
  readonly readOnly = false;

  constructor(private readonly o: ControlSourceOptions) {
    this.rpc = o.client ?? createControlClient({ baseUrl: o.baseUrl, token: o.token, httpVersion: o.httpVersion });
    this.feed = o.feed ?? new WatchFeed(this.rpc, { refreshMs: o.refreshMs ?? 1000 });
    const status: SourceStatus = { mode: "live", label: o.baseUrl, connected: false, error: null, updatedAt: null, feed: this.feed.label };
    this.snapshot = { sessions: [], claims: [], incidents: [], status, now: Date.now(), notes: o.notes ?? [] };
    this.feed.start({
      fleet: (d) => this.onFleet(d),
      commands: (c, list) => this.onCommands(c, list),
      error: (e) => this.onError(e),
    });
  }

  get version(): number {
    return this.em.version;
  }
  subscribe(l: () => void): () => void {
    return this.em.subscribe(l);
  }

  // ------------------------------------------------------------ feed

  private onFleet(d: FleetData): void {
    const now = Date.now();
    this.snapshot = {
      sessions: sessionInfos(d.clients, d.sessions),
      claims: d.claims.map(claimInfo),
      incidents: d.incidents.map(incidentInfo).sort((a, b) => (b.at ?? 0) - (a.at ?? 0)),
      status: { ...this.snapshot.status, connected: true, error: null, updatedAt: now, feed: this.feed.label },
      now,
      notes: this.o.notes ?? [],
    };
    this.em.changed();
  }

  private onCommands(clientId: string | null, list: Command[]): void {
    this.lists.set(clientId, list.map(commandInfo));
    this.em.changed();
  }

  private onError(err: unknown): void {
    const error = describeError(err, { server: this.o.baseUrl }).message;
    this.snapshot = { ...this.snapshot, status: { ...this.snapshot.status, connected: false, error, feed: this.feed.label }, now: Date.now() };
    this.em.changed();
  }

  fleet(): FleetSnapshot {
    return this.snapshot;
  }

  commands(clientId: string | null): readonly CommandInfo[] {
    return this.lists.get(clientId) ?? [];
  }

  jobs(): readonly JobInfo[] {
    return this.jobList;
  }

  /**
   * Polled while watched (jobs are not in WatchFleet): the list every
   * JOB_POLL_MS, with the per-client children of the newest JOB_DETAIL_MAX.
   */
  watchJobs(): () => void {
    this.jobWatchers++;
    if (this.jobWatchers === 1) void this.pollJobs();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.jobWatchers--;
      if (this.jobWatchers === 0 && this.jobTimer) {
        clearTimeout(this.jobTimer);
        this.jobTimer = null;
      }
    };
  }

  private async pollJobs(): Promise<void> {
    if (this.closed || this.jobWatchers === 0) return;
    try {
      const list = (await this.rpc.listJobs({ pageSize: JOB_DETAIL_MAX })).jobs;
      const full = await Promise.all(list.map(async (j) => (await this.rpc.getJob({ jobId: j.jobId })).job ?? j));
      this.jobList = full.map(jobInfo);
      this.em.changed();
    } catch (err) {
      this.onError(err);
    }
    if (!this.closed && this.jobWatchers > 0) this.jobTimer = setTimeout(() => void this.pollJobs(), JOB_POLL_MS);
  }

  watchCommands(clientId: string | null): () => void {
    this.interest.set(clientId, (this.interest.get(clientId) ?? 0) + 1);
    this.feed.setInterest(new Set(this.interest.keys()));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.interest.get(clientId) ?? 1) - 1;
      if (n <= 0) this.interest.delete(clientId);
      else this.interest.set(clientId, n);
      this.feed.setInterest(new Set(this.interest.keys()));
    };
  }

  /** Patch a command everywhere it is listed (a lifecycle event or `finished` arrived on its stream). */
  private patchCommand(c: CommandInfo): void {
    for (const [k, list] of this.lists) {
      const i = list.findIndex((x) => x.uuid === c.uuid);
      if (i >= 0) this.lists.set(k, [...list.slice(0, i), c, ...list.slice(i + 1)]);
    }
  }

  // ------------------------------------------------------------ output

  output(uuid: string): OutputSnapshot {
    const w = this.outputs.get(uuid);
    const buf = w?.buf ?? new OutputBuffer(uuid);
    const s = buf.snapshot();
    if (s.command) return s;
    const listed = [...this.lists.values()].flat().find((c) => c.uuid === uuid) ?? null;
    return { ...s, command: listed };
  }

  /**
   * Output is read in windows bounded by the pane's limits (PANE_MAX_LINES,
   * PANE_MAX_TEXT). A command opens at its end: the stream starts TAIL_EVENTS
   * before the last stored event, so a finished 100 MB command shows its end
   * after reading at most a few MiB. `moveOutput` loads other parts; while
   * the pane does not follow the tail, a full window stops pulling the
   * stream (its iterator is not advanced, so HTTP/2 flow control holds the
   * server back) instead of letting go of lines the operator is reading.
   */
  watchOutput(uuid: string): () => void {
    let w = this.outputs.get(uuid);
    if (!w) {
      w = { buf: new OutputBuffer(uuid, undefined, { reloadable: true }), refs: 0, abort: null, following: true, stopBefore: null, wake: null, gen: 0 };
      this.outputs.set(uuid, w);
      void this.openAtEnd(w);
    } else {
      // A pane opens following the tail.
      w.following = true;
      if (w.stopBefore === null) w.buf.trimAllowance = Number.POSITIVE_INFINITY;
      if (!w.abort && !w.buf.finished) this.stream(w);
    }
    // Most recently used last (for trimming).
    this.outputs.delete(uuid);
    this.outputs.set(uuid, w);
    w.refs++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      w.refs--;
      if (w.refs === 0) {
        this.stop(w);
        this.trimOutputs();
      }
    };
  }

  private stop(w: OutputWatch): void {
    w.gen++;
    w.abort?.abort();
    w.abort = null;
    w.wake?.();
    w.wake = null;
  }

  /** Start a window over the last events (once the command's stored count is known). */
  private async openAtEnd(w: OutputWatch): Promise<void> {
    const gen = w.gen;
    const c = await this.loadCommand(w);
    if (w.gen !== gen || w.refs === 0 || this.closed) return;
    const through = c?.storedThrough ?? 0;
    this.newWindow(w, { startSeq: Math.max(1, through - TAIL_EVENTS + 1), following: true, stopBefore: null });
  }

  private newWindow(w: OutputWatch, o: { startSeq: number; following: boolean; stopBefore: number | null }): void {
    this.stop(w);
    const old = w.buf;
    const buf = new OutputBuffer(old.uuid, undefined, { startSeq: o.startSeq, reloadable: true });
    buf.command = old.command;
    w.buf = buf;
    w.following = o.following;
    w.stopBefore = o.stopBefore;
    buf.trimAllowance = o.following || o.stopBefore !== null ? Number.POSITIVE_INFINITY : 0;
    this.em.changed();
    if (w.refs > 0) this.stream(w);
  }

  moveOutput(uuid: string, move: OutputMove): void {
    const w = this.outputs.get(uuid);
    if (!w || w.refs === 0) return;
    const b = w.buf;
    switch (move) {
      case "end": {
        // Already at the end, or reading close to it (a reader paused there included: following
        // resumes it): just follow; otherwise a new window over the last events.
        const through = b.command?.storedThrough ?? 0;
        const near = b.finished || (w.stopBefore === null && w.abort !== null && b.next + TAIL_EVENTS > through);
        if (near) return this.followOutput(uuid, true);
        return void this.openAtEnd(w);
      }
      case "start":
        if (b.firstSeq <= 1) return;
        return this.newWindow(w, { startSeq: 1, following: false, stopBefore: null });
      case "earlier": {
        const first = b.firstSeq;
        if (first <= 1) return;
        // As many events as would fill half the pane at this window's lines per event.
        const events = Math.max(1, b.next - first);
        const perLine = events / Math.max(1, b.held.lines);
        const n = Math.round(Math.min(EARLIER_EVENTS.max, Math.max(EARLIER_EVENTS.min, (PANE_MAX_LINES / 2) * perLine)));
        return this.newWindow(w, { startSeq: Math.max(1, first - n), following: true, stopBefore: first });
      }
      case "later":
        if (!b.paused) return;
        // Read on for half a pane; the window lets that much go from its front.
        w.stopBefore = null;
        b.trimAllowance = w.following ? Number.POSITIVE_INFINITY : Math.max(b.trimAllowance, 0) + Math.floor(PANE_MAX_LINES / 2);
        return this.resume(w);
    }
  }

  followOutput(uuid: string, following: boolean): void {
    const w = this.outputs.get(uuid);
    if (!w || w.following === following) return;
    w.following = following;
    if (w.stopBefore !== null) return;
    if (following) {
      w.buf.trimAllowance = Number.POSITIVE_INFINITY;
      this.resume(w);
    } else if (w.buf.trimAllowance === Number.POSITIVE_INFINITY) w.buf.trimAllowance = 0;
  }

  private resume(w: OutputWatch): void {
    const wake = w.wake;
    w.wake = null;
    wake?.();
  }

  /** The reader must stop pulling: at the end it was asked for, or full while the pane is not following. */
  private mustWait(w: OutputWatch): boolean {
    return (w.stopBefore !== null && w.buf.next >= w.stopBefore) || w.buf.full;
  }

  private trimOutputs(): void {
    const keep = this.o.keepOutputs ?? 8;
    for (const [uuid, w] of this.outputs) {
      // A pane closed with much output lets its lines go (reopening reads the end again, which is cheap).
      if (w.refs === 0 && (w.buf.held.lines > 2000 || w.buf.held.text > 256 * 1024)) this.outputs.delete(uuid);
    }
    for (const [uuid, w] of this.outputs) {
      if (this.outputs.size <= keep) break;
      if (w.refs === 0) this.outputs.delete(uuid);
    }
  }

  private async loadCommand(w: OutputWatch): Promise<CommandInfo | null> {
    try {
      const r = await this.rpc.getCommand({ issueUuid: w.buf.uuid });
      if (r.command) {
        const c = commandInfo(r.command);
        if (!w.buf.command) {
          w.buf.command = c;
          w.buf.touch();
          this.em.changed();
        }
        return c;
      }
    } catch (err) {
      if (ConnectError.from(err).code === ConnectCode.NotFound) {
        w.buf.error = `no command ${w.buf.uuid}`;
        w.buf.touch();
        this.em.changed();
        return null;
      }
    }
    return w.buf.command;
  }

  private stream(w: OutputWatch): void {
    const abort = new AbortController();
    w.abort = abort;
    const gen = w.gen;
    const live = (): boolean => !abort.signal.aborted && !this.closed && w.gen === gen;
    const run = async (): Promise<void> => {
      let delay = 250;
      while (live()) {
        const buf = w.buf;
        try {
          for await (const m of this.rpc.followOutput({ issueUuid: buf.uuid, fromEventSeq: BigInt(buf.next), follow: true }, { signal: abort.signal })) {
            delay = 250;
            if (buf.error) buf.error = null;
            if (m.item.case === "finished") {
              const c = commandInfo(m.item.value);
              buf.command = c;
              buf.finished = true;
              this.patchCommand(c);
            } else {
              const it = outputItem(m);
              if (!it) continue;
              buf.add(it);
              // A window over earlier events replays old transitions: a terminal state never changes back.
              if (it.kind === "lifecycle" && buf.command && !TERMINAL_STATES.has(buf.command.state)) {
                const c = { ...buf.command, state: it.state, revision: Math.max(buf.command.revision, it.revision) };
                if (it.exitCode !== null) c.exitCode = it.exitCode;
                if (it.signalName) c.signalName = it.signalName;
                buf.command = c;
                this.patchCommand(c);
              }
            }
            buf.touch();
            this.em.changed();
            // Back-pressure: while the window must not take more, do not advance the iterator.
            while (live() && !buf.finished && this.mustWait(w)) {
              if (!buf.paused) {
                buf.paused = true;
                buf.touch();
                this.em.changed();
              }
              await new Promise<void>((r) => (w.wake = r));
            }
            if (!live()) break;
            if (buf.paused) {
              buf.paused = false;
              buf.touch();
              this.em.changed();
            }
          }
          if (buf.finished || !live()) break;
        } catch (err) {
          if (!live()) break;
          buf.error = describeError(err, { server: this.o.baseUrl }).message;
          buf.touch();
          this.em.changed();
          if (!isTransient(err)) break;
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      }
      if (w.abort === abort) w.abort = null;
    };
    void run();
  }

  // ------------------------------------------------------------ actions

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      const r = await fn();
      this.feed.poke();
      return r;
    } catch (err) {
      throw describeError(err, { server: this.o.baseUrl, what });
    }
  }

  async authorize(clientId: string, instanceId: string): Promise<string> {
    const r = await this.call(`authorize ${clientId}`, () => this.rpc.authorizeInstance({ clientId, instanceId, requestId: randomUUID() }));
    const until = r.expiryTime ? new Date(Number(r.expiryTime.seconds) * 1000).toISOString().slice(11, 19) : "?";
    return `authorized instance ${instanceId} for ${clientId} once, until ${until}`;
  }

  async dismissClaim(clientId: string): Promise<string> {
    const r = await this.call(`dismiss claim ${clientId}`, () => this.rpc.dismissClaim({ clientId, requestId: randomUUID() }));
    return `dismissed the claim of instance ${r.instanceId} for ${clientId}`;
  }

  async ackIncident(id: string): Promise<void> {
    await this.call(`incident ${id}`, () => this.rpc.acknowledgeIncident({ incidentId: id, requestId: randomUUID() }));
  }

  async submit(spec: SubmitSpec): Promise<string> {
    const program =
      spec.program.kind === "shell"
        ? { case: "shell" as const, value: { shell: spec.program.shell === "bash" ? ShellType.BASH : ShellType.SH, commandLine: spec.program.line } }
        : { case: "argv" as const, value: { argv: spec.program.argv } };
    const r = await this.call(`submit to ${spec.clientId}`, () =>
      this.rpc.submitCommand({
        clientId: spec.clientId,
        program,
        stdinOpen: spec.stdinOpen ?? false,
        cwd: spec.cwd ?? "",
        environment: spec.env ?? [],
        timeoutMs: BigInt(spec.timeoutMs ?? 0),
        issueUuid: randomUUID(),
        requestId: randomUUID(),
      }),
    );
    return r.command!.issueUuid;
  }

  async cancelJob(jobId: string): Promise<string> {
    const r = await this.call(`job ${jobId}`, () => this.rpc.cancelJob({ jobId, requestId: randomUUID() }));
    if (this.jobWatchers > 0) void this.pollJobs();
    const refused = r.refused.length > 0 ? `; refused: ${r.refused.join("; ")}` : "";
    return `job ${jobId}: ${r.notStarted} not started, ${r.cancelledRunning} running cancelled${refused}`;
  }

  async signal(uuid: string, signal: SignalName): Promise<number> {
    const r = await this.call(`command ${uuid}`, () => this.rpc.signalCommand({ issueUuid: uuid, signal: signalKind(signal), requestId: randomUUID() }));
    return Number(r.revision);
  }

  async writeStdin(uuid: string, text: string, appendNewline: boolean): Promise<void> {
    await this.call(`stdin of ${uuid}`, () =>
      this.rpc.writeStdin({ issueUuid: uuid, data: new TextEncoder().encode(text), appendNewline, requestId: randomUUID() }),
    );
  }

  async closeStdin(uuid: string): Promise<void> {
    await this.call(`stdin of ${uuid}`, () => this.rpc.closeStdin({ issueUuid: uuid, requestId: randomUUID() }));
  }

  close(): void {
    this.closed = true;
    if (this.jobTimer) clearTimeout(this.jobTimer);
    this.feed.stop();
    for (const w of this.outputs.values()) w.abort?.abort();
  }
}
