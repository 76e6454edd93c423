// The jobs oracle (core/server/jobs.ts), from what the operator asked and
// what the server and the processes did, never from the job's own
// bookkeeping of in-flight counts:
//
//  concurrency   after every server step, a job's commands that exist and
//                are not terminal number at most its max-concurrency
//                (resolved here from the operator's text and target count)
//  once          no client runs two different commands of one job, and a
//                job's child runs only on its own target client
//  budget        no child command is created once more children than
//                max-errors failed: the server's effects of each step are
//                read in order, so a failure and a start in one step count
//                in the order they happened
//  R-D1          an acknowledged job survives every server restart
//  liveness      after the heal every job has ended (every child ended,
//                was refused or cancelled)

import { isTerminal } from "../core/dispatch/lifecycle.js";
import type { ServerEffect, ServerState } from "../core/server/server-types.js";
import { CommandLifecycle as L } from "../protos/gen/rvbox/v1/common_pb.js";
import type { ExecHost } from "./executor.js";
import type { SubmittedJob } from "./operator.js";

interface Tracked {
  job: SubmittedJob;
  conc: number;
  /** -1: no limit. */
  errs: number;
  /** Children failed so far in this server incarnation's memory. */
  failed: number;
  /** Child uuids known to have failed (a terminal state never changes). */
  failedUuids: Set<string>;
  /** Clients that ran a child: client id -> uuid. */
  ran: Map<string, string>;
}

/** The operator's "N" / "P%" against `n` targets, as documented (concurrency rounds up, errors down). */
export function resolvedLimit(text: string | undefined, n: number, kind: "conc" | "errs"): number {
  if (!text) return kind === "conc" ? n : -1;
  const pct = text.endsWith("%");
  const v = Number(pct ? text.slice(0, -1) : text);
  if (!pct) return kind === "conc" ? Math.min(v, n) : v;
  return kind === "conc" ? Math.max(1, Math.ceil((v * n) / 100)) : Math.floor((v * n) / 100);
}

/** `<job>.<n>` -> job id (null: not a job child's uuid of a known job). */
function jobOf(uuid: string, jobs: Map<string, Tracked>): Tracked | null {
  const i = uuid.lastIndexOf(".");
  if (i < 0) return null;
  return jobs.get(uuid.slice(0, i)) ?? null;
}

export class JobOracle {
  private readonly jobs = new Map<string, Tracked>();
  readonly stats = { jobsSubmitted: 0, jobsAcked: 0, childrenCreated: 0, maxInFlightSeen: 0, stoppedByBudget: 0, jobsEnded: 0 };

  constructor(private readonly fail: (oracle: string, message: string) => never) {}

  get active(): boolean {
    return this.jobs.size > 0;
  }

  jobSubmitted(j: SubmittedJob): void {
    this.stats.jobsSubmitted++;
    const n = j.request.clients.length;
    this.jobs.set(j.jobId, {
      job: j,
      conc: resolvedLimit(j.request.maxConcurrency, n, "conc"),
      errs: resolvedLimit(j.request.maxErrors, n, "errs"),
      failed: 0,
      failedUuids: new Set(),
      ran: new Map(),
    });
  }

  jobAcked(_j: SubmittedJob): void {
    this.stats.jobsAcked++;
  }

  /** After every server step: the step's effects in order, then the counts. */
  afterServer(st: ServerState, effects: ServerEffect[]): void {
    if (this.jobs.size === 0) return;
    for (const e of effects) {
      if (e.type !== "trace") continue;
      const d = e.detail as Record<string, unknown>;
      if (e.event === "submitted") {
        const t = jobOf(String(d.uuid), this.jobs);
        if (!t) continue;
        this.stats.childrenCreated++;
        if (t.errs >= 0 && t.failed > t.errs)
          this.fail("jobs-budget", `job ${t.job.jobId}: child ${String(d.uuid)} created after ${t.failed} failures (max-errors ${t.errs})`);
      } else if (e.event === "state") {
        const uuid = String(d.uuid);
        const t = jobOf(uuid, this.jobs);
        if (!t) continue;
        const state = L[String(d.state) as keyof typeof L] as L | undefined;
        if (state !== undefined && isTerminal(state) && state !== L.SUCCEEDED && !t.failedUuids.has(uuid)) {
          t.failedUuids.add(uuid);
          t.failed++;
        }
      } else if (e.event === "job_child_refused") {
        const t = this.jobs.get(String(d.job));
        if (t) t.failed++;
      } else if (e.event === "job_stopped") this.stats.stoppedByBudget++;
    }
    this.checkConcurrency(st);
  }

  private checkConcurrency(st: ServerState): void {
    for (const t of this.jobs.values()) {
      let inflight = 0;
      for (let n = 1; n <= t.job.request.clients.length; n++) {
        const c = st.commands.get(`${t.job.jobId}.${n}`);
        if (c && !isTerminal(c.state)) inflight++;
      }
      if (inflight > this.stats.maxInFlightSeen) this.stats.maxInFlightSeen = inflight;
      if (inflight > t.conc) this.fail("jobs-concurrency", `job ${t.job.jobId}: ${inflight} commands in flight, max-concurrency ${t.conc}`);
    }
  }

  /** A restarted server: acknowledged jobs are all there; failure counts restart from what it restored. */
  serverRestored(st: ServerState): void {
    for (const t of this.jobs.values()) {
      const job = st.jobs.get(t.job.jobId);
      if (t.job.acked && !job) this.fail("R-D1", `acknowledged job ${t.job.jobId} lost across a server restart`);
      t.failed = 0;
      t.failedUuids = new Set();
      if (!job) continue;
      for (const ch of job.children) {
        const c = st.commands.get(ch.uuid);
        const state = c ? c.state : ch.state;
        const failed = ch.phase === "refused" || (isTerminal(state) && state !== L.SUCCEEDED && ch.phase !== "cancelled");
        if (!failed) continue;
        t.failed++;
        t.failedUuids.add(ch.uuid);
      }
    }
    this.checkConcurrency(st);
  }

  /** A process of `uuid` starts on `host`. */
  spawned(host: ExecHost, uuid: string): void {
    const t = jobOf(uuid, this.jobs);
    if (!t) return;
    const n = Number(uuid.slice(uuid.lastIndexOf(".") + 1));
    const target = t.job.request.clients[n - 1];
    const client = (host as { client?: number }).client;
    const on = client !== undefined ? `agent-${client}` : host.name;
    if (target !== on) this.fail("jobs-once", `child ${uuid} of job ${t.job.jobId} (for ${target}) launched on ${on}`);
    const prev = t.ran.get(on);
    if (prev !== undefined && prev !== uuid) this.fail("jobs-once", `job ${t.job.jobId} launched ${prev} and ${uuid} on ${on}`);
    t.ran.set(on, uuid);
  }

  /** After the heal: every job the server holds has ended; every acknowledged one is held. */
  checkLiveness(st: ServerState): void {
    for (const t of this.jobs.values()) {
      const job = st.jobs.get(t.job.jobId);
      if (!job) {
        if (t.job.acked) this.fail("liveness", `acknowledged job ${t.job.jobId} missing at the end`);
        continue;
      }
      if (job.endedAt === 0 || job.committed.endedAt === 0) {
        const open = job.children.filter((c) => c.phase === "pending" || c.phase === "started").map((c) => `${c.uuid}:${c.phase}`);
        this.fail("liveness", `job ${t.job.jobId} not ended after the heal: ${open.slice(0, 6).join(", ")}`);
      }
      this.stats.jobsEnded++;
    }
  }
}
