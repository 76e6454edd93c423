// Admission of a submitted command (R-D1): validated, deduplicated by uuid
// and request digest (against held and pruned history), bounded per client
// and by the active share of the metadata tier, then persisted as `queued`;
// the reply waits for that persist.

import { toBinary } from "@bufbuild/protobuf";
import { ExecutionSpecSchema, CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { concatBytes, toHex } from "../bytes.js";
import { checkDispatchSize, checkSpecLimits } from "../dispatch/spec-limits.js";
import { Code, type CoreError, coreError } from "../errors.js";
import { DEFAULT_QUEUE_EXPIRY_MS, MAX_SCRIPT_BYTES, SERVER_ACTIVE_METADATA_SHARE, SERVER_RECORD_BASE_BYTES } from "../limits.js";
import { clientsNamedBy } from "./client-names.js";
import type { ControlRequest, ServerCommand, ServerEnv, ServerState } from "./server-types.js";
import { scriptRecord } from "./store.js";
import { unknownClientMessage } from "./clients.js";
import { persistCommand } from "./commands.js";
import { activate, activeCount } from "./active.js";
import { missingMessage } from "./history.js";
import { terminalSubmitRefusal } from "./terminal.js";
import { type ServerCtx, reply, replyError } from "./io.js";

/** The immutable request digest: what the agent deduplicates on (with the UUID). */
export function requestDigest(env: ServerEnv, uuid: string, clientId: string, specBytes: Uint8Array, queueExpiry: number): Uint8Array {
  const head = new TextEncoderLite().encode(`rvbox.v1/request\n${uuid}\n${clientId}\n${queueExpiry}\n`);
  return env.ports.sha256(concatBytes([head, specBytes]));
}

/** UTF-8 bytes of `s`. */
export const utf8 = (s: string): Uint8Array => new TextEncoderLite().encode(s);

/** Minimal UTF-8 encoder (core has no TextEncoder in its lib). */
class TextEncoderLite {
  encode(s: string): Uint8Array {
    const out: number[] = [];
    for (const ch of s) {
      let cp = ch.codePointAt(0)!;
      if (cp < 0x80) out.push(cp);
      else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 63));
      else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
      else {
        cp -= 0;
        out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
      }
    }
    return new Uint8Array(out);
  }
}

const UUID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** What admission decided: a new command, an existing one the same request made (a retry), or a refusal. */
export type Admission = { ok: true; command: ServerCommand; created: boolean } | { ok: false; error: CoreError };

export function submit(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "submit" }>, env: ServerEnv): void {
  const a = admitCommand(st, ctx, r, env);
  // A retry is answered like the original, and no sooner: only once the command is durable.
  if (a.ok) reply(ctx, r.requestId, { ok: true, uuid: a.command.uuid, revision: a.created ? 1 : a.command.revision });
  else replyError(ctx, r.requestId, a.error.code, a.error.message, a.error.issueUuid);
}

const refuse = (code: Code, message: string, uuid?: string): Admission => ({ ok: false, error: coreError(code, message, uuid) });

/**
 * Admission of one command (the operator's submit, or a job's child): on
 * success the command is held and its record persisted in this step's batch.
 * `requestId` is remembered as the request that created it.
 */
