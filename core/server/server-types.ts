// The server node's state, inputs and effects: the contract between the pure
// server core and whoever runs it (shells/server or sim/).

import type { LazyHeap } from "../lazy-heap.js";
import type { CommandLifecycle, ExecutionSpec, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { CommonEffect } from "../effects.js";
import type { Heartbeat } from "../session/heartbeat.js";
import type { RngState } from "../rng.js";
import type { DurableGate } from "../step-context.js";
import type { Version, VersionRange } from "../codec/version.js";
import type { CoreError } from "../errors.js";
import type { CorePorts } from "../ports.js";
import type { StreamName } from "../window/outbox.js";

export interface ServerLimits {
  outputPerCommand: number;
  outputPerClient: number;
  segmentBytes: number;
  ingressHigh: number;
  maxInflightDispatches: number;
  maxActivePerClient: number;
  /** Targets one ReconcileRequest names at most; capped at MAX_RECONCILE_TARGETS so it fits an envelope. */
  reconcileTargets: number;
  redeliveryMs: number;
  authorizationTtlMs: number;
  stdinWindow: number;
  stdinQueue: number;
  scriptWindow: number;
  /**
   * Reserved metadata tier (architecture.md): bytes charged for the command
   * records the server keeps. Settled terminal history is pruned oldest first
   * to stay inside it; new submits are refused once active commands alone
   * would take more than three quarters of it.
   */
  metadataBudget: number;
  /** Terminal commands older than this (ms after they ended) are pruned; 0: no age limit. */
  historyMs: number;
  /** Compact records of pruned commands kept (oldest forgotten first). */
  prunedMax: number;
  /**
   * The store keeps the history (history.ts): pruning a command only drops it
   * from memory, its rows stay (the store's own retention deletes them by
   * historyMs), and a restore holds no ended command but as a ledger entry.
   * False: pruning deletes the rows (the store holds only what memory does).
   */
  historyInStore: boolean;
  /** With historyInStore: ended commands held in memory at most (the newest). */
  historyHeld: number;
  /** Client records kept; a hello naming a new client id past it is refused (CODE_CAPACITY). */
  maxClients: number;
  /** Audit entries kept (audit.ts); past it the oldest go first and are counted as dropped. */
  auditMax: number;
  /** FollowOutput streams open at once (the shell's control API enforces it; the core never reads it). */
  maxFollowStreams: number;
  /** FollowOutput streams open at once per operator identity. */
  maxFollowStreamsPerIdentity: number;
  /** Of maxFollowStreams, how many only admins may use (0: none reserved). */
  followStreamsAdminReserve: number;
  /** Refusal entries kept, apart from the audit entries (audit.ts); past it the oldest go first and are counted as dropped. */
  auditRefusalMax: number;
}

export interface ServerConfig {
  protocol: VersionRange;
  limits: ServerLimits;
}

/** Who made a command terminal: its agent's events, or the server itself. */
export type TerminalSource = "agent" | "server" | "";

export interface StdinOp {
  seq: number;
  data: Uint8Array;
  appendNewline: boolean;
  close: boolean;
  requestId: string;
  /** Protocol 1.1, a terminal's command only: its new window size, applied before data. Absent on every other write. */
  resize?: WindowSize;
}

/** A terminal's window size in character cells. */
export interface WindowSize {
  rows: number;
  cols: number;
}

export interface PendingSignal {
  revision: number;
  signal: SignalKind;
  requestId: string;
  /** Generation of the session it was sent on (0: not sent on the current one). */
  sentOn: number;
}

export interface Segment {
  firstSeq: number;
  lastSeq: number;
  bytes: number;
  ranges: Array<{ stream: StreamName; offset: number; length: number }>;
}

export interface RetentionMarker {
  firstSeq: number;
  lastSeq: number;
  ranges: Array<{ stream: StreamName; offset: number; length: number }>;
  /** Wall clock (shown to readers). */
  at: number;
}

/**
 * A command as the server holds it. Fields that one concern module writes are
 * grouped in a sub-struct named after it (the module that owns the group is
 * named on each); the rest are the record's identity, its lifecycle and the
 * times and charges several modules read. The stored record is flat and does
 * not follow this grouping: store.ts `COMMAND_FIELDS` maps every field of
 * every group to its column of `CommandRow`, so regrouping changes no stored
 * byte.
 */
export interface ServerCommand {
  uuid: string;
  clientId: string;
  /** Immutable request SHA-256, hex. */
  hash: string;
  revision: number;
  spec: ExecutionSpec;
  /** Wall clock (issue_time, shown to readers). */
  createdAt: number;
  /**
   * What readers (the control API, the TUI) may show: the outward state as of
   * the last durable persist. `state` may be ahead of it by one group commit;
   * a crash in that window would take the newer state back, so nobody outside
   * the core may have seen it.
   */
  committed: CommittedView;
  /** Deadline clock; sent and shown converted to wall time. */
  queueExpiry: number;
  /** Written only by commands.ts `setState`. */
  state: CommandLifecycle;
  dispatch: CommandDispatch;
  ingest: CommandIngest;
  exit: CommandExit;
  /**
   * Stdin writes (R-S1), owned by stdin.ts (ingest.ts releases acknowledged
   * ones, setState clears the queue at the end). Each write taken since stdin
   * rows exist is stored as its own `stdin` row, written once and deleted
   * when acknowledged; writes through `inlineThrough` came from a record
   * written before that (its queue held their bytes) and stay in the record
   * until acknowledged.
   */
  stdin: {
    nextSeq: number;
    ackedThrough: number;
    sentThrough: number;
    queue: StdinOp[];
    queuedBytes: number;
    closeRequested: boolean;
    inlineThrough: number;
  };
  /** Signals not yet answered, owned by signals.ts (ingest.ts and reconcile.ts drop answered ones). */
  signals: PendingSignal[];
  script: CommandScript;
  output: CommandOutput;
  /** request_id -> revision (R-S5); bounded by the number of requests (commands.ts `remember`). */
  requests: Record<string, number>;
  /** Deadline clock: when it became terminal (0 while active): history is pruned in this order (history.ts). */
  endedAt: number;
  /** Wall clock: when its process started (the agent's RUNNING event), 0 if it never ran (setState). */
  startedTime: number;
  /** Wall clock: when it became terminal (the agent's event time, or the server's clock for a server-made end); 0 while active (setState). */
  endedTime: number;
  /** Encoded ExecutionSpec bytes (charged to the metadata tier). */
  specBytes: number;
  /** Bytes charged to the metadata tier at the last persist (metadata.ts metaCharge). */
  charged: number;
}

/** Dispatch progress, written by dispatch.ts (reconcile.ts's requeue clears nextAttemptAt). */
export interface CommandDispatch {
  /** Dispatched at least once (so reconciliation must ask about it). */
  everDispatched: boolean;
  /** Generation of the session it was last dispatched on (0 after a restart: nothing is in flight). */
  dispatchedOn: number;
  /** Deadline clock, as is nextAttemptAt. */
  dispatchedAt: number;
  attempts: number;
  nextAttemptAt: number;
}

/** Event ingest (R-O2, R-O3), written by ingest.ts. */
export interface CommandIngest {
  /** Events durably stored through this sequence (R-O3). */
  storedThrough: number;
  /** Events received and being persisted through this sequence. */
  receivedThrough: number;
  /** Next byte offset expected per stream. */
  streamNext: { stdout: number; stderr: number };
  /** Recent event digests by seq, for duplicate checks (bounded; reloaded from the event table on restore). */
  digests: Record<number, number>;
  /** Stored events that are rows rather than segment output (lifecycle, acks, markers). */
  rowEvents: number;
}

/**
 * How it ended. `exitCode` and `signalName` come from the agent's lifecycle
 * events (ingest.ts); `reason` and `terminalSource` are set by setState
 * (commands.ts) when it becomes terminal.
 */
export interface CommandExit {
  exitCode: number | null;
  signalName: string;
  reason: string;
  terminalSource: TerminalSource;
}

/**
 * Script upload (R-C1, R-C3): scripts.ts sends (`sent`, `commitSentOn`),
 * ingest.ts takes the agent's progress (`acked`, `committed`, and drops the
 * bytes once complete), reconcile.ts rewinds `sent` to `acked` on a new
 * session, setState drops the bytes when the command ends.
 */
export interface CommandScript {
  /** Script bytes (script commands only) until the upload completes; stored in table `script`. */
  bytes: Uint8Array | null;
  /** Upload progress acknowledged by the agent, and sent up to. */
  acked: number;
  sent: number;
  /** Generation of the session the ScriptCommit was sent on (0: not yet). */
  commitSentOn: number;
  committed: boolean;
}

/** Stored output accounting for retention (R-O5), written by retention.ts (history.ts releases it at prune). */
export interface CommandOutput {
  segments: Segment[];
  storedOutputBytes: number;
  retention: RetentionMarker[];
}

/**
 * What the server remembers of a command it pruned from history: enough to
 * answer a late resend, a reconcile snapshot or a repeated submit exactly as
 * it would have with the full record (history.ts).
 */
export interface PrunedCommand {
  uuid: string;
  clientId: string;
  hash: string;
  state: CommandLifecycle;
  terminalSource: TerminalSource;
  storedThrough: number;
  exitCode: number | null;
  endedAt: number;
  /** When it was pruned (deadline clock: it orders the ledger). */
  at: number;
}

export interface CommittedView {
  state: CommandLifecycle;
  exitCode: number | null;
  signalName: string;
  reason: string;
  storedThrough: number;
  /** Revisions and stdin write_seqs durably assigned: only those may be sent. */
  revision: number;
  stdinAssigned: number;
  /** Wall clock, as in ServerCommand (0: not yet). */
  startedTime: number;
  endedTime: number;
}

/** A client's labels, key -> value (validated, bounded and matched in labels.ts). */
export type Labels = Readonly<Record<string, string>>;

export interface ClientRecord {
  clientId: string;
  /** Last generation handed out; persisted before the welcome leaves. */
  generation: number;
  instanceId: string;
  /** Live connection (0: none). */
  conn: number;
  /** `at`: wall clock (shown to operators). */
  pendingClaim: { instanceId: string; at: number; attempts: number } | null;
  /** `expiresAt`: deadline clock; shown converted to wall time. */
  authorization: { instanceId: string; expiresAt: number } | null;
  /**
   * The instance an accepted registration of another instance displaced
   * (MAX_REPLACED_INSTANCES_PER_CLIENT: one, the latest). `authorized`: an
   * operator's one-shot authorization did it (a takeover); such an instance's
   * hellos are refused with CODE_REPLACED until it is authorized again.
   */
  replaced: { instanceId: string; generation: number; by: string; at: number; authorized: boolean } | null;
  capacity: { running: number; queued: number; maxRunning: number; maxQueued: number };
  /** Wall clock. */
  lastSeen: number;
  /**
   * An operator drains the client (rvbox drain, before an agent upgrade): no
   * queued command is dispatched to it while set; commands already
   * dispatched, accepted or running go on. Durable; records written before
   * the flag existed restore as false.
   */
  draining: boolean;
  /**
   * Labels an operator set (rvbox label): the server's record is
   * authoritative. Durable; records written before labels existed, and
   * records with none, store no field and restore as none (labels.ts).
   */
  labels: Labels;
}

/**
 * Who made an operator call, and what it was, as the control service
 * resolved it (shells/server/access.ts): the core appends it to the audit log
 * with the call's result (audit.ts).
 */
export interface AuditCall {
  /** The operator identity's name (`admin` for the legacy --operator-token). */
  operator: string;
  role: string;
  /** The control RPC (e.g. SubmitCommand). */
  rpc: string;
  /** Its arguments, summarised (bounded by MAX_AUDIT_SUMMARY_CHARS). */
  summary: string;
}

/** One audit log entry (durable, table `audit`). */
export interface AuditEntry extends AuditCall {
  seq: number;
  /** Wall clock. */
  at: number;
  /** The clients the call named (at most MAX_AUDIT_CLIENTS_PER_ENTRY; `clientsOmitted` more). */
  clients: string[];
  clientsOmitted: number;
  /** "OK", or the error code's name (CODE_NOT_FOUND, PERMISSION_DENIED, ...). */
  result: string;
  /** The refusal's message ("" when it succeeded). */
  message: string;
}

/**
 * Refused calls (durable, table `refusal`): those of one identity to one RPC
 * refused with one message, from `at` for AUDIT_REFUSAL_WINDOW_MS, counted
 * in one entry; `summary` and `clients` are the last call's.
 */
export interface RefusalEntry extends AuditEntry {
  /** Calls counted here (>= 1). */
  count: number;
  /** Wall clock of the last of them. */
  lastAt: number;
}

/**
 * A job's child (jobs.ts): one target client. `pending`: not a command yet;
 * `started`: its command exists (uuid) and is not terminal; `done`: its
 * command ended (state, exit copied from it); `refused`: admission refused
 * to create its command (counted as failed); `cancelled`: never started
 * because the job stopped (the error budget was exceeded).
 */
export type JobChildPhase = "pending" | "started" | "done" | "refused" | "cancelled";

export interface JobChild {
  clientId: string;
  /** The child's command uuid (`${jobId}.${n}`), fixed at submit. */
  uuid: string;
  phase: JobChildPhase;
  /** The command's terminal state (done), CANCELLED (cancelled), REJECTED (refused), else UNSPECIFIED. */
  state: CommandLifecycle;
  exitCode: number | null;
  reason: string;
  /** Wall clock: when its command was created (0: not yet). */
  createdAt: number;
  /** Wall clock: its process start and its end, copied from the command when it ended (0: none). */
  startedTime: number;
  endedTime: number;
}

/** What readers see of a job: as of its last durable persist. */
export interface JobView {
  children: Array<Pick<JobChild, "phase" | "state" | "exitCode" | "reason" | "createdAt" | "startedTime" | "endedTime">>;
  stopped: string;
  endedAt: number;
}

/**
 * One request, many clients (jobs.ts). The targets are resolved once, at
 * submit, and recorded in `children`, in order.
 */
export interface ServerJob {
  id: string;
  /** Request digest (hex): a repeated submit with the same id must match. */
  hash: string;
  /** Wall clock. */
  createdAt: number;
  spec: ExecutionSpec;
  /** The operator's queue expiry for every child (wall clock, 0: the default, counted from each child's creation). */
  queueExpiry: number;
  /** The label selector the targets were resolved from ("" for an explicit list). */
  selector: string;
  /** As given ("2", "10%", "" for the default) and resolved against the target count. */
  concurrencyText: string;
  maxConcurrency: number;
  errorsText: string;
  /** Failed children tolerated; one more stops the job. -1: no limit. */
  maxErrors: number;
  children: JobChild[];
  /** Why no further child is started ("" while not stopped). */
  stopped: string;
  /** Wall clock: when its last child ended (0 while active). */
  endedAt: number;
  /** Readers' view (not stored). */
  committed: JobView;
}

/** conn-phase.ts: the phases, their order and their one writer (a closed connection is dropped). */
export type ConnPhase = "hello" | "welcoming" | "reconciling" | "ready";

export interface ConnState {
  conn: number;
  phase: ConnPhase;
  clientId: string;
  instanceId: string;
  sessionId: string;
  generation: number;
  version: Version | null;
  hb: Heartbeat;
  /** Encoded bytes received but not yet durable (R-W7). */
  ingressPending: number;
  /** Commands dispatched on this session without an answer. */
  inflight: number;
  /** Wall clock. */
  openedAt: number;
  /** The session's one ReconcileSnapshot has arrived (its result may still wait for durability). */
  snapshotReceived: boolean;
  /** Its place in the order connections opened (heartbeats.ts: ties between equal deadlines). */
  hbOrder: number;
}

export interface Incident {
  id: string;
  clientId: string;
  uuid: string;
  kind: string;
  detail: string;
  /** Wall clock (shown to operators). */
  at: number;
  acknowledged: boolean;
}

/** Incidents of one client that were not stored (its per-client bound, or the total one). Durable. */
export interface IncidentDrops {
  clientId: string;
  count: number;
  lastAt: number;
  lastKind: string;
}

export type ServerDeferred =
  | { kind: "welcome"; conn: number; generation: number }
  | { kind: "reconcile_result"; conn: number; terminate: string[]; discard: string[] }
  | { kind: "ack"; conn: number; uuid: string; through: number; bytes: number }
  | { kind: "reply"; requestId: string; result: ControlResult }
  | { kind: "committed"; uuid: string; view: CommittedView }
  | { kind: "dispatch"; uuid: string; conn: number; generation: number }
  | { kind: "drop_output"; uuid: string; throughSeq: number }
  | { kind: "prune"; uuid: string }
  | { kind: "job_committed"; id: string; view: JobView };

/**
 * The server's named timers (timers.ts): what a `wake` is for. `at` of each is
 * on the deadline clock.
 */
export type Timer =
  /** A connection's heartbeat: ping it, or close it as dead (R-H1). */
  | { kind: "heartbeat"; conn: number }
  /** An unused one-shot authorization expires (R-F5). */
  | { kind: "authorization_expiry"; clientId: string }
  /** The oldest terminal command reaches limits.historyMs. */
  | { kind: "history_age"; uuid: string }
  /** Pruning stopped at its per-step bound with more to do: at once. */
  | { kind: "prune_backlog" }
  /** A queued command's queue expiry passes (R-D1). */
  | { kind: "queue_expiry"; uuid: string }
  /** A requeued command's capacity retry is due (R-D3). */
  | { kind: "capacity_retry"; uuid: string }
  /** An unanswered dispatch is sent again (R-D1). */
  | { kind: "redelivery"; uuid: string };

export type TimerKind = Timer["kind"];

/** A command timer and its order among equal deadlines: submission order, then queue expiry before retry. */
export interface CommandWake {
  at: number;
  seq: number;
  sub: number;
  timer: Timer;
}

/** A command's earliest timer (null: none ahead), as computed at `computedAt`; reusable while now < validUntil. */
export interface WakeAnswer {
  best: CommandWake | null;
  computedAt: number;
  validUntil: number;
}

/** A connection's heartbeat deadline as it was when recorded (heartbeats.ts; stale once the connection's differs). */
export interface HeartbeatEntry {
  at: number;
  order: number;
  conn: number;
}

/** Every connection's heartbeat deadline, earliest first (heartbeats.ts explains it). */
export interface HeartbeatIndex {
  heap: LazyHeap<HeartbeatEntry>;
  nextOrder: number;
}

/** A client's kept answer in one of the active index's heaps: keyed by its earliest timer, or by the instant it stops holding. */
export interface KeptWake {
  at: number;
  seq: number;
  sub: number;
  uuid: string;
  cw: WakeAnswer;
}

/**
 * A client's parked commands (active.ts `park`): `live` names them, `heap`
 * orders them by submission order for release oldest first; an entry whose
 * uuid is no longer in `live` is stale and skipped.
 */
export interface ParkedQueue {
  live: Set<string>;
  heap: LazyHeap<{ seq: number; uuid: string }>;
}

/** The active index (active.ts explains it). */
export interface ActiveIndex {
  byClient: Map<string, Set<string>>;
  seq: Map<string, number>;
  nextSeq: number;
  charged: number;
  /** Queued commands' queue expiries by (expiry, submission order); an entry counts while `expiryKept` holds its expiry for that uuid. */
  expiries: LazyHeap<{ at: number; seq: number; uuid: string }>;
  /** The queue expiry in `expiries` of each queued active command. */
  expiryKept: Map<string, number>;
  wakes: Map<string, WakeAnswer>;
  quiet: Set<string>;
  /** Per client: its quiet commands that are dispatched and not yet answered (counted in its session's inflight; no empty sets). */
  unanswered: Map<string, Set<string>>;
  /** Per client: queued commands skipped while it has no room (active.ts `park`). */
  parked: Map<string, ParkedQueue>;
  /** Clients whose room may have grown since the pump last looked (`unpark`): it releases their oldest parked commands. */
  roomGrew: Set<string>;
  /** Per client: active commands neither quiet nor parked, the ones the pump looks at (no empty sets). */
  loud: Map<string, Set<string>>;
  /** Commands whose kept answer was dropped (touch, deactivate) and is worked out again at the next wake. */
  dirty: Set<string>;
  /** Kept answers by earliest timer, and those that stop holding before it by that instant (stale entries are skipped). */
  wakeHeap: LazyHeap<KeptWake>;
  recheck: LazyHeap<KeptWake>;
  /** The clock at the last wake (a clock that went back recomputes every answer). */
  wakeNow: number;
}

export interface ServerState {
  config: ServerConfig;
  rng: RngState;
  clients: Map<string, ClientRecord>;
  conns: Map<number, ConnState>;
  /** Every command ever submitted (terminal ones are history). */
  commands: Map<string, ServerCommand>;
  /** Index: non-terminal commands, in submission order. Derived; rebuilt on restore. Written only by active.ts. */
  active: Set<string>;
  /** The active commands per client, their order, charge and timer bookkeeping (active.ts). Derived. */
  activeIndex: ActiveIndex;
  /** Heartbeat deadlines of the connections, earliest first (heartbeats.ts). Derived; empty on restore. */
  heartbeats: HeartbeatIndex;
  /** Clients given an operator authorization (clients.ts `authorize`); may still name some whose one has gone since, which `authorizedClients` drops. Derived. */
  authorized: Set<string>;
  /** Index: terminal commands in the order they ended (uuid -> endedAt). Derived. */
  history: Map<string, number>;
  /** Sum of every command's `charged` bytes (metadata tier). Derived. */
  metaBytes: number;
  /** Pruned commands, oldest first, at most limits.prunedMax. */
  pruned: Map<string, PrunedCommand>;
  /** Index: retained output bytes and the commands holding them, per client. Derived. */
  clientOutput: Map<string, { bytes: number; uuids: Set<string> }>;
  incidents: Map<string, Incident>;
  incidentSeq: number;
  /** Index: unacknowledged incidents, in total and per client. Derived. */
  openIncidents: number;
  openByClient: Map<string, number>;
  /**
   * Open incidents per client found on restore above MAX_OPEN_INCIDENTS_PER_CLIENT
   * (written before that bound existed): kept, never added to. Usually empty.
   */
  openOverByClient: Map<string, number>;
  /** Incidents counted instead of stored, per client (durable, table `incident_drop`). */
  incidentDrops: Map<string, IncidentDrops>;
  /** Every incident ever dropped, forgotten clients included (durable, table `counter`). */
  incidentsDropped: number;
  /** Drop counters changed in this step, persisted once when it seals. Empty between steps. */
  dropsDirty: Set<string>;
  /**
   * Every client record starts at this generation: the highest generation of a
   * forgotten client, so a client id forgotten and seen again never reuses a
   * generation (durable, table `counter`).
   */
  generationFloor: number;
  /** Client records found on restore (maxClients may have been lowered since). */
  clientsAtRestore: number;
  /** The audit log, oldest first (audit.ts): at most limits.auditMax entries. */
  audit: Map<number, AuditEntry>;
  /** Last audit sequence number handed out. */
  auditSeq: number;
  /** Audit entries dropped (oldest first) to stay inside the bound (durable, table `counter`). */
  auditDropped: number;
  /** Audit entries found on restore (auditMax may have been lowered since; the next append trims). */
  auditAtRestore: number;
  /** Refused calls, aggregated, oldest first (audit.ts): at most limits.auditRefusalMax entries. */
  refusals: Map<number, RefusalEntry>;
  /** The newest refusal entry of each (operator, rpc, result, message): where the next such refusal may be counted. */
  refusalOpen: Map<string, number>;
  /** Last refusal sequence number handed out. */
  refusalSeq: number;
  /** Refusal entries dropped (oldest first) to stay inside the bound (durable, table `counter`). */
  refusalsDropped: number;
  /** Refusal entries found on restore. */
  refusalsAtRestore: number;
  /** Jobs held (at most MAX_JOBS; the oldest ended one is forgotten first). */
  jobs: Map<string, ServerJob>;
  /** Index: jobs with a child not yet ended, in submission order. Derived. */
  activeJobs: Set<string>;
  gate: DurableGate<ServerDeferred>;
  /**
   * The wake last asked for and the timer it is for (null: none). Kept in the
   * state, not in the `wake` effect, so that naming it changes no trace hash;
   * a tick at or after `at` is that timer firing. Derived; null on restore.
   */
  wake: { at: number; timer: Timer } | null;
}

export type ControlRequest =
  | {
      op: "submit";
      requestId: string;
      uuid: string;
      clientId: string;
      spec: ExecutionSpec;
      /** Script bytes for a script spec. */
      script?: Uint8Array;
      /** Wall clock, ms since the epoch (the operator's instant); 0 = default expiry. */
      queueExpiry?: number;
      /** Queue it for a client id the server does not know (never registered, or forgotten). */
      allowUnknownClient?: boolean;
      /**
       * History in the store: the store's record of this uuid, an ended
       * command memory and the ledger no longer hold (the shell reads it
       * first), so a repeated submit is answered as for a pruned one.
       */
      stored?: PrunedCommand;
    }
  | { op: "stdin"; requestId: string; uuid: string; data: Uint8Array; appendNewline: boolean; afterRequestId?: string; resize?: WindowSize }
  | { op: "close_stdin"; requestId: string; uuid: string }
  /**
   * `force` (an admin's): end the command at the server now, whatever its
   * state, instead of waiting for the agent to answer (signals.ts `forceEnd`).
   */
  | { op: "signal"; requestId: string; uuid: string; signal: SignalKind; force?: boolean }
  /** `instanceNotYetSeen`: an instance that is neither the pending claimant nor the replaced one. */
  | { op: "authorize"; requestId: string; clientId: string; instanceId: string; instanceNotYetSeen?: boolean }
  | { op: "revoke_authorization"; requestId: string; clientId: string }
  | { op: "dismiss_claim"; requestId: string; clientId: string }
  | { op: "ack_incident"; requestId: string; incidentId: string }
  | { op: "forget_client"; requestId: string; clientId: string }
  /**
   * Only append an audit entry: a call the control service refused before it
   * reached the core (access control). Answered once the entry is durable.
   */
  | { op: "audit_refusal"; requestId: string; clients: string[]; code: string; message: string }
  /** Drain (cordon) a client or end its drain. */
  | { op: "set_draining"; requestId: string; clientId: string; draining: boolean }
  /** Set and remove labels of a client (labels.ts); a key may not be in both. */
  | { op: "set_labels"; requestId: string; clientId: string; set: Labels; remove: string[] }
  /**
   * A job (jobs.ts): one command per target client. `clients`: explicit
   * targets, in order; or `selector`: every client whose labels match it,
   * in client id order (one of the two); `maxConcurrency` / `maxErrors`:
   * "N" or "P%" ("": no limit).
   */
  /** Stop a job: pending children cancelled, started ones sent a CANCEL each (jobs.ts cancelJob). */
  | { op: "cancel_job"; requestId: string; jobId: string }
  | {
      op: "submit_job";
      requestId: string;
      jobId: string;
      clients: string[];
      selector?: string;
      spec: ExecutionSpec;
      /** Wall clock, as for submit; 0: each child's default. */
      queueExpiry?: number;
      maxConcurrency?: string;
      maxErrors?: string;
      /**
       * History in the store: which of this job's child uuids (`jobId.n`)
       * the store already holds commands under, memory no longer (the shell
       * reads it first): a child must never reuse one.
       */
      storedUuids?: string[];
    };

export type ControlResult =
  /** `expiresAt`: an authorization's expiry (deadline clock), as set by the request. */
  /** `wasDraining`: the drain flag before a set_draining request. `labels`: a client's labels after a set_labels request. */
  | {
      ok: true;
      uuid?: string;
      revision?: number;
      writeSeq?: number;
      instanceId?: string;
      expiresAt?: number;
      wasDraining?: boolean;
      labels?: Labels;
      jobId?: string;
      /** cancel_job: children that will never start, started ones sent a cancel, and the refused ones ("uuid: why"). */
      notStarted?: number;
      cancelledRunning?: number;
      refused?: string[];
      /** forget_client: the client's non-terminal commands it ended. */
      ended?: number;
    }
  | { ok: false; error: CoreError };

export type ServerInput =
  | { type: "tick" }
  | { type: "durable"; through: number }
  | { type: "conn_open"; conn: number }
  | { type: "conn_closed"; conn: number; reason: string }
  | { type: "frame"; conn: number; data: Uint8Array; binary?: boolean }
  | { type: "activity"; conn: number }
  | { type: "ingress_full"; conn: number }
  /**
   * `audit`: who made the call (the control service); audited calls append an
   * audit entry before their reply. `callId`: the reply effect carries it
   * instead of `request.requestId` (the shell's key for the waiting caller).
   */
  | { type: "control"; request: ControlRequest; audit?: AuditCall; callId?: string };

/** What the shell stores for a validated output event (segment files). */
export interface StoredOutput {
  uuid: string;
  seq: number;
  stream: StreamName;
  offset: number;
  originalSize: number;
  zstd: Uint8Array;
}

export type ServerEffect =
  | CommonEffect
  /** The control request is answered (after its persist is durable). */
  | { type: "reply"; requestId: string; result: ControlResult }
  /** Retention removed stored output of `uuid` through `throughSeq` (R-O5). */
  | { type: "drop_output"; uuid: string; throughSeq: number }
  /** `uuid` was pruned from history (durably): delete all of its stored output. */
  | { type: "prune_output"; uuid: string };

export interface ServerEnv {
  ports: CorePorts;
}
