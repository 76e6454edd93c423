// Script upload (R-C1, R-C3): chunks within the upload window from the
// agent's acknowledged progress, then one ScriptCommit per session.

import { create } from "@bufbuild/protobuf";
import { ScriptChunkSchema, ScriptCommitSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { SCRIPT_CHUNK_BYTES } from "../limits.js";
import type { ConnState, ServerCommand, ServerEnv, ServerState } from "./server-types.js";
import { type ServerCtx, send } from "./io.js";

export function pumpScript(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand, env: ServerEnv): void {
  if (!c.script || c.scriptCommitted) return;
  const size = c.script.length;
  while (c.scriptSent < size && c.scriptSent - c.scriptAcked < st.config.limits.scriptWindow) {
    const data = c.script.subarray(c.scriptSent, Math.min(size, c.scriptSent + SCRIPT_CHUNK_BYTES));
    send(ctx, conn, {
      case: "scriptChunk",
      value: create(ScriptChunkSchema, { issueUuid: c.uuid, offset: BigInt(c.scriptSent), data, sha256: env.ports.sha256(data) }),
    });
    c.scriptSent += data.length;
  }
  if (c.scriptAcked === size && c.scriptCommitSentOn !== conn.generation) {
    // All bytes durably received: commit, once per session.
    send(ctx, conn, {
      case: "scriptCommit",
      value: create(ScriptCommitSchema, { issueUuid: c.uuid, sizeBytes: BigInt(size), sha256: (c.spec.program.value as { sha256: Uint8Array }).sha256 }),
    });
    c.scriptCommitSentOn = conn.generation;
  }
}
