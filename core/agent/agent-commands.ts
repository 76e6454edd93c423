// Agent command handling: admission and dedup (R-D2..R-D5, R-D10), launch at
// most once, stdin (R-S1..R-S3), signals (R-S4), scripts (R-C2..R-C4) and
// process exits (R-O8).
//
// Theory of operation
// -------------------
// A command's agent-side phase:
//
//   queued --(slot free; script committed)--> preparing --script_prepared--> queued
//   queued --(slot free)--> launching --durable--> spawn --process_started--> running
//   running --process_exited--> done
//   queued|preparing --expiry--> done(expired)   --cancel--> done(cancelled)
//   any non-done --checksum/preparation/spawn failure--> done(rejected)
//
// `launching` is the durable launch authorization: the spawn effect is only
// emitted after that record is durable, and an agent that restarts and finds
// `launching` or `running` reports `interrupted` instead of launching again.
// That is what makes a launch happen at most once.
//
// Dedup: a dispatch whose UUID is live and whose request hash matches is
// answered with the same CommandAccepted again; a UUID with another hash is a
// CODE_CONFLICT. A UUID in the tombstone ledger with the same hash is
// CODE_ALREADY_EXECUTED. A command becomes a tombstone once it is done and all
// of its events are acknowledged (or the server's ReconcileResult says so).

import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  CommandAcceptedSchema,
  type CloseStdin,
  type CommandDispatch,
  type EventAck,
  type ScriptChunk,
  type ScriptCommit,
  type SignalCommand,
  type StdinWrite,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandLifecycle,
  ControlErrorSchema,
  OutputIncompleteSchema,
  OutputStream,
  ScriptUploadStatusSchema,
  SignalKind,
  SignalResultSchema,
  StdinAckSchema,
  type ExecutionSpec,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import { bytesEqual, concatBytes, toHex } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { assert, Code, codeName } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import {
  MAX_ARGV_ITEMS,
  MAX_CHUNK_BYTES,
  MAX_ENV_ITEMS,
  MAX_SCRIPT_BYTES,
  MAX_SPEC_STRING_BYTES,
  STDIN_WRITES_IN_FLIGHT,
} from "../limits.js";
import { acknowledge, appendMeta, appendOutput, newCommandOutbox, outboxHeader, removeCommand, type MetaEvent, type StreamName } from "../window/outbox.js";
import { appendLifecycle, send, trace, type AgentCtx } from "./agent-node.js";
import type { AgentCommand, AgentDeferred, AgentEnv, AgentState } from "./agent-types.js";
import { chunkKey, chunkRecord, commandRecord, deleteRecord, stdinKey, stdinRecord, tombstoneRecord } from "./store.js";

export type Fail = (code: Code, message: string, close: boolean) => void;

export function countCapacity(st: AgentState): { running: number; queued: number } {
  let running = 0;
  let queued = 0;
  for (const c of st.commands.values()) {
    if (c.phase === "launching" || c.phase === "running" || c.phase === "preparing") running++;
    else if (c.phase === "queued") queued++;
  }
  return { running, queued };
}

// ------------------------------------------------------------------ dispatch

