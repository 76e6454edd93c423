// Jobs (core/server/jobs.ts): one request, many clients, with a concurrency
// bound and an error budget; targets resolved once; durable across a crash.
import { createHash } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { MAX_JOBS, MAX_JOB_ID_CHARS, MAX_JOB_TARGETS, MAX_PENDING_SIGNALS } from "../../../core/limits.js";
import { restoreServer, serverInvariants, type ControlRequest } from "../../../core/index.js";
import { parseRate, resolveRate } from "../../../core/server/jobs.js";
import { rowOf } from "../../../core/server/store.js";
import { CommandLifecycle as L, ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { argv, lifecycle, ServerRig } from "../../support/server-rig.js";
import { jobPhases } from "../../support/pair.js";

type Job = Extract<ControlRequest, { op: "submit_job" }>;

function job(r: ServerRig, jobId: string, clients: string[], extra: Partial<Job> = {}) {
  return r.control({ op: "submit_job", requestId: `job-${jobId}-${r.now}`, jobId, clients, spec: create(ExecutionSpecSchema, argv("true")), ...extra });
}

/** A fleet of ready sessions a..: client id -> conn. */
function fleet(r: ServerRig, ids: string[]): Map<string, number> {
  return new Map(ids.map((id) => [id, r.connect(id)]));
}

/** The agent runs the child's command to its end with `exit`. */
function finish(r: ServerRig, conns: Map<string, number>, uuid: string, exit: number) {
  const conn = conns.get(r.command(uuid).clientId)!;
  r.accept(conn, uuid);
  r.event(conn, uuid, 1, lifecycle(L.RUNNING));
  r.event(conn, uuid, 2, lifecycle(exit === 0 ? L.SUCCEEDED : L.FAILED, { exitCode: exit }));
}

/** GetJob's child phases (the committed view). */
const phases = (r: ServerRig, id: string) => jobPhases(r.getJob(id));
/** GetJob's summary: children in flight. */
const inflight = (r: ServerRig, id: string) => r.getJob(id)!.summary!.inFlight;
/** GetJob's children as [phase, state, exit code]. */
const outcomes = (r: ServerRig, id: string) => r.getJob(id)!.children.map((c, i) => [jobPhases(r.getJob(id))[i], c.state, c.exitCode ?? null]);

describe("jobs", () => {
  it("R-D1: a job is answered once durable; it creates one command per target, each with its own uuid, in target order", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c"]);
    expect(job(r, "j1", ["a", "b", "c"])).toEqual({ ok: true, jobId: "j1" });
    expect(rowOf(r.disk.durable, "job", "j1")!.children.map((c) => c.clientId)).toEqual(["a", "b", "c"]);
    expect(phases(r, "j1")).toEqual(["started", "started", "started"]);
    expect(["j1.1", "j1.2", "j1.3"].map((u) => [r.command(u).clientId, r.command(u).state])).toEqual([
      ["a", "dispatched"],
      ["b", "dispatched"],
      ["c", "dispatched"],
    ]);
    expect(r.getJob("j1")!.children.map((c) => [c.clientId, c.issueUuid])).toEqual([
      ["a", "j1.1"],
      ["b", "j1.2"],
      ["c", "j1.3"],
    ]);
    for (const [id, u] of [
      ["a", "j1.1"],
      ["b", "j1.2"],
      ["c", "j1.3"],
    ] as const)
      expect(r.sent(r.log, conns.get(id), "commandDispatch").map((s) => (s.env.payload.value as { issueUuid: string }).issueUuid)).toEqual([u]);
    // The same request again is the same job; a different one under its id is a conflict.
    expect(job(r, "j1", ["a", "b", "c"])).toEqual({ ok: true, jobId: "j1" });
    expect(job(r, "j1", ["a", "b"])).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    expect(r.listCommands()).toHaveLength(3);
    expect(r.listJobs().map((j) => j.jobId)).toEqual(["j1"]);
  });

  it("max-concurrency n: exactly n in flight, the n+1-th starts only when one ends", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c", "d"]);
    job(r, "j", ["a", "b", "c", "d"], { maxConcurrency: "2" });
    expect(phases(r, "j")).toEqual(["started", "started", "pending", "pending"]);
    expect(r.findCommand("j.3")).toBeUndefined();
    // Accepted and running still count as in flight.
    r.accept(conns.get("a")!, "j.1");
    r.event(conns.get("a")!, "j.1", 1, lifecycle(L.RUNNING));
    expect(inflight(r, "j")).toBe(2);
    expect(r.findCommand("j.3")).toBeUndefined();
    r.event(conns.get("a")!, "j.1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(phases(r, "j")).toEqual(["done", "started", "started", "pending"]);
    expect(r.command("j.3").state).toBe("dispatched");
    finish(r, conns, "j.2", 0);
    finish(r, conns, "j.3", 0);
    finish(r, conns, "j.4", 0);
    expect(r.getJob("j")!.endedTime).toBeDefined();
    expect(outcomes(r, "j")).toEqual(Array(4).fill(["done", L.SUCCEEDED, 0]));
    expect(r.getJob("j")!.summary).toMatchObject({ targets: 4, pending: 0, inFlight: 0, succeeded: 4, failed: 0, cancelled: 0 });
    expect(r.st.activeJobs.size).toBe(0); // internal: the index of unfinished jobs the server walks (no view lists it)
  });

  it("a percentage is of the targets: concurrency rounds up (at least 1), errors round down", () => {
    expect(resolveRate("50%", 3, "concurrency")).toBe(2);
    expect(resolveRate("1%", 3, "concurrency")).toBe(1);
    expect(resolveRate("", 7, "concurrency")).toBe(7);
    expect(resolveRate("9", 3, "concurrency")).toBe(3);
    expect(resolveRate("10%", 6, "errors")).toBe(0);
    expect(resolveRate("50%", 6, "errors")).toBe(3);
    expect(resolveRate("", 6, "errors")).toBe(-1);
    expect(resolveRate("0", 6, "concurrency")).toMatchObject({ code: Code.VALIDATION });
    expect(resolveRate("101%", 6, "errors")).toMatchObject({ code: Code.VALIDATION });
    expect(resolveRate("two", 6, "errors")).toMatchObject({ code: Code.VALIDATION });
  });

  it("max-errors: once failures exceed it nothing new starts; the rest end cancelled with the reason; started ones run on", () => {
    const r = new ServerRig();
    const ids = ["a", "b", "c", "d", "e", "f"];
    const conns = fleet(r, ids);
    job(r, "j", ids, { maxConcurrency: "2", maxErrors: "1" });
    expect(phases(r, "j")).toEqual(["started", "started", "pending", "pending", "pending", "pending"]);
    finish(r, conns, "j.1", 3); // failure 1: within the budget
    expect(phases(r, "j")).toEqual(["done", "started", "started", "pending", "pending", "pending"]);
    finish(r, conns, "j.3", 0);
    expect(phases(r, "j")).toEqual(["done", "started", "done", "started", "pending", "pending"]);
    finish(r, conns, "j.4", 1); // failure 2 > 1: stop
    const j = () => r.getJob("j")!;
    expect(phases(r, "j")).toEqual(["done", "started", "done", "done", "cancelled", "cancelled"]);
    expect(j().stoppedReason).toBe("error budget exceeded: 2 failed, max-errors 1");
    expect(j().children[4]!.reason).toBe("not started: error budget exceeded: 2 failed, max-errors 1");
    expect(j().children[4]!.state).toBe(L.CANCELLED);
    expect([r.findCommand("j.5"), r.findCommand("j.6")]).toEqual([undefined, undefined]);
    expect(j().endedTime).toBeUndefined();
    // The child in flight when the budget ran out finishes normally, then the job ends.
    finish(r, conns, "j.2", 0);
    expect(j().endedTime).toBeDefined();
    expect(j().children.map((c) => c.state)).toEqual([L.FAILED, L.SUCCEEDED, L.SUCCEEDED, L.FAILED, L.CANCELLED, L.CANCELLED]);
  });

  it("max-errors 0 stops at the first failure; a child admission refuses counts as a failure", () => {
    const r = new ServerRig({ maxActivePerClient: 1 });
    const conns = fleet(r, ["a", "b", "c"]);
    r.submit("a", "busy"); // a's one active slot is taken: the child for a is refused
    job(r, "j", ["a", "b", "c"], { maxConcurrency: "1", maxErrors: "0" });
    const j = r.getJob("j")!;
    expect(jobPhases(j)).toEqual(["refused", "cancelled", "cancelled"]);
    expect(j.children[0]!.reason).toMatch(/^not started: client a has 1 active commands/);
    expect(j.endedTime).toBeDefined();
    expect(conns.size).toBe(3);
  });

  it("unknown targets are refused with the did-you-mean of each, and nothing is created", () => {
    const r = new ServerRig();
    fleet(r, ["web-1", "web-2"]);
    const res = job(r, "j", ["web-1", "wbe-2", "db-9"]);
    expect(res).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(res!.ok === false && res!.error.message).toContain("no client wbe-2 has registered with this server; did you mean web-2");
    expect(res!.ok === false && res!.error.message).toContain("db-9");
    expect([r.listJobs(), r.listCommands(), r.getJob("j")]).toEqual([[], [], undefined]);
    expect(job(r, "j2", ["web-1", "web-1"])).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(job(r, "j3", [])).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(job(r, "bad id", ["web-1"])).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
  });

  it("cancel_job: nothing more starts, pending children end cancelled, each started one gets a CANCEL of its own; the job ends with them; a retry sends nothing twice", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c", "d"]);
    job(r, "j", ["a", "b", "c", "d"], { maxConcurrency: "2" });
    const a = conns.get("a")!;
    const b = conns.get("b")!;
    r.accept(a, "j.1");
    r.event(a, "j.1", 1, lifecycle(L.RUNNING));
    expect(r.control({ op: "cancel_job", requestId: "cj-1", jobId: "j" })).toEqual({ ok: true, jobId: "j", notStarted: 2, cancelledRunning: 2, refused: [] });
    expect(phases(r, "j")).toEqual(["started", "started", "cancelled", "cancelled"]);
    expect(r.getJob("j")!.stoppedReason).toBe("cancelled by an operator");
    expect(r.getJob("j")!.children[2]!.reason).toBe("not started: cancelled by an operator");
    expect([r.findCommand("j.3"), r.findCommand("j.4")]).toEqual([undefined, undefined]);
    const cancels = (conn: number) =>
      r
        .sent(r.log, conn, "signalCommand")
        .map((x) => [(x.env.payload.value as { signal: SignalKind }).signal, (x.env.payload.value as { commandRevision: bigint }).commandRevision]);
    // j.2 is dispatched, not yet accepted: its cancel goes once its agent accepts it.
    expect([cancels(a), cancels(b)]).toEqual([[[SignalKind.CANCEL, 2n]], []]);
    // The same request again: the same revisions, nothing sent again.
    expect(r.control({ op: "cancel_job", requestId: "cj-1", jobId: "j" })).toEqual({ ok: true, jobId: "j", notStarted: 0, cancelledRunning: 2, refused: [] });
    expect(cancels(a)).toEqual([[SignalKind.CANCEL, 2n]]);
    expect([r.command("j.1").revision, r.command("j.2").revision]).toEqual([2, 2]);
    r.accept(b, "j.2");
    expect(cancels(b)).toEqual([[SignalKind.CANCEL, 2n]]);
    expect(r.getJob("j")!.endedTime).toBeUndefined();
    r.event(a, "j.1", 2, lifecycle(L.CANCELLED, { signalName: "SIGTERM" }), 2n);
    r.event(b, "j.2", 1, lifecycle(L.CANCELLED), 2n);
    expect(r.getJob("j")!.endedTime).toBeDefined();
    expect(r.getJob("j")!.summary).toMatchObject({ targets: 4, pending: 0, inFlight: 0, succeeded: 0, failed: 2, cancelled: 2 });
    // Ended: nothing to do, and no new revision.
    expect(r.control({ op: "cancel_job", requestId: "cj-2", jobId: "j" })).toEqual({ ok: true, jobId: "j", notStarted: 0, cancelledRunning: 0, refused: [] });
    expect(r.command("j.1").revision).toBe(2);
    expect(r.control({ op: "cancel_job", requestId: "cj-3", jobId: "nope" })).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no job nope" },
    });
  });

  it("cancel_job: a child still queued at the server ends cancelled there; a job of only pending children ends at once; the error budget's reason is kept", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b"]);
    // "q" is known but has no session: its child is queued at the server.
    r.step({ type: "conn_closed", conn: r.connect("q"), reason: "cut" });
    job(r, "jq", ["q", "a", "b"], { maxConcurrency: "1" });
    expect(r.command("jq.1").state).toBe("queued");
    expect(r.control({ op: "cancel_job", requestId: "cq", jobId: "jq" })).toEqual({ ok: true, jobId: "jq", notStarted: 2, cancelledRunning: 1, refused: [] });
    expect(r.command("jq.1").state).toBe("cancelled");
    expect(r.getJob("jq")!.endedTime).toBeDefined();
    // Stopped by its error budget first: the cancel keeps that reason.
    job(r, "je", ["a", "b"], { maxConcurrency: "1", maxErrors: "0" });
    finish(r, conns, "je.1", 1);
    expect(r.getJob("je")!.stoppedReason).toBe("error budget exceeded: 1 failed, max-errors 0");
    expect(r.control({ op: "cancel_job", requestId: "ce", jobId: "je" })).toEqual({ ok: true, jobId: "je", notStarted: 0, cancelledRunning: 0, refused: [] });
    expect(r.getJob("je")!.stoppedReason).toBe("error budget exceeded: 1 failed, max-errors 0");
  });

  it("R-D1: a crash mid-wave: restore continues the job without starting a child twice or exceeding its concurrency", () => {
    const r = new ServerRig();
    const ids = ["a", "b", "c", "d", "e"];
    let conns = fleet(r, ids);
    job(r, "j", ids, { maxConcurrency: "2" });
    finish(r, conns, "j.1", 0);
    expect(phases(r, "j")).toEqual(["done", "started", "started", "pending", "pending"]);
    // Not yet durable: j.2 ends in memory, j.4 starts in memory; the crash takes both back.
    r.autoDurable = false;
    finish(r, conns, "j.2", 0);
    // internal: the working phases, ahead of the committed view readers see
    expect(r.st.jobs.get("j")!.children.map((c) => c.phase)).toEqual(["done", "done", "started", "started", "pending"]);
    expect(phases(r, "j")).toEqual(["done", "started", "started", "pending", "pending"]);
    r.st = restoreServer(r.cfg, r.disk.tables(), 7);
    expect(phases(r, "j")).toEqual(["done", "started", "started", "pending", "pending"]);
    expect(r.findCommand("j.4")).toBeUndefined();
    expect(inflight(r, "j")).toBe(2);
    r.autoDurable = true;
    conns = fleet(r, ids);
    // Nothing new starts until a child ends: j.2's end comes again from its agent.
    expect(r.findCommand("j.4")).toBeUndefined();
    finish(r, conns, "j.2", 0);
    expect(phases(r, "j")).toEqual(["done", "done", "started", "started", "pending"]);
    finish(r, conns, "j.3", 0);
    finish(r, conns, "j.4", 0);
    finish(r, conns, "j.5", 0);
    expect(r.getJob("j")!.endedTime).toBeDefined();
    // Each uuid was dispatched for creation once per session at most: no child ran twice.
    expect(new Set(r.getJob("j")!.children.map((c) => c.issueUuid)).size).toBe(5);
    expect(outcomes(r, "j")).toEqual(Array(5).fill(["done", L.SUCCEEDED, 0]));
  });

  it("MAX_JOBS: at the bound a new job forgets the oldest ended one, also after a restart; with none ended it is refused CAPACITY and nothing is created", () => {
    const r = new ServerRig();
    let conns = fleet(r, ["a"]);
    for (let i = 0; i < MAX_JOBS; i++) {
      r.now += 1;
      expect(job(r, `j${i}`, ["a"])).toEqual({ ok: true, jobId: `j${i}` });
      // j0 and j2 run to their end; every other job's child stays in flight.
      if (i === 0 || i === 2) finish(r, conns, `j${i}.1`, 0);
    }
    expect(r.listJobs()).toHaveLength(MAX_JOBS);
    r.now += 1;
    expect(job(r, "n1", ["a"])).toEqual({ ok: true, jobId: "n1" });
    expect(r.getJob("j0")).toBeUndefined(); // the oldest ended job
    expect(r.getJob("j1")).toBeDefined(); // older than j2, but still running
    expect(r.getJob("j2")).toBeDefined();
    expect(r.listJobs()).toHaveLength(MAX_JOBS);
    expect(rowOf(r.disk.durable, "job", "j0")).toBeUndefined(); // forgotten durably too
    // After a restart the next one forgets j2, the only ended job left.
    r.st = restoreServer(r.cfg, r.disk.tables(), 7);
    conns = fleet(r, ["a"]);
    r.now += 1;
    expect(job(r, "n2", ["a"])).toEqual({ ok: true, jobId: "n2" });
    expect(r.getJob("j2")).toBeUndefined();
    expect(r.getJob("j1")).toBeDefined();
    // None ended: the next job is refused, names the bound, and creates nothing.
    const commands = r.listCommands().length;
    r.now += 1;
    expect(job(r, "n3", ["a"])).toMatchObject({ ok: false, error: { code: Code.CAPACITY, message: `${MAX_JOBS} jobs are active (at most ${MAX_JOBS})` } });
    expect(r.getJob("n3")).toBeUndefined();
    expect(r.listCommands()).toHaveLength(commands);
    // One ends: room again, and that is the job forgotten.
    finish(r, conns, "j500.1", 0);
    r.now += 1;
    expect(job(r, "n3", ["a"])).toEqual({ ok: true, jobId: "n3" });
    expect(r.getJob("j500")).toBeUndefined();
    expect(r.getJob("j1")).toBeDefined();
  });

  it("-l: a selector is resolved once at submit to the matching clients in id order; later label changes move nothing; a retry is the same job", () => {
    const r = new ServerRig();
    fleet(r, ["web-2", "db-1", "web-1", "web-3"]);
    const label = (clientId: string, role: string) =>
      r.control({ op: "set_labels", requestId: `l-${clientId}-${role}-${r.now}`, clientId, set: { role }, remove: [] });
    for (const id of ["web-2", "web-1", "web-3"]) label(id, "web");
    label("db-1", "db");
    expect(job(r, "jw", [], { selector: "role=web", maxConcurrency: "1" })).toEqual({ ok: true, jobId: "jw" });
    const j = r.getJob("jw")!;
    expect(j.selector).toBe("role=web");
    expect(j.children.map((c) => c.clientId)).toEqual(["web-1", "web-2", "web-3"]);
    label("db-1", "web");
    label("web-3", "db");
    expect(job(r, "jw", [], { selector: "role=web", maxConcurrency: "1" })).toEqual({ ok: true, jobId: "jw" });
    expect(r.getJob("jw")!.children.map((c) => c.clientId)).toEqual(["web-1", "web-2", "web-3"]);
    expect(job(r, "jn", [], { selector: "role=cache" })).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no client matches role=cache; nothing was created" },
    });
    expect(job(r, "jb", ["web-1"], { selector: "role=web" })).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(job(r, "je", [], { selector: "role=" })).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(r.listJobs().map((x) => x.jobId)).toEqual(["jw"]);
  });

  it("readers see a job's committed view: a child start is shown only once durable", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b"]);
    job(r, "j", ["a", "b"], { maxConcurrency: "1" });
    r.autoDurable = false;
    finish(r, conns, "j.1", 0);
    // internal: the working phases, ahead of the committed view (what this test sets apart)
    expect(r.st.jobs.get("j")!.children.map((c) => c.phase)).toEqual(["done", "started"]);
    expect(phases(r, "j")).toEqual(["started", "pending"]);
    r.flush();
    expect(phases(r, "j")).toEqual(["done", "started"]);
  });
});

