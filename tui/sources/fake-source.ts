/**
 * A deterministic, controllable DataSource for tests: fixed clock, data set
 * by the test, every action recorded in `calls` and applied to the data the
 * way a server would (authorize consumes the claim, ack marks the incident,
 * submit adds a queued command, a signal bumps the revision).
 */
import type { JobInfo } from "../../client/model.js";
import { OutputBuffer } from "../output-buffer.js";
import {
  EMPTY_OUTPUT,
  Emitter,
  ReadOnlyError,
  type ClaimInfo,
  type CommandInfo,
  type DataSource,
  type FleetSnapshot,
  type IncidentInfo,
  type OutputItem,
  type OutputSnapshot,
  type SessionInfo,
  type SignalName,
  type SourceStatus,
  type SubmitSpec,
  type TimelineControl,
} from "../source.js";

export const FAKE_NOW = Date.UTC(2025, 0, 15, 12, 0, 0);

export type FakeCall =
  | { op: "authorize"; clientId: string; instanceId: string }
  | { op: "dismiss_claim"; clientId: string }
  | { op: "ack"; id: string }
  | { op: "submit"; spec: SubmitSpec }
  | { op: "signal"; uuid: string; signal: SignalName }
  | { op: "stdin"; uuid: string; text: string; appendNewline: boolean }
  | { op: "close_stdin"; uuid: string }
  | { op: "cancel_job"; jobId: string };

export function fakeSession(i: number, over: Partial<SessionInfo> = {}): SessionInfo {
  const id = over.clientId ?? `host-${String(i).padStart(4, "0")}`;
  return {
    key: over.key ?? id,
    clientId: id,
    instanceId: `inst-${((i * 2654435761) >>> 0).toString(16).padStart(8, "0")}`,
    generation: 1 + (i % 7),
    link: i % 10 === 3 ? "offline" : "connected",
    detail: i % 10 === 3 ? "" : "ready",
    lastActivity: FAKE_NOW - (i % 60) * 1000,
    running: i % 4,
    queued: i % 3,
    maxRunning: 4,
    maxQueued: 16,
    active: (i % 4) + (i % 3),
    window: { used: (i % 8) * 128 * 1024, limit: 8 * 1024 * 1024 },
    budget: { used: (i % 5) * 64 * 1024 * 1024, limit: 512 * 1024 * 1024 },
    authorizedInstance: null,
    authorizationExpiry: null,
    kind: "agent",
    ...over,
  };
}

export function fakeCommand(clientId: string, i: number, over: Partial<CommandInfo> = {}): CommandInfo {
  return {
    uuid: `job${i}-${clientId}`,
    clientId,
    state: "running",
    revision: 1,
    exitCode: null,
    signalName: "",
    reason: "",
    terminalSource: "",
    createdAt: FAKE_NOW - (100 - i) * 1000,
    queueExpiry: FAKE_NOW + 86_400_000,
    startedAt: FAKE_NOW - (100 - i) * 1000 + 200,
    endedAt: null,
    durationMs: null,
    program: `sh: echo job ${i}`,
    cwd: "",
    stdinOpen: false,
    timeoutMs: 0,
    storedThrough: 0,
    retainedBytes: 0,
    retentionMarkers: 0,
    attempts: 1,
    stdinAckedThrough: 0,
    stdinCloseRequested: false,
    ...over,
  };
}

export interface FakeData {
  sessions?: SessionInfo[];
  commands?: CommandInfo[];
  claims?: ClaimInfo[];
  incidents?: IncidentInfo[];
  jobs?: JobInfo[];
  status?: Partial<SourceStatus>;
  notes?: string[];
}

export class FakeSource implements DataSource {
  private readonly em = new Emitter();
  sessions: SessionInfo[];
  commandList: CommandInfo[];
  claims: ClaimInfo[];
  incidents: IncidentInfo[];
  jobList: JobInfo[];
  /** Jobs tab watchers (tests check the view releases its watch). */
  watchingJobs = 0;
  status: SourceStatus;
  notes: string[];
  readonly outputs = new Map<string, OutputBuffer>();
  readonly calls: FakeCall[] = [];
  /** Currently watched (for tests that check views release what they watch). */
  readonly watchingCommands = new Map<string, number>();
  readonly watchingOutput = new Map<string, number>();
  readOnly = false;
  /** Make the next action fail with this message. */
  failNext: string | null = null;
  timeline?: TimelineControl;
  private submitSeq = 0;

  constructor(d: FakeData = {}) {
    this.sessions = d.sessions ?? [];
    this.commandList = d.commands ?? [];
    this.claims = d.claims ?? [];
    this.incidents = d.incidents ?? [];
    this.jobList = d.jobs ?? [];
    this.status = { mode: "fake", label: "fake fleet", connected: true, error: null, updatedAt: FAKE_NOW, feed: "test", ...d.status };
    this.notes = d.notes ?? [];
  }

