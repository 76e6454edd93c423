/**
 * ControlService (protos/rvbox/v1/control.proto) on top of the server daemon.
 * Mutations become core `control` requests and return once the core replied
 * (after the persist they depend on is durable). Queries read the core's
 * state (read-only) and, for FollowOutput, the durable store and segment
 * files. WatchFleet streams the same views as the List calls, pushed by the
 * daemon's FleetWatch (fleet-watch.ts) when the core's state changes. Request ids: the caller's, or a random one; the core maps them to
 * revisions / write sequences (R-S5).
 */
import { randomUUID, createHash } from "node:crypto";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { Code as ConnectCode, ConnectError, type HandlerContext, type ServiceImpl, createContextKey } from "@connectrpc/connect";
import { storeReadUnavailable } from "./store-errors.js";
import {
  Code,
  checkSpecLimits,
  MAX_AUDIT_PAGE_ENTRIES,
  MAX_OPEN_INCIDENTS,
  MAX_OPEN_INCIDENTS_PER_CLIENT,
  codeName,
  isTerminal,
  matchesSelector,
  missingMessage,
  parseSelector,
  type AuditCall,
  type AuditEntry as ServerAuditEntry,
  type RefusalEntry as ServerRefusalEntry,
  type ClientRecord,
  type ControlRequest,
  type ConnState,
  type CoreError,
  type Incident as ServerIncident,
  type PrunedCommand,
  type ServerCommand,
  type ServerJob,
  type ServerState,
} from "../../core/index.js";
import {
  ArgvProgramSchema,
  CommandLifecycle,
  ControlErrorSchema,
  ExecutionSpecSchema,
  OutputStream,
  ScriptDescriptorSchema,
  ShellProgramSchema,
  ShellType,
  TruncationCause,
  type ExecutionSpec,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  type AuditEntry,
  AuditEntrySchema,
  ClientSchema,
  CommandSchema,
  type ControlService,
  IncidentSchema,
  JobChildPhase,
  JobSchema,
  PendingClaimSchema,
  SessionSchema,
  TerminalSource,
  type Client,
  type Command,
  type FollowOutputResponseSchema,
  type Incident,
  type Job,
  type PendingClaim,
  type Session,
} from "../../protos/gen/rvbox/v1/control_pb.js";
import { decompressRun } from "../zstd/index.js";
import {
  type AuditPage,
  type CommandQuery,
  type FrameReader,
  type ListPosition,
  pageOf,
  type StoredEventRow,
  type StoredOutputRow,
} from "../storage/server-store.js";
import type { ServerDaemon } from "./server-daemon.js";
import { idProblem, MAX_WATCHED_CLIENTS } from "./id-limits.js";
import type { Identity } from "./operators.js";
import { MAX_ISSUE_UUID_CHARS, MAX_JOB_TARGETS } from "../../core/limits.js";
import { restoreCommand } from "../../core/server/store.js";
import { ledgerRowOf } from "../../core/server/restore.js";
import type { OpenStream, StreamMethod } from "./open-streams.js";

type FollowItem = MessageInitShape<typeof FollowOutputResponseSchema>;

/** The caller of this call (set by the daemon from the bearer token). */
export const IDENTITY_KEY = createContextKey<Identity | null>(null, { description: "rvbox operator identity" });
/** The Authorization header the caller presented (streams are identified again with it on a reload). */
export const AUTH_KEY = createContextKey<string>("", { description: "rvbox authorization header" });

/** Set per call by the access interceptor for an identified caller's mutating RPC. */
export const AUDIT_KEY = createContextKey<{ call: AuditCall; recorded: boolean } | null>(null, { description: "rvbox audit call" });

const CODE_MAP: Partial<Record<Code, ConnectCode>> = {
  [Code.VALIDATION]: ConnectCode.InvalidArgument,
  [Code.PAYLOAD_TOO_LARGE]: ConnectCode.InvalidArgument,
  [Code.NOT_FOUND]: ConnectCode.NotFound,
  [Code.CAPACITY]: ConnectCode.ResourceExhausted,
  [Code.CONFLICT]: ConnectCode.AlreadyExists,
  [Code.ALREADY_EXECUTED]: ConnectCode.AlreadyExists,
  [Code.UNAUTHENTICATED]: ConnectCode.Unauthenticated,
  [Code.UNSUPPORTED_PLATFORM]: ConnectCode.FailedPrecondition,
  // A terminal (run -t) for a client whose agent negotiated protocol 1.0.
  [Code.INCOMPATIBLE_VERSION]: ConnectCode.FailedPrecondition,
  // A chained stdin write ahead of its predecessor: the writer resends it in order.
  [Code.SEQUENCE_VIOLATION]: ConnectCode.Aborted,
};

export function toConnectError(e: CoreError, connectCode?: ConnectCode): ConnectError {
  return new ConnectError(`${codeName(e.code)}: ${e.message}`, connectCode ?? CODE_MAP[e.code] ?? ConnectCode.Internal, undefined, [
    { desc: ControlErrorSchema, value: { code: e.code, message: e.message, issueUuid: e.issueUuid ?? "" } },
  ]);
}

/** An argv or shell program of a submit as the core stores it (the shell defaults to sh). */
function argvOrShell(
  p: { case: "argv"; value: { argv: string[] } } | { case: "shell"; value: { shell: ShellType; commandLine: string } },
): ExecutionSpec["program"] {
  if (p.case === "argv") return { case: "argv", value: create(ArgvProgramSchema, { argv: p.value.argv }) };
  const shell = p.value.shell === ShellType.UNSPECIFIED ? ShellType.SH : p.value.shell;
  return { case: "shell", value: create(ShellProgramSchema, { shell, commandLine: p.value.commandLine }) };
}

/**
 * The spec limits every agent enforces (core/dispatch/spec-limits.ts), checked
 * here on the decoded request before it reaches the server's loop: a 10 MB
 * argv item or a million of them costs one check, not a trip through the
 * core. The core checks the same again (and the dispatch's envelope size).
 */
function refuseOverLimits(spec: ExecutionSpec): void {
  const bad = checkSpecLimits(spec);
  if (bad) throw toConnectError(bad);
}

function invalid(message: string): ConnectError {
  return toConnectError({ code: Code.VALIDATION, message });
}

/**
 * Why a command that has not started is still waiting, from what the server
 * holds now (one client lookup; empty when nothing holds it back). `fleet`
 * absent (a pushed change): not computed.
 */