describe("jobs: what an operator is told when a request is refused", () => {
  const spec = create(ExecutionSpecSchema, argv("true"));
  const refusals: Array<[string, Partial<Job>, Code, string]> = [
    ["an id with a space", { jobId: "bad id" }, Code.VALIDATION, `job id must be 1-${MAX_JOB_ID_CHARS} characters of [A-Za-z0-9._:-]`],
    [
      "an id one character too long",
      { jobId: "j".repeat(MAX_JOB_ID_CHARS + 1) },
      Code.VALIDATION,
      `job id must be 1-${MAX_JOB_ID_CHARS} characters of [A-Za-z0-9._:-]`,
    ],
    ["no program", { spec: create(ExecutionSpecSchema, {}) }, Code.VALIDATION, "no program (argv or shell)"],
    [
      "a script",
      { spec: create(ExecutionSpecSchema, { program: { case: "script", value: { sizeBytes: 1n, interpreter: "/bin/sh" } } }) },
      Code.VALIDATION,
      "script jobs are not supported: run argv or a shell command line",
    ],
    ["clients and a selector", { selector: "role=web" }, Code.VALIDATION, "a job names its clients or a label selector, not both"],
    ["a selector of blanks", { clients: [], selector: "  " }, Code.VALIDATION, "an empty selector would match every client; name at least one label term"],
    ["no target", { clients: [] }, Code.VALIDATION, "a job needs at least one target client"],
    ["an empty client id", { clients: ["a", ""] }, Code.VALIDATION, "empty client id in the target list"],
    ["a client twice", { clients: ["a", "b", "a"] }, Code.VALIDATION, "client a is named twice"],
    [
      "one target over the bound",
      { clients: Array.from({ length: MAX_JOB_TARGETS + 1 }, (_, i) => `h${i}`) },
      Code.VALIDATION,
      `a job targets at most ${MAX_JOB_TARGETS} clients (got ${MAX_JOB_TARGETS + 1})`,
    ],
    ["max-concurrency 0", { maxConcurrency: "0" }, Code.VALIDATION, 'max-concurrency must be a count or a percentage (N or P%), at least 1: got "0"'],
    ["max-errors in words", { maxErrors: "two" }, Code.VALIDATION, 'max-errors must be a count or a percentage (N or P%), at least 0: got "two"'],
  ];
  for (const [what, over, code, message] of refusals)
    it(`${what}: ${Code[code]} "${message.slice(0, 40)}…", and nothing is created`, () => {
      const r = new ServerRig();
      fleet(r, ["a", "b"]);
      const res = r.control({ op: "submit_job", requestId: "rq", jobId: "j", clients: ["a", "b"], spec, ...over });
      expect(res).toEqual({ ok: false, error: { code, message } });
      expect([r.listJobs(), r.listCommands()]).toEqual([[], []]);
    });

  it("the bounds themselves are accepted: an id of MAX_JOB_ID_CHARS, MAX_JOB_TARGETS targets (then judged by name), 100%", () => {
    const r = new ServerRig();
    fleet(r, ["a"]);
    const long = "j".repeat(MAX_JOB_ID_CHARS);
    expect(job(r, long, ["a"], { maxConcurrency: "100%", maxErrors: "100%" })).toEqual({ ok: true, jobId: long });
    expect(r.command(`${long}.1`).clientId).toBe("a");
    const many = Array.from({ length: MAX_JOB_TARGETS }, (_, i) => (i === 0 ? "a" : `h${i}`));
    const res = job(r, "many", many);
    expect(res).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(res!.ok === false && res!.error.message).toMatch(/^no client h1 has registered/);
  });

  it("a child's uuid already taken by a command is a conflict naming the child, the last child too", () => {
    const r = new ServerRig();
    fleet(r, ["a", "b"]);
    r.submit("a", "j.2");
    expect(job(r, "j", ["a", "b"])).toEqual({ ok: false, error: { code: Code.CONFLICT, message: "command uuid j.2 (child 2 of job j) is already used" } });
    expect(r.listJobs()).toEqual([]);
    expect(r.findCommand("j.1")).toBeUndefined();
  });

  it("rates: blanks around a rate are ignored, anything else around the number is refused; a count of errors is not cut to the targets", () => {
    expect(resolveRate(" 2 ", 5, "concurrency")).toBe(2);
    expect(resolveRate("100%", 5, "concurrency")).toBe(5);
    expect(resolveRate("100%", 5, "errors")).toBe(5);
    expect(resolveRate("9", 3, "errors")).toBe(9);
    expect(resolveRate("0", 3, "errors")).toBe(0);
    for (const bad of ["x2", "2x", "2 %", "-1", "1234567890"])
      expect(resolveRate(bad, 3, "errors")).toEqual({
        code: Code.VALIDATION,
        message: `max-errors must be a count or a percentage (N or P%), at least 0: got "${bad}"`,
      });
    expect(parseRate("7", "what", 8)).toEqual({ code: Code.VALIDATION, message: 'what must be a count or a percentage (N or P%), at least 8: got "7"' });
  });

  it("GetJob shows the rates as given and as resolved", () => {
    const r = new ServerRig();
    fleet(r, ["a", "b", "c"]);
    job(r, "j", ["a", "b", "c"], { maxConcurrency: "50%", maxErrors: "1" });
    expect(r.getJob("j")).toMatchObject({ maxConcurrency: "50%", maxConcurrencyResolved: 2, maxErrors: "1", maxErrorsResolved: 1, selector: "" });
    job(r, "k", ["a"]);
    expect(r.getJob("k")).toMatchObject({ maxConcurrency: "", maxConcurrencyResolved: 1, maxErrors: "", maxErrorsResolved: -1 });
  });

  it("a retry is the same job only if every field of the request is the same; the digest is of the documented text", () => {
    const r = new ServerRig();
    fleet(r, ["a", "b"]);
    for (const [id, role] of [
      ["a", "web"],
      ["b", "web"],
    ])
      r.control({ op: "set_labels", requestId: `l-${id}`, clientId: id!, set: { role: role! }, remove: [] });
    const base: Partial<Job> = { clients: [], selector: "role=web", maxConcurrency: "1", maxErrors: "0", queueExpiry: r.now + 60_000 };
    expect(job(r, "j", [], base)).toEqual({ ok: true, jobId: "j" });
    expect(job(r, "j", [], base)).toEqual({ ok: true, jobId: "j" });
    const conflict = { ok: false, error: { code: Code.CONFLICT, message: "job id j already used by a different request" } };
    for (const change of [
      { selector: "role = web" },
      { maxConcurrency: "2" },
      { maxErrors: "1" },
      { queueExpiry: r.now + 1 },
      { spec: create(ExecutionSpecSchema, argv("false")) },
    ])
      expect(job(r, "j", [], { ...base, ...change })).toEqual(conflict);
    const text = `rvbox.v1/job\nj\nrole=web\n\n\n1\n0\n${base.queueExpiry}\n`;
    const expected = createHash("sha256")
      .update(Buffer.concat([Buffer.from(text), toBinary(ExecutionSpecSchema, create(ExecutionSpecSchema, argv("true")))]))
      .digest("hex");
    expect(rowOf(r.disk.durable, "job", "j")!.hash).toBe(expected);
    // An explicit list: the clients one per line.
    job(r, "k", ["a", "b"]);
    const text2 = `rvbox.v1/job\nk\n\na\nb\n\n\n\n0\n`;
    const expected2 = createHash("sha256")
      .update(Buffer.concat([Buffer.from(text2), toBinary(ExecutionSpecSchema, create(ExecutionSpecSchema, argv("true")))]))
      .digest("hex");
    expect(rowOf(r.disk.durable, "job", "k")!.hash).toBe(expected2);
  });
});

