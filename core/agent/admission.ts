// Admission of a CommandDispatch (R-D2..R-D5, R-D10, R-W2): validation of
// the spec, deduplication by UUID and request hash against the live commands
// and the tombstone ledger, the capacity limits, and the durable command
// record. The CommandAccepted waits for that record to be durable: it is
// parked as a `send_accepted` deferred action and sent by `runAdmissionDeferred`
// below, on the same session only.
//
// Dedup: a dispatch whose UUID is live and whose request hash matches is
// answered with the same CommandAccepted again; a UUID with another hash is a
// CODE_CONFLICT. A UUID in the tombstone ledger with the same hash is
// CODE_ALREADY_EXECUTED.

import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { CommandAcceptedSchema, type CommandDispatch } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, ControlErrorSchema, type ExecutionSpec } from "../../protos/gen/rvbox/v1/common_pb.js";
import { toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { speaksTerminal, TERMINAL_VERSION, versionText } from "../codec/version.js";
import { checkSpecLimits } from "../dispatch/spec-limits.js";
import { Code, codeName } from "../errors.js";
import { newCommandOutbox, outboxHeader } from "../window/outbox.js";
import type { AdmissionDeferred, AgentCommand, AgentState } from "./agent-types.js";
import { countCapacity } from "./capacity.js";
import { send, trace, type AgentCtx, type Fail } from "./io.js";
import { commandRecord } from "./store.js";

/**
 * The spec limits (core/dispatch/spec-limits.ts, the same check the server
 * makes at submit), then what only this agent knows: the shells it supports.
 */
export function validateSpec(st: AgentState, spec: ExecutionSpec | undefined): { code: Code; message: string } | null {
  const bad = checkSpecLimits(spec);
  if (bad) return bad;
  const p = spec!.program;
  if (p.case === "shell" && !st.config.supportedShells.includes(p.value.shell))
    return { code: Code.UNSUPPORTED_PLATFORM, message: `shell ${p.value.shell} is not supported on this agent` };
  // R-T4/R-T5: a terminal only on a session that negotiated it (a server never sends one to an older session).
  const v = st.session.selected;
  if (spec!.terminal && !speaksTerminal(v))
    return {
      code: Code.UNSUPPORTED_PLATFORM,
      message: `a terminal needs protocol ${versionText(TERMINAL_VERSION)}; this session negotiated ${v ? versionText(v) : "none"}`,
    };
  return null;
}

function reject(st: AgentState, ctx: AgentCtx, uuid: string, revision: bigint, code: Code, message: string): void {
  ctx.emit(trace("dispatch_rejected", { uuid, code: codeName(code), message }));
  send(st, ctx, {
    case: "commandAccepted",
    value: create(CommandAcceptedSchema, {
      issueUuid: uuid,
      commandRevision: revision,
      accepted: false,
      rejection: create(ControlErrorSchema, { code, message, issueUuid: uuid }),
    }),
  });
}

export function handleDispatch(st: AgentState, ctx: AgentCtx, d: CommandDispatch, fail: Fail): void {
  const uuid = d.issueUuid;
  if (uuid === "" || uuid.length > 128) return fail(Code.VALIDATION, "dispatch without a usable issue_uuid", false);
  if (d.immutableRequestSha256.length !== 32) return reject(st, ctx, uuid, d.commandRevision, Code.VALIDATION, "immutable_request_sha256 must be 32 bytes");
  const hash = toHex(d.immutableRequestSha256);
  const revision = safeNumber(d.commandRevision);
  if (revision === null) return fail(Code.SEQUENCE_VIOLATION, "command_revision out of range", true);
  if (Number(d.targetSessionGeneration) !== st.session.fence?.generation)
    return reject(st, ctx, uuid, d.commandRevision, Code.STALE_GENERATION, `dispatch targets generation ${d.targetSessionGeneration}`);
  const live = st.commands.get(uuid);
  if (live) {
    if (live.hash !== hash) return reject(st, ctx, uuid, d.commandRevision, Code.CONFLICT, "issue_uuid already holds a different request");
    ctx.afterDurable({ kind: "send_accepted", conn: st.session.conn, uuid, revision: live.revision });
    return;
  }
  const tomb = st.tombstones.get(uuid);
  if (tomb !== undefined) {
    if (tomb === hash) return reject(st, ctx, uuid, d.commandRevision, Code.ALREADY_EXECUTED, "already executed (tombstone ledger)");
    return reject(st, ctx, uuid, d.commandRevision, Code.CONFLICT, "issue_uuid was used by a different request");
  }
  if (st.storeIncident !== null) return reject(st, ctx, uuid, d.commandRevision, Code.STORE_INCIDENT, `agent store incident: ${st.storeIncident}`);
  const bad = validateSpec(st, d.spec);
  if (bad) return reject(st, ctx, uuid, d.commandRevision, bad.code, bad.message);
  const spec = d.spec!;
  const { running, queued } = countCapacity(st);
  const L = st.config.limits;
  // One bound for both: a run slot a queued command cannot take yet is queue room. (A second clause,
  // `queued >= maxQueued + max(0, maxRunning - running)`, stood here; this one implies it whatever
  // `running` is, so it decided nothing, and mutation testing said so.)
  if (running + queued >= st.config.maxRunning + st.config.maxQueued)
    return reject(st, ctx, uuid, d.commandRevision, Code.CAPACITY, `queue full (${running} running, ${queued} queued)`);
  if (st.commands.size >= L.maxRetained) return reject(st, ctx, uuid, d.commandRevision, Code.CAPACITY, "retained-command limit reached");
  if (st.metadataUsed + L.metadataPerCommand > L.metadataBudget) return reject(st, ctx, uuid, d.commandRevision, Code.CAPACITY, "metadata budget full");
  const scriptSize = spec.program.case === "script" ? Number(spec.program.value.sizeBytes) : 0;
  if (st.scriptBytes + scriptSize > L.scriptTotal) return reject(st, ctx, uuid, d.commandRevision, Code.CAPACITY, "script storage budget full");

  const c: AgentCommand = {
    uuid,
    hash,
    revision,
    spec,
    // A wall-clock instant from the server, kept on this agent's deadline clock.
    queueExpiry: d.queueExpiryTime ? Math.max(1, ctx.toDeadline(timestampMs(d.queueExpiryTime))) : 0,
    acceptedAt: ctx.wall,
    phase: "queued",
    lifecycle: CommandLifecycle.ACCEPTED,
    pid: 0,
    script:
      spec.program.case === "script"
        ? { size: scriptSize, sha256: toHex(spec.program.value.sha256), received: 0, chunks: [], committed: false, path: "" }
        : null,
    stdin: { next: 1, pending: [], pendingBytes: 0, inFlight: false, closed: false },
    lastSignalRevision: 0,
    cancelRevision: 0,
  };
  st.commands.set(uuid, c);
  st.metadataUsed += L.metadataPerCommand;
  st.scriptBytes += scriptSize;
  const cb = newCommandOutbox(uuid);
  st.outbox.commands.set(uuid, cb);
  ctx.persist(commandRecord(c), outboxHeader(cb));
  ctx.emit(trace("accepted", { uuid, revision }));
  ctx.afterDurable({ kind: "send_accepted", conn: st.session.conn, uuid, revision });
}

/** After the command record is durable: the CommandAccepted, on the session that asked. */
export function runAdmissionDeferred(st: AgentState, ctx: AgentCtx, a: AdmissionDeferred): void {
  if (a.conn === st.session.conn && st.session.phase === "established" && st.commands.has(a.uuid)) {
    send(st, ctx, {
      case: "commandAccepted",
      value: create(CommandAcceptedSchema, { issueUuid: a.uuid, commandRevision: BigInt(a.revision), accepted: true }),
    });
  }
}
