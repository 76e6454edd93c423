/**
 * What the TUI renders from: a DataSource. Views never call the control API
 * (or the simulator) themselves; they read the source's current state and
 * re-render when it tells them something changed (`subscribe`). A source
 * decides how it learns about changes (a watch stream, a single refresher,
 * a recorded timeline); views cannot tell and never poll.
 *
 * Three implementations: sources/control-source.ts (a live server),
 * sim/tui-source.ts (a recorded simulated world with a timeline cursor; it
 * lives with the simulator and is injected by shells/operator/tui-open.ts),
 * sources/fake-source.ts (tests).
 */
import type { ClaimInfo, CommandInfo, IncidentInfo, JobInfo, OutputItem, SessionInfo, SignalName } from "../client/model.js";

export type {
  ClaimInfo,
  CommandInfo,
  IncidentInfo,
  JobInfo,
  Lifecycle,
  LinkState,
  OutputItem,
  SessionInfo,
  SignalName,
  StreamName,
  Usage,
} from "../client/model.js";

export interface SourceStatus {
  mode: "live" | "sim" | "fake";
  /** Where the data comes from: a server URL, "sim seed 42", ... */
  label: string;
  /** The last refresh (or stream) worked. */
  connected: boolean;
  error: string | null;
  /** When the fleet data was last confirmed (source time). */
  updatedAt: number | null;
  /** How fleet changes arrive: "stream" (WatchFleet), "refresh 1s (server has no WatchFleet)" (fallback refresher), "timeline". */
  feed: string;
}

export interface FleetSnapshot {
  sessions: readonly SessionInfo[];
  claims: readonly ClaimInfo[];
  incidents: readonly IncidentInfo[];
  status: SourceStatus;
  /** "Now" for relative times: wall clock (live) or the cursor's virtual time (sim). */
  now: number;
  /** Extra header facts (sim: server up/down, failure). */
  notes: readonly string[];
}

/** One display line of a command's output pane. */
export interface OutputLine {
  kind: "stdout" | "stderr" | "marker" | "event" | "viewer";
  text: string;
}

export interface OutputSnapshot {
  uuid: string;
  /** Display lines, oldest first (bounded: see `elided`). */
  lines: readonly OutputLine[];
  /**
   * The absolute number of lines[0] in its window: lines the window let go
   * from the front move it up, so a scroll position kept as `offset + index`
   * stays on the same line. A new window starts again at 0 (or -1 with a
   * marker line above it).
   */
  offset: number;
  /** Which part of the output the lines are (absent: all of it, as it arrived). */
  window?: OutputWindowInfo;
  /** Non-output items kept (markers, lifecycle, stdin and signal events; bounded), for tests and detail views. */
  items: readonly OutputItem[];
  /** Truncation, incomplete and gap markers seen. */
  markers: number;
  /** The stream reached the command's end (terminal and everything stored was sent). */
  finished: boolean;
  command: CommandInfo | null;
  error: string | null;
  /** Output the viewer let go of to stay bounded (shown as a viewer marker line). */
  elided: { bytes: number; events: number };
}

export interface OutputWindowInfo {
  /** Events before the first one held (0: the window starts at the first event). */
  before: number;
  /** The reader stopped pulling before the end: its buffer is full (or it reached what it was asked for). */
  paused: boolean;
  /** The buffer is at its bound and may let nothing more go. */
  full: boolean;
  /** The next event the window would read. */
  next: number;
  /** What the buffer holds now, against its bound (PANE_MAX_LINES, PANE_MAX_TEXT). */
  held: { lines: number; text: number };
}

/** What the output pane asks of a source that loads output in windows. */
export type OutputMove =
  /** Jump to the end: a window over the last events, following. */
  | "end"
  /** Load from the first event, up to the bound. */
  | "start"
  /** The view is at the top of the window: load the events before it. */
  | "earlier"
  /** The view is at the bottom of a paused window: read on. */
  | "later";

export interface SubmitSpec {
  clientId: string;
  /** A shell command line (run by sh) or an argv. */
  program: { kind: "shell"; line: string; shell?: "sh" | "bash" } | { kind: "argv"; argv: string[] };
  stdinOpen?: boolean;
  cwd?: string;
  env?: Array<{ name: string; value: string }>;
  timeoutMs?: number;
}