export function validateSpec(st: AgentState, spec: ExecutionSpec | undefined): { code: Code; message: string } | null {
  if (!spec) return { code: Code.VALIDATION, message: "dispatch has no execution spec" };
  const tooLong = (s: string): boolean => s.length > MAX_SPEC_STRING_BYTES || s.includes("\0");
  const p = spec.program;
  switch (p.case) {
    case "argv":
      if (p.value.argv.length === 0 || p.value.argv[0] === "") return { code: Code.VALIDATION, message: "argv is empty" };
      if (p.value.argv.length > MAX_ARGV_ITEMS) return { code: Code.VALIDATION, message: "argv has too many items" };
      if (p.value.argv.some(tooLong)) return { code: Code.VALIDATION, message: "argv item too long or contains NUL" };
      break;
    case "shell":
      if (!st.config.supportedShells.includes(p.value.shell))
        return { code: Code.UNSUPPORTED_PLATFORM, message: `shell ${p.value.shell} is not supported on this agent` };
      if (p.value.commandLine === "" || tooLong(p.value.commandLine)) return { code: Code.VALIDATION, message: "command line empty, too long or contains NUL" };
      break;
    case "script": {
      const size = safeNumber(p.value.sizeBytes);
      if (size === null || size === 0 || size > MAX_SCRIPT_BYTES) return { code: Code.VALIDATION, message: `script size must be 1..${MAX_SCRIPT_BYTES} bytes` };
      if (p.value.sha256.length !== 32) return { code: Code.VALIDATION, message: "script sha256 must be 32 bytes" };
      if (tooLong(p.value.interpreter) || p.value.args.some(tooLong)) return { code: Code.VALIDATION, message: "script interpreter/args invalid" };
      break;
    }
    default:
      return { code: Code.VALIDATION, message: "execution spec names no program" };
  }
  if (tooLong(spec.cwd)) return { code: Code.VALIDATION, message: "cwd too long or contains NUL" };
  if (spec.environment.length > MAX_ENV_ITEMS) return { code: Code.VALIDATION, message: "too many environment variables" };
  for (const e of spec.environment) {
    if (e.name === "" || e.name.includes("=") || tooLong(e.name) || tooLong(e.value))
      return { code: Code.VALIDATION, message: `invalid environment variable ${JSON.stringify(e.name.slice(0, 64))}` };
  }
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
  if (running + queued >= st.config.maxRunning + st.config.maxQueued || queued >= st.config.maxQueued + Math.max(0, st.config.maxRunning - running))
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

export function handleEventAck(st: AgentState, ctx: AgentCtx, a: EventAck, fail: Fail): void {
  const cb = st.outbox.commands.get(a.issueUuid);
  if (!cb) return; // Already retired: a late or repeated ack.
  const through = safeNumber(a.throughEventSeq);
  const records: PersistRecord[] = [];
  if (through === null || !acknowledge(st.outbox, cb, through, records)) {
    return fail(Code.SEQUENCE_VIOLATION, `EventAck through ${a.throughEventSeq} for ${a.issueUuid} beyond last assigned ${cb.nextSeq - 1}`, true);
  }
  ctx.persist(...records);
}

// ------------------------------------------------------------------ launch

export function launchReady(st: AgentState, ctx: AgentCtx): void {
  let { running } = countCapacity(st);
  for (const c of st.commands.values()) {
    if (running >= st.config.maxRunning) return;
    if (c.phase !== "queued") continue;
    if (c.queueExpiry > 0 && ctx.now >= c.queueExpiry) continue; // expireQueued handles it
    if (c.script && !c.script.committed) continue;
    if (c.script && c.script.path === "") {
      c.phase = "preparing";
      ctx.persist(commandRecord(c));
      ctx.emit({
        type: "write_script",
        uuid: c.uuid,
        data: concatBytes(c.script.chunks),
        sha256: hexBytes(c.script.sha256),
      });
      running++;
      continue;
    }
    c.phase = "launching";
    ctx.persist(commandRecord(c));
    ctx.emit(trace("launch_authorized", { uuid: c.uuid }));
    ctx.afterDurable({ kind: "launch", uuid: c.uuid });
    running++;
  }
}

function hexBytes(h: string): Uint8Array {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function runDeferredCommand(st: AgentState, ctx: AgentCtx, a: AgentDeferred, env: AgentEnv): void {
  void env;
  switch (a.kind) {
    case "send_accepted":
      if (a.conn === st.session.conn && st.session.phase === "established" && st.commands.has(a.uuid)) {
        send(st, ctx, {
          case: "commandAccepted",
          value: create(CommandAcceptedSchema, { issueUuid: a.uuid, commandRevision: BigInt(a.revision), accepted: true }),
        });
      }
      break;
    case "launch": {
      const c = st.commands.get(a.uuid);
      if (!c || c.phase !== "launching") break;
      if (c.cancelRevision > 0) {
        finish(st, ctx, c, CommandLifecycle.CANCELLED, { reason: "cancelled before launch" }, c.cancelRevision);
        break;
      }
      ctx.emit({ type: "spawn", uuid: c.uuid, spec: c.spec, scriptPath: c.script?.path ?? "" });
      break;
    }
    case "stdin": {
      const c = st.commands.get(a.uuid);
      if (c) flushStdin(ctx, c);
      break;
    }
    default:
      break;
  }
}

export function handleScriptPrepared(st: AgentState, ctx: AgentCtx, uuid: string, path: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "preparing" || !c.script) return;
  // The file on disk is the copy from now on; the journaled chunks can go.
  deleteChunks(ctx, c);
  c.script.path = path;
  c.script.chunks = [];
  c.phase = "queued";
  ctx.persist(commandRecord(c));
}

export function handleScriptFailed(st: AgentState, ctx: AgentCtx, uuid: string, reason: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "preparing") return;
  finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `could not prepare script: ${reason}`, code: Code.VALIDATION });
}

