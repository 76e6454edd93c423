/**
 * Jobs in the operator CLI: `rvbox run --clients a,b,c [--max-concurrency
 * N|P%] [--max-errors N|P%] -- CMD` submits one job (SubmitJob), `rvbox job
 * ID` shows its per-client table and summary, `rvbox jobs` lists them.
 * `--follow` follows every child's output as it starts, each line prefixed
 * by its client (`web-1: line`, as pdsh does), through the same follow
 * machinery as `rvbox logs -f` (follow.ts, the core's follow cursor), then
 * prints the summary and exits 1 if any client failed.
 */
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { SubmitJobRequestSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import { describeError, isTransient, OperatorError, type ControlClient } from "../../client/control-client.js";
import { EXIT } from "../../client/exit-codes.js";
import { durationText, humanDuration, jobInfo, jobSummaryText, type JobChildInfo, type JobInfo } from "../../client/model.js";
import { bool, list, parseDuration, parseEnv, str, UsageError, type Parsed } from "./args.js";
import { followOutput, isClosedOutput, OutputClosedError } from "./follow.js";
import { watchLeaving } from "./leaving.js";
import type { OperatorIO } from "./cli.js";

/** What the job commands need of the CLI's context (cli.ts Ctx). */
export interface JobCtx {
  io: OperatorIO;
  server: string;
  client(): ControlClient;
  requestTimeoutMs: number;
  out(line: string): void;
  err(line: string): void;
}

type SubmitJobInit = MessageInitShape<typeof SubmitJobRequestSchema>;

/** How often `--follow` asks for the job's state (new children to follow, its end). */
const JOB_POLL_MS = 300;

async function call<T>(ctx: JobCtx, what: string, fn: (c: ControlClient, o: { timeoutMs: number }) => Promise<T>, tries = 1): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn(ctx.client(), { timeoutMs: ctx.requestTimeoutMs });
    } catch (e) {
      if (i + 1 >= tries || !isTransient(e)) throw describeError(e, { server: ctx.server, what });
      await new Promise((r) => setTimeout(r, 250 * 2 ** i));
    }
  }
}

/**
 * The server refuses a single-client submit whose id looks like a list or a
 * wildcard ("web-1,web-2", "web-*") with a message for every API client; the
 * CLI has jobs for exactly that, so it says how to run one instead.
 */
export function multiClientHint(message: string, clientId: string): string {
  const at = message.indexOf("multi-client runs are not supported yet");
  if (at < 0) return message;
  const named = /\(it names ([^)]*)\)/.exec(message)?.[1];
  const listed = named !== undefined && !named.startsWith("no known") && !named.includes(" more");
  const ids = !clientId.includes("*") ? clientId : listed ? named.split(", ").join(",") : "A,B";
  return `${message.slice(0, at)}to run one command on several clients, submit a job: rvbox run --clients ${ids} -- CMD [ARG...], or rvbox run -l KEY=VALUE -- CMD [ARG...] for the clients with that label (rvbox jobs, rvbox job ID)`;
}

/** The client list of --clients: comma-separated (repeatable), order kept. */
export function clientList(p: Parsed): string[] {
  const ids = list(p, "clients")
    .flatMap((s) => s.split(","))
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (ids.length === 0) throw new UsageError("--clients: expected CLIENT[,CLIENT...]");
  return ids;
}

