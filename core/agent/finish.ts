// Ending a command on the agent: the one place a command becomes `done`.
// Pending stdin is answered, the journaled script chunks are deleted, the
// prepared script file is discarded, and the terminal lifecycle event is
// appended. Every terminal path (exit, rejection, cancellation, expiry,
// restart interruption) goes through `finish`.

import { create } from "@bufbuild/protobuf";
import { CommandLifecycle, OutputIncompleteSchema, OutputStream, StdinAckSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert, type Code } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import { appendMeta } from "../window/outbox.js";
import type { AgentCommand, AgentState } from "./agent-types.js";
import { appendEvent, appendLifecycle, trace, type AgentCtx } from "./io.js";
import { setPhase } from "./phase.js";
import { chunkDeletes, commandRecord, deleteRecord, stdinKey } from "./store.js";

export type FinishExtra = { exitCode?: number; signalName?: string; reason?: string; code?: Code };

/** Make a command terminal: stdin leftovers are answered, then the lifecycle event. */
export function finish(st: AgentState, ctx: AgentCtx, c: AgentCommand, state: CommandLifecycle, extra: FinishExtra, revision = c.revision): void {
  assert(c.phase !== "done", `finish twice: ${c.uuid}`);
  // After a restart a pending write may or may not have reached the child.
  const failure = state === CommandLifecycle.INTERRUPTED ? "agent restarted before the write was confirmed" : "command ended before the write";
  for (const item of c.stdin.pending) {
    ctx.persist(deleteRecord("stdin", stdinKey(c.uuid, item.seq)));
    appendEvent(st, ctx, c, {
      case: "stdinAck",
      value: create(StdinAckSchema, { writeSeq: BigInt(item.seq), closed: item.close, failure }),
    });
  }
  c.stdin.pending = [];
  c.stdin.pendingBytes = 0;
  c.stdin.inFlight = false;
  if (c.script && c.script.chunks.length > 0) {
    deleteChunks(ctx, c);
    c.script.chunks = [];
  }
  if (c.script && c.script.path !== "") ctx.emit({ type: "discard_script", uuid: c.uuid, path: c.script.path });
  setPhase(c, "done");
  c.lifecycle = state;
  ctx.persist(commandRecord(c));
  appendLifecycle(st, ctx, c, state, extra, revision);
  ctx.emit(trace("finished", { uuid: c.uuid, state: CommandLifecycle[state] ?? state }));
}

/**
 * A command found launching or running after a restart: its outcome is
 * unknown. The capture pipes went with the old agent process: whatever the
 * command wrote after the last durable output was never read, so neither
 * stream was drained to a provable EOF (R-O8), which an OutputIncomplete (no
 * byte count) says before the command ends through `finish`.
 */
export function finishInterrupted(st: AgentState, ctx: AgentCtx, c: AgentCommand, reason: string): void {
  const cb = st.outbox.commands.get(c.uuid);
  if (cb && !cb.closed) {
    const records: PersistRecord[] = [];
    const value = create(OutputIncompleteSchema, {
      streams: [OutputStream.STDOUT, OutputStream.STDERR],
      reason: "agent restarted: capture pipes not drained to EOF",
    });
    appendMeta(st.outbox, cb, { case: "incomplete", value }, c.revision, ctx.wall, records);
    ctx.persist(...records);
  }
  finish(st, ctx, c, CommandLifecycle.INTERRUPTED, { reason });
}

/** Delete the journaled script chunks of `c` (the in-memory list is the caller's to clear). */
export function deleteChunks(ctx: AgentCtx, c: AgentCommand): void {
  ctx.persist(...chunkDeletes(c.uuid, c.script?.chunks ?? []));
}