/** The cursor over a recorded simulation (sim mode only). */
export interface TimelineControl {
  /** Frames recorded so far (grows while recording). */
  readonly frames: number;
  /** Index of the frame shown. */
  readonly index: number;
  /** Virtual time (ms since the run's start) of frame i. */
  timeOf(i: number): number;
  readonly recording: boolean;
  readonly playing: boolean;
  /** Total virtual length of the run so far. */
  readonly endTime: number;
  /** The failure, if the seed failed: where and why. */
  readonly failure: { at: number; frame: number; oracle: string; message: string } | null;
  /** Timeline text lines up to the cursor (last `n`, filtered). */
  recentLines(n: number): readonly string[];
  step(frames: number): void;
  seek(frame: number): void;
  /** Jump by virtual time (ms, may be negative). */
  jump(ms: number): void;
  togglePlay(): void;
  readonly filter: { node: string | null; command: string | null };
  setFilter(f: { node?: string | null; command?: string | null }): void;
  /** Node names for the node filter (server, agent-0, ...). */
  readonly nodes: readonly string[];
}

export interface DataSource {
  /** Increases on every change; views subscribe and re-read. */
  readonly version: number;
  subscribe(listener: () => void): () => void;

  fleet(): FleetSnapshot;
  /** Commands of one client (null: all clients), newest first. Empty until watched and loaded. */
  commands(clientId: string | null): readonly CommandInfo[];
  /** Output of one command; empty until watched. */
  output(uuid: string): OutputSnapshot;

  /**
   * Jobs, newest first, each with its per-client children (sources without
   * jobs leave these out: the tab then says there are none).
   */
  jobs?(): readonly JobInfo[];
  /** Keep the job list current while the returned release is not called. */
  watchJobs?(): () => void;
  /** CancelJob (sources with jobs that take actions): what it did, in words. */
  cancelJob?(jobId: string): Promise<string>;
  /** Keep this client's command list current while the returned release is not called. */
  watchCommands(clientId: string | null): () => void;
  /** Stream this command's output while the returned release is not called. */
  watchOutput(uuid: string): () => void;
  /**
   * Sources that read output in bounded windows (ControlSource): move the
   * window. Others hold all they show and have no such call.
   */
  moveOutput?(uuid: string, move: OutputMove): void;
  /** Whether the pane follows the tail: a window may then let old lines go; otherwise its reader stops when full. */
  followOutput?(uuid: string, following: boolean): void;

  authorize(clientId: string, instanceId: string): Promise<string>;
  /** Forget a client's pending claim without authorizing it. */
  dismissClaim(clientId: string): Promise<string>;
  ackIncident(id: string): Promise<void>;
  /** Returns the new command's id. */
  submit(spec: SubmitSpec): Promise<string>;
  /** Returns the revision the request got. */
  signal(uuid: string, signal: SignalName): Promise<number>;
  writeStdin(uuid: string, text: string, appendNewline: boolean): Promise<void>;
  closeStdin(uuid: string): Promise<void>;

  /** Present in sim mode only. */
  readonly timeline?: TimelineControl;
  /** Actions are refused (sim replay). */
  readonly readOnly: boolean;
  close(): void;
}

/** Listener bookkeeping shared by the sources: changes are coalesced into one notification per microtask. */
export class Emitter {
  version = 0;
  private readonly listeners = new Set<() => void>();
  private scheduled = false;

  subscribe = (l: () => void): (() => void) => {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  };

  changed(): void {
    this.version++;
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      for (const l of [...this.listeners]) l();
    });
  }
}

export const EMPTY_OUTPUT = (uuid: string): OutputSnapshot => ({
  uuid,
  lines: [],
  offset: 0,
  items: [],
  markers: 0,
  finished: false,
  command: null,
  error: null,
  elided: { bytes: 0, events: 0 },
});

export class ReadOnlyError extends Error {
  constructor() {
    super("read-only: this is a simulation replay");
  }
}