/** SubmitJob from `rvbox run --clients …` or `rvbox run -l SELECTOR …` (script and stdin flags do not apply). */
export function buildJob(p: Parsed, now = Date.now()): SubmitJobInit {
  // A job's command always follows `--`: `rvbox run web-1 ls -l /tmp` must not become a job over -l /tmp.
  if (p.rest === null)
    throw new UsageError(
      p.positionals.length > 0
        ? `${p.flags.has("selector") ? "-l/--selector" : "--clients"} makes this a job; put the command after \`--\` (rvbox run CLIENT -- CMD ARG... for one client, rvbox run --clients A,B -- CMD ARG... for a job)`
        : "expected a command after `--`: rvbox run --clients A,B -- CMD [ARG...]",
    );
  if (p.positionals.length > 0)
    throw new UsageError(`unexpected ${JSON.stringify(p.positionals[0])} before \`--\` (a job names its clients with --clients or -l, not CLIENT)`);
  for (const f of ["script", "interpreter", "stdin", "open-stdin", "allow-unknown-client"])
    if (p.flags.has(f)) throw new UsageError(`--${f} does not apply to a job (--clients)`);
  const words = p.rest;
  if (words.length === 0) throw new UsageError("expected a command: rvbox run --clients A,B -- CMD [ARG...]");
  const shell = str(p, "shell");
  let program: SubmitJobInit["program"];
  if (shell !== undefined) {
    const sh = shell === "bash" ? ShellType.BASH : shell === "zsh" ? ShellType.ZSH : ShellType.SH;
    program = { case: "shell", value: { shell: sh, commandLine: words.join(" ") } };
  } else {
    if (words[0] === "") throw new UsageError("the command name is empty");
    program = { case: "argv", value: { argv: words } };
  }
  const selector = str(p, "selector");
  if (selector !== undefined && p.flags.has("clients")) throw new UsageError("--clients and -l/--selector do not go together");
  if (selector !== undefined && selector.trim() === "") throw new UsageError("-l/--selector: expected a selector like role=web");
  const req: SubmitJobInit = {
    ...(selector !== undefined ? { selector, clientIds: [] } : { clientIds: clientList(p) }),
    program,
    cwd: str(p, "cwd") ?? "",
    environment: list(p, "env").map(parseEnv),
    maxConcurrency: str(p, "max-concurrency") ?? "",
    maxErrors: str(p, "max-errors") ?? "",
    jobId: str(p, "id") ?? randomUUID(),
    requestId: randomUUID(),
  };
  for (const [flag, v] of [
    ["--max-concurrency", req.maxConcurrency],
    ["--max-errors", req.maxErrors],
  ] as const)
    if (v !== "" && !/^\d+%?$/.test(v!)) throw new UsageError(`${flag}: expected N or P%, got ${JSON.stringify(v)}`);
  const timeout = str(p, "timeout");
  if (timeout !== undefined) {
    const t = parseDuration(timeout, "--timeout");
    if (t <= 0) throw new UsageError("--timeout must be positive");
    req.timeoutMs = BigInt(t);
  }
  const expire = str(p, "expire-after");
  if (expire !== undefined) req.queueExpiryTime = timestampFromMs(now + parseDuration(expire, "--expire-after"));
  return req;
}

/** `rvbox run --clients …`: submit the job; print its id (or follow it). */
export async function cmdRunJob(ctx: JobCtx, p: Parsed, json: boolean): Promise<number> {
  const req = buildJob(p);
  const r = await call(ctx, "job", (c, o) => c.submitJob(req, o), 4);
  const job = jobInfo(r.job!);
  if (!bool(p, "follow")) {
    if (json) for (const c of job.children) ctx.out(JSON.stringify({ job: job.id, ...c }));
    else ctx.out(job.id);
    return EXIT.OK;
  }
  ctx.err(
    `rvbox: job ${job.id}: ${job.summary.targets} clients, max-concurrency ${job.maxConcurrencyResolved}, max-errors ${job.maxErrorsResolved < 0 ? "none" : job.maxErrorsResolved}`,
  );
  return followJob(ctx, job.id, json, bool(p, "cancel-on-interrupt"));
}

/** Lines of one client's stream to `target`, each prefixed with `prefix`; a last partial line is ended at `end()`. */
class PrefixedLines extends Writable {
  private partial: Buffer = Buffer.alloc(0);
  constructor(
    private readonly target: NodeJS.WritableStream,
    private readonly prefix: string,
  ) {
    super();
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    const all = this.partial.length > 0 ? Buffer.concat([this.partial, chunk]) : chunk;
    const last = all.lastIndexOf(0x0a);
    if (last < 0) {
      this.partial = Buffer.from(all);
      cb();
      return;
    }
    this.partial = Buffer.from(all.subarray(last + 1));
    this.emitLines(all.subarray(0, last + 1), cb);
  }
  private emitLines(data: Buffer, cb: (e?: Error | null) => void): void {
    const parts: Buffer[] = [];
    const head = Buffer.from(`${this.prefix}: `);
    let at = 0;
    while (at < data.length) {
      const nl = data.indexOf(0x0a, at);
      const end = nl < 0 ? data.length : nl + 1;
      parts.push(head, data.subarray(at, end));
      at = end;
    }
    this.target.write(Buffer.concat(parts), (e?: Error | null) => cb(e ?? null));
  }
  /** Write out a last line without its newline (with one added). */
  flushPartial(): Promise<void> {
    if (this.partial.length === 0) return Promise.resolve();
    const line = Buffer.concat([this.partial, Buffer.from("\n")]);
    this.partial = Buffer.alloc(0);
    return new Promise((resolve, reject) => this.emitLines(line, (e) => (e ? reject(e) : resolve())));
  }
}

/**
 * Follow a job to its end: each child's output from when it starts, line by
 * line with its client's name in front; then the per-client summary on
 * stderr (or the records with --json) and exit 1 if any client failed.
 * With `cancelOnInterrupt` the operator going away cancels the job
 * (CancelJob), by the rules of leaving.ts.
 */