export function waitingReason(c: ServerCommand, fleet?: FleetReader): string {
  if (!fleet) return "";
  const s = c.committed.state;
  if (s !== CommandLifecycle.QUEUED && s !== CommandLifecycle.DISPATCHED && s !== CommandLifecycle.ACCEPTED) return "";
  const st = fleet.state;
  const cl = st.clients.get(c.clientId);
  if (!cl) return `client ${c.clientId} has never registered (or was forgotten); the command waits for an agent under that id`;
  if (s === CommandLifecycle.QUEUED && cl.draining) return `client draining: ${c.clientId} takes no new command until rvbox drain ${c.clientId} --off`;
  const conn = cl.conn !== 0 ? st.conns.get(cl.conn) : undefined;
  if (!conn) return `client ${c.clientId} offline since ${new Date(clientActivity(fleet, cl)).toISOString().replace(/\.\d{3}Z$/, "Z")}`;
  if (conn.phase !== "ready") return `client ${c.clientId} is reconnecting (${conn.phase})`;
  const k = cl.capacity;
  if (s === CommandLifecycle.ACCEPTED) {
    return k.maxRunning > 0 && k.running >= k.maxRunning ? `accepted by ${c.clientId}; queued there behind ${k.running} running (agent capacity full)` : "";
  }
  if (s === CommandLifecycle.DISPATCHED) return c.dispatch.attempts > 1 ? `dispatched to ${c.clientId} ${c.dispatch.attempts} times without an answer yet` : "";
  if (k.maxRunning + k.maxQueued - k.running - k.queued - conn.inflight <= 0)
    return `queued behind ${[`${k.running} running`, k.queued > 0 ? `${k.queued} queued` : "", conn.inflight > 0 ? `${conn.inflight} being dispatched` : ""].filter(Boolean).join(", ")} on ${c.clientId} (agent capacity full: ${k.maxRunning} running, ${k.maxQueued} queued)`;
  if (conn.inflight >= st.config.limits.maxInflightDispatches)
    return `server capacity full: ${conn.inflight} dispatches to ${c.clientId} await an answer (at most ${st.config.limits.maxInflightDispatches})`;
  if (fleet.toWall(c.dispatch.nextAttemptAt) > Date.now()) return `${c.clientId} refused it for capacity; retrying`;
  return "";
}

/** `waiting`: compute waiting_reason (reads; pushed changes skip it). */
export function toCommand(c: ServerCommand, d: FleetReader, waiting = true): Command {
  return create(CommandSchema, {
    issueUuid: c.uuid,
    clientId: c.clientId,
    // Readers see the committed view: nothing a crash could take back.
    state: c.committed.state,
    revision: BigInt(c.committed.revision),
    spec: c.spec,
    createdTime: timestampFromMs(c.createdAt),
    queueExpiryTime: timestampFromMs(d.toWall(c.queueExpiry)),
    exitCode: c.committed.exitCode ?? undefined,
    signalName: c.committed.signalName,
    reason: c.committed.reason,
    terminalSource:
      c.exit.terminalSource === "agent" ? TerminalSource.AGENT : c.exit.terminalSource === "server" ? TerminalSource.SERVER : TerminalSource.UNSPECIFIED,
    storedThroughEventSeq: BigInt(c.committed.storedThrough),
    retainedOutputBytes: BigInt(c.output.storedOutputBytes),
    retentionMarkers: c.output.retention.length,
    dispatchAttempts: c.dispatch.attempts,
    stdinAckedThrough: BigInt(c.stdin.ackedThrough),
    stdinCloseRequested: c.stdin.closeRequested,
    requestSha256: c.hash,
    startedTime: c.committed.startedTime > 0 ? timestampFromMs(c.committed.startedTime) : undefined,
    endedTime: c.committed.endedTime > 0 ? timestampFromMs(c.committed.endedTime) : undefined,
    waitingReason: waitingReason(c, waiting ? d : undefined),
  });
}

const PHASES: Record<ServerJob["children"][number]["phase"], JobChildPhase> = {
  pending: JobChildPhase.PENDING,
  started: JobChildPhase.STARTED,
  done: JobChildPhase.DONE,
  refused: JobChildPhase.REFUSED,
  cancelled: JobChildPhase.CANCELLED,
};

/**
 * A job as readers see it: its committed view; a started child shows its
 * command's committed state (queued .. running). `children` false: the
 * summary only (ListJobs).
 */
export function toJob(j: ServerJob, d: FleetReader, children = true): Job {
  const v = j.committed;
  const sum = { targets: v.children.length, pending: 0, inFlight: 0, succeeded: 0, failed: 0, cancelled: 0 };
  const kids = v.children.map((c, i) => {
    const base = j.children[i]!;
    const cmd = c.phase === "started" ? d.state.commands.get(base.uuid) : undefined;
    if (c.phase === "pending") sum.pending++;
    else if (c.phase === "started") sum.inFlight++;
    else if (c.phase === "cancelled") sum.cancelled++;
    else if (c.phase === "done" && c.state === CommandLifecycle.SUCCEEDED) sum.succeeded++;
    else sum.failed++;
    const started = cmd ? cmd.committed.startedTime : c.startedTime;
    return {
      clientId: base.clientId,
      issueUuid: base.uuid,
      phase: PHASES[c.phase],
      state: cmd ? cmd.committed.state : c.state,
      exitCode: c.exitCode ?? undefined,
      reason: c.reason,
      createdTime: c.createdAt > 0 ? timestampFromMs(c.createdAt) : undefined,
      startedTime: started > 0 ? timestampFromMs(started) : undefined,
      endedTime: c.endedTime > 0 ? timestampFromMs(c.endedTime) : undefined,
    };
  });
  return create(JobSchema, {
    jobId: j.id,
    createdTime: timestampFromMs(j.createdAt),
    spec: j.spec,
    maxConcurrency: j.concurrencyText,
    maxConcurrencyResolved: j.maxConcurrency,
    maxErrors: j.errorsText,
    maxErrorsResolved: j.maxErrors,
    stoppedReason: v.stopped,
    endedTime: v.endedAt > 0 ? timestampFromMs(v.endedAt) : undefined,
    children: children ? kids : [],
    summary: sum,
    selector: j.selector,
  });
}

const streamEnum = (s: unknown): OutputStream => (s === "stdout" ? OutputStream.STDOUT : s === "stderr" ? OutputStream.STDERR : OutputStream.UNSPECIFIED);

function rangesToWire(ranges: Array<{ stream: string; offset: number; length: number }>) {
  return ranges.map((r) => ({ stream: streamEnum(r.stream), offset: BigInt(r.offset), length: BigInt(r.length) }));
}

function requestId(given: string, kind: string): string {
  return given !== "" ? given : `${kind}-${randomUUID()}`;
}

/**
 * The audit call of an identified caller's mutating RPC (set by the access
 * interceptor, server-daemon.ts), marked as recorded: the core appends the
 * entry with the call's result, so the interceptor does not add another.
 */