  get version(): number {
    return this.em.version;
  }

  jobs(): readonly JobInfo[] {
    return this.jobList;
  }

  watchJobs(): () => void {
    this.watchingJobs++;
    return () => {
      this.watchingJobs--;
    };
  }
  subscribe(l: () => void): () => void {
    return this.em.subscribe(l);
  }
  /** Tell the views something changed (after mutating fields directly). */
  changed(): void {
    this.em.changed();
  }

  fleet(): FleetSnapshot {
    return { sessions: this.sessions, claims: this.claims, incidents: this.incidents, status: this.status, now: FAKE_NOW, notes: this.notes };
  }

  commands(clientId: string | null): readonly CommandInfo[] {
    const list = clientId === null ? this.commandList : this.commandList.filter((c) => c.clientId === clientId);
    return [...list].sort((a, b) => (b.createdAt ?? 0) - (a.createdAt ?? 0));
  }

  output(uuid: string): OutputSnapshot {
    const command = this.commandList.find((c) => c.uuid === uuid) ?? null;
    const b = this.outputs.get(uuid);
    return { ...(b ? b.snapshot() : EMPTY_OUTPUT(uuid)), command };
  }

  watchCommands(clientId: string | null): () => void {
    const k = clientId ?? "*";
    this.watchingCommands.set(k, (this.watchingCommands.get(k) ?? 0) + 1);
    return () => this.watchingCommands.set(k, this.watchingCommands.get(k)! - 1);
  }

  watchOutput(uuid: string): () => void {
    this.watchingOutput.set(uuid, (this.watchingOutput.get(uuid) ?? 0) + 1);
    return () => this.watchingOutput.set(uuid, this.watchingOutput.get(uuid)! - 1);
  }

  // -------------------------------------------------------------- test controls

  buffer(uuid: string): OutputBuffer {
    let b = this.outputs.get(uuid);
    if (!b) this.outputs.set(uuid, (b = new OutputBuffer(uuid, { maxLines: 2000, maxItems: 2000 })));
    return b;
  }

  pushOutput(uuid: string, ...items: OutputItem[]): void {
    const b = this.buffer(uuid);
    for (const it of items) b.add(it);
    this.changed();
  }

  /** Append stdout text as one output event. */
  pushText(uuid: string, text: string, stream: "stdout" | "stderr" = "stdout"): void {
    const b = this.buffer(uuid);
    const data = new TextEncoder().encode(text);
    b.add({ kind: "output", seq: b.next, stream, offset: b.streamOffset(stream), data });
    this.changed();
  }

  finish(uuid: string, over: Partial<CommandInfo>): void {
    this.update(uuid, over);
    this.buffer(uuid).finished = true;
    this.changed();
  }

  update(uuid: string, over: Partial<CommandInfo>): void {
    this.commandList = this.commandList.map((c) => (c.uuid === uuid ? { ...c, ...over } : c));
    this.changed();
  }

  // -------------------------------------------------------------- actions

  private check(): void {
    if (this.readOnly) throw new ReadOnlyError();
    if (this.failNext !== null) {
      const m = this.failNext;
      this.failNext = null;
      throw new Error(m);
    }
  }

  async authorize(clientId: string, instanceId: string): Promise<string> {
    this.check();
    this.calls.push({ op: "authorize", clientId, instanceId });
    this.claims = this.claims.filter((c) => !(c.clientId === clientId && c.instanceId === instanceId));
    this.sessions = this.sessions.map((s) => (s.clientId === clientId ? { ...s, authorizedInstance: instanceId } : s));
    this.changed();
    return `authorized ${instanceId} for ${clientId} until 12:05:00`;
  }

  async dismissClaim(clientId: string): Promise<string> {
    this.check();
    this.calls.push({ op: "dismiss_claim", clientId });
    const c = this.claims.find((x) => x.clientId === clientId);
    this.claims = this.claims.filter((x) => x.clientId !== clientId);
    this.changed();
    return `dismissed the claim of instance ${c?.instanceId ?? "?"} for ${clientId}`;
  }

  async ackIncident(id: string): Promise<void> {
    this.check();
    this.calls.push({ op: "ack", id });
    this.incidents = this.incidents.map((i) => (i.id === id ? { ...i, acknowledged: true } : i));
    this.changed();
  }

  async submit(spec: SubmitSpec): Promise<string> {
    this.check();
    this.calls.push({ op: "submit", spec });
    const uuid = `new-${++this.submitSeq}`;
    const program = spec.program.kind === "shell" ? `sh: ${spec.program.line}` : `argv: ${spec.program.argv.join(" ")}`;
    this.commandList = [
      ...this.commandList,
      fakeCommand(spec.clientId, 0, { uuid, state: "queued", createdAt: FAKE_NOW + this.submitSeq, program, stdinOpen: spec.stdinOpen ?? false }),
    ];
    this.changed();
    return uuid;
  }

