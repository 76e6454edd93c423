// Jobs: one request, many clients (issue 14 item 2).
//
// Theory of operation
// -------------------
// `submit_job` resolves its targets once (`resolveTargets`: today an
// explicit list of known client ids; a label selector later) and records
// them, in order, as the job's children, each with its command uuid fixed
// at submit (`${jobId}.${n}`). The job row is persisted and the reply waits
// for it, like a submit (R-D1).
//
// A child is not a command until the job starts it. `pumpJobs`, run by the
// node's pump around every dispatch pass, walks the active jobs:
//   1. a started child whose command became terminal is `done` (state, exit
//      and times copied from the command);
//   2. failed children (done with any state but SUCCEEDED, or refused by
//      admission) above `maxErrors` stop the job: every pending child ends
//      `cancelled` with the reason recorded on it, and nothing new starts;
//      children already started run on (as in SSM);
//   3. otherwise pending children start in target order while fewer than
//      `maxConcurrency` are started and not ended: each goes through the
//      same admission as an operator's submit (`admitCommand`), so its
//      command is a normal command from then on (dispatch, at-most-once
//      launch per uuid at the agent, reconciliation, history);
//   4. a job whose children are all done, refused or cancelled ends.
// Every change persists the job row in the same step, so it shares a persist
// batch with the command records it is about: a crash takes back both or
// neither. After a restore a child is `started` exactly when its command
// exists, so no child is started twice (and a uuid is never admitted twice
// anyway), and the in-flight count, derived from the rows, is what it was:
// the job goes on without exceeding its concurrency.
//
// In flight counts from the command's creation (queued included) to its
// terminal state: never more than maxConcurrency of a job's commands are
// anywhere between created and ended, which bounds those dispatched and not
// terminal too.