function audited(hctx: HandlerContext): AuditCall | undefined {
  const a = hctx.values.get(AUDIT_KEY);
  if (!a) return undefined;
  a.recorded = true;
  return a.call;
}

/**
 * The clients a listing is about: `clientId` (empty: any), narrowed to those
 * whose labels match `selector` (a client the server holds no record of
 * matches no selector). null: every client.
 */
function listedClients(d: ServerDaemon, clientId: string, selector: string): string[] | null {
  if (selector === "") return clientId === "" ? null : [clientId];
  const sel = parseSelector(selector);
  if (!sel.ok) throw toConnectError(sel.error);
  const ids: string[] = [];
  for (const c of d.state.clients.values()) if ((clientId === "" || c.clientId === clientId) && matchesSelector(c.labels, sel.value)) ids.push(c.clientId);
  return ids;
}

/**
 * The store's record of an ended command that memory and the ledger no
 * longer hold (history in the store), for a repeated submit of its uuid; the
 * core decides what it means (submit.ts).
 */
async function storedEnded(d: ServerDaemon, uuid: string): Promise<PrunedCommand | undefined> {
  if (!d.storage.keepsHistory || d.state.commands.has(uuid) || d.state.pruned.has(uuid)) return undefined;
  const row = await d.whileStoreUp(() => d.storage.readCommand(uuid));
  if (!row || !isTerminal(row.state)) return undefined;
  return ledgerRowOf(row);
}

/** A page of the commands memory holds, by their committed view (what the store holds of them), in listing order. */
function memoryCommands(d: ServerDaemon, q: CommandQuery): ServerCommand[] {
  const views = [];
  for (const c of d.state.commands.values())
    if (c.committed.state !== CommandLifecycle.UNSPECIFIED)
      views.push({ uuid: c.uuid, clientId: c.clientId, createdAt: c.createdAt, state: c.committed.state, c });
  return pageOf(views, q).map((v) => v.c);
}

/** The audit log as memory holds it (a store that does not keep the history). */
function memoryAudit(d: ServerDaemon, matches: (e: ServerAuditEntry) => boolean, limit: number): AuditPage {
  const all = [...d.state.audit.values()].filter(matches);
  return { entries: all.slice(Math.max(0, all.length - limit)), matched: all.length, swept: 0 };
}

/**
 * The child uuids of job `jobId` (`jobId.n`, n up to its explicit targets,
 * or up to MAX_JOB_TARGETS for a selector) that the store holds commands
 * under and memory does not (history in the store): a job id used before
 * must not reuse them (the core refuses, jobs.ts).
 */
async function storedChildren(d: ServerDaemon, jobId: string, explicit: number): Promise<string[]> {
  if (!d.storage.keepsHistory) return [];
  const n = explicit > 0 ? Math.min(explicit, MAX_JOB_TARGETS) : MAX_JOB_TARGETS;
  const uuids = Array.from({ length: n }, (_, i) => `${jobId}.${i + 1}`).filter((u) => !d.state.commands.has(u) && !d.state.pruned.has(u));
  return d.whileStoreUp(() => d.storage.storedUuids(uuids));
}

/** A ListCommands page token: where the page ended (`createdAt:uuid`; the listing's order is created_at, then uuid). */
function pageToken(c: ServerCommand): string {
  return `${c.createdAt}:${c.uuid}`;
}

/** The position a page token names; undefined: not one of ours. */
function parsePageToken(t: string): ListPosition | undefined {
  const at = t.indexOf(":");
  const createdAt = Number(t.slice(0, at));
  const uuid = t.slice(at + 1);
  if (at <= 0 || !Number.isFinite(createdAt) || uuid === "" || uuid.length > MAX_ISSUE_UUID_CHARS) return undefined;
  return { createdAt, uuid };
}

/**
 * A command as readers see it: held in memory, else its stored row (the
 * history in the store: the committed view of a command memory let go of),
 * else NOT_FOUND. (Reads are not scoped by an operator's selector: the
 * access table lets every role read every command.)
 */
export async function readCommand(d: ServerDaemon, uuid: string): Promise<ServerCommand> {
  const held = d.state.commands.get(uuid);
  if (held) return held;
  const row = await d.storage.readCommand(uuid);
  const now = d.state.commands.get(uuid);
  if (now) return now;
  if (!row) throw toConnectError({ code: Code.NOT_FOUND, message: missingMessage(d.state, uuid) });
  return restoreCommand(row, undefined);
}