export function admitCommand(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "submit" }>, env: ServerEnv): Admission {
  if (!UUID_RE.test(r.uuid)) return refuse(Code.VALIDATION, "issue uuid must be 1-128 characters of [A-Za-z0-9._:-]");
  if (r.clientId === "") return refuse(Code.VALIDATION, "client id is required");
  const p = r.spec.program;
  if (p.case === undefined) return refuse(Code.VALIDATION, "no program (argv, shell or script)");
  // Everything an agent would refuse is refused now, not after a dispatch (spec-limits.ts).
  const bad = checkSpecLimits(r.spec);
  if (bad) return { ok: false, error: bad };
  if (p.case === "script") {
    const bytes = r.script;
    if (!bytes || bytes.length === 0 || bytes.length > MAX_SCRIPT_BYTES) return refuse(Code.VALIDATION, `script of 1..${MAX_SCRIPT_BYTES} bytes required`);
    if (Number(p.value.sizeBytes) !== bytes.length || toHex(env.ports.sha256(bytes)) !== toHex(p.value.sha256))
      return refuse(Code.VALIDATION, "script descriptor does not match the script bytes");
  }
  // The operator's expiry is a wall-clock instant; it is kept on the deadline clock.
  const queueExpiry = r.queueExpiry && r.queueExpiry > 0 ? Math.max(1, ctx.toDeadline(r.queueExpiry)) : ctx.now + DEFAULT_QUEUE_EXPIRY_MS;
  const specBytes = toBinary(ExecutionSpecSchema, r.spec);
  // R-T2: a dispatch over one envelope could never reach the agent.
  const tooBig = checkDispatchSize(r.uuid, specBytes.length);
  if (tooBig) return { ok: false, error: tooBig };
  const hash = toHex(requestDigest(env, r.uuid, r.clientId, specBytes, r.queueExpiry ?? 0));
  const existing = st.commands.get(r.uuid);
  if (existing) {
    if (existing.hash === hash) return { ok: true, command: existing, created: false };
    return refuse(Code.CONFLICT, "issue uuid already used by a different request", r.uuid);
  }
  // The ledger, or (history in the store) the store's record of an ended
  // command the ledger has forgotten, which the shell looked up (r.stored).
  const gone = st.pruned.get(r.uuid) ?? (st.config.limits.historyInStore ? r.stored : undefined);
  if (gone) {
    // Never run a pruned command again: the same request already ran.
    if (gone.hash === hash) return refuse(Code.ALREADY_EXECUTED, missingMessage(st, r.uuid, gone), r.uuid);
    return refuse(Code.CONFLICT, "issue uuid already used by a different request (since pruned from history)", r.uuid);
  }
  // A mistyped client id would wait silently for an agent that never comes
  // (or for whichever agent registers under that id later).
  if (!st.clients.has(r.clientId)) {
    if (r.clientId.includes(",") || r.clientId.includes("*")) {
      const named = clientsNamedBy(st.clients.keys(), r.clientId);
      const which =
        named.total === 0
          ? "it names no known client"
          : `it names ${named.ids.join(", ")}${named.total > named.ids.length ? ` and ${named.total - named.ids.length} more` : ""}`;
      return refuse(
        Code.VALIDATION,
        `client id ${r.clientId} looks like a list or a wildcard (${which}); multi-client runs are not supported yet: submit once per client`,
      );
    }
    if (!r.allowUnknownClient)
      return refuse(Code.NOT_FOUND, `${unknownClientMessage(st, r.clientId)} (allow_unknown_client queues it for an id that has not registered yet)`);
  }
  // R-T4/R-T5: a terminal for a client connected at an older minor could never run (terminal.ts).
  const oldAgent = r.spec.terminal ? terminalSubmitRefusal(st, r.clientId) : null;
  if (oldAgent) return refuse(Code.INCOMPATIBLE_VERSION, oldAgent);
  // This client's active commands, and the metadata all active ones hold (both kept by the active index).
  const active = activeCount(st, r.clientId);
  const activeBytes = st.activeIndex.charged;
  if (active >= st.config.limits.maxActivePerClient) return refuse(Code.CAPACITY, `client ${r.clientId} has ${active} active commands`);
  // Active work may take only its share of the tier: final states and history need the rest.
  if (activeBytes + SERVER_RECORD_BASE_BYTES + specBytes.length > st.config.limits.metadataBudget * SERVER_ACTIVE_METADATA_SHARE)
    return refuse(Code.CAPACITY, `server metadata budget: active commands hold ${activeBytes} bytes; retry once some finish`);
  const c: ServerCommand = {
    uuid: r.uuid,
    clientId: r.clientId,
    hash,
    revision: 1,
    spec: r.spec,
    script: { bytes: p.case === "script" ? r.script! : null, acked: 0, sent: 0, commitSentOn: 0, committed: false },
    createdAt: ctx.wall,
    committed: {
      state: L.UNSPECIFIED,
      exitCode: null,
      signalName: "",
      reason: "",
      storedThrough: 0,
      revision: 0,
      stdinAssigned: 0,
      startedTime: 0,
      endedTime: 0,
    },
    queueExpiry,
    state: L.QUEUED,
    dispatch: { everDispatched: false, dispatchedOn: 0, dispatchedAt: 0, attempts: 0, nextAttemptAt: 0 },
    ingest: { storedThrough: 0, receivedThrough: 0, streamNext: { stdout: 0, stderr: 0 }, digests: {}, rowEvents: 0 },
    exit: { exitCode: null, signalName: "", reason: "", terminalSource: "" },
    stdin: { nextSeq: 1, ackedThrough: 0, sentThrough: 0, queue: [], queuedBytes: 0, closeRequested: false, inlineThrough: 0 },
    signals: [],
    output: { segments: [], storedOutputBytes: 0, retention: [] },
    requests: { [r.requestId]: 1 },
    endedAt: 0,
    startedTime: 0,
    endedTime: 0,
    specBytes: specBytes.length,
    charged: 0,
  };
  st.commands.set(c.uuid, c);
  activate(st, c);
  persistCommand(st, ctx, c);
  if (c.script.bytes) ctx.persist(scriptRecord(c.uuid, c.script.bytes));
  ctx.emit({ type: "trace", event: "submitted", detail: { uuid: c.uuid, client: c.clientId } });
  return { ok: true, command: c, created: true };
}
