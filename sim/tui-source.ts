/**
 * DataSource over a simulated world (sim/): runs the seed's world (the same
 * swarm, plan and variant as `npm run sim -- run --seed S`), records a frame
 * of the fleet as the operator would see it every `frameMs` of virtual time
 * in which something happened, and exposes a cursor over those frames
 * (TimelineControl) that steps forward and back.
 *
 * Memory stays bounded:
 *   - frames hold the derived views only (sessions, commands, claims,
 *     incidents), and an unchanged row is the same object in every frame
 *     (structural sharing), so a frame costs a few arrays of pointers;
 *   - past `maxFrames` every other frame is dropped and the frame interval
 *     doubles (the failure frame is always kept);
 *   - command output is logged once per event (never per frame) from the
 *     server's durable event table, at most `outputPerCommand` bytes per
 *     command; the rest is counted and shown as a viewer marker;
 *   - timeline text lines are capped at `maxLines`.
 *
 * Actions (authorize, submit, ...) are refused: a replay is read-only.
 */
import { Decompress } from "fzstd";
import { isTerminal } from "../core/dispatch/lifecycle.js";
import { eventKey, isEventRow, rowOf, type EventRow } from "../core/server/store.js";
import type { ServerCommand, ServerJob, ServerState } from "../core/server/server-types.js";
import { viewerElisionText } from "../client/markers.js";
import { commandView, commandViewKey } from "../core/reader/command-view.js";
import { lifecycleName, programSummary, truncationSource, type ByteSpan, type JobInfo, type OutputItem } from "../client/model.js";
import { EPOCH, type AgentHost } from "./hosts.js";
import { SimFailure } from "./oracles.js";
import { planSchedule } from "./schedule.js";
import { drawSwarm, type SwarmOptions } from "./swarm.js";
import { Timeline } from "./timeline.js";
import { VARIANTS } from "./variants.js";
import { World } from "./world.js";
import { decodeRawZstdFrame } from "./zstd-raw.js";
import { OutputBuffer } from "../tui/output-buffer.js";
import {
  EMPTY_OUTPUT,
  Emitter,
  ReadOnlyError,
  type ClaimInfo,
  type CommandInfo,
  type DataSource,
  type FleetSnapshot,
  type IncidentInfo,
  type LinkState,
  type OutputSnapshot,
  type SessionInfo,
  type SourceStatus,
  type TimelineControl,
} from "../tui/source.js";

export interface SimSourceOptions {
  seed: number;
  variant?: string;
  swarmOptions?: SwarmOptions;
  node?: string;
  command?: string;
  /** Smallest virtual time between frames (ms). */
  frameMs?: number;
  maxFrames?: number;
  maxLines?: number;
  outputPerCommand?: number;
  /** Events run per slice while recording in the background. */
  sliceEvents?: number;
  /** Record the whole run in the constructor (tests). */
  sync?: boolean;
  /** Play speed: frames per second. */
  playFps?: number;
}

interface Frame {
  /** Virtual ms since the run's start. */
  t: number;
  /** Timeline lines recorded before this frame. */
  line: number;
  serverUp: boolean;
  sessions: SessionInfo[];
  commands: CommandInfo[];
  claims: ClaimInfo[];
  incidents: IncidentInfo[];
  jobs: JobInfo[];
  /** Retention markers per command at this frame (shared when unchanged). */
  retention: Map<string, ServerCommand["output"]["retention"]>;
}

interface CommandLog {
  items: OutputItem[];
  /** Events read from the server's disk through this sequence. */
  through: number;
  outputBytes: number;
  elidedBytes: number;
  elidedEvents: number;
}

const decoder = (zstd: Uint8Array, size: number): Uint8Array => {
  const raw = decodeRawZstdFrame(zstd);
  if (raw) return raw;
  const chunks: Uint8Array[] = [];
  const d = new Decompress((c) => chunks.push(c));
  d.push(zstd, true);
  const out = new Uint8Array(
    Math.min(
      size,
      chunks.reduce((n, c) => n + c.length, 0),
    ),
  );
  let o = 0;
  for (const c of chunks) {
    out.set(c.subarray(0, out.length - o), o);
    o += c.length;
    if (o >= out.length) break;
  }
  return out;
};