describe("jobs: children over time", () => {
  it("queue expiry is the job's: a child queued past it ends expired, and so does every child started after it, in the same step", () => {
    const r = new ServerRig();
    fleet(r, ["a"]);
    r.step({ type: "conn_closed", conn: r.connect("q"), reason: "cut" });
    job(r, "j", ["q", "a"], { maxConcurrency: "1", queueExpiry: r.now + 1_000 });
    expect(r.command("j.1").state).toBe("queued");
    r.now += 999;
    r.step({ type: "tick" });
    expect(phases(r, "j")).toEqual(["started", "pending"]);
    r.now += 2;
    r.autoDurable = false;
    r.step({ type: "tick" });
    // internal: the tick itself (before any durable input runs the pump again) takes the job to its end
    expect(r.st.jobs.get("j")!.children.map((c) => c.phase)).toEqual(["done", "done"]);
    expect(r.st.jobs.get("j")!.endedAt).toBeGreaterThan(0);
    r.flush();
    r.autoDurable = true;
    expect(phases(r, "j")).toEqual(["done", "done"]);
    expect(r.getJob("j")!.children.map((c) => c.state)).toEqual([L.EXPIRED, L.EXPIRED]);
    expect(r.getJob("j")!.endedTime).toBeDefined();
  });

  it("a target forgotten after submit: its child still starts when its turn comes, and waits for the client", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a"]);
    r.step({ type: "conn_closed", conn: r.connect("b"), reason: "cut" });
    job(r, "j", ["a", "b"], { maxConcurrency: "1" });
    expect(r.control({ op: "forget_client", requestId: "f", clientId: "b" })).toEqual({ ok: true });
    finish(r, conns, "j.1", 0);
    expect(phases(r, "j")).toEqual(["done", "started"]);
    expect(r.command("j.2")).toMatchObject({ clientId: "b", state: "queued" });
  });

  it("the committed view follows each child's end, also when the job has stopped and nothing else changes", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c"]);
    job(r, "j", ["a", "b", "c"], { maxConcurrency: "2" });
    r.control({ op: "cancel_job", requestId: "cj", jobId: "j" });
    expect(phases(r, "j")).toEqual(["started", "started", "cancelled"]);
    r.accept(conns.get("a")!, "j.1");
    r.event(conns.get("a")!, "j.1", 1, lifecycle(L.CANCELLED), 2n);
    expect(phases(r, "j")).toEqual(["done", "started", "cancelled"]);
    expect(rowOf(r.disk.durable, "job", "j")!.children.map((c) => c.phase)).toEqual(["done", "started", "cancelled"]);
  });

  it("cancel_job on a job that ended by itself changes nothing: no reason, no row written", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a"]);
    job(r, "j", ["a"]);
    finish(r, conns, "j.1", 0);
    const persists = r.log.filter((e) => e.type === "persist").length;
    expect(r.control({ op: "cancel_job", requestId: "cj", jobId: "j" })).toEqual({ ok: true, jobId: "j", notStarted: 0, cancelledRunning: 0, refused: [] });
    expect(r.getJob("j")!.stoppedReason).toBe("");
    expect(r.log.filter((e) => e.type === "persist").length).toBe(persists);
  });

  it("cancel_job on a job its error budget stopped while a child runs: the budget's reason stays, the running child is cancelled", () => {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c"]);
    job(r, "j", ["a", "b", "c"], { maxConcurrency: "2", maxErrors: "0" });
    finish(r, conns, "j.1", 1);
    expect(r.getJob("j")!.stoppedReason).toBe("error budget exceeded: 1 failed, max-errors 0");
    expect(r.control({ op: "cancel_job", requestId: "cj", jobId: "j" })).toEqual({ ok: true, jobId: "j", notStarted: 0, cancelledRunning: 1, refused: [] });
    expect(r.getJob("j")!.stoppedReason).toBe("error budget exceeded: 1 failed, max-errors 0");
    expect(traces(r, "job_cancelled")).toEqual([]);
  });

  it("cancel_job names each started child its CANCEL was refused for, and cancels the others", () => {
    const r = new ServerRig();
    fleet(r, ["a", "b"]);
    job(r, "j", ["a", "b"]);
    for (let i = 0; i < MAX_PENDING_SIGNALS; i++) r.control({ op: "signal", requestId: `s${i}`, uuid: "j.2", signal: SignalKind.USER1 });
    expect(r.control({ op: "cancel_job", requestId: "cj", jobId: "j" })).toEqual({
      ok: true,
      jobId: "j",
      notStarted: 0,
      cancelledRunning: 1,
      refused: [`j.2: ${MAX_PENDING_SIGNALS} signals already outstanding; retry once they are answered`],
    });
  });

  it("every step of a job is traced with what it concerns", () => {
    const r = new ServerRig({ maxActivePerClient: 1 });
    const conns = fleet(r, ["a", "b", "c", "d"]);
    r.submit("c", "busy");
    job(r, "j", ["a", "b", "c", "d"], { maxConcurrency: "2", maxErrors: "1" });
    finish(r, conns, "j.1", 2);
    finish(r, conns, "j.2", 0);
    job(r, "k", ["a", "b"], { maxConcurrency: "1" });
    r.control({ op: "cancel_job", requestId: "ck", jobId: "k" });
    expect(traces(r)).toEqual([
      ["job_submitted", { job: "j", targets: 4, maxConcurrency: 2, maxErrors: 1 }],
      ["job_child_started", { job: "j", uuid: "j.1", client: "a" }],
      ["job_child_started", { job: "j", uuid: "j.2", client: "b" }],
      ["job_child_ended", { job: "j", uuid: "j.1", state: "FAILED" }],
      ["job_child_refused", { job: "j", uuid: "j.3", message: "client c has 1 active commands" }],
      ["job_stopped", { job: "j", failed: 2, maxErrors: 1 }],
      ["job_child_ended", { job: "j", uuid: "j.2", state: "SUCCEEDED" }],
      ["job_ended", { job: "j", failed: 2 }],
      ["job_submitted", { job: "k", targets: 2, maxConcurrency: 1, maxErrors: -1 }],
      ["job_child_started", { job: "k", uuid: "k.1", client: "a" }],
      ["job_cancelled", { job: "k" }],
    ]);
  });
});