export function controlServiceImpl(d: ServerDaemon): ServiceImpl<typeof ControlService> {
  const command = (uuid: string): ServerCommand => {
    const c = d.state.commands.get(uuid);
    if (!c) throw toConnectError({ code: Code.NOT_FOUND, message: missingMessage(d.state, uuid) });
    return c;
  };
  const call = async (hctx: HandlerContext, req: ControlRequest) => {
    const audit = audited(hctx);
    const r = await d.control(req, audit);
    // Every operator action that changes something, at INFO (rate-limited per kind); the audit log has them all.
    const f = req as unknown as Record<string, unknown>;
    const detail: Record<string, unknown> = audit ? { operator: audit.operator } : {};
    for (const k of ["clientId", "uuid", "instanceId", "incidentId", "signal"]) if (f[k] !== undefined && f[k] !== "") detail[k] = f[k];
    d.logOperatorAction(req.op, detail, r.ok ? "ok" : codeName(r.error.code));
    if (!r.ok) throw toConnectError(r.error);
    return r;
  };

  const job = (id: string): ServerJob => {
    const j = d.state.jobs.get(id);
    if (!j) throw toConnectError({ code: Code.NOT_FOUND, message: `no job ${id}` });
    return j;
  };

  return {
    async submitJob(req, hctx) {
      if (req.clientIds.length === 0 && req.selector === "") throw invalid("client_ids or selector: at least one target is required");
      let program: ExecutionSpec["program"];
      switch (req.program.case) {
        case "argv":
        case "shell":
          program = argvOrShell(req.program);
          break;
        default:
          throw invalid("no program: set argv or shell");
      }
      const spec = create(ExecutionSpecSchema, { program, cwd: req.cwd, environment: req.environment, timeoutMs: req.timeoutMs, stdinOpen: false });
      refuseOverLimits(spec);
      const jobId = req.jobId !== "" ? req.jobId : randomUUID();
      const storedUuids = req.jobId !== "" ? await storedChildren(d, jobId, req.clientIds.length) : [];
      await call(hctx, {
        op: "submit_job",
        ...(storedUuids.length > 0 ? { storedUuids } : {}),
        requestId: requestId(req.requestId, "submit-job"),
        jobId,
        clients: req.clientIds,
        ...(req.selector !== "" ? { selector: req.selector } : {}),
        spec,
        queueExpiry: req.queueExpiryTime ? timestampMs(req.queueExpiryTime) : 0,
        maxConcurrency: req.maxConcurrency,
        maxErrors: req.maxErrors,
      });
      return { job: toJob(job(jobId), d) };
    },

    async cancelJob(req, hctx) {
      if (req.jobId === "") throw invalid("job_id is required");
      const r = await call(hctx, { op: "cancel_job", requestId: requestId(req.requestId, "cancel-job"), jobId: req.jobId });
      return {
        job: toJob(job(req.jobId), d),
        notStarted: r.notStarted ?? 0,
        cancelledRunning: r.cancelledRunning ?? 0,
        refused: r.refused ?? [],
      };
    },

    async getJob(req) {
      return { job: toJob(job(req.jobId), d) };
    },

    async listJobs(req) {
      const list = [...d.state.jobs.values()].sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? -1 : 1));
      const size = req.pageSize === 0 ? 1000 : Math.min(req.pageSize, 10_000);
      return { jobs: list.slice(0, size).map((j) => toJob(j, d, false)) };
    },

    async submitCommand(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const uuid = req.issueUuid !== "" ? req.issueUuid : randomUUID();
      let program: ExecutionSpec["program"];
      let script: Uint8Array | undefined;
      switch (req.program.case) {
        case "argv":
        case "shell":
          program = argvOrShell(req.program);
          break;
        case "script": {
          const s = req.program.value;
          script = s.content;
          const digest = s.sha256.length > 0 ? s.sha256 : new Uint8Array(createHash("sha256").update(s.content).digest());
          program = {
            case: "script",
            value: create(ScriptDescriptorSchema, { sizeBytes: BigInt(s.content.length), sha256: digest, interpreter: s.interpreter, args: s.args }),
          };
          break;
        }
        default:
          throw invalid("no program: set argv, shell or script");
      }
      const spec = create(ExecutionSpecSchema, {
        program,
        cwd: req.cwd,
        environment: req.environment,
        timeoutMs: req.timeoutMs,
        stdinOpen: req.stdinOpen,
        ...(req.terminal ? { terminal: req.terminal } : {}),
      });
      refuseOverLimits(spec);
      const queueExpiry = req.queueExpiryTime ? timestampMs(req.queueExpiryTime) : 0;
      const request = {
        op: "submit" as const,
        requestId: requestId(req.requestId, "submit"),
        uuid,
        clientId: req.clientId,
        spec,
        queueExpiry,
        allowUnknownClient: req.allowUnknownClient,
      };
      const stored = req.issueUuid !== "" ? await storedEnded(d, uuid) : undefined;
      await call(hctx, { ...request, ...(script ? { script } : {}), ...(stored ? { stored } : {}) });
      return { command: toCommand(command(uuid), d) };
    },

    async getCommand(req) {
      return { command: toCommand(await readCommand(d, req.issueUuid), d) };
    },

    async listCommands(req) {
      const size = req.pageSize === 0 ? 1000 : Math.min(req.pageSize, 10_000);
      const after = req.pageToken === "" ? null : parsePageToken(req.pageToken);
      if (after === undefined) throw invalid("bad page_token: pass the next_page_token of the previous page");
      const q: CommandQuery = {
        clientIds: listedClients(d, req.clientId, req.selector),
        states: req.states,
        createdFrom: req.createdAfter ? timestampMs(req.createdAfter) : 0,
        createdBefore: req.createdBefore ? timestampMs(req.createdBefore) : 0,
        after,
        limit: size,
      };
      // A store that keeps the history answers from it; otherwise memory holds every stored command.
      const page = d.storage.keepsHistory ? (await d.storage.listCommands(q)).map((r) => restoreCommand(r, undefined)) : memoryCommands(d, q);
      const last = page.at(-1);
      return {
        commands: page.map((c) => toCommand(c, d)),
        nextPageToken: page.length === size && last ? pageToken(last) : "",
      };
    },

    async *followOutput(req, ctx) {
      const s = openStream(d, "followOutput", ctx.values.get(IDENTITY_KEY), ctx.values.get(AUTH_KEY), req);
      // Ended by the reader going away, or by a reload that revoked its caller (s.ended says why).
      const signal = AbortSignal.any([ctx.signal, s.signal]);
      try {
        // Batches for a reader that asked for them (max_batch_bytes), one event per
        // response otherwise; the loop below bounds what it holds either way.
        const batched = req.maxBatchBytes > 0;
        const budget = batched ? Math.min(req.maxBatchBytes, FOLLOW_BATCH_BYTES) : FOLLOW_BATCH_BYTES;
        const zstd = batched && req.acceptZstd;
        for await (const batch of follow(d, req.issueUuid, Number(req.fromEventSeq), req.follow, { signal }, budget, zstd)) {
          if (s.ended) break;
          if (!batched || batch.length === 1) yield* batch;
          else yield { issueUuid: req.issueUuid, eventSeq: batch[batch.length - 1]!.eventSeq, events: batch };
        }
        if (s.ended) throw s.ended;
      } catch (err) {
        const away = storeReadUnavailable(err, d.opts.store !== undefined);
        if (away) throw away;
        if (!(err instanceof ConnectError))
          d.log.error("FollowOutput failed", { uuid: req.issueUuid, err: err instanceof Error ? (err.stack ?? err.message) : String(err) });
        throw err;
      } finally {
        d.streams.close(s);
      }
    },

    async writeStdin(req, hctx) {
      const r = await call(hctx, {
        op: "stdin",
        requestId: requestId(req.requestId, "stdin"),
        uuid: req.issueUuid,
        data: req.data,
        appendNewline: req.appendNewline,
        ...(req.afterRequestId !== "" ? { afterRequestId: req.afterRequestId } : {}),
        ...(req.resize ? { resize: { rows: req.resize.rows, cols: req.resize.cols } } : {}),
      });
      return { writeSeq: BigInt(r.writeSeq ?? 0), afterChecked: req.afterRequestId !== "" };
    },

    async closeStdin(req, hctx) {
      const r = await call(hctx, { op: "close_stdin", requestId: requestId(req.requestId, "close-stdin"), uuid: req.issueUuid });
      return { writeSeq: BigInt(r.writeSeq ?? 0) };
    },

    async signalCommand(req, hctx) {
      const r = await call(hctx, {
        op: "signal",
        requestId: requestId(req.requestId, "signal"),
        uuid: req.issueUuid,
        signal: req.signal,
        ...(req.force ? { force: true } : {}),
      });
      return { revision: BigInt(r.revision ?? 0) };
    },

    async listClients(req) {
      const sel = parseSelector(req.selector);
      if (!sel.ok) throw toConnectError(sel.error);
      const active = activeCounts(d.state);
      const clients = [...d.state.clients.values()].filter((c) => matchesSelector(c.labels, sel.value));
      return { clients: clients.map((c) => clientView(d, c, active)), maxClients: d.state.config.limits.maxClients };
    },

    async listSessions() {
      return { sessions: [...d.state.conns.values()].map((c) => sessionView(d, c)) };
    },

    async listClaims() {
      return { claims: [...d.state.clients.values()].filter((c) => c.pendingClaim !== null).map(claimView) };
    },

    async authorizeInstance(req, hctx) {
      if (req.clientId === "" || req.instanceId === "") throw invalid("client_id and instance_id are required");
      const r = await call(hctx, {
        op: "authorize",
        requestId: requestId(req.requestId, "authorize"),
        clientId: req.clientId,
        instanceId: req.instanceId,
        instanceNotYetSeen: req.instanceNotYetSeen,
      });
      // From the reply, not the state: the claimant may already have registered and consumed it (R-F5).
      return { expiryTime: r.expiresAt !== undefined ? timestampFromMs(d.toWall(r.expiresAt)) : undefined };
    },

    async revokeAuthorization(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const r = await call(hctx, { op: "revoke_authorization", requestId: requestId(req.requestId, "revoke"), clientId: req.clientId });
      return { instanceId: r.instanceId ?? "" };
    },

    async dismissClaim(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const r = await call(hctx, { op: "dismiss_claim", requestId: requestId(req.requestId, "dismiss-claim"), clientId: req.clientId });
      return { instanceId: r.instanceId ?? "" };
    },

    async setClientDraining(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const r = await call(hctx, { op: "set_draining", requestId: requestId(req.requestId, "set-draining"), clientId: req.clientId, draining: req.draining });
      return { wasDraining: r.wasDraining ?? false };
    },

    async setClientLabels(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const r = await call(hctx, {
        op: "set_labels",
        requestId: requestId(req.requestId, "set-labels"),
        clientId: req.clientId,
        set: { ...req.set },
        remove: [...req.remove],
      });
      return { labels: { ...(r.labels ?? {}) } };
    },

    async listAudit(req) {
      const since = req.sinceTime ? timestampMs(req.sinceTime) : 0;
      const matches = (e: ServerAuditEntry & { lastAt?: number }): boolean =>
        (e.lastAt ?? e.at) >= since && (req.operator === "" || e.operator === req.operator) && (req.clientId === "" || e.clients.includes(req.clientId));
      const refused = [...d.state.refusals.values()].filter(matches);
      const limit = req.limit === 0 ? MAX_AUDIT_PAGE_ENTRIES : Math.min(req.limit, MAX_AUDIT_PAGE_ENTRIES);
      // A store that keeps the history keeps the audit log (the core holds none of it).
      const page = d.storage.keepsHistory
        ? await d.storage.listAudit({ since, operator: req.operator, clientId: req.clientId, limit })
        : memoryAudit(d, matches, limit);
      return {
        entries: page.entries.map(auditView),
        droppedEntries: BigInt(d.state.auditDropped + page.swept),
        maxEntries: d.state.config.limits.auditMax,
        matched: BigInt(page.matched),
        refusals: refused.slice(Math.max(0, refused.length - limit)).map(auditView),
        droppedRefusals: BigInt(d.state.refusalsDropped),
        maxRefusals: d.state.config.limits.auditRefusalMax,
        matchedRefusals: BigInt(refused.length),
      };
    },

    async listIncidents(req) {
      return {
        incidents: [...d.state.incidents.values()].filter((i) => req.includeAcknowledged || !i.acknowledged).map(incidentView),
        droppedTotal: BigInt(d.state.incidentsDropped),
        dropped: [...d.state.incidentDrops.values()].map((x) => ({
          clientId: x.clientId,
          count: BigInt(x.count),
          lastTime: timestampFromMs(x.lastAt),
          lastKind: x.lastKind,
        })),
        maxOpenPerClient: MAX_OPEN_INCIDENTS_PER_CLIENT,
        maxOpen: MAX_OPEN_INCIDENTS,
      };
    },

    async acknowledgeIncident(req, hctx) {
      await call(hctx, { op: "ack_incident", requestId: requestId(req.requestId, "ack-incident"), incidentId: req.incidentId });
      return {};
    },

    async forgetClient(req, hctx) {
      if (req.clientId === "") throw invalid("client_id is required");
      const r = await d.control({ op: "forget_client", requestId: requestId(req.requestId, "forget-client"), clientId: req.clientId }, audited(hctx));
      // A client still in use is a failed precondition, not an existing resource.
      if (!r.ok) throw toConnectError(r.error, r.error.code === Code.CONFLICT ? ConnectCode.FailedPrecondition : undefined);
      return { endedCommands: r.ended ?? 0 };
    },

    async *watchFleet(req, ctx) {
      if (req.commandClients.some((c) => c === "")) throw invalid('command_clients: an empty client id (use "*" for every client)');
      if (req.commandClients.length > MAX_WATCHED_CLIENTS) throw invalid(`command_clients: at most ${MAX_WATCHED_CLIENTS} clients`);
      const s = openStream(d, "watchFleet", ctx.values.get(IDENTITY_KEY), ctx.values.get(AUTH_KEY), req);
      const w = d.watch.subscribe(req.commandClients);
      if (!w) {
        d.streams.close(s);
        throw new ConnectError(`too many WatchFleet streams open (at most ${d.watch.maxWatchers})`, ConnectCode.ResourceExhausted);
      }
      const signal = AbortSignal.any([ctx.signal, s.signal]);
      try {
        for (;;) {
          const m = await w.next(signal);
          if (s.ended) throw s.ended;
          if (m === null) return;
          yield m;
        }
      } finally {
        d.watch.unsubscribe(w);
        d.streams.close(s);
      }
    },
  };
}