export function handleProcessStarted(st: AgentState, ctx: AgentCtx, uuid: string, pid: number): void {
  const c = st.commands.get(uuid);
  if (!c) {
    // The command was removed while its spawn was in flight (a ReconcileResult
    // terminated it): no command owns this process, so it must not run on (R-D11).
    if (pid > 0) ctx.emit({ type: "kill_orphan", uuid, pid });
    return;
  }
  if (c.phase !== "launching") return;
  c.phase = "running";
  c.pid = pid;
  c.lifecycle = CommandLifecycle.RUNNING;
  ctx.persist(commandRecord(c));
  appendLifecycle(st, ctx, c, CommandLifecycle.RUNNING, {});
  if (c.cancelRevision > 0) ctx.emit({ type: "signal", uuid, signal: SignalKind.CANCEL, revision: c.cancelRevision });
  flushStdin(ctx, c);
}

export function handleSpawnFailed(st: AgentState, ctx: AgentCtx, uuid: string, reason: string): void {
  const c = st.commands.get(uuid);
  if (!c || c.phase !== "launching") return;
  // Nothing ran: this is a preparation failure, never a process failure (R-C4).
  finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `could not launch: ${reason}`, code: Code.VALIDATION });
}

export function handleOutput(st: AgentState, ctx: AgentCtx, uuid: string, stream: StreamName, data: Uint8Array): void {
  const c = st.commands.get(uuid);
  const cb = st.outbox.commands.get(uuid);
  if (!c || !cb || c.phase !== "running" || cb.closed) return;
  const records: PersistRecord[] = [];
  for (let o = 0; o < data.length; o += MAX_CHUNK_BYTES) {
    appendOutput(st.outbox, cb, stream, data.subarray(o, Math.min(data.length, o + MAX_CHUNK_BYTES)), c.revision, ctx.wall, records);
  }
  ctx.persist(...records);
}

export function handleExit(
  st: AgentState,
  ctx: AgentCtx,
  x: { uuid: string; exitCode: number | null; signal: string | null; timedOut: boolean; incompleteStreams: StreamName[] },
): void {
  const c = st.commands.get(x.uuid);
  if (c && c.phase === "launching") handleProcessStarted(st, ctx, x.uuid, 0); // an exit implies a start
  if (!c || c.phase !== "running") return;
  if (x.incompleteStreams.length > 0) {
    appendEvent(st, ctx, c, {
      case: "incomplete",
      value: create(OutputIncompleteSchema, {
        streams: x.incompleteStreams.map((s) => (s === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR)),
        reason: "capture pipe not drained to EOF (a descendant may still hold it open)",
      }),
    });
  }
  if (c.cancelRevision > 0 && x.exitCode !== 0) {
    finish(st, ctx, c, CommandLifecycle.CANCELLED, exitExtra(x, "ended after an operator request"), c.cancelRevision);
  } else if (x.exitCode === 0 && !x.timedOut) {
    finish(st, ctx, c, CommandLifecycle.SUCCEEDED, { exitCode: 0 });
  } else {
    finish(st, ctx, c, CommandLifecycle.FAILED, exitExtra(x, x.timedOut ? "timed out" : ""));
  }
}

function exitExtra(x: { exitCode: number | null; signal: string | null }, reason: string): { exitCode?: number; signalName?: string; reason: string } {
  const out: { exitCode?: number; signalName?: string; reason: string } = { reason };
  if (x.exitCode !== null) out.exitCode = x.exitCode;
  if (x.signal !== null) out.signalName = x.signal;
  return out;
}