/** The job traces in r.log: [event, detail]. */
function traces(r: ServerRig, only?: string): Array<[string, unknown]> {
  return r.log.flatMap((e) =>
    e.type === "trace" && e.event.startsWith("job_") && (only === undefined || e.event === only) ? [[e.event, e.detail] as [string, unknown]] : [],
  );
}

describe("jobs: restore order", () => {
  it("after a restart the oldest ended job is forgotten first, by creation time and then id, whatever order the rows come in; a job forgotten before its last view is durable is simply gone", () => {
    const r = new ServerRig();
    let conns = fleet(r, ["a"]);
    // "late" is submitted first, under a wall clock 10 s ahead; "early" after it, with the clock back.
    r.wallStep = 10_000;
    job(r, "late", ["a"]);
    finish(r, conns, "late.1", 0);
    r.wallStep = 0;
    r.now += 1;
    job(r, "early", ["a"]);
    finish(r, conns, "early.1", 0);
    // Two jobs created in the same millisecond, "tie-b" first.
    r.now += 1;
    job(r, "tie-b", ["a"]);
    job(r, "tie-a", ["a"]);
    finish(r, conns, "tie-b.1", 0);
    finish(r, conns, "tie-a.1", 0);
    // Bounded by the count, not by the table's size: a job that fails to be created must not loop forever.
    for (let i = 0; i < MAX_JOBS - 4; i++) {
      r.now += 1;
      expect(job(r, `run${i}`, ["a"])).toEqual({ ok: true, jobId: `run${i}` });
    }
    r.st = restoreServer(r.cfg, r.disk.tables(), 7);
    conns = fleet(r, ["a"]);
    const forgotten: string[] = [];
    for (const n of ["n1", "n2", "n3", "n4"]) {
      const before = new Set(r.st.jobs.keys());
      r.now += 1;
      expect(job(r, n, ["a"])).toEqual({ ok: true, jobId: n });
      forgotten.push(...[...before].filter((id) => !r.st.jobs.has(id)));
    }
    expect(forgotten).toEqual(["early", "tie-a", "tie-b", "late"]);
    // run0 ends, and a new job forgets it before that end is durable.
    r.autoDurable = false;
    finish(r, conns, "run0.1", 0);
    r.now += 1;
    job(r, "n5", ["a"]);
    r.flush();
    r.autoDurable = true;
    expect(r.getJob("run0")).toBeUndefined();
    expect(r.replies.get(`job-n5-${r.now}`)).toEqual({ ok: true, jobId: "n5" });
    expect(rowOf(r.disk.durable, "job", "run0")).toBeUndefined();
  });
});