const streamOf = (s: unknown): "stdout" | "stderr" | "unknown" => (s === "stdout" ? "stdout" : s === "stderr" ? "stderr" : "unknown");

/** A stored server event row (core/server/store.ts EventRow) as an OutputItem. */
export function eventRowItem(v: EventRow): OutputItem | null {
  const seq = v.seq;
  switch (v.kind) {
    case "output":
      return { kind: "output", seq, stream: streamOf(v.stream), offset: v.offset, data: decoder(v.zstd, v.originalSize) };
    case "truncation":
      return {
        kind: "truncation",
        seq,
        cause: truncationSource(v.cause),
        events: null,
        ranges: (v.ranges ?? []).map((r) => ({ stream: streamOf(r.stream), offset: r.offset, length: r.length })),
      };
    case "incomplete":
      return { kind: "incomplete", seq, streams: (v.streams ?? []).map(streamOf), reason: v.reason ?? "" };
    case "lifecycle":
      return {
        kind: "lifecycle",
        seq,
        revision: v.revision ?? 0,
        state: lifecycleName(v.state),
        exitCode: v.exitCode ?? null,
        signalName: v.signalName ?? "",
        reason: v.reason ?? "",
        error: v.error?.message ?? "",
      };
    case "stdin_ack":
      return { kind: "stdin_ack", seq, writeSeq: v.writeSeq, closed: v.closed, failure: v.failure ?? "" };
    case "signal_result":
      return { kind: "signal_result", seq, revision: v.revision ?? 0, signal: String(v.signal), delivered: v.delivered, detail: v.detail ?? "" };
    case "script_upload":
      return { kind: "script_upload", seq, receivedBytes: v.receivedBytes, complete: v.complete };
    default:
      return null;
  }
}

export class SimSource implements DataSource, TimelineControl {
  private readonly em = new Emitter();
  readonly readOnly = true;
  readonly timeline: TimelineControl = this;
  private readonly world: World;
  private readonly lines: string[] = [];
  private linesDropped = 0;
  private readonly framesList: Frame[] = [];
  private cursor = 0;
  private frameMs: number;
  private lastFrameAt = -Infinity;
  private lastFrameLine = -1;
  private done = false;
  private fail: { at: number; frame: number; oracle: string; message: string } | null = null;
  private playTimer: NodeJS.Timeout | null = null;
  private recordTimer: NodeJS.Immediate | null = null;
  private readonly logs = new Map<string, CommandLog>();
  private readonly rowCache = new Map<string, { key: string; row: CommandInfo }>();
  private readonly sessionCache = new Map<string, { key: string; row: SessionInfo }>();
  private readonly retentionCache = new Map<string, ServerCommand["output"]["retention"]>();
  private lastServerView: { commands: CommandInfo[]; claims: ClaimInfo[]; incidents: IncidentInfo[]; jobs: JobInfo[] } = {
    commands: [],
    claims: [],
    incidents: [],
    jobs: [],
  };
  private outputCache: { frame: number; uuid: string; snap: OutputSnapshot } | null = null;
  private filt: { node: string | null; command: string | null };
  private readonly maxFrames: number;
  private readonly maxLines: number;
  private readonly outputCap: number;
  readonly nodes: string[] = [];
  readonly label: string;