/** Make a command terminal: stdin leftovers are answered, then the lifecycle event. */
export function finish(
  st: AgentState,
  ctx: AgentCtx,
  c: AgentCommand,
  state: CommandLifecycle,
  extra: { exitCode?: number; signalName?: string; reason?: string; code?: Code },
  revision = c.revision,
): void {
  assert(c.phase !== "done", `finish twice: ${c.uuid}`);
  for (const item of c.stdin.pending) {
    ctx.persist(deleteRecord("stdin", stdinKey(c.uuid, item.seq)));
    appendEvent(st, ctx, c, {
      case: "stdinAck",
      value: create(StdinAckSchema, { writeSeq: BigInt(item.seq), closed: item.close, failure: "command ended before the write" }),
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
  c.phase = "done";
  c.lifecycle = state;
  ctx.persist(commandRecord(c));
  appendLifecycle(st, ctx, c, state, extra, revision);
  ctx.emit(trace("finished", { uuid: c.uuid, state: CommandLifecycle[state] ?? state }));
}

function deleteChunks(ctx: AgentCtx, c: AgentCommand): void {
  let off = 0;
  for (const ch of c.script?.chunks ?? []) {
    ctx.persist(deleteRecord("chunk", chunkKey(c.uuid, off)));
    off += ch.length;
  }
}

function appendEvent(st: AgentState, ctx: AgentCtx, c: AgentCommand, ev: MetaEvent, revision = c.revision): void {
  const cb = st.outbox.commands.get(c.uuid);
  if (!cb || cb.closed) return;
  const records: PersistRecord[] = [];
  appendMeta(st.outbox, cb, ev, revision, ctx.wall, records);
  ctx.persist(...records);
}

export function expireQueued(st: AgentState, ctx: AgentCtx): void {
  for (const c of st.commands.values()) {
    if ((c.phase === "queued" || c.phase === "preparing") && c.queueExpiry > 0 && ctx.now >= c.queueExpiry) {
      finish(st, ctx, c, CommandLifecycle.EXPIRED, { reason: "queue expiry passed before launch" });
    }
  }
}

// ------------------------------------------------------------------ stdin

function live(st: AgentState, uuid: string, fail: Fail): AgentCommand | null {
  const c = st.commands.get(uuid);
  if (c) return c;
  if (!st.tombstones.has(uuid)) fail(Code.NOT_FOUND, `unknown command ${uuid}`, false);
  return null;
}

export function handleStdinWrite(st: AgentState, ctx: AgentCtx, w: StdinWrite, fail: Fail): void {
  const c = live(st, w.issueUuid, fail);
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
  if (c.stdin.pendingBytes + data.length > st.config.limits.stdinPendingPerCommand || c.stdin.pending.length >= STDIN_WRITES_IN_FLIGHT)
    return fail(Code.CAPACITY, `stdin buffer for ${c.uuid} is full; resend later`, false);
  c.stdin.next++;
  c.stdin.pending.push({ seq, data, close: false });
  c.stdin.pendingBytes += data.length;
  ctx.persist(commandRecord(c), stdinRecord(c.uuid, { seq, data, close: false }));
  ctx.afterDurable({ kind: "stdin", uuid: c.uuid });
}

export function handleCloseStdin(st: AgentState, ctx: AgentCtx, w: CloseStdin, fail: Fail): void {
  const c = live(st, w.issueUuid, fail);
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

function flushStdin(ctx: AgentCtx, c: AgentCommand): void {
  if (c.phase !== "running" || c.stdin.inFlight) return;
  const item = c.stdin.pending[0];
  if (!item) return;
  c.stdin.inFlight = true;
  if (item.close) ctx.emit({ type: "close_stdin", uuid: c.uuid, seq: item.seq });
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

// ------------------------------------------------------------------ signals

const ENDING = new Set<SignalKind>([
  SignalKind.CANCEL,
  SignalKind.TERMINATE,
  SignalKind.KILL,
  SignalKind.INTERRUPT,
  SignalKind.HANGUP,
  SignalKind.QUIT,
]);

export function handleSignal(st: AgentState, ctx: AgentCtx, s: SignalCommand, fail: Fail): void {
  const c = live(st, s.issueUuid, fail);
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
  }
}

// ------------------------------------------------------------------ scripts

export function handleScriptChunk(st: AgentState, ctx: AgentCtx, ch: ScriptChunk, env: AgentEnv, fail: Fail): void {
  const c = live(st, ch.issueUuid, fail);
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
      return finish(st, ctx, c, CommandLifecycle.REJECTED, { reason: `script chunk at ${offset} differs from the bytes already received`, code: Code.VALIDATION });
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
  const c = live(st, m.issueUuid, fail);
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

// ------------------------------------------------------------------ retire

export function tombstoneAndRemove(st: AgentState, ctx: AgentCtx, uuid: string, why: string): void {
  const c = st.commands.get(uuid);
  if (!c) return;
  const records: PersistRecord[] = [];
  removeCommand(st.outbox, uuid, records);
  ctx.persist(...records);
  for (const item of c.stdin.pending) ctx.persist(deleteRecord("stdin", stdinKey(uuid, item.seq)));
  deleteChunks(ctx, c);
  ctx.persist(deleteRecord("command", uuid));
  st.commands.delete(uuid);
  st.metadataUsed -= st.config.limits.metadataPerCommand;
  if (c.script) st.scriptBytes -= c.script.size;
  st.tombstones.set(uuid, c.hash);
  st.tombstoneSeq++;
  ctx.persist(tombstoneRecord(uuid, { hash: c.hash, order: st.tombstoneSeq }));
  while (st.tombstones.size > st.config.limits.maxTombstones) {
    const oldest = st.tombstones.keys().next().value as string;
    st.tombstones.delete(oldest);
    ctx.persist(deleteRecord("tombstone", oldest));
  }
  ctx.emit(trace("tombstoned", { uuid, why }));
}

export function agentCommandInvariants(st: AgentState): void {
  const L = st.config.limits;
  let scriptBytes = 0;
  let running = 0;
  for (const [uuid, c] of st.commands) {
    assert(c.uuid === uuid, "command key mismatch");
    assert(st.outbox.commands.has(uuid), `${uuid} has no outbox`);
    if (c.phase === "queued" || c.phase === "preparing" || c.phase === "launching") assert(c.lifecycle === CommandLifecycle.ACCEPTED, `${uuid} ${c.phase} with lifecycle ${c.lifecycle}`);
    if (c.phase === "running") assert(c.lifecycle === CommandLifecycle.RUNNING, `${uuid} running with lifecycle ${c.lifecycle}`);
    if (c.phase === "launching" || c.phase === "running" || c.phase === "preparing") running++;
    let pb = 0;
    let prev = 0;
    for (const p of c.stdin.pending) {
      assert(p.seq > prev && p.seq < c.stdin.next, `${uuid} stdin pending order`);
      prev = p.seq;
      pb += p.data.length;
    }
    assert(pb === c.stdin.pendingBytes, `${uuid} stdin bytes drift`);
    assert(c.stdin.pendingBytes <= L.stdinPendingPerCommand, `${uuid} stdin over budget`);
    // A close may follow a full buffer of writes.
    assert(c.stdin.pending.length <= STDIN_WRITES_IN_FLIGHT + 1, `${uuid} stdin writes over their bound`);
    if (c.script) {
      scriptBytes += c.script.size;
      assert(c.script.received <= c.script.size, `${uuid} script over size`);
      if (c.phase !== "done" && c.script.path === "") {
        let n = 0;
        for (const ch of c.script.chunks) n += ch.length;
        assert(n === c.script.received, `${uuid} script chunks drift`);
      }
    }
  }
  for (const uuid of st.outbox.commands.keys()) assert(st.commands.has(uuid), `outbox ${uuid} without command`);
  assert(running <= st.config.maxRunning, `running ${running} over max ${st.config.maxRunning}`);
  assert(st.metadataUsed === st.commands.size * L.metadataPerCommand, "metadata budget drift");
  assert(st.metadataUsed <= L.metadataBudget, "metadata budget exceeded");
  assert(scriptBytes === st.scriptBytes && st.scriptBytes <= L.scriptTotal, "script budget drift/exceeded");
}

export { removeCommand };