import { toBinary } from "@bufbuild/protobuf";
import { ExecutionSpecSchema, CommandLifecycle as L, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { concatBytes, toHex } from "../bytes.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { checkDispatchSize, checkSpecLimits } from "../dispatch/spec-limits.js";
import { Code, assert, type CoreError, coreError } from "../errors.js";
import { MAX_JOBS, MAX_JOB_ID_CHARS, MAX_JOB_TARGETS } from "../limits.js";
import type { ControlRequest, JobChild, JobView, ServerDeferred, ServerEnv, ServerJob, ServerState } from "./server-types.js";
import { jobDelete, jobRecord } from "./store.js";
import { unknownClientMessage } from "./clients.js";
import { formatSelector, matchesSelector, parseSelector } from "./labels.js";
import { type ServerCtx, reply, replyError } from "./io.js";
import { signalCommand } from "./signals.js";
import { admitCommand, utf8 } from "./submit.js";

type SubmitJob = Extract<ControlRequest, { op: "submit_job" }>;

const JOB_ID_RE = new RegExp(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,${MAX_JOB_ID_CHARS - 1}}$`);

/** A rate as given: "N" (a count) or "P%" (of the targets). */
export function parseRate(text: string, what: string, min: number): { n: number; percent: boolean } | CoreError {
  const m = /^(\d{1,9})(%?)$/.exec(text.trim());
  const bad = coreError(Code.VALIDATION, `${what} must be a count or a percentage (N or P%), at least ${min}: got "${text}"`);
  if (!m) return bad;
  const n = Number(m[1]);
  const percent = m[2] === "%";
  if (n < min || (percent && n > 100)) return bad;
  return { n, percent };
}

/**
 * Concurrency: a percentage rounds up, at least 1; no limit: every target.
 * Errors: a percentage rounds down (10% of 6 is 0: the first failure stops
 * the job); no limit: -1.
 */
export function resolveRate(text: string | undefined, targets: number, kind: "concurrency" | "errors"): number | CoreError {
  const t = text ?? "";
  if (t === "") return kind === "concurrency" ? targets : -1;
  const r = parseRate(t, kind === "concurrency" ? "max-concurrency" : "max-errors", kind === "concurrency" ? 1 : 0);
  if ("code" in r) return r;
  if (!r.percent) return kind === "concurrency" ? Math.min(r.n, targets) : r.n;
  return kind === "concurrency" ? Math.max(1, Math.ceil((r.n * targets) / 100)) : Math.floor((r.n * targets) / 100);
}

/**
 * The job's target clients, resolved once at submit: an explicit list of
 * known client ids (every unknown id is named with its did-you-mean), or
 * every client whose labels match the selector, in client id order.
 */
export function resolveTargets(st: ServerState, r: SubmitJob): string[] | CoreError {
  const sel = r.selector ?? "";
  if (sel !== "") {
    if (r.clients.length > 0) return coreError(Code.VALIDATION, "a job names its clients or a label selector, not both");
    const parsed = parseSelector(sel);
    if (!parsed.ok) return parsed.error;
    if (parsed.value.length === 0) return coreError(Code.VALIDATION, "an empty selector would match every client; name at least one label term");
    const ids = [...st.clients.values()]
      .filter((c) => matchesSelector(c.labels, parsed.value))
      .map((c) => c.clientId)
      .sort();
    if (ids.length === 0) return coreError(Code.NOT_FOUND, `no client matches ${formatSelector(parsed.value)}; nothing was created`);
    if (ids.length > MAX_JOB_TARGETS)
      return coreError(Code.VALIDATION, `${ids.length} clients match ${formatSelector(parsed.value)}; a job targets at most ${MAX_JOB_TARGETS}`);
    return ids;
  }
  if (r.clients.length === 0) return coreError(Code.VALIDATION, "a job needs at least one target client");
  if (r.clients.length > MAX_JOB_TARGETS) return coreError(Code.VALIDATION, `a job targets at most ${MAX_JOB_TARGETS} clients (got ${r.clients.length})`);
  const seen = new Set<string>();
  const unknown: string[] = [];
  for (const id of r.clients) {
    if (id === "") return coreError(Code.VALIDATION, "empty client id in the target list");
    if (seen.has(id)) return coreError(Code.VALIDATION, `client ${id} is named twice`);
    seen.add(id);
    if (!st.clients.has(id)) unknown.push(unknownClientMessage(st, id));
  }
  if (unknown.length > 0) return coreError(Code.NOT_FOUND, `${unknown.join("; ")}; nothing was created`);
  return [...r.clients];
}

export const childUuid = (jobId: string, n: number): string => `${jobId}.${n}`;

/** Failed for the error budget: ended in any state but SUCCEEDED, or refused by admission. */
export const childFailed = (c: Pick<JobChild, "phase" | "state">): boolean => c.phase === "refused" || (c.phase === "done" && c.state !== L.SUCCEEDED);

export const childEnded = (c: Pick<JobChild, "phase">): boolean => c.phase !== "pending" && c.phase !== "started";

/** The request's digest (as given: a selector, not what it resolved to, so a retry matches whatever the labels are now). */
export function jobDigest(env: ServerEnv, r: SubmitJob, specBytes: Uint8Array): string {
  const head = utf8(
    `rvbox.v1/job\n${r.jobId}\n${r.selector ?? ""}\n${r.clients.join("\n")}\n\n${r.maxConcurrency ?? ""}\n${r.maxErrors ?? ""}\n${r.queueExpiry ?? 0}\n`,
  );
  return toHex(env.ports.sha256(concatBytes([head, specBytes])));
}

export function submitJob(st: ServerState, ctx: ServerCtx, r: SubmitJob, env: ServerEnv): void {
  const fail = (e: CoreError): void => replyError(ctx, r.requestId, e.code, e.message);
  if (!JOB_ID_RE.test(r.jobId)) return fail(coreError(Code.VALIDATION, `job id must be 1-${MAX_JOB_ID_CHARS} characters of [A-Za-z0-9._:-]`));
  const p = r.spec.program;
  if (p.case === undefined) return fail(coreError(Code.VALIDATION, "no program (argv or shell)"));
  if (p.case === "script") return fail(coreError(Code.VALIDATION, "script jobs are not supported: run argv or a shell command line"));
  // What any agent would refuse is refused here, before a child exists (spec-limits.ts).
  const bad = checkSpecLimits(r.spec);
  if (bad) return fail(bad);
  const specBytes = toBinary(ExecutionSpecSchema, r.spec);
  // A child's uuid is `JOB.N`: sized with the longest id a child can have.
  const tooBig = checkDispatchSize(`${r.jobId}.${MAX_JOB_TARGETS}`, specBytes.length);
  if (tooBig) return fail(tooBig);
  const hash = jobDigest(env, r, specBytes);
  // A retry is answered before the targets are resolved again: they were resolved once.
  const existing = st.jobs.get(r.jobId);
  if (existing) {
    if (existing.hash === hash) return reply(ctx, r.requestId, { ok: true, jobId: existing.id });
    return fail(coreError(Code.CONFLICT, `job id ${r.jobId} already used by a different request`));
  }
  const list = resolveTargets(st, r);
  if (!Array.isArray(list)) return fail(list);
  const conc = resolveRate(r.maxConcurrency, list.length, "concurrency");
  if (typeof conc !== "number") return fail(conc);
  const errs = resolveRate(r.maxErrors, list.length, "errors");
  if (typeof errs !== "number") return fail(errs);
  const stored = new Set(st.config.limits.historyInStore ? (r.storedUuids ?? []) : []);
  for (let n = 1; n <= list.length; n++) {
    const uuid = childUuid(r.jobId, n);
    if (st.commands.has(uuid) || st.pruned.has(uuid) || stored.has(uuid))
      return fail(coreError(Code.CONFLICT, `command uuid ${uuid} (child ${n} of job ${r.jobId}) is already used`));
  }
  if (st.jobs.size >= MAX_JOBS && !forgetOldestEnded(st, ctx)) return fail(coreError(Code.CAPACITY, `${st.jobs.size} jobs are active (at most ${MAX_JOBS})`));
  const children: JobChild[] = list.map((clientId, i) => ({
    clientId,
    uuid: childUuid(r.jobId, i + 1),
    phase: "pending",
    state: L.UNSPECIFIED,
    exitCode: null,
    reason: "",
    createdAt: 0,
    startedTime: 0,
    endedTime: 0,
  }));
  const job: ServerJob = {
    id: r.jobId,
    hash,
    createdAt: ctx.wall,
    spec: r.spec,
    queueExpiry: r.queueExpiry ?? 0,
    selector: r.selector ?? "",
    concurrencyText: r.maxConcurrency ?? "",
    maxConcurrency: conc,
    errorsText: r.maxErrors ?? "",
    maxErrors: errs,
    children,
    stopped: "",
    endedAt: 0,
    committed: { children: [], stopped: "", endedAt: 0 },
  };
  job.committed = emptyView(job);
  st.jobs.set(job.id, job);
  st.activeJobs.add(job.id);
  persistJob(ctx, job);
  ctx.emit({ type: "trace", event: "job_submitted", detail: { job: job.id, targets: list.length, maxConcurrency: conc, maxErrors: errs } });
  // Its first children start in this step's pump, in this same persist batch.
  reply(ctx, r.requestId, { ok: true, jobId: job.id });
}

/** Why a job stopped when an operator cancelled it (its stopped_reason; "not started: …" on its pending children). */
export const JOB_CANCELLED = "cancelled by an operator";

type CancelJob = Extract<ControlRequest, { op: "cancel_job" }>;

/**
 * Stop a job (see CancelJob in control.proto): nothing more starts, pending
 * children end cancelled, and each started child whose command has not ended
 * gets a CANCEL of its own, under a request id derived from this request's,
 * so a retry of the request gives each command the revision it gave before
 * and sends nothing twice. A job the error budget stopped keeps that reason.
 */
export function cancelJob(st: ServerState, ctx: ServerCtx, r: CancelJob): void {
  const job = st.jobs.get(r.jobId);
  if (!job) return replyError(ctx, r.requestId, Code.NOT_FOUND, `no job ${r.jobId}`);
  let notStarted = 0;
  let cancelledRunning = 0;
  const refused: string[] = [];
  if (job.endedAt === 0) {
    if (!job.stopped) {
      job.stopped = JOB_CANCELLED;
      ctx.emit({ type: "trace", event: "job_cancelled", detail: { job: job.id } });
    }
    for (const ch of job.children) {
      if (ch.phase === "pending") {
        ch.phase = "cancelled";
        ch.state = L.CANCELLED;
        ch.reason = `not started: ${job.stopped}`;
        notStarted++;
        continue;
      }
      if (ch.phase !== "started") continue;
      const c = st.commands.get(ch.uuid);
      assert(c !== undefined, `job ${job.id}: started child ${ch.uuid} has no command`);
      if (isTerminal(c.state)) continue; // its end is this step's pump's to record
      const res = signalCommand(st, ctx, c, `${r.requestId}/${ch.uuid}`, SignalKind.CANCEL);
      if ("code" in res) refused.push(`${ch.uuid}: ${res.message}`);
      else cancelledRunning++;
    }
    persistJob(ctx, job);
  }
  reply(ctx, r.requestId, { ok: true, jobId: job.id, notStarted, cancelledRunning, refused });
}

/** A view of a job before anything of it is durable. */
function emptyView(job: ServerJob): JobView {
  return {
    children: job.children.map(() => ({ phase: "pending", state: L.UNSPECIFIED, exitCode: null, reason: "", createdAt: 0, startedTime: 0, endedTime: 0 })),
    stopped: "",
    endedAt: 0,
  };
}

export function viewOfJob(job: ServerJob): JobView {
  return {
    children: job.children.map((c) => ({
      phase: c.phase,
      state: c.state,
      exitCode: c.exitCode,
      reason: c.reason,
      createdAt: c.createdAt,
      startedTime: c.startedTime,
      endedTime: c.endedTime,
    })),
    stopped: job.stopped,
    endedAt: job.endedAt,
  };
}

function persistJob(ctx: ServerCtx, job: ServerJob): void {
  ctx.persist(jobRecord(job));
  ctx.afterDurable({ kind: "job_committed", id: job.id, view: viewOfJob(job) });
}

/** Readers see a job's new view once the persist that holds it is durable. */
export function releaseJobCommitted(st: ServerState, a: Extract<ServerDeferred, { kind: "job_committed" }>): void {
  const job = st.jobs.get(a.id);
  if (job) job.committed = a.view;
}

/** At MAX_JOBS: forget the oldest ended job (false: none has ended). */
function forgetOldestEnded(st: ServerState, ctx: ServerCtx): boolean {
  for (const job of st.jobs.values()) {
    if (job.endedAt === 0) continue;
    st.jobs.delete(job.id);
    ctx.persist(jobDelete(job.id));
    ctx.emit({ type: "trace", event: "job_forgotten", detail: { job: job.id } });
    return true;
  }
  return false;
}

/** Children started and not yet ended. */
export function jobInflight(job: ServerJob): number {
  let n = 0;
  for (const c of job.children) if (c.phase === "started") n++;
  return n;
}

export function jobFailures(job: ServerJob): number {
  let n = 0;
  for (const c of job.children) if (childFailed(c)) n++;
  return n;
}

/**
 * Move every active job on (see the header). Returns true when a child was
 * started or ended (the caller runs a dispatch pass again for new children).
 */
export function pumpJobs(st: ServerState, ctx: ServerCtx, env: ServerEnv): boolean {
  let any = false;
  for (const id of [...st.activeJobs]) {
    const job = st.jobs.get(id)!;
    if (stepJob(st, ctx, job, env)) {
      any = true;
      persistJob(ctx, job);
    }
  }
  return any;
}

function stepJob(st: ServerState, ctx: ServerCtx, job: ServerJob, env: ServerEnv): boolean {
  let changed = false;
  for (const ch of job.children) {
    if (ch.phase !== "started") continue;
    const c = st.commands.get(ch.uuid);
    if (c && !isTerminal(c.state)) continue;
    // Pruning waits for a settled terminal state, which this pass has seen in an earlier step.
    assert(c !== undefined, `job ${job.id}: started child ${ch.uuid} has no command`);
    ch.phase = "done";
    ch.state = c.state;
    ch.exitCode = c.exit.exitCode;
    ch.reason = c.exit.reason;
    ch.startedTime = c.startedTime;
    ch.endedTime = c.endedTime;
    changed = true;
    ctx.emit({ type: "trace", event: "job_child_ended", detail: { job: job.id, uuid: ch.uuid, state: L[c.state] ?? c.state } });
  }
  let inflight = jobInflight(job);
  let failed = jobFailures(job);
  for (const ch of job.children) {
    if (ch.phase !== "pending") continue;
    if (!job.stopped && job.maxErrors >= 0 && failed > job.maxErrors) {
      job.stopped = `error budget exceeded: ${failed} failed, max-errors ${job.maxErrors}`;
      ctx.emit({ type: "trace", event: "job_stopped", detail: { job: job.id, failed, maxErrors: job.maxErrors } });
    }
    if (job.stopped) {
      ch.phase = "cancelled";
      ch.state = L.CANCELLED;
      ch.reason = `not started: ${job.stopped}`;
      changed = true;
      continue;
    }
    if (inflight >= job.maxConcurrency) break;
    const a = admitCommand(
      st,
      ctx,
      {
        op: "submit",
        requestId: `job:${ch.uuid}`,
        uuid: ch.uuid,
        clientId: ch.clientId,
        spec: job.spec,
        ...(job.queueExpiry > 0 ? { queueExpiry: job.queueExpiry } : {}),
        // Its client was known at submit; if it has been forgotten since, the child waits for it.
        allowUnknownClient: true,
      },
      env,
    );
    ch.createdAt = ctx.wall;
    changed = true;
    if (a.ok) {
      ch.phase = "started";
      inflight++;
      ctx.emit({ type: "trace", event: "job_child_started", detail: { job: job.id, uuid: ch.uuid, client: ch.clientId } });
    } else {
      ch.phase = "refused";
      ch.state = L.REJECTED;
      ch.reason = `not started: ${a.error.message}`;
      failed++;
      ctx.emit({ type: "trace", event: "job_child_refused", detail: { job: job.id, uuid: ch.uuid, message: a.error.message } });
    }
  }
  if (job.endedAt === 0 && job.children.every(childEnded)) {
    job.endedAt = ctx.wall;
    st.activeJobs.delete(job.id);
    changed = true;
    ctx.emit({ type: "trace", event: "job_ended", detail: { job: job.id, failed } });
  }
  return changed;
}

export function restoreJobs(st: ServerState, rows: Iterable<[string, Omit<ServerJob, "committed">]>): void {
  const list = [...rows].map(([, r]) => r);
  list.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
  for (const r of list) {
    const job: ServerJob = { ...r, children: r.children.map((c) => ({ ...c })), committed: { children: [], stopped: "", endedAt: 0 } };
    job.committed = viewOfJob(job);
    st.jobs.set(job.id, job);
    if (job.endedAt === 0) st.activeJobs.add(job.id);
  }
}

/**
 * Each job: its children's uuids are its own; no more started than its
 * concurrency; a started child's command exists and is active; a stopped
 * job has nothing pending and started nothing after it stopped (the
 * budget: nothing pending once failures exceed it); an ended job has only
 * ended children.
 */
export function jobInvariants(st: ServerState): void {
  assert(st.jobs.size <= MAX_JOBS, `${st.jobs.size} jobs over MAX_JOBS`);
  let active = 0;
  for (const [id, job] of st.jobs) {
    assert(job.id === id, "job key mismatch");
    assert(job.children.length >= 1 && job.children.length <= MAX_JOB_TARGETS, `job ${id}: ${job.children.length} children`);
    assert(job.maxConcurrency >= 1, `job ${id}: concurrency below 1`);
    const inflight = jobInflight(job);
    assert(inflight <= job.maxConcurrency, `job ${id}: ${inflight} children in flight over max-concurrency ${job.maxConcurrency}`);
    const clients = new Set<string>();
    job.children.forEach((ch, i) => {
      assert(ch.uuid === childUuid(id, i + 1), `job ${id}: child ${i + 1} uuid ${ch.uuid}`);
      assert(!clients.has(ch.clientId), `job ${id}: client ${ch.clientId} targeted twice`);
      clients.add(ch.clientId);
      if (ch.phase === "started") {
        const c = st.commands.get(ch.uuid);
        assert(c !== undefined && !isTerminal(c.state), `job ${id}: started child ${ch.uuid} has no active command`);
      }
    });
    const pending = job.children.some((c) => c.phase === "pending");
    if (job.maxErrors >= 0 && jobFailures(job) > job.maxErrors) assert(!pending, `job ${id}: children pending past the error budget`);
    if (job.stopped) assert(!pending, `job ${id}: stopped with children pending`);
    if (job.endedAt !== 0) assert(job.children.every(childEnded), `job ${id}: ended with children not ended`);
    if (job.endedAt === 0) active++;
    assert(st.activeJobs.has(id) === (job.endedAt === 0), `job ${id}: active index out of step`);
  }
  assert(active === st.activeJobs.size, "active job index out of step");
}