  constructor(private readonly o: SimSourceOptions) {
    const variant = o.variant ? VARIANTS.find((v) => v.name === o.variant) : null;
    if (o.variant && !variant) throw new Error(`unknown sim variant ${JSON.stringify(o.variant)}; known: ${VARIANTS.map((v) => v.name).join(", ")}`);
    const swarm = drawSwarm(o.seed, o.swarmOptions ?? variant?.swarm ?? {});
    const schedule = planSchedule(o.seed, swarm);
    const tl = new Timeline({}, (line) => {
      if (this.lines.length < this.maxLines) this.lines.push(line);
      else this.linesDropped++;
    });
    this.maxFrames = o.maxFrames ?? 5000;
    this.maxLines = o.maxLines ?? 400_000;
    this.outputCap = o.outputPerCommand ?? 256 * 1024;
    this.frameMs = o.frameMs ?? 10;
    this.filt = { node: o.node ?? null, command: o.command ?? null };
    this.label = `sim seed ${o.seed}${o.variant ? ` variant ${o.variant}` : ""} (${swarm.agents} agents)`;
    this.world = new World(o.seed, swarm, schedule, variant ?? null, tl);
    // A replay stops where a per-step check would (as `sim replay` does).
    this.world.checkEvery = 1;
    try {
      this.world.start();
    } catch (e) {
      this.failed(e);
    }
    this.capture(true);
    if (o.sync) {
      while (!this.done) this.slice(Number.MAX_SAFE_INTEGER);
    } else {
      this.schedule();
    }
  }

  // ------------------------------------------------------------ recording

  /** Record in slices of ~40 ms so keys stay responsive; tell the views at most 4 times a second. */
  private schedule(): void {
    this.recordTimer = setImmediate(() => {
      this.recordTimer = null;
      const end = performance.now() + 40;
      while (!this.done && performance.now() < end) this.slice(this.o.sliceEvents ?? 500);
      const now = performance.now();
      if (this.done || now - this.lastNotify > 250) {
        this.lastNotify = now;
        this.em.changed();
      }
      if (!this.done) this.schedule();
    });
  }
  private lastNotify = 0;

  private slice(budget: number): void {
    const w = this.world;
    try {
      for (let n = 0; n < budget && !this.done; n++) {
        if (w.phase === "done") return this.finish();
        const ev = w.q.pop();
        if (!ev || ev.at > w.endAt) return this.finish();
        ev.run();
        if ((w.steps & 0xfff) === 0) w.net.gc();
        if (w.q.now >= this.lastFrameAt + this.frameMs && this.lines.length + this.linesDropped !== this.lastFrameLine) this.capture(false);
      }
    } catch (e) {
      this.failed(e);
    }
  }

  private finish(): void {
    if (this.done) return;
    try {
      this.world.oracles.checkCoverage();
      this.world.oracles.checkLiveness();
    } catch (e) {
      this.failed(e);
      return;
    }
    this.capture(true);
    this.done = true;
  }

  private failed(e: unknown): void {
    const at = e instanceof SimFailure ? e.at : this.world.q.now;
    const oracle = e instanceof SimFailure ? e.oracle : "sim-crashed";
    const message = e instanceof Error ? e.message : String(e);
    this.lines.push(`FAIL [${oracle}] ${message.split("\n")[0]}`);
    this.capture(true);
    this.fail = { at, frame: this.framesList.length - 1, oracle, message };
    this.done = true;
  }

  private capture(force: boolean): void {
    const w = this.world;
    const now = w.q.now;
    if (!force && now < this.lastFrameAt + this.frameMs) return;
    this.lastFrameAt = now;
    this.lastFrameLine = this.lines.length + this.linesDropped;
    const st = w.server.up ? w.server.state : null;
    if (st) this.lastServerView = this.serverView(st);
    for (const h of w.hosts) if (!this.nodes.includes(h.name)) this.nodes.push(h.name);
    if (!this.nodes.includes("server")) this.nodes.unshift("server");
    const retention = new Map<string, ServerCommand["output"]["retention"]>();
    if (st) {
      for (const c of st.commands.values()) {
        if (c.output.retention.length === 0) continue;
        let r = this.retentionCache.get(c.uuid);
        if (!r || r.length !== c.output.retention.length)
          this.retentionCache.set(c.uuid, (r = c.output.retention.map((m) => ({ ...m, ranges: m.ranges.map((x) => ({ ...x })) }))));
        retention.set(c.uuid, r);
      }
      this.readEvents(st);
    } else {
      const prev = this.framesList[this.framesList.length - 1];
      if (prev) for (const [k, v] of prev.retention) retention.set(k, v);
    }
    this.framesList.push({
      t: now,
      line: this.lines.length,
      serverUp: w.server.up,
      sessions: this.sessionsNow(st),
      commands: this.lastServerView.commands,
      claims: this.lastServerView.claims,
      incidents: this.lastServerView.incidents,
      jobs: this.lastServerView.jobs,
      retention,
    });
    if (this.framesList.length > this.maxFrames) this.thin();
  }

