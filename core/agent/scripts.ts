// Scripts (R-C2..R-C4): the chunks of an uploaded script are checked
// (SHA-256 per chunk, idempotent by offset and content, within the declared
// size), journaled as `chunk` rows, committed against the whole script's
// SHA-256, then written to a file by the executor (`write_script`, emitted
// when the command gets a run slot: launch.ts) before the launch. Any
// mismatch rejects the command: nothing ran.

import { create } from "@bufbuild/protobuf";
import type { ScriptChunk, ScriptCommit } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, ScriptUploadStatusSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { bytesEqual, concatBytes, toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { Code } from "../errors.js";
import { MAX_CHUNK_BYTES } from "../limits.js";
import type { AgentCommand, AgentEnv, AgentScript, AgentState } from "./agent-types.js";
import { deleteChunks, finish } from "./finish.js";
import { appendEvent, liveCommand, type AgentCtx, type Fail } from "./io.js";
import { setPhase } from "./phase.js";
import { chunkRecord, commandRecord } from "./store.js";

export function handleScriptChunk(st: AgentState, ctx: AgentCtx, ch: ScriptChunk, env: AgentEnv, fail: Fail): void {
  const c = liveCommand(st, ch.issueUuid, fail);
  if (!c) return;
  const sc = c.script;
  if (!sc) return fail(Code.VALIDATION, `${c.uuid} is not a script command`, false);
  if (c.phase === "done" || sc.committed) return;
  if (ch.data.length > MAX_CHUNK_BYTES) return fail(Code.PAYLOAD_TOO_LARGE, `script chunk of ${ch.data.length} bytes`, true);
  const offset = safeNumber(ch.offset);
  if (offset === null) return fail(Code.SEQUENCE_VIOLATION, "script chunk offset out of range", true);
  if (!bytesEqual(env.ports.sha256(ch.data), ch.sha256)) {
    return finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `script chunk at ${offset}: SHA-256 mismatch`, code: Code.VALIDATION });
  }
  if (offset < sc.received) {
    // A resent chunk is idempotent by offset and content (R-C3).
    const have = concatBytes(sc.chunks).subarray(offset, offset + ch.data.length);
    if (have.length !== ch.data.length || !bytesEqual(have, ch.data)) {
      return finish(st, ctx, c, CommandLifecycle.REJECTED, {
        reason: `script chunk at ${offset} differs from the bytes already received`,
        code: Code.VALIDATION,
      });
    }
    return;
  }
  if (offset > sc.received) return fail(Code.SEQUENCE_VIOLATION, `script chunk at ${offset}, expected ${sc.received}`, false);
  if (offset + ch.data.length > sc.size) {
    return finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `script longer than its declared ${sc.size} bytes`, code: Code.VALIDATION });
  }
  if (ch.data.length === 0) return;
  sc.chunks.push(ch.data);
  sc.received += ch.data.length;
  ctx.persist(commandRecord(c), chunkRecord(c.uuid, offset, ch.data));
  appendEvent(st, ctx, c, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: BigInt(sc.received) }) });
}

export function handleScriptCommit(st: AgentState, ctx: AgentCtx, m: ScriptCommit, env: AgentEnv, fail: Fail): void {
  const c = liveCommand(st, m.issueUuid, fail);
  if (!c) return;
  const sc = c.script;
  if (!sc) return fail(Code.VALIDATION, `${c.uuid} is not a script command`, false);
  if (c.phase === "done" || sc.committed) return;
  const size = safeNumber(m.sizeBytes);
  if (size !== sc.size || sc.received !== sc.size) {
    if (size === sc.size && sc.received < sc.size) return fail(Code.SEQUENCE_VIOLATION, `script commit at ${sc.received} of ${sc.size} bytes`, false);
    return finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `script commit size ${m.sizeBytes} != declared ${sc.size}`, code: Code.VALIDATION });
  }
  const actual = toHex(env.ports.sha256(concatBytes(sc.chunks)));
  if (toHex(m.sha256) !== sc.sha256 || actual !== sc.sha256) {
    return finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: "script SHA-256 mismatch", code: Code.VALIDATION });
  }
  sc.committed = true;
  ctx.persist(commandRecord(c));
  appendEvent(st, ctx, c, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: BigInt(sc.received), complete: true }) });
}

/** A committed script got a run slot: the executor writes its file first (answered by script_prepared or script_failed). */
export function prepareScript(ctx: AgentCtx, c: AgentCommand, script: AgentScript): void {
  setPhase(c, "preparing");
  ctx.persist(commandRecord(c));
  ctx.emit({
    type: "write_script",
    uuid: c.uuid,
    data: concatBytes(script.chunks),
    sha256: hexBytes(script.sha256),
  });
}

export function handleScriptPrepared(st: AgentState, ctx: AgentCtx, uuid: string, path: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase === "done") {
    // It ended (a cancel, its queue expiry) while the shell wrote the file, or
    // has been forgotten since: nothing will run the file, so it goes (a
    // finished command's own file was discarded when it finished).
    if (c?.script?.path !== path) ctx.emit({ type: "discard_script", uuid, path });
    return;
  }
  if (c.phase !== "preparing" || !c.script) return;
  // The file on disk is the copy from now on; the journaled chunks can go.
  deleteChunks(ctx, c);
  c.script.path = path;
  c.script.chunks = [];
  setPhase(c, "queued");
  ctx.persist(commandRecord(c));
}

export function handleScriptFailed(st: AgentState, ctx: AgentCtx, uuid: string, reason: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "preparing") return;
  finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `could not prepare script: ${reason}`, code: Code.VALIDATION });
}

function hexBytes(h: string): Uint8Array {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return out;
}