/**
 * Register a stream call with the daemon's open streams (open-streams.ts):
 * its ids are checked first (id-limits.ts); a FollowOutput over its bounds is
 * refused with RESOURCE_EXHAUSTED. The caller closes it when the stream ends.
 */
export function openStream(d: ServerDaemon, method: StreamMethod, who: Identity | null, auth: string, req: unknown): OpenStream {
  const why = idProblem(method, req);
  if (why !== null) throw invalid(why);
  if (!who) throw new ConnectError("operator bearer token required", ConnectCode.Unauthenticated);
  return d.streams.add(method, who, auth, req);
}

/** What the views of the fleet read: the daemon (its core state and per-connection facts). */
export interface FleetReader {
  readonly state: ServerState;
  /** Deadline clock (like the core's heartbeat times). */
  readonly lastActivity: ReadonlyMap<string, number>;
  /** `lastInbound`: deadline clock. */
  sessionInfo(conn: number): { remote: string; lastInbound: number } | undefined;
  /** A deadline-clock instant as wall time, for a timestamp shown to readers. */
  toWall(t: number): number;
}

export { MAX_WATCHED_CLIENTS };

/** Non-terminal commands per client id. */
export function activeCounts(st: ServerState): Map<string, number> {
  const active = new Map<string, number>();
  for (const uuid of st.active) {
    const c = st.commands.get(uuid);
    if (c) active.set(c.clientId, (active.get(c.clientId) ?? 0) + 1);
  }
  return active;
}