  /** Drop every other frame (never the first, the last or the failure) and double the interval. */
  private thin(): void {
    const keep: Frame[] = [];
    const current = this.framesList[this.cursor];
    this.framesList.forEach((f, i) => {
      if (i === 0 || i === this.framesList.length - 1 || i % 2 === 0 || f === current) keep.push(f);
    });
    this.framesList.length = 0;
    this.framesList.push(...keep);
    this.cursor = current ? Math.max(0, this.framesList.indexOf(current)) : 0;
    this.frameMs *= 2;
    this.outputCache = null;
  }

  private serverView(st: ServerState): { commands: CommandInfo[]; claims: ClaimInfo[]; incidents: IncidentInfo[]; jobs: JobInfo[] } {
    const commands: CommandInfo[] = [];
    for (const c of st.commands.values()) {
      // What the control API would answer: the committed view only (core/reader/command-view.ts).
      const key = commandViewKey(c);
      const cached = this.rowCache.get(c.uuid);
      if (cached && cached.key === key) {
        commands.push(cached.row);
        continue;
      }
      const row: CommandInfo = commandView(c);
      this.rowCache.set(c.uuid, { key, row });
      commands.push(row);
    }
    commands.sort((a, b) => (b.createdAt ?? 0) - (a.createdAt ?? 0) || (a.uuid < b.uuid ? -1 : 1));
    const claims: ClaimInfo[] = [];
    for (const c of st.clients.values()) {
      if (c.pendingClaim)
        claims.push({
          clientId: c.clientId,
          instanceId: c.pendingClaim.instanceId,
          currentInstanceId: c.instanceId,
          at: c.pendingClaim.at,
          attempts: c.pendingClaim.attempts,
        });
    }
    const incidents: IncidentInfo[] = [...st.incidents.values()]
      .map((i) => ({ id: i.id, clientId: i.clientId, uuid: i.uuid, kind: i.kind, detail: i.detail, at: i.at, acknowledged: i.acknowledged }))
      .sort((a, b) => b.at - a.at);
    const jobs = [...st.jobs.values()].map((j) => jobView(st, j)).sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? -1 : 1));
    return { commands, claims, incidents, jobs };
  }

  private sessionsNow(st: ServerState | null): SessionInfo[] {
    const w = this.world;
    const vnow = EPOCH + w.q.now;
    const active = new Map<string, number>();
    if (st)
      for (const uuid of st.active) {
        const c = st.commands.get(uuid);
        if (c && !isTerminal(c.state)) active.set(c.clientId, (active.get(c.clientId) ?? 0) + 1);
      }
    return w.hosts.map((h) => this.sessionRow(h, st, vnow, active));
  }

  private sessionRow(h: AgentHost, st: ServerState | null, vnow: number, active: Map<string, number>): SessionInfo {
    const clientId = `agent-${h.client}`;
    const a = h.up ? h.state : null;
    let link: LinkState = "down";
    let detail = h.retired ? "retired" : h.up ? "" : "crashed";
    let running = 0;
    let queued = 0;
    if (a) {
      const s = a.session;
      switch (s.phase) {
        case "established":
          link = a.reconciled ? "connected" : "reconciling";
          break;
        case "backoff":
          link = "backoff";
          detail = `retry in ${Math.max(0, (s.retryAt - h.now()) / 1000).toFixed(1)}s (attempt ${s.attempt})`;
          break;
        case "connecting":
          link = "connecting";
          break;
        case "registering":
          link = "registering";
          break;
        default:
          link = "offline";
      }
      for (const c of a.commands.values()) {
        if (c.phase === "running" || c.phase === "launching") running++;
        else if (c.phase === "queued" || c.phase === "preparing") queued++;
      }
      if (a.storeIncident) detail = `store incident: ${a.storeIncident}`;
    }
    if (h.partitioned) detail = [detail, "partitioned"].filter(Boolean).join("; ");
    const rec = st?.clients.get(clientId);
    const lastInbound = a ? vnow - (h.now() - a.session.hb.lastInbound) : null;
    const row: SessionInfo = {
      key: h.name,
      clientId,
      instanceId: a?.instanceId ?? this.sessionCache.get(h.name)?.row.instanceId ?? "",
      generation: a?.session.fence?.generation ?? a?.session.maxGeneration ?? 0,
      link,
      detail,
      lastActivity: lastInbound !== null && a?.session.phase !== "idle" ? lastInbound : null,
      running,
      queued,
      maxRunning: h.config.maxRunning,
      maxQueued: h.config.maxQueued,
      active: st ? (active.get(clientId) ?? 0) : null,
      window: a ? { used: a.outbox.sessionPinnedBytes, limit: a.outbox.limits.windowPerSession } : null,
      budget: a ? { used: a.outbox.rawTotal, limit: a.outbox.limits.outputTotal } : null,
      authorizedInstance: rec?.authorization?.instanceId ?? null,
      authorizationExpiry: rec?.authorization?.expiresAt ?? null,
      kind: h.kind,
    };
    const key = JSON.stringify(row);
    const cached = this.sessionCache.get(h.name);
    if (cached && cached.key === key) return cached.row;
    this.sessionCache.set(h.name, { key, row });
    return row;
  }

  /** Log newly durable events of every command from the server's disk (once per event). */
  private readEvents(st: ServerState): void {
    const tables = this.world.server.disk.tables;
    if (!tables.has("event")) return;
    for (const c of st.commands.values()) {
      let log = this.logs.get(c.uuid);
      if (!log) this.logs.set(c.uuid, (log = { items: [], through: 0, outputBytes: 0, elidedBytes: 0, elidedEvents: 0 }));
      for (let seq = log.through + 1; seq <= c.ingest.storedThrough; seq++) {
        const v = rowOf(tables, "event", eventKey(c.uuid, seq));
        log.through = seq;
        if (!v || !isEventRow(v)) continue;
        if (v.kind === "output" && log.outputBytes >= this.outputCap) {
          log.elidedBytes += v.originalSize ?? 0;
          log.elidedEvents++;
          continue;
        }
        const it = eventRowItem(v);
        if (!it) continue;
        if (it.kind === "output") log.outputBytes += it.data.length;
        log.items.push(it);
      }
    }
  }

  // ------------------------------------------------------------ DataSource

  get version(): number {
    return this.em.version;
  }
  subscribe(l: () => void): () => void {
    return this.em.subscribe(l);
  }

  private frame(): Frame {
    return this.framesList[Math.min(this.cursor, this.framesList.length - 1)]!;
  }

  fleet(): FleetSnapshot {
    const f = this.frame();
    const status: SourceStatus = { mode: "sim", label: this.label, connected: true, error: null, updatedAt: EPOCH + f.t, feed: "timeline" };
    const notes = [f.serverUp ? "server up" : "SERVER DOWN"];
    if (this.linesDropped) notes.push(`${this.linesDropped} timeline lines not kept`);
    return { sessions: f.sessions, claims: f.claims, incidents: f.incidents, status, now: EPOCH + f.t, notes };
  }

  jobs(): readonly JobInfo[] {
    return this.frame().jobs;
  }

  watchJobs(): () => void {
    return () => {};
  }

  commands(clientId: string | null): readonly CommandInfo[] {
    const all = this.frame().commands;
    return clientId === null ? all : all.filter((c) => c.clientId === clientId);
  }

  output(uuid: string): OutputSnapshot {
    if (this.outputCache && this.outputCache.frame === this.cursor && this.outputCache.uuid === uuid) return this.outputCache.snap;
    const f = this.frame();
    const cmd = f.commands.find((c) => c.uuid === uuid) ?? null;
    const log = this.logs.get(uuid);
    if (!cmd || !log) return { ...EMPTY_OUTPUT(uuid), command: cmd };
    const through = cmd.storedThrough;
    const markers = [...(f.retention.get(uuid) ?? [])].sort((a, b) => a.firstSeq - b.firstSeq);
    const buf = new OutputBuffer(uuid);
    let mi = 0;
    const emitMarkersUpTo = (seq: number): void => {
      while (mi < markers.length && markers[mi]!.firstSeq <= seq) {
        const m = markers[mi++]!;
        const ranges: ByteSpan[] = m.ranges.map((r) => ({ stream: r.stream, offset: r.offset, length: r.length }));
        buf.add({ kind: "truncation", seq: m.firstSeq, cause: "server-retention", events: { first: m.firstSeq, last: m.lastSeq }, ranges });
      }
    };
    const covered = (seq: number): boolean => markers.some((m) => m.firstSeq <= seq && seq <= m.lastSeq);
    for (const it of log.items) {
      if (it.seq > through) break;
      emitMarkersUpTo(it.seq);
      if (it.kind === "output" && covered(it.seq)) continue;
      buf.add(it);
    }
    emitMarkersUpTo(through);
    buf.command = cmd;
    buf.finished = isTerminalState(cmd.state);
    let snap = buf.snapshot();
    if (log.elidedEvents > 0 && log.through <= through) {
      snap = {
        ...snap,
        lines: [
          ...snap.lines,
          {
            kind: "viewer",
            text: viewerElisionText(log.elidedBytes, log.elidedEvents, uuid).replace(
              "this viewer",
              `the replay (over ${Math.round(this.outputCap / 1024)} KiB)`,
            ),
          },
        ],
      };
    }
    this.outputCache = { frame: this.cursor, uuid, snap };
    return snap;
  }

  watchCommands(): () => void {
    return () => {};
  }
  watchOutput(): () => void {
    return () => {};
  }

  async authorize(): Promise<string> {
    throw new ReadOnlyError();
  }
  async dismissClaim(): Promise<string> {
    throw new ReadOnlyError();
  }
  async ackIncident(): Promise<void> {
    throw new ReadOnlyError();
  }
  async submit(): Promise<string> {
    throw new ReadOnlyError();
  }
  async signal(): Promise<number> {
    throw new ReadOnlyError();
  }
  async writeStdin(): Promise<void> {
    throw new ReadOnlyError();
  }
  async closeStdin(): Promise<void> {
    throw new ReadOnlyError();
  }

  close(): void {
    if (this.playTimer) clearInterval(this.playTimer);
    if (this.recordTimer) clearImmediate(this.recordTimer);
    this.playTimer = null;
    this.recordTimer = null;
  }

  // ------------------------------------------------------------ TimelineControl

  get frames(): number {
    return this.framesList.length;
  }
  get index(): number {
    return Math.min(this.cursor, this.framesList.length - 1);
  }
  timeOf(i: number): number {
    return this.framesList[Math.max(0, Math.min(i, this.framesList.length - 1))]?.t ?? 0;
  }
  get recording(): boolean {
    return !this.done;
  }
  get playing(): boolean {
    return this.playTimer !== null;
  }
  get endTime(): number {
    return this.framesList[this.framesList.length - 1]?.t ?? 0;
  }
  get failure(): { at: number; frame: number; oracle: string; message: string } | null {
    return this.fail;
  }
  get filter(): { node: string | null; command: string | null } {
    return this.filt;
  }

  setFilter(f: { node?: string | null; command?: string | null }): void {
    this.filt = { node: f.node !== undefined ? f.node : this.filt.node, command: f.command !== undefined ? f.command : this.filt.command };
    this.em.changed();
  }

  private matches(line: string): boolean {
    const { node, command } = this.filt;
    if (command && !line.includes(command)) return false;
    if (node) {
      const label = line.slice(14).split(" ")[0] ?? "";
      if (label !== node && !label.startsWith(`${node}#`) && !line.startsWith("FAIL")) return false;
    }
    return true;
  }

  recentLines(n: number): readonly string[] {
    const end = this.frame().line;
    const out: string[] = [];
    for (let i = end - 1, scanned = 0; i >= 0 && out.length < n && scanned < 100_000; i--, scanned++) {
      const l = this.lines[i]!;
      if (this.matches(l)) out.push(l);
    }
    return out.reverse();
  }

  /** All timeline lines up to the cursor that pass the filter (tests, export). */
  linesUpToCursor(): string[] {
    return this.lines.slice(0, this.frame().line).filter((l) => this.matches(l));
  }

  seek(frame: number): void {
    const next = Math.max(0, Math.min(frame, this.framesList.length - 1));
    if (next === this.cursor) return;
    this.cursor = next;
    this.em.changed();
  }

  step(frames: number): void {
    this.seek(this.index + frames);
  }

  jump(ms: number): void {
    const target = this.timeOf(this.index) + ms;
    let i = this.index;
    if (ms > 0) while (i < this.framesList.length - 1 && this.framesList[i]!.t < target) i++;
    else while (i > 0 && this.framesList[i]!.t > target) i--;
    this.seek(i);
  }

  togglePlay(): void {
    if (this.playTimer) {
      clearInterval(this.playTimer);
      this.playTimer = null;
    } else {
      this.playTimer = setInterval(
        () => {
          if (this.index >= this.framesList.length - 1 && !this.recording) {
            clearInterval(this.playTimer!);
            this.playTimer = null;
          } else this.step(1);
          this.em.changed();
        },
        1000 / (this.o.playFps ?? 10),
      );
    }
    this.em.changed();
  }
}

