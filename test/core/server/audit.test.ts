// The operators' audit log in the server core (audit.ts): an audited control
// call appends one entry with its result in the same persist batch as its
// change, its reply leaves only once that batch is durable, the log is
// bounded with a durable drop count, and it survives a restart.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { Code, InvariantViolation } from "../../../core/errors.js";
import { restoreServer, serverInvariants, type AuditCall, type ControlRequest } from "../../../core/index.js";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AUDIT_REFUSAL_WINDOW_MS, MAX_AUDIT_CLIENTS_PER_ENTRY, MAX_AUDIT_MESSAGE_CHARS, MAX_AUDIT_SUMMARY_CHARS } from "../../../core/limits.js";
import { auditKey, rowOf, rowsOf } from "../../../core/server/store.js";
import { CommandLifecycle as L, ExecutionSpecSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { argv, lifecycle, ServerRig } from "../../support/server-rig.js";

const alice: AuditCall = { operator: "alice", role: "operator", rpc: "SubmitCommand", summary: 'client=a argv=["true"]' };
const admin = (rpc: string, summary = ""): AuditCall => ({ operator: "admin", role: "admin", rpc, summary });

function audited(r: ServerRig, request: ControlRequest, audit: AuditCall) {
  r.step({ type: "control", request, audit });
  return r.replies.get(request.requestId);
}

const submit = (uuid: string, clientId = "a"): ControlRequest => ({
  op: "submit",
  requestId: `submit-${uuid}`,
  uuid,
  clientId,
  spec: {
    $typeName: "rvbox.v1.ExecutionSpec",
    program: { case: "argv", value: { $typeName: "rvbox.v1.ArgvProgram", argv: ["true"] } },
    cwd: "",
    environment: [],
    timeoutMs: 0n,
    stdinOpen: false,
  },
});

describe("audit log (core)", () => {
  it("an audited call appends one entry with who, what, which client, when and the result, in the batch of its own change", () => {
    const r = new ServerRig();
    r.connect("a");
    r.autoDurable = false;
    const out = r.step({ type: "control", request: submit("u1"), audit: alice });
    expect(out.filter((e) => e.type === "reply")).toEqual([]);
    const persists = out.filter((e) => e.type === "persist");
    expect(persists).toHaveLength(1);
    const tables = persists[0]!.type === "persist" ? persists[0]!.records.map((x) => x.table) : [];
    expect(tables).toContain("command");
    expect(tables).toContain("audit");
    const after = r.flush();
    expect(after.filter((e) => e.type === "reply")).toEqual([{ type: "reply", requestId: "submit-u1", result: { ok: true, uuid: "u1", revision: 1 } }]);
    const row = rowOf(r.disk.durable, "audit", auditKey(1))!;
    expect(row).toEqual({
      seq: 1,
      at: r.now + r.wallStep,
      operator: "alice",
      role: "operator",
      rpc: "SubmitCommand",
      summary: alice.summary,
      clients: ["a"],
      clientsOmitted: 0,
      result: "OK",
      message: "",
    });
  });

  it("a refused call is audited with its error code, and its error reply also waits for the entry to be durable", () => {
    const r = new ServerRig();
    r.connect("alpha");
    r.autoDurable = false;
    const req: ControlRequest = { op: "set_labels", requestId: "l1", clientId: "alpah", set: { role: "web" }, remove: [] };
    const out = r.step({ type: "control", request: req, audit: admin("SetClientLabels", "client=alpah set=role=web") });
    expect(out.filter((e) => e.type === "reply")).toEqual([]);
    const back = r.flush().filter((e) => e.type === "reply");
    expect(back).toMatchObject([{ requestId: "l1", result: { ok: false, error: { code: Code.NOT_FOUND } } }]);
    expect(rowOf(r.disk.durable, "audit", auditKey(1))).toMatchObject({ operator: "admin", clients: ["alpah"], result: "NOT_FOUND" });
    expect(rowOf(r.disk.durable, "audit", auditKey(1))!.message).toContain("did you mean alpha");
  });

  it("names the command's client for stdin and signal calls, and the client a forget removed", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.running(a, "run1");
    audited(r, { op: "signal", requestId: "s1", uuid: "run1", signal: 7 }, admin("SignalCommand"));
    audited(r, { op: "close_stdin", requestId: "c1", uuid: "run1" }, admin("CloseStdin"));
    const b = r.connect("b");
    r.step({ type: "conn_closed", conn: b, reason: "gone" });
    expect(audited(r, { op: "forget_client", requestId: "f1", clientId: "b" }, admin("ForgetClient"))).toEqual({ ok: true });
    expect(r.client("b")).toBeUndefined();
    expect(r.listAudit().entries.map((e) => [e.rpc, e.clientIds, e.result])).toEqual([
      ["SignalCommand", ["a"], "OK"],
      ["CloseStdin", ["a"], "VALIDATION"],
      ["ForgetClient", ["b"], "OK"],
    ]);
  });

  it("audit_refusal only appends the entry (the shell's access-control refusals), with the refusal's code", () => {
    const r = new ServerRig();
    r.connect("db-1");
    const res = audited(
      r,
      {
        op: "audit_refusal",
        requestId: "x1",
        clients: ["db-1"],
        code: "PERMISSION_DENIED",
        message: "operator alice may run only on clients matching role=web; client db-1 has no labels",
      },
      alice,
    );
    expect(res).toEqual({ ok: true });
    expect(r.listAudit().entries).toEqual([]);
    expect(r.listRefusals().refusals).toMatchObject([{ seq: 1n, operator: "alice", clientIds: ["db-1"], result: "PERMISSION_DENIED", count: 1n }]);
    expect(r.listCommands()).toEqual([]);
  });

  it("unaudited calls (the simulator, tests) append nothing", () => {
    const r = new ServerRig();
    r.connect("a");
    r.submit("a", "u1");
    expect(r.listAudit()).toEqual({ entries: [], dropped: 0 });
    expect([...rowsOf(r.disk.tables(), "audit")]).toEqual([]);
  });

  it("is bounded by limits.auditMax: the oldest go first, counted durably; a restart keeps the entries, the count and the sequence", () => {
    const r = new ServerRig({ auditMax: 3 });
    r.connect("a");
    for (let i = 1; i <= 5; i++)
      audited(r, { op: "set_draining", requestId: `d${i}`, clientId: "a", draining: i % 2 === 1 }, admin("SetClientDraining", `#${i}`));
    const seqs = (x: ServerRig) => x.listAudit().entries.map((e) => Number(e.seq));
    expect(seqs(r)).toEqual([3, 4, 5]);
    expect(r.listAudit().dropped).toBe(2);
    expect([...rowsOf(r.disk.tables(), "audit")].map(([k]) => k)).toEqual([auditKey(3), auditKey(4), auditKey(5)]);
    expect(rowOf(r.disk.durable, "counter", "audit_dropped")).toEqual({ count: 2, throughSeq: 2 });
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    serverInvariants(back);
    r.st = back;
    expect(r.listAudit().entries.map((e) => e.summary)).toEqual(["#3", "#4", "#5"]);
    expect(r.listAudit().dropped).toBe(2);
    audited(r, { op: "set_draining", requestId: "d6", clientId: "a", draining: false }, admin("SetClientDraining", "#6"));
    expect(seqs(r)).toEqual([4, 5, 6]);
    expect(r.listAudit().dropped).toBe(3);
  });

  it("a restart with a lowered bound keeps what it finds until the next entry trims it", () => {
    const r = new ServerRig({ auditMax: 5 });
    r.connect("a");
    for (let i = 1; i <= 5; i++) audited(r, { op: "set_draining", requestId: `d${i}`, clientId: "a", draining: true }, admin("SetClientDraining"));
    const cfg = { ...r.cfg, limits: { ...r.cfg.limits, auditMax: 2 } };
    r.st = restoreServer(cfg, r.disk.tables(), 3);
    serverInvariants(r.st);
    expect(r.listAudit().entries).toHaveLength(5);
    audited(r, { op: "set_draining", requestId: "d6", clientId: "a", draining: true }, admin("SetClientDraining"));
    expect(r.listAudit().entries.map((e) => Number(e.seq))).toEqual([5, 6]);
    expect(r.listAudit().dropped).toBe(4);
  });

  it("an entry's summary and message are cut at exactly their bounds with an ellipsis; its clients at MAX_AUDIT_CLIENTS_PER_ENTRY, the rest counted", () => {
    const r = new ServerRig();
    r.connect("a");
    const refuse = (requestId: string, clients: string[], message: string, summary: string) =>
      audited(r, { op: "audit_refusal", requestId, clients, code: "PERMISSION_DENIED", message }, admin("SubmitJob", summary));
    const ids = (n: number) => Array.from({ length: n }, (_, i) => `h-${i}`);
    refuse("fit", ids(MAX_AUDIT_CLIENTS_PER_ENTRY), "m".repeat(MAX_AUDIT_MESSAGE_CHARS), "s".repeat(MAX_AUDIT_SUMMARY_CHARS));
    refuse("over", ids(MAX_AUDIT_CLIENTS_PER_ENTRY + 3), "m".repeat(MAX_AUDIT_MESSAGE_CHARS + 1), "s".repeat(MAX_AUDIT_SUMMARY_CHARS + 1));
    const [fit, over] = r.listRefusals().refusals;
    expect([fit!.summary, fit!.message, fit!.clientIds, fit!.clientsOmitted]).toEqual([
      "s".repeat(MAX_AUDIT_SUMMARY_CHARS),
      "m".repeat(MAX_AUDIT_MESSAGE_CHARS),
      ids(MAX_AUDIT_CLIENTS_PER_ENTRY),
      0,
    ]);
    expect([over!.summary, over!.message, over!.clientIds, over!.clientsOmitted]).toEqual([
      `${"s".repeat(MAX_AUDIT_SUMMARY_CHARS - 1)}…`,
      `${"m".repeat(MAX_AUDIT_MESSAGE_CHARS - 1)}…`,
      ids(MAX_AUDIT_CLIENTS_PER_ENTRY),
      3,
    ]);
    serverInvariants(r.st);
  });

  it("names the client of every kind of call: claims, incidents, a pruned command's stdin; none when there is none", () => {
    const r = new ServerRig({ historyMs: 1 });
    const a = r.connect("a");
    r.connect("b");
    // A command that ended and was pruned from history still names its client.
    r.running(a, "gone");
    r.event(a, "gone", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.now += 10;
    r.step({ type: "tick" });
    expect(r.findCommand("gone")).toBeUndefined();
    audited(r, { op: "stdin", requestId: "w1", uuid: "gone", data: new Uint8Array([1]), appendNewline: false }, admin("WriteStdin"));
    audited(r, { op: "stdin", requestId: "w2", uuid: "never-was", data: new Uint8Array([1]), appendNewline: false }, admin("WriteStdin"));
    audited(r, { op: "authorize", requestId: "au", clientId: "a", instanceId: "inst-x", instanceNotYetSeen: true }, admin("AuthorizeInstance"));
    audited(r, { op: "revoke_authorization", requestId: "rv", clientId: "a" }, admin("RevokeAuthorization"));
    audited(r, { op: "dismiss_claim", requestId: "dc", clientId: "b" }, admin("DismissClaim"));
    audited(r, { op: "submit", requestId: "s0", uuid: "s0", clientId: "", spec: create(ExecutionSpecSchema, argv("true")) }, admin("SubmitCommand"));
    // An incident names its client; an unknown incident names none.
    r.snapshot(r.connect("c"), []);
    const c2 = r.open();
    r.hello(c2, "c");
    r.snapshot(c2, [{ issueUuid: "ghost", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: new Uint8Array(32) }]);
    const inc = r.incidents(true).find((i) => i.issueUuid === "ghost")!;
    audited(r, { op: "ack_incident", requestId: "ai", incidentId: inc.incidentId }, admin("AckIncident"));
    audited(r, { op: "ack_incident", requestId: "ax", incidentId: "inc-404" }, admin("AckIncident"));
    expect(r.listAudit().entries.map((e) => [e.rpc, e.clientIds])).toEqual([
      ["WriteStdin", ["a"]],
      ["WriteStdin", []],
      ["AuthorizeInstance", ["a"]],
      ["RevokeAuthorization", ["a"]],
      ["DismissClaim", ["b"]],
      ["SubmitCommand", []],
      ["AckIncident", ["c"]],
      ["AckIncident", []],
    ]);
  });

  it("a job's entry names the clients its label selector resolved to (it named none before the job existed); a refused job the clients it named", () => {
    const r = new ServerRig();
    for (const id of ["a", "b", "c"]) r.connect(id);
    for (const id of ["a", "c"])
      audited(r, { op: "set_labels", requestId: `lb-${id}`, clientId: id, set: { role: "web" }, remove: [] }, admin("SetClientLabels"));
    const job = (requestId: string, jobId: string, clients: string[], selector?: string) =>
      audited(
        r,
        { op: "submit_job", requestId, jobId, clients, ...(selector ? { selector } : {}), spec: create(ExecutionSpecSchema, argv("true")) },
        admin("SubmitJob"),
      );
    expect(job("j1", "job-1", [], "role=web")).toMatchObject({ ok: true });
    expect(job("j2", "job-2", ["b", "nobody"])).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(
      r
        .listAudit()
        .entries.filter((e) => e.rpc === "SubmitJob")
        .map((e) => [e.clientIds, e.result]),
    ).toEqual([
      [["a", "c"], "OK"],
      [["b", "nobody"], "NOT_FOUND"],
    ]);
  });

  it("a restart whose every entry was dropped still continues the sequence after the last dropped one; rows restore in seq order", () => {
    const r = new ServerRig({ auditMax: 1 });
    r.connect("a");
    for (let i = 1; i <= 12; i++) audited(r, { op: "set_draining", requestId: `d${i}`, clientId: "a", draining: true }, admin("SetClientDraining", `#${i}`));
    // Only the counter remains: the sequence resumes after its throughSeq.
    const tables = r.disk.tables();
    const back = restoreServer(r.cfg, { get: (t) => (t === "audit" ? new Map() : tables.get(t)) }, 2);
    serverInvariants(back);
    r.st = back;
    audited(r, { op: "set_draining", requestId: "d13", clientId: "a", draining: true }, admin("SetClientDraining", "#13"));
    expect(r.listAudit().entries.map((e) => [Number(e.seq), e.summary])).toEqual([[12, "#13"]]);
  });

  it("the invariants catch an entry out of order, one with too many clients, one beyond the sequence, and a log over its bound", () => {
    const fresh = () => {
      const r = new ServerRig({ auditMax: 3 });
      r.connect("a");
      for (let i = 1; i <= 3; i++) audited(r, { op: "set_draining", requestId: `d${i}`, clientId: "a", draining: true }, admin("SetClientDraining"));
      serverInvariants(r.st);
      return r;
    };
    const corrupt: Array<[string, (r: ServerRig) => void, RegExp]> = [
      ["key and seq differ", (r) => void (r.st.audit.get(2)!.seq = 7), /audit entry 2 out of order/],
      [
        "order",
        (r) => {
          const e = r.st.audit.get(1)!;
          r.st.audit.delete(1);
          r.st.audit.set(1, e);
        },
        /audit entry 1 out of order/,
      ],
      [
        "too many clients",
        (r) => void (r.st.audit.get(3)!.clients = Array.from({ length: MAX_AUDIT_CLIENTS_PER_ENTRY + 1 }, (_, i) => `c${i}`)),
        /lists too many clients/,
      ],
      ["beyond the sequence", (r) => void (r.st.auditSeq = 2), /beyond the audit sequence/],
      ["over the bound", (r) => void r.st.audit.set(4, { ...r.st.audit.get(3)!, seq: 4 }), /audit log over its bound/],
    ];
    for (const [name, hurt, message] of corrupt) {
      const r = fresh();
      if (name === "over the bound") r.st.auditSeq = 4;
      hurt(r);
      expect(() => serverInvariants(r.st), name).toThrow(InvariantViolation);
      expect(() => serverInvariants(r.st), name).toThrow(message);
    }
    // Exactly at the bound with a full list of clients is healthy.
    const ok = fresh();
    ok.st.audit.get(3)!.clients = Array.from({ length: MAX_AUDIT_CLIENTS_PER_ENTRY }, (_, i) => `c${i}`);
    serverInvariants(ok.st);
  });

  describe("refused calls (issue 38 item 2): a log of their own, so a flood of them never pushes an accepted call out", () => {
    const bob = (rpc = "SubmitCommand"): AuditCall => ({ operator: "bob", role: "viewer", rpc, summary: "client=a" });
    const refuse = (r: ServerRig, i: number, message: string, who = bob()) =>
      audited(r, { op: "audit_refusal", requestId: `x${i}`, clients: ["a"], code: "PERMISSION_DENIED", message }, who);
    const drain = (r: ServerRig, i: number) =>
      audited(r, { op: "set_draining", requestId: `d${i}`, clientId: "a", draining: i % 2 === 1 }, admin("SetClientDraining", `#${i}`));

    it("holds limits.auditRefusalMax refusal entries (n), drops the oldest at n+1 and counts it durably; the accepted entries stay whole", () => {
      const r = new ServerRig({ auditMax: 2, auditRefusalMax: 3 });
      r.connect("a");
      drain(r, 1);
      drain(r, 2);
      for (let i = 1; i <= 3; i++) refuse(r, i, `reason ${i}`);
      expect(r.listRefusals().refusals.map((e) => e.message)).toEqual(["reason 1", "reason 2", "reason 3"]);
      expect(r.listRefusals().dropped).toBe(0);
      refuse(r, 4, "reason 4");
      expect(r.listRefusals().refusals.map((e) => [Number(e.seq), e.message])).toEqual([
        [2, "reason 2"],
        [3, "reason 3"],
        [4, "reason 4"],
      ]);
      expect(r.listRefusals().dropped).toBe(1);
      expect(rowOf(r.disk.durable, "counter", "refusals_dropped")).toEqual({ count: 1, throughSeq: 1 });
      expect([...rowsOf(r.disk.tables(), "refusal")].map(([k]) => k)).toEqual([auditKey(2), auditKey(3), auditKey(4)]);
      // A flood many times both bounds: the admin's entries are all still there, none dropped.
      for (let i = 5; i <= 200; i++) refuse(r, i, `reason ${i}`);
      expect(r.listAudit()).toMatchObject({ entries: [{ summary: "#1" }, { summary: "#2" }], dropped: 0 });
      expect(r.listRefusals().dropped).toBe(197);
      // Only accepted entries push accepted entries out.
      drain(r, 3);
      expect(r.listAudit().entries.map((e) => e.summary)).toEqual(["#2", "#3"]);
      expect(r.listAudit().dropped).toBe(1);
    });

    it("repeats of one identity, RPC and reason within AUDIT_REFUSAL_WINDOW_MS are one entry with a count; after it, or for another reason, RPC or identity, a new one", () => {
      const r = new ServerRig({ auditRefusalMax: 10 });
      r.connect("a");
      const t0 = r.now + r.wallStep;
      refuse(r, 1, "no");
      r.now += AUDIT_REFUSAL_WINDOW_MS - 1;
      refuse(r, 2, "no", { ...bob(), summary: "client=a the last" });
      expect(r.listRefusals().refusals).toHaveLength(1);
      const [one] = r.listRefusals().refusals;
      expect([one!.count, one!.summary, one!.time, one!.lastTime]).toEqual([
        2n,
        "client=a the last",
        timestampFromMs(t0),
        timestampFromMs(t0 + AUDIT_REFUSAL_WINDOW_MS - 1),
      ]);
      expect(rowOf(r.disk.durable, "refusal", auditKey(1))).toMatchObject({ count: 2, at: t0, lastAt: t0 + AUDIT_REFUSAL_WINDOW_MS - 1 });
      refuse(r, 3, "other reason");
      refuse(r, 4, "no", bob("WriteStdin"));
      refuse(r, 5, "no", { ...bob(), operator: "carol" });
      r.now += 1; // the first entry's window has passed
      refuse(r, 6, "no");
      expect(r.listRefusals().refusals.map((e) => [e.operator, e.rpc, e.message, Number(e.count)])).toEqual([
        ["bob", "SubmitCommand", "no", 2],
        ["bob", "SubmitCommand", "other reason", 1],
        ["bob", "WriteStdin", "no", 1],
        ["carol", "SubmitCommand", "no", 1],
        ["bob", "SubmitCommand", "no", 1],
      ]);
      // A restart keeps the counts and counts the next repeat in the newest entry of its kind.
      r.st = restoreServer(r.cfg, r.disk.tables(), 2);
      serverInvariants(r.st);
      refuse(r, 7, "no");
      expect(r.listRefusals().refusals.map((e) => Number(e.count))).toEqual([2, 1, 1, 1, 2]);
      expect(r.listAudit().entries).toEqual([]);
    });

    it("a store written before refusals were kept apart (refusals among the entries, no refusal table) restores as it was", () => {
      const r = new ServerRig({ auditMax: 3 });
      r.connect("a");
      drain(r, 1);
      const tables = r.disk.tables();
      const old = new Map(tables.get("audit") ?? []);
      old.set(auditKey(2), { ...rowOf(tables, "audit", auditKey(1))!, seq: 2, result: "PERMISSION_DENIED", message: "no" });
      const back = restoreServer(r.cfg, { get: (t) => (t === "audit" ? old : t === "refusal" ? undefined : tables.get(t)) }, 2);
      serverInvariants(back);
      r.st = back;
      expect(r.listAudit().entries.map((e) => e.result)).toEqual(["OK", "PERMISSION_DENIED"]);
      refuse(r, 1, "no");
      expect(r.listRefusals()).toMatchObject({ refusals: [{ seq: 1n, count: 1n }], dropped: 0 });
      drain(r, 2);
      expect(r.listAudit().entries.map((e) => Number(e.seq))).toEqual([1, 2, 3]);
    });
  });
});
