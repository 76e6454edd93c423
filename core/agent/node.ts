// Agent node reducer: the whole agent daemon's protocol behaviour as one pure
// step function, `agentStep(state, input, now, env) -> { state, effects }`.
//
// Theory of operation
// -------------------
// This file only routes. Each input, each accepted envelope and each
// released deferred action goes to the module that owns that part:
//
//   session.ts     registration, session actions, protocol failures, CODE_REPLACED
//                  (the session reducer itself: session/agent-session.ts)
//   admission.ts   CommandDispatch: validation, dedup, capacity, CommandAccepted
//   launch.ts      the queue, launch at most once, process start, output, exit
//   stdin.ts       StdinWrite / CloseStdin, writes to the process in order
//   signals.ts     SignalCommand
//   scripts.ts     ScriptChunk / ScriptCommit, the script file
//   reconcile.ts   ReconcileRequest (snapshot) and ReconcileResult
//   outbox-ack.ts  admission into the event window, pinned sends, EventAck
//   retention.ts   done and acknowledged commands become tombstones
//   finish.ts      the one way a command ends
//   restore.ts     restoreAgent and `start` (restart interruption)
//   io.ts          send, errors, traces, event appends (a leaf)
//   store.ts       the durable rows and their keys
//
// Which envelope the agent accepts in which session phase is the ENVELOPES
// table (core/protocol/envelopes.ts); the payload switch below is exhaustive
// over it, so a new server-sent kind does not compile until it is routed.
//
// State is owned: the step mutates it in place and returns it (like
// quinn-proto's &mut self); callers keep no other reference. Every step ends
// in `pump`: admit entries into the window, launch what may launch, retire
// fully acknowledged commands into tombstones, then seal the step: one
// persist batch, deferred actions parked behind it, durable pinned events
// sent on a reconciled session, and one wake effect for the earliest timer
// (timers.ts).
//
// Durability ordering: CommandAccepted, the ReconcileSnapshot, a launch and
// every event send wait for the persist batch they depend on (`afterDurable`);
// the runner reports `durable` and the deferred actions run then.

import type { Payload } from "../codec/frame-codec.js";
import { decodeFrame } from "../codec/frame-codec.js";
import { assert, Code, unreachable } from "../errors.js";
import { agentAccepts, type ENVELOPES, type AgentSessionFramePhase } from "../protocol/envelopes.js";
import { StepContext, releaseDurable } from "../step-context.js";
import {
  fenceMatches,
  sessionActivity,
  sessionFail,
  sessionTick,
  sessionTransportClosed,
  sessionTransportOpen,
  type SessionAction,
} from "../session/agent-session.js";
import { handleDispatch, runAdmissionDeferred } from "./admission.js";
import type { AgentDeferred, AgentEffect, AgentEnv, AgentInput, AgentState, Step } from "./agent-types.js";
import { sendCapacity } from "./capacity.js";
import { sendError, trace, type AgentCtx } from "./io.js";
import { expireQueued, handleExit, handleOutput, handleProcessStarted, handleSpawnFailed, launchReady, runLaunchDeferred } from "./launch.js";
import { admitEntries, handleEventAck, runPinnedDeferred, sendPinned } from "./outbox-ack.js";
import { handleReconcileRequest, handleReconcileResult, runSnapshotDeferred } from "./reconcile.js";
import { start } from "./restore.js";
import { retire } from "./retention.js";
import { handleScriptChunk, handleScriptCommit, handleScriptFailed, handleScriptPrepared } from "./scripts.js";
import { applySessionActions, onRefused, onServerError, onWelcome, protocolFailure } from "./session.js";
import { handleSignal } from "./signals.js";
import { handleCloseStdin, handleStdinWrite, handleStdinWritten, runStdinDeferred } from "./stdin.js";
import { nextWake } from "./timers.js";

export function agentStep(st: AgentState, input: AgentInput, now: number, env: AgentEnv, wall: number = now): Step<AgentState, AgentEffect> {
  const ctx: AgentCtx = new StepContext(now, wall);
  const acts: SessionAction[] = [];
  switch (input.type) {
    case "start":
      start(st, ctx, acts);
      break;
    case "tick":
      sessionTick(st.session, now, st.rng, acts);
      expireQueued(st, ctx);
      break;
    case "durable":
      for (const a of releaseDurable(st.gate, input.through)) runDeferred(st, ctx, a);
      break;
    case "transport_open":
      sessionTransportOpen(st.session, input.conn, now, acts);
      break;
    case "transport_closed":
      sessionTransportClosed(st.session, input.conn, input.reason, now, st.rng, acts);
      break;
    case "activity":
      sessionActivity(st.session, input.conn, now);
      break;
    case "ingress_full":
      if (input.conn === st.session.conn) sessionFail(st.session, "ingress queue full", now, st.rng, acts);
      break;
    case "frame":
      if (input.conn === st.session.conn) onFrame(st, ctx, acts, input.data, input.binary ?? true, env);
      break;
    case "store_incident":
      st.storeIncident = input.detail;
      ctx.emit(trace("store_incident", { detail: input.detail }));
      break;
    case "store_repaired":
      if (st.storeIncident !== null) {
        st.storeIncident = null;
        // Reconcile again from scratch now that a complete snapshot is possible.
        sessionFail(st.session, "store repaired: re-registering", now, st.rng, acts);
      }
      break;
    case "script_prepared":
      handleScriptPrepared(st, ctx, input.uuid, input.path);
      break;
    case "script_failed":
      handleScriptFailed(st, ctx, input.uuid, input.reason);
      break;
    case "process_started":
      handleProcessStarted(st, ctx, input.uuid, input.pid);
      break;
    case "spawn_failed":
      handleSpawnFailed(st, ctx, input.uuid, input.reason);
      break;
    case "process_output":
      handleOutput(st, ctx, input.uuid, input.stream, input.data);
      break;
    case "process_exited":
      handleExit(st, ctx, input);
      break;
    case "stdin_written":
      handleStdinWritten(st, ctx, input.uuid, input.seq, input.failure);
      break;
    default:
      unreachable(input, "agent input");
  }
  applySessionActions(st, ctx, acts);
  pump(st, ctx, env);
  return { state: st, effects: ctx.effects as AgentEffect[] };
}