function isTerminalState(s: string): boolean {
  return s === "succeeded" || s === "failed" || s === "rejected" || s === "cancelled" || s === "interrupted" || s === "expired";
}

/** What GetJob would answer (the job's committed view; a started child shows its command's committed state). */
function jobView(st: ServerState, j: ServerJob): JobInfo {
  const sum = { targets: j.children.length, pending: 0, inFlight: 0, succeeded: 0, failed: 0, cancelled: 0 };
  const children = j.committed.children.map((c, i) => {
    const base = j.children[i]!;
    const cmd = c.phase === "started" ? st.commands.get(base.uuid) : undefined;
    if (c.phase === "pending") sum.pending++;
    else if (c.phase === "started") sum.inFlight++;
    else if (c.phase === "cancelled") sum.cancelled++;
    else if (c.phase === "done" && lifecycleName(c.state) === "succeeded") sum.succeeded++;
    else sum.failed++;
    const startedAt = (cmd ? cmd.committed.startedTime : c.startedTime) || null;
    const endedAt = c.endedTime || null;
    return {
      client: base.clientId,
      uuid: base.uuid,
      phase: c.phase,
      state: c.phase === "pending" ? ("pending" as const) : lifecycleName(cmd ? cmd.committed.state : c.state),
      exitCode: c.exitCode,
      reason: c.reason,
      startedAt,
      endedAt,
      durationMs: startedAt !== null && endedAt !== null ? Math.max(0, endedAt - startedAt) : null,
    };
  });
  return {
    id: j.id,
    createdAt: j.createdAt,
    program: programSummary(j.spec),
    maxConcurrency: j.concurrencyText,
    maxConcurrencyResolved: j.maxConcurrency,
    maxErrors: j.errorsText,
    maxErrorsResolved: j.maxErrors,
    stoppedReason: j.committed.stopped,
    endedAt: j.committed.endedAt || null,
    summary: sum,
    children,
  };
}