export async function followJob(ctx: JobCtx, id: string, json: boolean, cancelOnInterrupt = false): Promise<number> {
  const abort = new AbortController();
  const cancelRequest = randomUUID();
  const leaving = watchLeaving(ctx.io, ctx.err, {
    cancelOnInterrupt,
    what: `job ${id}`,
    sendCancel: () => call(ctx, `cancel of job ${id}`, (c, o) => c.cancelJob({ jobId: id, requestId: cancelRequest }, o), 4),
    abort: () => abort.abort(),
  });
  let outputClosed = false;
  const follows = new Map<string, Promise<void>>();
  const startFollow = (c: JobChildInfo): void => {
    if (follows.has(c.uuid)) return;
    const stdout = new PrefixedLines(ctx.io.stdout, c.client);
    const stderr = new PrefixedLines(ctx.io.stderr, c.client);
    const run = followOutput(
      ctx.client(),
      { stdout, stderr, env: ctx.io.env },
      { uuid: c.uuid, follow: true, signal: abort.signal, server: ctx.server, waitingPollMs: 0 },
    )
      .then(async () => {
        await stdout.flushPartial();
        await stderr.flushPartial();
      })
      .catch(async (e: unknown) => {
        if (e instanceof OutputClosedError || isClosedOutput(e)) {
          // `| head`: nobody reads any more; with the flag the job goes too.
          outputClosed = true;
          if (cancelOnInterrupt) await leaving.cancel(`rvbox: the output was closed: cancelling job ${id}`);
          abort.abort();
          return;
        }
        // The server's bound on open follows (limits.maxFollowStreamsPerIdentity): refused
        // before anything was read; followed again once one of ours has ended.
        if (e instanceof OperatorError && e.exitCode === EXIT.TEMPORARY && !abort.signal.aborted) {
          follows.delete(c.uuid);
          refused.add(c.uuid);
          if (!heldBack) ctx.err(`rvbox: the server holds back some output streams (${describeError(e).message}); following them as others end`);
          heldBack = true;
          return;
        }
        if (!abort.signal.aborted) ctx.err(`${c.client}: rvbox: ${describeError(e, { server: ctx.server }).message}`);
      });
    follows.set(c.uuid, run);
  };
  const refused = new Set<string>();
  let heldBack = false;
  /** After the job ended: follow the children refused earlier, as the others end (or every JOB_POLL_MS). */
  const followRefused = async (job: JobInfo): Promise<void> => {
    while (refused.size > 0 && !abort.signal.aborted) {
      const again = job.children.filter((c) => refused.has(c.uuid));
      refused.clear();
      for (const c of again) startFollow(c);
      await Promise.race([Promise.all(follows.values()), new Promise((r) => setTimeout(r, JOB_POLL_MS))]);
    }
  };
  const stoppedEarly = (): number | null => {
    if (outputClosed) return EXIT.OUTPUT_CLOSED;
    if (leaving.hungUp) return EXIT.HANGUP;
    if (leaving.detached) {
      ctx.err(`\nrvbox: detached; job ${id} keeps running (rvbox job ${id}, rvbox cancel ${id})`);
      return EXIT.CANCELLED;
    }
    return null;
  };
  try {
    let job: JobInfo;
    for (;;) {
      job = jobInfo((await call(ctx, `job ${id}`, (c, o) => c.getJob({ jobId: id }, { ...o, signal: abort.signal }), 4)).job!);
      for (const c of job.children) if (c.phase === "started" || c.phase === "done") startFollow(c);
      if (job.endedAt !== null || abort.signal.aborted) break;
      refused.clear();
      await new Promise((r) => setTimeout(r, JOB_POLL_MS));
    }
    await Promise.all(follows.values());
    await followRefused(job);
    await Promise.all(follows.values());
    const early = stoppedEarly();
    if (early !== null) return early;
    // The state as of the end of every follow (each child's last event is in).
    job = jobInfo((await call(ctx, `job ${id}`, (c, o) => c.getJob({ jobId: id }, o), 4)).job!);
    if (json) for (const c of job.children) ctx.out(JSON.stringify({ job: job.id, ...c }));
    else ctx.err(jobTable(job, Date.now()));
    ctx.err(`rvbox: ${jobSummaryText(job)}`);
    // Cancelled from here (Ctrl-C or SIGTERM under the flag): as a cancelled command exits.
    if (leaving.cancelling !== null) return EXIT.CANCELLED;
    return job.summary.failed > 0 || job.summary.cancelled > 0 ? EXIT.ERROR : EXIT.OK;
  } catch (e) {
    await Promise.all(follows.values());
    const early = stoppedEarly();
    if (early !== null) return early;
    throw e;
  } finally {
    leaving.off();
    abort.abort();
    await leaving.cancelling;
  }
}

