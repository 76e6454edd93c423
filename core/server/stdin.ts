// Stdin (R-S1..R-S3): operator writes take durable write_seqs; they are sent
// within the stdin window, never before the seq is durable, and resent from
// the acknowledged point on a new session.

import { create } from "@bufbuild/protobuf";
import { CloseStdinSchema, StdinWriteSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, TerminalSizeSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { checkTerminalSize } from "../dispatch/spec-limits.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { Code } from "../errors.js";
import { CONTROL_STDIN_WRITE_BYTES, MAX_CHUNK_BYTES, STDIN_WRITES_IN_FLIGHT } from "../limits.js";
import type { ConnState, ControlRequest, ServerCommand, ServerState, StdinOp } from "./server-types.js";
import { persistCommand, remember } from "./commands.js";
import { touch } from "./active.js";
import { missingMessage } from "./history.js";
import { type ServerCtx, reply, replyError, send } from "./io.js";
import { stdinDelete, stdinRecord } from "./store.js";

/** The write_seqs an operator write of `bytes` takes: one per MAX_CHUNK_BYTES, at least one. */
export const stdinPieces = (bytes: number): number => Math.max(1, Math.ceil(bytes / MAX_CHUNK_BYTES));

/**
 * R-S1: a stdin write or close takes the next write_seq (a write larger than
 * MAX_CHUNK_BYTES the next several), durably, before it may be sent. The
 * reply names the last write_seq it took.
 */
export function controlStdin(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "stdin" | "close_stdin" }>): void {
  const c = st.commands.get(r.uuid);
  if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
  const prior = c.requests[r.requestId];
  if (prior !== undefined) return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: prior });
  if (isTerminal(c.state)) return replyError(ctx, r.requestId, Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`, r.uuid);
  if (!c.spec.stdinOpen) return replyError(ctx, r.requestId, Code.VALIDATION, "the command was submitted without open stdin", r.uuid);
  if (c.stdin.closeRequested) return replyError(ctx, r.requestId, Code.VALIDATION, "stdin is already closed", r.uuid);
  const data = r.op === "stdin" ? r.data : new Uint8Array(0);
  const resize = r.op === "stdin" ? r.resize : undefined;
  if (resize) {
    if (!c.spec.terminal) return replyError(ctx, r.requestId, Code.VALIDATION, "the command has no terminal to resize (submitted without -t)", r.uuid);
    const bad = checkTerminalSize(resize);
    if (bad) return replyError(ctx, r.requestId, bad.code, bad.message, r.uuid);
  }
  if (data.length > CONTROL_STDIN_WRITE_BYTES)
    return replyError(ctx, r.requestId, Code.PAYLOAD_TOO_LARGE, `stdin writes are at most ${CONTROL_STDIN_WRITE_BYTES} bytes`, r.uuid);
  if (c.stdin.queuedBytes + data.length > st.config.limits.stdinQueue)
    return replyError(ctx, r.requestId, Code.CAPACITY, "stdin queue for this command is full; retry later", r.uuid);
  // A write chained to one that is not the last taken: it arrived ahead of its predecessor (the
  // writer resends it once that one is in), or another writer's write came in between.
  if (r.op === "stdin" && r.afterRequestId !== undefined && c.requests[r.afterRequestId] !== c.stdin.nextSeq - 1)
    return replyError(
      ctx,
      r.requestId,
      Code.SEQUENCE_VIOLATION,
      `stdin write chained to request ${r.afterRequestId}, which is not the write taken last; resend it in order`,
      r.uuid,
    );
  // One write_seq per MAX_CHUNK_BYTES of data (the agent protocol's bound; one for an empty
  // write or the close); the newline, if asked for, follows the last piece.
  const pieces = stdinPieces(data.length);
  let seq = 0;
  for (let i = 0; i < pieces; i++) {
    seq = c.stdin.nextSeq++;
    const last = i === pieces - 1;
    const op: StdinOp = {
      seq,
      data: pieces === 1 ? data : data.subarray(i * MAX_CHUNK_BYTES, Math.min(data.length, (i + 1) * MAX_CHUNK_BYTES)),
      appendNewline: last && r.op === "stdin" && r.appendNewline,
      close: r.op === "close_stdin",
      requestId: r.requestId,
    };
    // The resize rides on the first piece: the size changes before the keystrokes that follow it.
    if (resize && i === 0) op.resize = { rows: resize.rows, cols: resize.cols };
    c.stdin.queue.push(op);
    touch(st, c);
    c.stdin.queuedBytes += op.data.length;
    // The bytes in a row of their own, written once: the command record (rewritten with every
    // event) holds only the counters, so its size does not grow with what is queued.
    ctx.persist(stdinRecord(c.uuid, op));
  }
  if (r.op === "close_stdin") c.stdin.closeRequested = true;
  remember(c, r.requestId, seq);
  persistCommand(st, ctx, c);
  return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: seq });
}

/** The agent acknowledged stdin writes through `through`: they leave the queue, and their rows go. */
export function releaseStdin(ctx: ServerCtx, c: ServerCommand, through: number): void {
  if (through <= c.stdin.ackedThrough) return;
  c.stdin.ackedThrough = through;
  while (c.stdin.queue.length > 0 && c.stdin.queue[0]!.seq <= through) {
    const op = c.stdin.queue.shift()!;
    c.stdin.queuedBytes -= op.data.length;
    if (op.seq > c.stdin.inlineThrough) ctx.persist(stdinDelete(c.uuid, op.seq));
  }
}

export function pumpStdin(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  let inflight = 0;
  let writes = 0;
  for (const op of c.stdin.queue) {
    if (op.seq > c.stdin.sentThrough) break;
    inflight += op.data.length + 1;
    writes++;
  }
  for (const op of c.stdin.queue) {
    if (op.seq <= c.stdin.sentThrough) continue;
    if (writes >= STDIN_WRITES_IN_FLIGHT) break;
    // Never send a write_seq a crash could take back (the agent would apply it and the
    // server would later refuse its acknowledgement as never sent).
    if (op.seq > c.committed.stdinAssigned) break;
    if (inflight > 0 && inflight + op.data.length > st.config.limits.stdinWindow) break;
    if (op.close) {
      send(ctx, conn, { case: "closeStdin", value: create(CloseStdinSchema, { issueUuid: c.uuid, writeSeq: BigInt(op.seq) }) });
    } else {
      send(ctx, conn, {
        case: "stdinWrite",
        value: create(StdinWriteSchema, {
          issueUuid: c.uuid,
          writeSeq: BigInt(op.seq),
          data: op.data,
          appendNewline: op.appendNewline,
          // Only a terminal's command has resizes, and it runs only on a 1.1 session (terminal.ts).
          ...(op.resize ? { resize: create(TerminalSizeSchema, op.resize) } : {}),
        }),
      });
    }
    c.stdin.sentThrough = op.seq;
    inflight += op.data.length + 1;
    writes++;
  }
}
