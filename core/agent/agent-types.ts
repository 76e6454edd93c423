// The agent node's state, inputs and effects: the contract between the pure
// agent core and whoever runs it (shells/agent or sim/). See
// docs/ARCHITECTURE.md "Agent node" for the table of inputs and effects.

import type { ExecutionSpec, ShellType, Platform, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { CommonEffect } from "../effects.js";
import type { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { RngState } from "../rng.js";
import type { AgentSession } from "../session/agent-session.js";
import type { Outbox, OutboxLimits, StreamName } from "../window/outbox.js";
import type { DurableGate } from "../step-context.js";
import type { VersionRange } from "../codec/version.js";
import type { CorePorts } from "../ports.js";

export interface AgentLimits extends OutboxLimits {
  metadataBudget: number;
  metadataPerCommand: number;
  stdinPendingPerCommand: number;
  scriptTotal: number;
  maxRetained: number;
  maxTombstones: number;
}

export interface AgentConfig {
  clientId: string;
  daemonVersion: string;
  platform: Platform;
  architecture: string;
  daemonCwd: string;
  supportedShells: ShellType[];
  maxRunning: number;
  maxQueued: number;
  protocol: VersionRange;
  limits: AgentLimits;
}

export type AgentPhase = "queued" | "preparing" | "launching" | "running" | "done";

export interface StdinItem {
  seq: number;
  data: Uint8Array;
  close: boolean;
  /** Protocol 1.1, a terminal's command only: set the window size before writing data. Absent otherwise. */
  resize?: { rows: number; cols: number };
}

export interface AgentScript {
  size: number;
  sha256: string;
  received: number;
  chunks: Uint8Array[];
  committed: boolean;
  path: string;
}

export interface AgentCommand {
  uuid: string;
  /** Immutable request SHA-256, hex. */
  hash: string;
  revision: number;
  spec: ExecutionSpec;
  /** Queue expiry on the deadline clock (converted from the dispatch's wall timestamp); 0 = none. */
  queueExpiry: number;
  /** Wall clock. */
  acceptedAt: number;
  phase: AgentPhase;
  lifecycle: CommandLifecycle;
  pid: number;
  script: AgentScript | null;
  stdin: {
    /** Next write_seq expected from the server. */
    next: number;
    pending: StdinItem[];
    pendingBytes: number;
    /** A write to the process is under way (one at a time, in order). */
    inFlight: boolean;
    closed: boolean;
  };
  lastSignalRevision: number;
  /** Revision of an operator request that asked the process to end (0: none). */
  cancelRevision: number;
}

// Actions parked behind a persist batch until it is durable (the durable
// gate, core/step-context.ts). Each kind is parked and run by one module,
// the after-durable half beside the before half; node.ts only routes.

/** admission.ts: the CommandAccepted, once the command record is durable. */
export type AdmissionDeferred = { kind: "send_accepted"; conn: number; uuid: string; revision: number };
/** reconcile.ts: the ReconcileSnapshot, once everything persisted before it is durable. */
export type SnapshotDeferred = { kind: "send_snapshot"; conn: number };
/** launch.ts: the spawn, once the launch authorization is durable. */
export type LaunchDeferred = { kind: "launch"; uuid: string };
/** outbox-ack.ts: a pinned event may be sent once its bytes are durable. */
export type PinnedDeferred = { kind: "pinned"; uuid: string; seq: number };
/** stdin.ts: the next write to the process, once its stdin row is durable. */
export type StdinDeferred = { kind: "stdin"; uuid: string };

export type AgentDeferred = AdmissionDeferred | SnapshotDeferred | LaunchDeferred | PinnedDeferred | StdinDeferred;

export interface AgentState {
  config: AgentConfig;
  instanceId: string;
  rng: RngState;
  session: AgentSession;
  /** Set after the reconcile snapshot of the current session left: events may flow. */
  reconciled: boolean;
  /** Essential-store incident (R-D13): while set the agent accepts no work. */
  storeIncident: string | null;
  commands: Map<string, AgentCommand>;
  /** Compact tombstone ledger: uuid -> request hash hex, oldest first. */
  tombstones: Map<string, string>;
  outbox: Outbox;
  gate: DurableGate<AgentDeferred>;
  metadataUsed: number;
  scriptBytes: number;
  /** Last capacity figures sent on the current session. */
  lastCapacity: string;
  started: boolean;
  /** Requested UUIDs found in the tombstone ledger, for the snapshot being prepared. */
  pendingSnapshotTombstones: Array<{ uuid: string; hash: string }>;
  /** Insertion counter of the tombstone ledger (its order survives restarts). */
  tombstoneSeq: number;
  /**
   * The server said another instance took over this client id
   * (CODE_REPLACED): the local work was ended, and the agent retries only at
   * the backoff cap until a registration is accepted again. Not durable: a
   * restarted agent learns it again from its first hello.
   */
  replaced: string | null;
}

export type AgentInput =
  | { type: "start" }
  | { type: "tick" }
  | { type: "durable"; through: number }
  | { type: "transport_open"; conn: number }
  | { type: "transport_closed"; conn: number; reason: string }
  | { type: "frame"; conn: number; data: Uint8Array; binary?: boolean }
  | { type: "activity"; conn: number }
  /** The shell's bounded staging queue for this connection overflowed (R-W5). */
  | { type: "ingress_full"; conn: number }
  | { type: "store_incident"; detail: string }
  | { type: "store_repaired" }
  | { type: "script_prepared"; uuid: string; path: string }
  | { type: "script_failed"; uuid: string; reason: string }
  | { type: "process_started"; uuid: string; pid: number }
  | { type: "spawn_failed"; uuid: string; reason: string }
  | { type: "process_output"; uuid: string; stream: StreamName; data: Uint8Array }
  | {
      type: "process_exited";
      uuid: string;
      exitCode: number | null;
      signal: string | null;
      timedOut: boolean;
      incompleteStreams: StreamName[];
    }
  | { type: "stdin_written"; uuid: string; seq: number; failure?: string };

export type AgentEffect =
  | CommonEffect
  | { type: "connect"; conn: number }
  | { type: "write_script"; uuid: string; data: Uint8Array; sha256: Uint8Array }
  | { type: "discard_script"; uuid: string; path: string }
  | { type: "spawn"; uuid: string; spec: ExecutionSpec; scriptPath: string }
  | { type: "write_stdin"; uuid: string; seq: number; data: Uint8Array; resize?: { rows: number; cols: number } }
  | { type: "close_stdin"; uuid: string; seq: number }
  | { type: "signal"; uuid: string; signal: SignalKind; revision: number }
  /**
   * Kill what is left of a command launched before a crash. `pid` is its
   * process group id, or 0 when the pid never became durable: the shell then
   * uses its own spawn-time record of the process (shells/agent/proc-identity.ts).
   */
  | { type: "kill_orphan"; uuid: string; pid: number };

export interface AgentEnv {
  ports: CorePorts;
}

export interface Step<S, E> {
  state: S;
  effects: E[];
}
