// Script upload (R-C1, R-C3): chunks within the upload window from the
// agent's acknowledged progress, then one ScriptCommit per session.

import { create } from "@bufbuild/protobuf";
import { ScriptChunkSchema, ScriptCommitSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { SCRIPT_CHUNK_BYTES } from "../limits.js";
import type { ConnState, ServerCommand, ServerEnv, ServerState } from "./server-types.js";
import { type ServerCtx, send } from "./io.js";

export function pumpScript(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand, env: ServerEnv): void {
  const bytes = c.script.bytes;
  if (!bytes || c.script.committed) return;
  const size = bytes.length;
  while (c.script.sent < size && c.script.sent - c.script.acked < st.config.limits.scriptWindow) {
    const data = bytes.subarray(c.script.sent, Math.min(size, c.script.sent + SCRIPT_CHUNK_BYTES));
    send(ctx, conn, {
      case: "scriptChunk",
      value: create(ScriptChunkSchema, { issueUuid: c.uuid, offset: BigInt(c.script.sent), data, sha256: env.ports.sha256(data) }),
    });
    c.script.sent += data.length;
  }
  if (c.script.acked === size && c.script.commitSentOn !== conn.generation) {
    // All bytes durably received: commit, once per session.
    send(ctx, conn, {
      case: "scriptCommit",
      value: create(ScriptCommitSchema, { issueUuid: c.uuid, sizeBytes: BigInt(size), sha256: (c.spec.program.value as { sha256: Uint8Array }).sha256 }),
    });
    c.script.commitSentOn = conn.generation;
  }
}