  async cancelJob(jobId: string): Promise<string> {
    this.check();
    this.calls.push({ op: "cancel_job", jobId });
    return `job ${jobId}: cancelled`;
  }

  async signal(uuid: string, signal: SignalName): Promise<number> {
    this.check();
    this.calls.push({ op: "signal", uuid, signal });
    const c = this.commandList.find((x) => x.uuid === uuid);
    const rev = (c?.revision ?? 0) + 1;
    this.update(uuid, { revision: rev });
    return rev;
  }

  async writeStdin(uuid: string, text: string, appendNewline: boolean): Promise<void> {
    this.check();
    this.calls.push({ op: "stdin", uuid, text, appendNewline });
  }

  async closeStdin(uuid: string): Promise<void> {
    this.check();
    this.calls.push({ op: "close_stdin", uuid });
  }

  close(): void {}
}

/** A fleet of `n` sessions with a few commands, a claim and two incidents. */
export function fakeFleet(n: number): FakeSource {
  const sessions = Array.from({ length: n }, (_, i) => fakeSession(i));
  const commands: CommandInfo[] = [];
  for (let i = 0; i < Math.min(n, 3); i++) {
    const id = sessions[i]!.clientId;
    commands.push(
      fakeCommand(id, 1, { state: "succeeded", exitCode: 0, program: "argv: uname -a", storedThrough: 4 }),
      fakeCommand(id, 2, { state: "failed", exitCode: 3, program: "sh: exit 3", storedThrough: 3, revision: 1 }),
      fakeCommand(id, 3, { state: "running", program: "sh: tail -f /var/log/syslog", storedThrough: 40, revision: 2, stdinOpen: true }),
      fakeCommand(id, 4, { state: "cancelled", signalName: "SIGTERM", revision: 2, program: "argv: sleep 600" }),
    );
  }
  return new FakeSource({
    sessions,
    commands,
    claims:
      n > 1
        ? [
            {
              clientId: sessions[1]!.clientId,
              instanceId: "inst-impostor-7f3a",
              currentInstanceId: sessions[1]!.instanceId,
              at: FAKE_NOW - 30_000,
              attempts: 3,
            },
          ]
        : [],
    incidents: [
      {
        id: "inc-1",
        clientId: sessions[0]?.clientId ?? "",
        uuid: "cmd-x",
        kind: "recovery",
        detail: "agent-known command missing at the server; terminated",
        at: FAKE_NOW - 60_000,
        acknowledged: false,
      },
      {
        id: "inc-2",
        clientId: sessions[0]?.clientId ?? "",
        uuid: "",
        kind: "store",
        detail: "journal corruption repaired",
        at: FAKE_NOW - 120_000,
        acknowledged: false,
      },
    ],
  });
}

/** A controllable TimelineControl: frames at 1 s intervals, every call recorded. */
export class FakeTimeline implements TimelineControl {
  index = 0;
  recording = false;
  playing = false;
  filter: { node: string | null; command: string | null } = { node: null, command: null };
  readonly nodes = ["server", "agent-0", "agent-1"];
  readonly calls: string[] = [];
  failure: TimelineControl["failure"] = null;

  constructor(
    private readonly owner: FakeSource,
    readonly frames = 100,
  ) {}

  get endTime(): number {
    return (this.frames - 1) * 1000;
  }
  timeOf(i: number): number {
    return i * 1000;
  }
  recentLines(n: number): readonly string[] {
    const lines = [`[     ${this.index}.000s] server#0         frame ${this.index}${this.filter.node ? ` node=${this.filter.node}` : ""}`];
    return lines.slice(-n);
  }
  step(frames: number): void {
    this.calls.push(`step ${frames}`);
    this.seek(this.index + frames);
  }
  seek(frame: number): void {
    this.calls.push(`seek ${frame}`);
    this.index = Math.max(0, Math.min(frame, this.frames - 1));
    this.owner.changed();
  }
  jump(ms: number): void {
    this.calls.push(`jump ${ms}`);
    this.index = Math.max(0, Math.min(this.index + Math.round(ms / 1000), this.frames - 1));
    this.owner.changed();
  }
  togglePlay(): void {
    this.calls.push("play");
    this.playing = !this.playing;
    this.owner.changed();
  }
  setFilter(f: { node?: string | null; command?: string | null }): void {
    this.calls.push(`filter ${JSON.stringify(f)}`);
    this.filter = { node: f.node !== undefined ? f.node : this.filter.node, command: f.command !== undefined ? f.command : this.filter.command };
    this.owner.changed();
  }
}
