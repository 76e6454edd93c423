// The envelope table: every payload kind of AgentEnvelope, who may send it,
// in which receiver phases it is accepted, which outbound lane carries it,
// and whether it is work that waits for the session's reconciliation.
//
// This is the one place those facts live (h11's "everything that affects the
// state machine in one file"). It `satisfies Record<PayloadCase, …>`, so a
// payload added to agent.proto fails to compile here until it is classified,
// and then both nodes' onFrame, the send lane and the simulator's oracles
// read the new row.
//
//   kind               from    accepted in                       lane      needsReconcile
//   clientHello        agent   server conn: hello                priority  no
//   serverWelcome      server  agent session: registering        priority  no
//   commandDispatch    server  agent session: established        data      yes (R-D8)
//   commandAccepted    agent   server conn: reconciling, ready   data      yes
//   commandEvent       agent   server conn: reconciling, ready   data      yes
//   eventAck           server  agent session: established        data      no
//   stdinWrite         server  agent session: established        data      yes (R-D8)
//   closeStdin         server  agent session: established        data      yes (R-D8)
//   signalCommand      server  agent session: established        data      yes (R-D8)
//   scriptChunk        server  agent session: established        data      yes (R-D8)
//   scriptCommit       server  agent session: established        data      yes (R-D8)
//   clientCapacity     agent   server conn: reconciling, ready   data      yes
//   reconcileRequest   server  agent session: established        data      no
//   reconcileSnapshot  agent   server conn: reconciling          data      no
//   error              both    agent: registering, established;  priority  no
//                              server: reconciling, ready
//   reconcileResult    server  agent session: established        data      no
//
// "needsReconcile" for a server-sent kind is R-D8: the server sends no work
// on a session before that session's ReconcileResult. For an agent-sent kind
// it records that the agent sends it only once it has received the
// ReconcileResult (its outbox and capacity reports wait for `reconciled`);
// the server does not refuse such a frame while it is still reconciling.

import type { PayloadCase } from "../codec/frame-codec.js";

export type Sender = "agent" | "server";
export type Lane = "priority" | "data";

/** The server's per-connection phase (core/server/conn-phase.ts; a closed connection is dropped, not a phase). */
export type ServerConnPhase = "hello" | "welcoming" | "reconciling" | "ready";
/** The agent session's phases in which frames are read at all. */
export type AgentSessionFramePhase = "registering" | "established";

export interface EnvelopeRow {
  /** Who may send it; a frame of this kind from the other side is a PROTOCOL_ERROR. */
  readonly from: Sender | "both";
  /** Server connection phases in which the server accepts it (empty: the server never does). */
  readonly serverPhases: readonly ServerConnPhase[];
  /** Agent session phases in which the agent accepts it (empty: the agent never does). */
  readonly agentPhases: readonly AgentSessionFramePhase[];
  /** The outbound lane: priority frames overtake queued data (R-W10's control traffic). */
  readonly lane: Lane;
  /** Work that its sender may send only on a reconciled session (see the header). */
  readonly needsReconcile: boolean;
}

const S_READY = ["reconciling", "ready"] as const;
const A_EST = ["established"] as const;

export const ENVELOPES = {
  clientHello: { from: "agent", serverPhases: ["hello"], agentPhases: [], lane: "priority", needsReconcile: false },
  serverWelcome: { from: "server", serverPhases: [], agentPhases: ["registering"], lane: "priority", needsReconcile: false },
  commandDispatch: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  commandAccepted: { from: "agent", serverPhases: S_READY, agentPhases: [], lane: "data", needsReconcile: true },
  commandEvent: { from: "agent", serverPhases: S_READY, agentPhases: [], lane: "data", needsReconcile: true },
  eventAck: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: false },
  stdinWrite: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  closeStdin: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  signalCommand: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  scriptChunk: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  scriptCommit: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: true },
  clientCapacity: { from: "agent", serverPhases: S_READY, agentPhases: [], lane: "data", needsReconcile: true },
  reconcileRequest: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: false },
  reconcileSnapshot: { from: "agent", serverPhases: ["reconciling"], agentPhases: [], lane: "data", needsReconcile: false },
  error: { from: "both", serverPhases: S_READY, agentPhases: ["registering", "established"], lane: "priority", needsReconcile: false },
  reconcileResult: { from: "server", serverPhases: [], agentPhases: A_EST, lane: "data", needsReconcile: false },
} as const satisfies Record<PayloadCase, EnvelopeRow>;

type Table = typeof ENVELOPES;

/** The payload kinds a sender may send ("both" counts for either side). */
export type SentBy<S extends Sender> = {
  [K in PayloadCase]: Table[K]["from"] extends S | "both" ? K : never;
}[PayloadCase];

/** True when `kind` may come from `sender`; narrows the kind for an exhaustive switch. */
export function isSentBy<S extends Sender>(kind: PayloadCase, sender: S): kind is SentBy<S> {
  const from = ENVELOPES[kind].from;
  return from === sender || from === "both";
}

export function laneOf(kind: PayloadCase): Lane {
  return ENVELOPES[kind].lane;
}

/** Server-sent work that R-D8 holds back until the session's ReconcileResult. */
export function isReconcileGatedWork(kind: PayloadCase): boolean {
  const row = ENVELOPES[kind];
  return row.from === "server" && row.needsReconcile;
}

export function serverAccepts(kind: PayloadCase, phase: ServerConnPhase): boolean {
  return (ENVELOPES[kind].serverPhases as readonly ServerConnPhase[]).includes(phase);
}

export function agentAccepts(kind: PayloadCase, phase: AgentSessionFramePhase): boolean {
  return (ENVELOPES[kind].agentPhases as readonly AgentSessionFramePhase[]).includes(phase);
}

export const PAYLOAD_CASES = Object.keys(ENVELOPES) as PayloadCase[];