/** Last inbound activity of a client (wall clock): the latest frame the daemon saw, or when it last registered. */
export function clientActivity(d: FleetReader, c: ClientRecord): number {
  const t = d.lastActivity.get(c.clientId);
  return t !== undefined ? d.toWall(t) : c.lastSeen;
}

export function clientView(d: FleetReader, c: ClientRecord, active: ReadonlyMap<string, number>): Client {
  return create(ClientSchema, {
    clientId: c.clientId,
    instanceId: c.instanceId,
    generation: BigInt(c.generation),
    connected: c.conn !== 0,
    lastActivityTime: timestampFromMs(clientActivity(d, c)),
    runningCommands: c.capacity.running,
    queuedCommands: c.capacity.queued,
    maxRunningCommands: c.capacity.maxRunning,
    maxQueuedCommands: c.capacity.maxQueued,
    activeCommands: active.get(c.clientId) ?? 0,
    authorizedInstanceId: c.authorization?.instanceId ?? "",
    authorizationExpiryTime: c.authorization ? timestampFromMs(d.toWall(c.authorization.expiresAt)) : undefined,
    // The core's per-client retention index (R-O5) and the budget it enforces.
    retainedOutputBytes: BigInt(d.state.clientOutput.get(c.clientId)?.bytes ?? 0),
    outputBudgetBytes: BigInt(d.state.config.limits.outputPerClient),
    incidentsDropped: BigInt(d.state.incidentDrops.get(c.clientId)?.count ?? 0),
    draining: c.draining,
    labels: { ...c.labels },
  });
}

/** Last inbound time of a connection (deadline clock): the core's heartbeat view or the socket's, whichever is later. */
export function sessionInbound(d: FleetReader, c: ConnState): number {
  return Math.max(c.hb.lastInbound, d.sessionInfo(c.conn)?.lastInbound ?? 0);
}

export function sessionView(d: FleetReader, c: ConnState): Session {
  return create(SessionSchema, {
    connection: BigInt(c.conn),
    clientId: c.clientId,
    instanceId: c.instanceId,
    sessionId: c.sessionId,
    generation: BigInt(c.generation),
    phase: c.phase,
    openedTime: timestampFromMs(c.openedAt),
    lastInboundTime: timestampFromMs(d.toWall(sessionInbound(d, c))),
    remoteAddress: d.sessionInfo(c.conn)?.remote ?? "",
  });
}

/** The pending claim of a client record (call only when it has one). */
export function claimView(c: ClientRecord): PendingClaim {
  const p = c.pendingClaim!;
  return create(PendingClaimSchema, {
    clientId: c.clientId,
    instanceId: p.instanceId,
    currentInstanceId: c.instanceId,
    claimTime: timestampFromMs(p.at),
    attempts: p.attempts,
  });
}

export function auditView(e: ServerAuditEntry | ServerRefusalEntry): AuditEntry {
  return create(AuditEntrySchema, {
    ...("count" in e ? { count: BigInt(e.count), lastTime: timestampFromMs(e.lastAt) } : {}),
    seq: BigInt(e.seq),
    time: timestampFromMs(e.at),
    operator: e.operator,
    role: e.role,
    rpc: e.rpc,
    summary: e.summary,
    clientIds: e.clients,
    clientsOmitted: e.clientsOmitted,
    result: e.result,
    message: e.message,
  });
}

export function incidentView(i: ServerIncident): Incident {
  return create(IncidentSchema, {
    incidentId: i.id,
    clientId: i.clientId,
    issueUuid: i.uuid,
    kind: i.kind,
    detail: i.detail,
    time: timestampFromMs(i.at),
    acknowledged: i.acknowledged,
  });
}

/**
 * One stored event row (core/server/store.ts EventRow) as a stream item; `data`: an output
 * row's decompressed bytes, or with `zstd` its stored frame (null: its segment is gone).
 */
function eventItem(uuid: string, v: StoredEventRow, data: Uint8Array | null | undefined, zstd = false): FollowItem | "gone" {
  const base = { issueUuid: uuid, eventSeq: BigInt(v.seq), commandRevision: BigInt(v.revision ?? 0), time: timestampFromMs(v.time ?? 0) };
  switch (v.kind) {
    case "output": {
      if (!data) return "gone";
      const at = { stream: streamEnum(v.stream), streamOffset: BigInt(v.offset) };
      // An empty chunk's frame decodes to nothing: sent as empty data, so `zstd` is never an empty frame.
      if (zstd && v.originalSize > 0) return { ...base, item: { case: "output", value: { ...at, zstd: data, originalSize: v.originalSize } } };
      return { ...base, item: { case: "output", value: { ...at, data: zstd ? new Uint8Array(0) : data } } };
    }
    case "lifecycle": {
      const err = v.error;
      const exit = v.exitCode as number | null | undefined;
      return {
        ...base,
        item: {
          case: "lifecycle",
          value: {
            state: v.state,
            exitCode: exit === null ? undefined : exit,
            signalName: v.signalName ?? "",
            reason: v.reason ?? "",
            error: err ? { code: err.code, message: err.message, issueUuid: uuid } : undefined,
          },
        },
      };
    }
    case "stdin_ack":
      return { ...base, item: { case: "stdinAck", value: { writeSeq: BigInt(v.writeSeq), closed: v.closed, failure: v.failure ?? "" } } };
    case "signal_result":
      return { ...base, item: { case: "signalResult", value: { signal: v.signal, delivered: v.delivered, detail: v.detail ?? "" } } };
    case "script_upload":
      return { ...base, item: { case: "scriptUpload", value: { receivedBytes: BigInt(v.receivedBytes), complete: v.complete } } };
    case "truncation":
      return {
        ...base,
        item: { case: "truncation", value: { cause: v.cause as TruncationCause, removedBytes: rangesToWire(v.ranges) } },
      };
    case "incomplete":
      return { ...base, item: { case: "incomplete", value: { streams: v.streams.map(streamEnum), reason: v.reason ?? "" } } };
    default:
      throw new ConnectError(`stored event of unknown kind ${String((v as { kind?: unknown }).kind)}`, ConnectCode.Internal);
  }
}

