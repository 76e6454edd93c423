// Signals (R-S4): a SignalCommand is deduplicated by its command revision.
// Before launch an ending signal cancels the command; while launching it is
// remembered (`cancelRevision`) and sent as soon as the process starts;
// while running it is delivered. Each is answered by a SignalResult event or
// by the terminal lifecycle.

import { create } from "@bufbuild/protobuf";
import type { SignalCommand } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, SignalKind, SignalResultSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { safeNumber } from "../codec/frame-codec.js";
import { Code, unreachable } from "../errors.js";
import type { AgentState } from "./agent-types.js";
import { finish } from "./finish.js";
import { appendEvent, liveCommand, type AgentCtx, type Fail } from "./io.js";
import { commandRecord } from "./store.js";

const ENDING = new Set<SignalKind>([SignalKind.CANCEL, SignalKind.TERMINATE, SignalKind.KILL, SignalKind.INTERRUPT, SignalKind.HANGUP, SignalKind.QUIT]);

export function handleSignal(st: AgentState, ctx: AgentCtx, s: SignalCommand, fail: Fail): void {
  const c = liveCommand(st, s.issueUuid, fail);
  if (!c) return;
  const rev = safeNumber(s.commandRevision);
  if (rev === null || rev === 0) return fail(Code.SEQUENCE_VIOLATION, "signal without a usable revision", true);
  if (s.signal === SignalKind.UNSPECIFIED || SignalKind[s.signal] === undefined) return fail(Code.VALIDATION, `unknown signal ${s.signal}`, false);
  if (rev <= c.lastSignalRevision || c.phase === "done") return; // Duplicate or too late: the terminal event answers.
  c.lastSignalRevision = rev;
  if (rev > c.revision) c.revision = rev;
  const ending = ENDING.has(s.signal);
  const result = (delivered: boolean, detail: string): void =>
    appendEvent(st, ctx, c, { case: "signalResult", value: create(SignalResultSchema, { signal: s.signal, delivered, detail }) }, rev);
  switch (c.phase) {
    case "queued":
    case "preparing":
      if (ending) finish(st, ctx, c, CommandLifecycle.CANCELLED, { reason: `${SignalKind[s.signal]?.toLowerCase()} before launch` }, rev);
      else {
        ctx.persist(commandRecord(c));
        result(false, "not running yet");
      }
      return;
    case "launching":
      if (ending) c.cancelRevision = rev;
      ctx.persist(commandRecord(c));
      if (!ending) result(false, "not running yet");
      return;
    case "running":
      if (ending) c.cancelRevision = rev;
      ctx.persist(commandRecord(c));
      ctx.emit({ type: "signal", uuid: c.uuid, signal: s.signal, revision: rev });
      result(true, "");
      return;
    default:
      unreachable(c.phase, "phase of a signalled command");
  }
}
