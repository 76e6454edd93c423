// The operators' audit log in the server core (audit.ts): an audited control
// call appends one entry with its result in the same persist batch as its
// change, its reply leaves only once that batch is durable, the log is
// bounded with a durable drop count, and it survives a restart.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { restoreServer, serverInvariants, type AuditCall, type ControlRequest } from "../../../core/index.js";
import { auditKey, rowOf, rowsOf } from "../../../core/server/store.js";
import { ServerRig } from "../../support/server-rig.js";

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
    expect(r.listAudit().entries).toMatchObject([{ seq: 1n, operator: "alice", clientIds: ["db-1"], result: "PERMISSION_DENIED" }]);
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
});