type Marker = ServerCommand["output"]["retention"][number];
type StreamKey = "stdout" | "stderr";

function markerItem(uuid: string, firstSeq: number, m: Marker, ranges: Marker["ranges"]): FollowItem {
  return {
    issueUuid: uuid,
    eventSeq: BigInt(firstSeq),
    time: timestampFromMs(m.at),
    item: {
      case: "retention",
      value: {
        removedEvents: { firstEventSeq: BigInt(firstSeq), lastEventSeq: BigInt(m.lastSeq) },
        removedBytes: rangesToWire(ranges),
        cause: TruncationCause.SERVER_RETENTION,
      },
    },
  };
}

/**
 * Stream a command's stored events from `from`, merged with the server's
 * retention marker. The core keeps one cumulative marker per command (the
 * removed prefix of the output grows); this reader sends it where the removed
 * range begins, clipped to what this reader has not yet received, and again
 * whenever it has grown past what was sent. Output rows inside the marker's
 * range are not sent (their bytes are gone); other events in that range are.
 * Those include the agent's own truncation markers (R-O7), whose byte ranges
 * sit between the retention marker's ranges: each retention range is
 * therefore sent only once the stream has reached its offset, so a reader
 * sees every byte range, data or marker, in stream order (found by
 * `npm run chaos`). Events are sent only through the committed (durable)
 * storedThrough.
 *
 * `zstd` (a reader that set accept_zstd): output events carry their stored
 * zstd frames as they are (OutputData.zstd, original_size), neither decoded
 * nor re-encoded; they were validated against their declared size when they
 * were stored (R-T3), and the reader checks each again as it decodes it.
 * `budget` still counts decoded bytes: it bounds what the reader decodes per batch.
 */
export async function* follow(
  d: ServerDaemon,
  uuid: string,
  from: number,
  keepFollowing: boolean,
  ctx: { signal: AbortSignal },
  budget: number,
  zstd = false,
): AsyncGenerator<FollowItem[]> {
  let next = Math.max(1, from);
  let markerThrough = 0;
  const streamSent: Record<StreamKey, number> = { stdout: 0, stderr: 0 };
  // Ranges of the last retention marker not sent yet: they begin past what this reader has reached.
  let pending: { m: Marker; ranges: Marker["ranges"] } | null = null;
  const covered = (c: ServerCommand, seq: number): boolean => c.output.retention.some((m) => m.firstSeq <= seq && seq <= m.lastSeq);
  /** The pending ranges that now continue their streams (all of them if `force`), as one marker. */
  const release = (firstSeq: number, force = false): FollowItem | null => {
    if (!pending) return null;
    const out: Marker["ranges"] = [];
    for (let moved = true; moved; ) {
      moved = false;
      for (const r of [...pending.ranges].sort((a, b) => a.offset - b.offset)) {
        if (!force && r.offset > streamSent[r.stream]) continue;
        pending.ranges.splice(pending.ranges.indexOf(r), 1);
        moved = true;
        const start = Math.max(r.offset, streamSent[r.stream]);
        const end = r.offset + r.length;
        if (end > start) out.push({ stream: r.stream, offset: start, length: end - start });
        streamSent[r.stream] = Math.max(streamSent[r.stream], end);
      }
    }
    const m = pending.m;
    if (pending.ranges.length === 0) pending = null;
    return out.length > 0 ? markerItem(uuid, Math.max(firstSeq, m.firstSeq), m, out) : null;
  };
  const due = (c: ServerCommand, upto: number): FollowItem | null => {
    for (const m of c.output.retention) {
      if (m.lastSeq <= markerThrough || m.firstSeq > upto) continue;
      markerThrough = m.lastSeq;
      if (m.lastSeq < next) continue; // removed after this reader had it all
      pending = { m, ranges: m.ranges.filter((r) => r.offset + r.length > streamSent[r.stream]).map((r) => ({ ...r })) };
      const item = release(next);
      if (item) return item;
    }
    return null;
  };
  /** What an item sent moves each stream to; then any retention range that now continues. */
  const advance = (item: FollowItem, seq: number): FollowItem | null => {
    const it = item.item;
    if (it?.case === "output") {
      const o = it.value as { stream: OutputStream; streamOffset: bigint; data?: Uint8Array; zstd?: Uint8Array; originalSize?: number };
      const key: StreamKey = o.stream === OutputStream.STDOUT ? "stdout" : "stderr";
      const length = o.zstd !== undefined && o.zstd.length > 0 ? (o.originalSize ?? 0) : (o.data?.length ?? 0);
      streamSent[key] = Math.max(streamSent[key], Number(o.streamOffset) + length);
    } else if (it?.case === "truncation") {
      for (const r of (it.value as { removedBytes: Array<{ stream: OutputStream; offset: bigint; length: bigint }> }).removedBytes) {
        const key: StreamKey = r.stream === OutputStream.STDOUT ? "stdout" : "stderr";
        if (Number(r.offset) <= streamSent[key]) streamSent[key] = Math.max(streamSent[key], Number(r.offset + r.length));
      }
    } else return null;
    return release(seq + 1);
  };
  // History pruning may remove a finished command between two reads (its
  // segments go with it): the reader is told so, never shown a short stream.
  // A command memory let go of is read from the store (its row no longer
  // changes: it is read once).
  let stored: ServerCommand | null = null;
  const current = async (): Promise<ServerCommand> => {
    const c = d.state.commands.get(uuid);
    if (c) return c;
    try {
      stored ??= await readCommand(d, uuid);
      return stored;
    } catch (err) {
      if (next <= 1 || ConnectError.from(err).code !== ConnectCode.NotFound) throw err;
      throw toConnectError({ code: Code.NOT_FOUND, message: `${missingMessage(d.state, uuid)} while being read (through event ${next - 1})` });
    }
  };
  await current();
  // A reader resuming from a later event has had everything before it: start each stream
  // where those events left it, so retention ranges are clipped to what it has not seen and
  // are not held back for bytes it already has.
  for (let seq = 1; seq < next; ) {
    const rows = await d.storage.readEvents(uuid, seq, next - 1, 512);
    if (rows.length === 0) break;
    for (const v of rows) {
      if (v.kind === "output") {
        const key: StreamKey = v.stream;
        if (key in streamSent) streamSent[key] = Math.max(streamSent[key], v.offset + v.originalSize);
      } else if (v.kind === "truncation") {
        for (const r of v.ranges) streamSent[r.stream] = Math.max(streamSent[r.stream], r.offset + r.length);
      }
    }
    seq = rows[rows.length - 1]!.seq + 1;
  }
  const reader = new FrameLoader(d.storage.frameReader());
  try {
    for (;;) {
      if (ctx.signal.aborted) return;
      let c = await current();
      const through = c.committed.storedThrough;
      while (next <= through) {
        const rows = await d.storage.readEvents(uuid, next, through, FOLLOW_ROWS);
        // Sub-batches of at most `budget` output bytes (at least one event): each is
        // read with one read per contiguous run of a segment file, decoded in one call
        // per run, and sent as one batch; the next is read once this one is taken.
        for (let i = 0; i < rows.length; ) {
          let j = i;
          let bytes = 0;
          for (; j < rows.length; j++) {
            const v = rows[j]!;
            const size = v.kind === "output" && !covered(c, v.seq) ? (v.originalSize ?? 0) : 0;
            if (j > i && bytes + size > budget) break;
            bytes += size;
          }
          const part = rows.slice(i, j);
          i = j;
          const data = await reader.load(
            uuid,
            part.filter((v): v is StoredOutputRow => v.kind === "output" && !covered(c, v.seq)),
            zstd,
          );
          let held = 0;
          for (const b of data.values()) held += b?.length ?? 0;
          const batch: FollowItem[] = [];
          for (const v of part) {
            const seq = v.seq;
            const m = due(c, seq);
            if (m) batch.push(m);
            if (v.kind === "output" && covered(c, seq)) {
              next = seq + 1;
              continue;
            }
            const item = eventItem(uuid, v, data.get(seq), zstd);
            if (item === "gone") {
              // Retention removed it while we were reading: the marker says so.
              c = await current();
              if (!covered(c, seq)) throw new ConnectError(`output ${uuid}/${seq} is missing from the segment store`, ConnectCode.DataLoss);
              const m2 = due(c, seq);
              if (m2) batch.push(m2);
            } else {
              batch.push(item);
              const m3 = advance(item, seq);
              if (m3) batch.push(m3);
            }
            next = seq + 1;
          }
          if (batch.length > 0) {
            // Held until the transport takes the batch: it asks for the next one only
            // once this one is written and the socket has drained (backpressure).
            followGauge.hold(held);
            try {
              yield batch;
            } finally {
              followGauge.release(held);
            }
          }
        }
        if (rows.length < FOLLOW_ROWS) {
          const m = due(c, through);
          if (m) yield [m];
          next = through + 1;
        }
      }
      c = await current();
      const settled = isTerminal(c.committed.state) && next > c.committed.storedThrough;
      if (settled || !keepFollowing) {
        // Nothing is left to continue the stream up to a held range: send it as it is.
        const rest = release(next, true);
        if (rest) yield [rest];
        yield [{ issueUuid: uuid, eventSeq: BigInt(c.committed.storedThrough), item: { case: "finished", value: toCommand(c, d) } }];
        return;
      }
      // Wait only if nothing new was committed while we were sending (no file held open meanwhile).
      if (next > c.committed.storedThrough) {
        // Start waiting before the close yields: a view committed meanwhile still wakes it.
        const changed = d.waitForCommand(uuid, ctx.signal);
        await reader.close();
        await changed;
      }
    }
  } finally {
    await reader.close();
  }
}

