// Stdin (R-S1..R-S3): operator writes take durable write_seqs; they are sent
// within the stdin window, never before the seq is durable, and resent from
// the acknowledged point on a new session.

import { create } from "@bufbuild/protobuf";
import { CloseStdinSchema, StdinWriteSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { Code } from "../errors.js";
import { MAX_CHUNK_BYTES, STDIN_WRITES_IN_FLIGHT } from "../limits.js";
import type { ConnState, ControlRequest, ServerCommand, ServerState } from "./server-types.js";
import { persistCommand, remember } from "./commands.js";
import { missingMessage } from "./history.js";
import { type ServerCtx, reply, replyError, send } from "./io.js";

/** R-S1: a stdin write or close takes the next write_seq, durably, before it may be sent. */
export function controlStdin(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "stdin" | "close_stdin" }>): void {
  const c = st.commands.get(r.uuid);
  if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
  const prior = c.requests[r.requestId];
  if (prior !== undefined) return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: prior });
  if (isTerminal(c.state)) return replyError(ctx, r.requestId, Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`, r.uuid);
  if (!c.spec.stdinOpen) return replyError(ctx, r.requestId, Code.VALIDATION, "the command was submitted without open stdin", r.uuid);
  if (c.stdin.closeRequested) return replyError(ctx, r.requestId, Code.VALIDATION, "stdin is already closed", r.uuid);
  const data = r.op === "stdin" ? r.data : new Uint8Array(0);
  if (data.length > MAX_CHUNK_BYTES) return replyError(ctx, r.requestId, Code.PAYLOAD_TOO_LARGE, `stdin writes are at most ${MAX_CHUNK_BYTES} bytes`, r.uuid);
  if (c.stdin.queuedBytes + data.length > st.config.limits.stdinQueue)
    return replyError(ctx, r.requestId, Code.CAPACITY, "stdin queue for this command is full; retry later", r.uuid);
  const seq = c.stdin.nextSeq++;
  c.stdin.queue.push({ seq, data, appendNewline: r.op === "stdin" && r.appendNewline, close: r.op === "close_stdin", requestId: r.requestId });
  c.stdin.queuedBytes += data.length;
  if (r.op === "close_stdin") c.stdin.closeRequested = true;
  remember(c, r.requestId, seq);
  persistCommand(st, ctx, c);
  return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, writeSeq: seq });
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
        value: create(StdinWriteSchema, { issueUuid: c.uuid, writeSeq: BigInt(op.seq), data: op.data, appendNewline: op.appendNewline }),
      });
    }
    c.stdin.sentThrough = op.seq;
    inflight += op.data.length + 1;
    writes++;
  }
}