/** The payload kinds ENVELOPES lets the agent accept in session phase P. */
type AcceptedIn<P extends AgentSessionFramePhase> = {
  [K in keyof typeof ENVELOPES]: P extends (typeof ENVELOPES)[K]["agentPhases"][number] ? K : never;
}[keyof typeof ENVELOPES];

/** Narrows the payload to what ENVELOPES lets the agent accept in `phase`. */
function acceptedIn<P extends AgentSessionFramePhase>(p: Payload, phase: P): p is Extract<Payload, { case: AcceptedIn<P> }> {
  return p.case !== undefined && agentAccepts(p.case, phase);
}

function onFrame(st: AgentState, ctx: AgentCtx, acts: SessionAction[], data: Uint8Array, binary: boolean, env: AgentEnv): void {
  const s = st.session;
  const d = decodeFrame(data, binary);
  if (!d.ok) {
    protocolFailure(st, ctx, acts, d.error.code, d.error.message);
    return;
  }
  sessionActivity(s, s.conn, ctx.now);
  const env0 = d.envelope;
  const p: Payload = env0.payload;
  if (s.phase === "registering") {
    if (!acceptedIn(p, "registering")) {
      protocolFailure(st, ctx, acts, Code.PROTOCOL_ERROR, `${env0.payload.case} before ServerWelcome`);
      return;
    }
    switch (p.case) {
      case "serverWelcome":
        onWelcome(st, ctx, acts, env0, p.value);
        return;
      case "error":
        onRefused(st, ctx, acts, p.value);
        return;
      default:
        unreachable(p, "payload while registering");
    }
  }
  if (s.phase !== "established") return;
  if (!fenceMatches(s, env0.sessionId, env0.sessionGeneration)) {
    protocolFailure(st, ctx, acts, Code.STALE_GENERATION, `envelope fenced to generation ${env0.sessionGeneration}, current ${s.fence?.generation}`);
    return;
  }
  if (!acceptedIn(p, "established")) {
    // A payload only an agent sends, or one for the registration phase.
    protocolFailure(st, ctx, acts, Code.PROTOCOL_ERROR, `unexpected ${env0.payload.case} from server`);
    return;
  }
  const fail = (code: Code, message: string, close: boolean): void => {
    if (close) protocolFailure(st, ctx, acts, code, message);
    else sendError(st, ctx, code, message, false);
  };
  switch (p.case) {
    case "commandDispatch":
      handleDispatch(st, ctx, p.value, fail);
      break;
    case "eventAck":
      handleEventAck(st, ctx, p.value, fail);
      break;
    case "stdinWrite":
      handleStdinWrite(st, ctx, p.value, fail);
      break;
    case "closeStdin":
      handleCloseStdin(st, ctx, p.value, fail);
      break;
    case "signalCommand":
      handleSignal(st, ctx, p.value, fail);
      break;
    case "scriptChunk":
      handleScriptChunk(st, ctx, p.value, env, fail);
      break;
    case "scriptCommit":
      handleScriptCommit(st, ctx, p.value, env, fail);
      break;
    case "reconcileRequest":
      handleReconcileRequest(st, ctx, p.value, fail);
      break;
    case "reconcileResult":
      handleReconcileResult(st, ctx, p.value);
      break;
    case "error":
      onServerError(st, ctx, acts, p.value);
      break;
    default:
      unreachable(p, "payload on an established session");
  }
}

/** A released deferred action, to the module that parked it. */
function runDeferred(st: AgentState, ctx: AgentCtx, a: AgentDeferred): void {
  switch (a.kind) {
    case "pinned":
      runPinnedDeferred(st, a);
      break;
    case "send_snapshot":
      runSnapshotDeferred(st, ctx, a);
      break;
    case "send_accepted":
      runAdmissionDeferred(st, ctx, a);
      break;
    case "launch":
      runLaunchDeferred(st, ctx, a);
      break;
    case "stdin":
      runStdinDeferred(st, ctx, a);
      break;
    default:
      unreachable(a, "agent deferred action");
  }
}

/** End-of-step work: admit, send, launch, retire, seal, wake. */
function pump(st: AgentState, ctx: AgentCtx, env: AgentEnv): void {
  if (st.started) {
    admitEntries(st, ctx, env);
    launchReady(st, ctx);
    retire(st, ctx);
  }
  const now = ctx.now;
  // Seal first so that actions with nothing pending run in this same step.
  let ready = ctx.seal(st.gate);
  while (ready.length > 0) {
    for (const a of ready) runDeferred(st, ctx, a);
    ready = ctx.seal(st.gate);
  }
  sendPinned(st, ctx);
  sendCapacity(st, ctx);
  const after = ctx.seal(st.gate);
  assert(after.length === 0, "deferred work produced after the final seal");
  const wake = nextWake(st);
  if (wake !== null) ctx.emit({ type: "wake", at: Math.max(wake.at, now) });
}

export { restoreAgent, newAgent } from "./restore.js";
export type { AgentTables } from "./store.js";
export { agentInvariants } from "./invariants.js";
export { defaultAgentConfig } from "./config.js";