/**
 * Output bytes one FollowOutput batch carries at most (a reader's
 * max_batch_bytes is capped at this): 1 MiB less one 64 KiB chunk, so that a
 * batch of full chunks with its fields encodes to under 1 MiB (protobuf-es's
 * writer grows by doubling: a little over 1 MiB would cost a 2 MiB buffer).
 */
export const FOLLOW_BATCH_BYTES = 1024 * 1024 - 64 * 1024;
/** Stored events read from the store per step (one sql.js query and the index reads they need). */
const FOLLOW_ROWS = 512;

/**
 * Output the FollowOutput loops hold (decompressed, or the stored frames for
 * a reader that takes zstd), for tests and stats: a batch counts from when it
 * is read until the transport asks for the next, so with a reader that does
 * not read, each stream holds at most one batch (FOLLOW_BATCH_BYTES of
 * decoded output, or one event if a single event is larger; as stored
 * frames, that plus zstd's framing of incompressible blocks, under 0.5 %).
 */
export const followGauge = {
  /** Bytes read (and decompressed, unless sent as stored frames), not yet taken by the transport. */
  held: 0,
  /** The most `held` has been. */
  peak: 0,
  /** Bytes the transport has taken (written to the socket, which has drained). */
  taken: 0,
  hold(n: number): void {
    this.held += n;
    if (this.held > this.peak) this.peak = this.held;
  },
  release(n: number): void {
    this.held -= n;
    this.taken += n;
  },
};

/**
 * The stored frames of one follow loop's output rows, through the store's
 * FrameReader: each run of frames the store read in one go is decoded in one
 * call (not at all with `zstd`: each row gets its frame, a view of the read).
 */
class FrameLoader {
  constructor(private readonly frames: FrameReader) {}

  /** seq -> decompressed bytes (with `zstd`: the stored frame), or null where the bytes are gone (retention meanwhile). */
  async load(uuid: string, rows: StoredOutputRow[], zstd = false): Promise<Map<number, Uint8Array | null>> {
    const out = new Map<number, Uint8Array | null>();
    for (const { rows: run, bytes, lengths } of await this.frames.read(rows)) {
      if (!bytes) {
        for (const r of run) out.set(r.seq, null);
        continue;
      }
      if (zstd) {
        let at = 0;
        run.forEach((r, i) => {
          out.set(r.seq, bytes.subarray(at, at + lengths[i]!));
          at += lengths[i]!;
        });
        continue;
      }
      const data = decoded(
        uuid,
        run,
        decompressRun(
          bytes,
          run.map((r, i) => ({ length: lengths[i]!, originalSize: r.originalSize })),
        ),
      );
      let at = 0;
      for (const r of run) {
        out.set(r.seq, data.subarray(at, at + r.originalSize));
        at += r.originalSize;
      }
    }
    return out;
  }

  close(): Promise<void> {
    return this.frames.close();
  }
}

function decoded(uuid: string, run: StoredOutputRow[], r: ReturnType<typeof decompressRun>): Uint8Array {
  if (r.ok) return r.data;
  const seqs = run.length === 1 ? String(run[0]!.seq) : `${String(run[0]!.seq)}..${String(run[run.length - 1]!.seq)}`;
  throw new ConnectError(`stored output ${uuid}/${seqs} does not decompress: ${r.message}`, ConnectCode.DataLoss);
}

export { CommandLifecycle };
