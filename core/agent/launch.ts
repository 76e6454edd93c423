// The queue and the launch, at most once (R-C4, R-O8, R-D11). A command's
// agent-side phase:
//
//   queued --(slot free; script committed)--> preparing --script_prepared--> queued
//   queued --(slot free)--> launching --durable--> spawn --process_started--> running
//   running --process_exited--> done
//   queued|preparing --expiry--> done(expired)   --cancel--> done(cancelled)
//   any non-done --checksum/preparation/spawn failure--> done(rejected)
//
// `launching` is the durable launch authorization: the spawn effect is only
// emitted after that record is durable (the `launch` deferred action below),
// and an agent that restarts and finds `launching` or `running` reports
// `interrupted` instead of launching again (node.ts `start`). That is what
// makes a launch happen at most once.

import { create } from "@bufbuild/protobuf";
import { CommandLifecycle, OutputIncompleteSchema, OutputStream, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import { MAX_CHUNK_BYTES } from "../limits.js";
import { appendOutput, type StreamName } from "../window/outbox.js";
import type { AgentState, LaunchDeferred } from "./agent-types.js";
import { countCapacity } from "./capacity.js";
import { finish } from "./finish.js";
import { appendEvent, appendLifecycle, trace, type AgentCtx } from "./io.js";
import { setPhase } from "./phase.js";
import { prepareScript } from "./scripts.js";
import { flushStdin } from "./stdin.js";
import { commandRecord } from "./store.js";

export function expireQueued(st: AgentState, ctx: AgentCtx): void {
  for (const c of st.commands.values()) {
    if ((c.phase === "queued" || c.phase === "preparing") && c.queueExpiry > 0 && ctx.now >= c.queueExpiry) {
      finish(st, ctx, c, CommandLifecycle.EXPIRED, { reason: "queue expiry passed before launch" });
    }
  }
}

export function launchReady(st: AgentState, ctx: AgentCtx): void {
  let { running } = countCapacity(st);
  for (const c of st.commands.values()) {
    if (running >= st.config.maxRunning) return;
    if (c.phase !== "queued") continue;
    if (c.queueExpiry > 0 && ctx.now >= c.queueExpiry) continue; // expireQueued handles it
    if (c.script && !c.script.committed) continue;
    if (c.script && c.script.path === "") {
      prepareScript(ctx, c, c.script);
      running++;
      continue;
    }
    setPhase(c, "launching");
    ctx.persist(commandRecord(c));
    ctx.emit(trace("launch_authorized", { uuid: c.uuid }));
    ctx.afterDurable({ kind: "launch", uuid: c.uuid });
    running++;
  }
}

/** The launch authorization is durable: spawn (or end a command cancelled meanwhile). */
export function runLaunchDeferred(st: AgentState, ctx: AgentCtx, a: LaunchDeferred): void {
  const c = st.commands.get(a.uuid);
  if (!c || c.phase !== "launching") return;
  if (c.cancelRevision > 0) {
    finish(st, ctx, c, CommandLifecycle.CANCELLED, { reason: "cancelled before launch" }, c.cancelRevision);
    return;
  }
  ctx.emit({ type: "spawn", uuid: c.uuid, spec: c.spec, scriptPath: c.script?.path ?? "" });
}

export function handleProcessStarted(st: AgentState, ctx: AgentCtx, uuid: string, pid: number): void {
  const c = st.commands.get(uuid);
  if (!c) {
    // The command was removed while its spawn was in flight (a ReconcileResult
    // terminated it): no command owns this process, so it must not run on (R-D11).
    if (pid > 0) ctx.emit({ type: "kill_orphan", uuid, pid });
    return;
  }
  if (c.phase !== "launching") return;
  setPhase(c, "running");
  c.pid = pid;
  c.lifecycle = CommandLifecycle.RUNNING;
  ctx.persist(commandRecord(c));
  appendLifecycle(st, ctx, c, CommandLifecycle.RUNNING, {});
  if (c.cancelRevision > 0) ctx.emit({ type: "signal", uuid, signal: SignalKind.CANCEL, revision: c.cancelRevision });
  flushStdin(ctx, c);
}

export function handleSpawnFailed(st: AgentState, ctx: AgentCtx, uuid: string, reason: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "launching") return;
  // Nothing ran: this is a preparation failure, never a process failure (R-C4).
  finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `could not launch: ${reason}`, code: Code.VALIDATION });
}

export function handleOutput(st: AgentState, ctx: AgentCtx, uuid: string, stream: StreamName, data: Uint8Array): void {
  const c = st.commands.get(uuid);
  const cb = st.outbox.commands.get(uuid);
  if (!c || !cb || c.phase !== "running" || cb.closed) return;
  const records: PersistRecord[] = [];
  for (let o = 0; o < data.length; o += MAX_CHUNK_BYTES) {
    appendOutput(st.outbox, cb, stream, data.subarray(o, Math.min(data.length, o + MAX_CHUNK_BYTES)), c.revision, ctx.wall, records);
  }
  ctx.persist(...records);
}

export function handleExit(
  st: AgentState,
  ctx: AgentCtx,
  x: { uuid: string; exitCode: number | null; signal: string | null; timedOut: boolean; incompleteStreams: StreamName[] },
): void {
  const c = st.commands.get(x.uuid);
  if (c && c.phase === "launching") handleProcessStarted(st, ctx, x.uuid, 0); // an exit implies a start
  if (!c || c.phase !== "running") return;
  if (x.incompleteStreams.length > 0) {
    appendEvent(st, ctx, c, {
      case: "incomplete",
      value: create(OutputIncompleteSchema, {
        streams: x.incompleteStreams.map((s) => (s === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR)),
        reason: "capture pipe not drained to EOF (a descendant may still hold it open)",
      }),
    });
  }
  if (c.cancelRevision > 0 && x.exitCode !== 0) {
    finish(st, ctx, c, CommandLifecycle.CANCELLED, exitExtra(x, "ended after an operator request"), c.cancelRevision);
  } else if (x.exitCode === 0 && !x.timedOut) {
    finish(st, ctx, c, CommandLifecycle.SUCCEEDED, { exitCode: 0 });
  } else {
    finish(st, ctx, c, CommandLifecycle.FAILED, exitExtra(x, x.timedOut ? "timed out" : ""));
  }
}

function exitExtra(x: { exitCode: number | null; signal: string | null }, reason: string): { exitCode?: number; signalName?: string; reason: string } {
  const out: { exitCode?: number; signalName?: string; reason: string } = { reason };
  if (x.exitCode !== null) out.exitCode = x.exitCode;
  if (x.signal !== null) out.signalName = x.signal;
  return out;
}