function table(headers: string[], rows: string[][]): string {
  const w = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]): string =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/** CLIENT STATE EXIT DURATION COMMAND NOTE, one row per client in target order. */
export function jobTable(j: JobInfo, now: number): string {
  return table(
    ["CLIENT", "STATE", "EXIT", "DURATION", "COMMAND", "NOTE"],
    j.children.map((c) => [
      c.client,
      c.state,
      c.exitCode === null ? "-" : String(c.exitCode),
      durationText(c, now),
      c.phase === "pending" || c.phase === "cancelled" || c.phase === "refused" ? "-" : c.uuid,
      c.phase === "cancelled" || c.phase === "refused" || (c.state !== "succeeded" && c.reason) ? c.reason : "",
    ]),
  );
}

/** `rvbox job ID [--json] [--follow]`. */
export async function cmdJob(ctx: JobCtx, p: Parsed, json: boolean): Promise<number> {
  if (p.positionals.length !== 1) throw new UsageError("expected one job ID");
  const id = p.positionals[0]!;
  if (bool(p, "follow")) return followJob(ctx, id, json);
  const job = jobInfo((await call(ctx, `job ${id}`, (c, o) => c.getJob({ jobId: id }, o))).job!);
  if (json) {
    for (const c of job.children) ctx.out(JSON.stringify({ job: job.id, ...c }));
    return EXIT.OK;
  }
  ctx.out(`job ${job.id}: ${job.program}`);
  ctx.out(
    `max-concurrency ${job.maxConcurrencyResolved}${job.maxConcurrency.endsWith("%") ? ` (${job.maxConcurrency})` : ""}, max-errors ${job.maxErrorsResolved < 0 ? "none" : job.maxErrorsResolved}${job.maxErrors.endsWith("%") ? ` (${job.maxErrors})` : ""}`,
  );
  ctx.out(jobTable(job, Date.now()));
  ctx.out(jobSummaryText(job));
  return EXIT.OK;
}

/** `rvbox jobs [--json]`: newest first. */
export async function cmdJobs(ctx: JobCtx, _p: Parsed, json: boolean): Promise<number> {
  const r = await call(ctx, "jobs", (c, o) => c.listJobs({}, o));
  const jobs = r.jobs.map(jobInfo);
  if (json) {
    for (const j of jobs) ctx.out(JSON.stringify({ ...j, children: undefined }));
    return EXIT.OK;
  }
  const now = Date.now();
  ctx.out(
    table(
      ["JOB", "CREATED", "STATE", "TARGETS", "OK", "FAILED", "CANCELLED", "IN FLIGHT", "PROGRAM"],
      jobs.map((j) => [
        j.id,
        `${humanDuration(Math.max(0, now - j.createdAt))} ago`,
        j.endedAt !== null ? (j.stoppedReason ? "stopped" : "done") : "running",
        String(j.summary.targets),
        String(j.summary.succeeded),
        String(j.summary.failed),
        String(j.summary.cancelled),
        String(j.summary.inFlight),
        j.program,
      ]),
    ),
  );
  return EXIT.OK;
}

/**
 * The job `typed` names exactly, or null when there is none (then `rvbox
 * cancel` goes on to look for a command). Checked first: a job's children are
 * commands whose ids begin with the job's id, so a prefix match among
 * commands would find a child instead of the job.
 */
export async function findJob(ctx: JobCtx, typed: string): Promise<string | null> {
  try {
    return jobInfo((await call(ctx, `job ${typed}`, (c, o) => c.getJob({ jobId: typed }, o))).job!).id;
  } catch (e) {
    if ((e as { exitCode?: number }).exitCode === EXIT.NOT_FOUND) return null;
    throw e;
  }
}

/** `rvbox cancel JOB`: CancelJob, what it did, and 75 if a child's cancel was refused (retry it). */
export async function cmdCancelJob(ctx: JobCtx, id: string): Promise<number> {
  const requestId = randomUUID();
  const r = await call(ctx, `job ${id}`, (c, o) => c.cancelJob({ jobId: id, requestId }, o), 4);
  const job = jobInfo(r.job!);
  if (job.endedAt !== null && r.notStarted === 0 && r.cancelledRunning === 0 && r.refused.length === 0) {
    ctx.out(`${jobSummaryText(job)}; nothing to cancel`);
    return EXIT.OK;
  }
  ctx.out(`cancel requested for job ${id}: ${r.notStarted} not started, ${r.cancelledRunning} running cancelled`);
  for (const why of r.refused) ctx.err(`rvbox cancel: job ${id}: ${why}`);
  return r.refused.length > 0 ? EXIT.TEMPORARY : EXIT.OK;
}