describe("jobs: invariants catch every corruption they check", () => {
  /** j: a, b, c one at a time (started, pending, pending); k: a, b, ended. */
  function healthy(): ServerRig {
    const r = new ServerRig();
    const conns = fleet(r, ["a", "b", "c"]);
    job(r, "k", ["a", "b"]);
    finish(r, conns, "k.1", 0);
    finish(r, conns, "k.2", 1);
    job(r, "j", ["a", "b", "c"], { maxConcurrency: "1" });
    serverInvariants(r.st);
    return r;
  }
  const J = (r: ServerRig, id = "j") => r.st.jobs.get(id)!;
  const ended = (id: string, n: number) =>
    Array.from({ length: n }, (_, i) => ({
      clientId: `h${i}`,
      uuid: `${id}.${i + 1}`,
      phase: "cancelled" as const,
      state: L.CANCELLED,
      exitCode: null,
      reason: "",
      createdAt: 0,
      startedTime: 0,
      endedTime: 0,
    }));
  const cases: Array<[string, (r: ServerRig) => void, RegExp]> = [
    [
      "more jobs than MAX_JOBS",
      (r) => Array.from({ length: MAX_JOBS - 1 }, (_, i) => r.st.jobs.set(`x${i}`, J(r, "k"))),
      new RegExp(`^${MAX_JOBS + 1} jobs over MAX_JOBS$`),
    ],
    ["key mismatch", (r) => void (J(r).id = "zz"), /^job key mismatch$/],
    ["no children", (r) => void (J(r, "k").children = []), /^job k: 0 children$/],
    [
      "children over MAX_JOB_TARGETS",
      (r) => void (J(r, "k").children = ended("k", MAX_JOB_TARGETS + 1)),
      new RegExp(`^job k: ${MAX_JOB_TARGETS + 1} children$`),
    ],
    ["concurrency 0", (r) => void (J(r).maxConcurrency = 0), /^job j: concurrency below 1$/],
    ["in flight over the concurrency", (r) => void (J(r).children[1]!.phase = "started"), /^job j: 2 children in flight over max-concurrency 1$/],
    ["a child's uuid", (r) => void (J(r).children[1]!.uuid = "j.9"), /^job j: child 2 uuid j.9$/],
    ["a client twice", (r) => void (J(r).children[2]!.clientId = "b"), /^job j: client b targeted twice$/],
    [
      "a started child without a command",
      (r) => void ((J(r).maxConcurrency = 2), (J(r).children[1]!.phase = "started")),
      /^job j: started child j.2 has no active command$/,
    ],
    ["a started child whose command ended", (r) => void (J(r, "k").children[0]!.phase = "started"), /^job k: started child k.1 has no active command$/],
    [
      "pending past the error budget",
      (r) => void ((J(r).maxErrors = 0), Object.assign(J(r).children[2]!, { phase: "done", state: L.FAILED })),
      /^job j: children pending past the error budget$/,
    ],
    ["stopped with children pending", (r) => void (J(r).stopped = "x"), /^job j: stopped with children pending$/],
    ["ended with a child not ended", (r) => void (J(r, "k").children[1]!.phase = "pending"), /^job k: ended with children not ended$/],
    ["the active index misses a job", (r) => void r.st.activeJobs.delete("j"), /^job j: active index out of step$/],
    ["the active index holds an ended job", (r) => void r.st.activeJobs.add("k"), /^job k: active index out of step$/],
    ["the active index holds an unknown job", (r) => void r.st.activeJobs.add("ghost"), /^active job index out of step$/],
  ];
  for (const [what, corrupt, message] of cases)
    it(what, () => {
      const r = healthy();
      corrupt(r);
      expect(() => serverInvariants(r.st)).toThrow(message);
    });

  it("the bounds themselves hold: MAX_JOBS jobs, MAX_JOB_TARGETS children", () => {
    const r = healthy();
    for (let i = 0; i < MAX_JOBS - 2; i++) r.st.jobs.set(`x${i}`, { ...J(r, "k"), id: `x${i}`, children: ended(`x${i}`, 1) });
    J(r, "k").children = ended("k", MAX_JOB_TARGETS);
    J(r, "k").maxConcurrency = MAX_JOB_TARGETS;
    expect(() => serverInvariants(r.st)).not.toThrow();
  });
});
