// Stdin (R-S1..R-S3): a StdinWrite or CloseStdin is deduplicated by its
// write_seq, made durable (a `stdin` row beside the command record's cursor)
// and only then written to the process, one write at a time and in order:
// the `stdin` deferred action below starts the next write once its row is
// durable. Each write is answered by a StdinAck event, also when it cannot
// be done (stdin closed or never open, the command ended: see finish.ts).

import { create } from "@bufbuild/protobuf";
import type { CloseStdin, StdinWrite } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { StdinAckSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { concatBytes } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { Code } from "../errors.js";
import { STDIN_WRITES_IN_FLIGHT } from "../limits.js";
import { checkTerminalSize } from "../dispatch/spec-limits.js";
import type { AgentCommand, AgentState, StdinDeferred, StdinItem } from "./agent-types.js";
import { appendEvent, liveCommand, type AgentCtx, type Fail } from "./io.js";
import { commandRecord, deleteRecord, stdinKey, stdinRecord } from "./store.js";

export function handleStdinWrite(st: AgentState, ctx: AgentCtx, w: StdinWrite, fail: Fail): void {
  const c = liveCommand(st, w.issueUuid, fail);
  if (!c) return;
  const seq = safeNumber(w.writeSeq);
  if (seq === null || seq > c.stdin.next) return fail(Code.SEQUENCE_VIOLATION, `stdin write_seq ${w.writeSeq}, expected ${c.stdin.next}`, true);
  if (seq < c.stdin.next) return; // Duplicate: already durable and acknowledged in order.
  if (c.phase === "done") {
    c.stdin.next++;
    ctx.persist(commandRecord(c));
    return;
  }
  if (!c.spec.stdinOpen || c.stdin.closed) {
    c.stdin.next++;
    ctx.persist(commandRecord(c));
    appendEvent(st, ctx, c, {
      case: "stdinAck",
      value: create(StdinAckSchema, { writeSeq: BigInt(seq), failure: c.stdin.closed ? "stdin already closed" : "stdin is not open for this command" }),
    });
    return;
  }
  const data = w.appendNewline ? concatBytes([w.data, new Uint8Array([10])]) : w.data;
  // A resize (protocol 1.1) means something only to a terminal; for any other command it is ignored.
  const resize = w.resize && c.spec.terminal ? { rows: w.resize.rows, cols: w.resize.cols } : undefined;
  if (resize && checkTerminalSize(resize)) return fail(Code.VALIDATION, `stdin write ${seq} resizes the terminal to ${resize.cols}x${resize.rows}`, false);
  if (c.stdin.pendingBytes + data.length > st.config.limits.stdinPendingPerCommand || c.stdin.pending.length >= STDIN_WRITES_IN_FLIGHT)
    return fail(Code.CAPACITY, `stdin buffer for ${c.uuid} is full; resend later`, false);
  c.stdin.next++;
  const item: StdinItem = resize ? { seq, data, close: false, resize } : { seq, data, close: false };
  c.stdin.pending.push(item);
  c.stdin.pendingBytes += data.length;
  ctx.persist(commandRecord(c), stdinRecord(c.uuid, item));
  ctx.afterDurable({ kind: "stdin", uuid: c.uuid });
}

export function handleCloseStdin(st: AgentState, ctx: AgentCtx, w: CloseStdin, fail: Fail): void {
  const c = liveCommand(st, w.issueUuid, fail);
  if (!c) return;
  const seq = safeNumber(w.writeSeq);
  if (seq === null || seq > c.stdin.next) return fail(Code.SEQUENCE_VIOLATION, `close_stdin write_seq ${w.writeSeq}, expected ${c.stdin.next}`, true);
  if (seq < c.stdin.next) return;
  c.stdin.next++;
  if (c.phase === "done") {
    ctx.persist(commandRecord(c));
    return;
  }
  if (c.stdin.closed || !c.spec.stdinOpen) {
    // Idempotent: closing a closed (or never open) stdin is acknowledged as closed.
    c.stdin.closed = true;
    ctx.persist(commandRecord(c));
    appendEvent(st, ctx, c, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: BigInt(seq), closed: true }) });
    return;
  }
  c.stdin.closed = true;
  c.stdin.pending.push({ seq, data: new Uint8Array(0), close: true });
  ctx.persist(commandRecord(c), stdinRecord(c.uuid, { seq, data: new Uint8Array(0), close: true }));
  ctx.afterDurable({ kind: "stdin", uuid: c.uuid });
}

export function flushStdin(ctx: AgentCtx, c: AgentCommand): void {
  if (c.phase !== "running" || c.stdin.inFlight) return;
  const item = c.stdin.pending[0];
  if (!item) return;
  c.stdin.inFlight = true;
  if (item.close) ctx.emit({ type: "close_stdin", uuid: c.uuid, seq: item.seq });
  else if (item.resize) ctx.emit({ type: "write_stdin", uuid: c.uuid, seq: item.seq, data: item.data, resize: item.resize });
  else ctx.emit({ type: "write_stdin", uuid: c.uuid, seq: item.seq, data: item.data });
}

export function handleStdinWritten(st: AgentState, ctx: AgentCtx, uuid: string, seq: number, failure: string | undefined): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "running") return;
  const item = c.stdin.pending[0];
  if (!item || item.seq !== seq) return;
  c.stdin.pending.shift();
  c.stdin.pendingBytes -= item.data.length;
  c.stdin.inFlight = false;
  ctx.persist(deleteRecord("stdin", stdinKey(c.uuid, seq)));
  appendEvent(st, ctx, c, {
    case: "stdinAck",
    value: create(StdinAckSchema, { writeSeq: BigInt(seq), closed: item.close, failure: failure ?? "" }),
  });
  flushStdin(ctx, c);
}

/** A write's row is durable: start the next write to the command's stdin. */
export function runStdinDeferred(st: AgentState, ctx: AgentCtx, a: StdinDeferred): void {
  const c = st.commands.get(a.uuid);
  if (c) flushStdin(ctx, c);
}
