// Exact-behaviour tests of reconcile/classify.ts: the reconcile decision table: every branch, at its edges
// (targets taken from the mutation report, docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { isTerminal } from "../../../core/dispatch/lifecycle.js";
import { classify, type AgentView, type ServerView, type Verdict } from "../../../core/reconcile/classify.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";

const sv = (uuid: string, state: L, o: Partial<ServerView> = {}): ServerView => ({
  uuid,
  state,
  terminalSource: isTerminal(state) ? "agent" : "",
  hash: "h",
  storedThrough: 0,
  ...o,
});
const av = (uuid: string, lifecycle: L, o: Partial<AgentView> = {}): AgentView => ({ uuid, lifecycle, tombstoned: false, hash: "h", lastEventSeq: 0, ...o });

/** Verdict for one agent entry against one server record (or none). */
function judge1(a: AgentView, s: ServerView | undefined): Verdict {
  const res = classify([], (u) => (u === a.uuid ? s : undefined), [a]);
  expect(res.verdicts).toHaveLength(1);
  return res.verdicts[0]!;
}

describe("reconcile classification, branch by branch", () => {
  it("R-D9: a requested command absent from the snapshot: queued/dispatched requeue, accepted/running interrupt with an incident, terminal keep", () => {
    const requested = [sv("q", L.QUEUED), sv("d", L.DISPATCHED), sv("a", L.ACCEPTED), sv("r", L.RUNNING), sv("s", L.SUCCEEDED), sv("x", L.CANCELLED)];
    const res = classify(requested, () => undefined, []);
    expect(res.verdicts[0]).toEqual({ uuid: "q", action: "requeue" });
    expect(res.verdicts[1]).toEqual({ uuid: "d", action: "requeue" });
    expect(res.verdicts[2]!.action).toBe("interrupt");
    expect(res.verdicts[2]!.incident).toMatch(/invariant failure/);
    expect(res.verdicts[3]!.action).toBe("interrupt");
    expect(res.verdicts[3]!.incident).toMatch(/invariant failure/);
    expect(res.verdicts[4]).toEqual({ uuid: "s", action: "keep" });
    expect(Object.keys(res.verdicts[4]!)).toEqual(["uuid", "action"]);
    expect(res.verdicts[5]).toEqual({ uuid: "x", action: "keep" });
    expect(res.terminate).toEqual([]);
    expect(res.discard).toEqual([]);
  });

  it("R-D10: a tombstone with a matching hash and a non-terminal server record is already_executed with an incident", () => {
    for (const st of [L.QUEUED, L.DISPATCHED, L.ACCEPTED, L.RUNNING]) {
      const v = judge1(av("u", L.SUCCEEDED, { tombstoned: true }), sv("u", st));
      expect(v.action).toBe("already_executed");
      expect(v.incident).toMatch(/tombstone/);
    }
  });

  it("R-D10: a tombstone otherwise suppresses replay silently (none): unknown to the server, terminal there, or another hash", () => {
    expect(judge1(av("u", L.SUCCEEDED, { tombstoned: true }), undefined)).toEqual({ uuid: "u", action: "none" });
    expect(judge1(av("u", L.SUCCEEDED, { tombstoned: true }), sv("u", L.SUCCEEDED))).toEqual({ uuid: "u", action: "none" });
    expect(judge1(av("u", L.SUCCEEDED, { tombstoned: true }), sv("u", L.RUNNING, { hash: "other" }))).toEqual({ uuid: "u", action: "none" });
  });

  it("R-D11: an agent command the server lacks, or with another request hash, is terminated locally with an incident", () => {
    const lacks = judge1(av("u", L.RUNNING), undefined);
    expect(lacks.action).toBe("terminate_local");
    expect(lacks.incident).toMatch(/does not know/);
    for (const st of [L.RUNNING, L.SUCCEEDED]) {
      const other = judge1(av("u", L.RUNNING, { hash: "h1" }), sv("u", st, { hash: "h2" }));
      expect(other.action).toBe("terminate_local");
      expect(other.incident).toMatch(/different request/);
    }
  });

  it("R-D12: both terminal: discard, with an incident only when the server (not the agent) ended it", () => {
    expect(judge1(av("u", L.SUCCEEDED), sv("u", L.SUCCEEDED, { terminalSource: "agent" }))).toEqual({ uuid: "u", action: "discard" });
    expect(Object.keys(judge1(av("u", L.FAILED), sv("u", L.FAILED, { terminalSource: "agent" })))).toEqual(["uuid", "action"]);
    for (const src of ["server", ""] as const) {
      const v = judge1(av("u", L.SUCCEEDED), sv("u", L.CANCELLED, { terminalSource: src }));
      expect(v.action).toBe("discard");
      expect(v.incident).toMatch(/server had already ended/);
    }
  });

  it("R-D11: an agent still running a command terminal at the server terminates it locally with an incident", () => {
    for (const a of [L.ACCEPTED, L.RUNNING]) {
      const v = judge1(av("u", a), sv("u", L.CANCELLED, { terminalSource: "server" }));
      expect(v.action).toBe("terminate_local");
      expect(v.incident).toMatch(/terminal at the server/);
    }
  });

  it("R-D11: an agent with fewer events than the server stored diverged; the incident names both counts; equal counts do not", () => {
    const v = judge1(av("u", L.RUNNING, { lastEventSeq: 4 }), sv("u", L.RUNNING, { storedThrough: 5 }));
    expect(v.action).toBe("diverged");
    expect(v.incident).toContain("4");
    expect(v.incident).toContain("5");
    expect(judge1(av("u", L.RUNNING, { lastEventSeq: 5 }), sv("u", L.RUNNING, { storedThrough: 5 }))).toEqual({ uuid: "u", action: "keep" });
    const res = classify([], (u) => sv(u, L.RUNNING, { storedThrough: 5 }), [av("d", L.RUNNING, { lastEventSeq: 1 }), av("k", L.RUNNING, { lastEventSeq: 5 })]);
    expect(res.terminate).toEqual(["d"]);
  });

  it("R-D9: the server adopts accepted/running only when the agent got further; otherwise it keeps its state", () => {
    const cases: Array<[agent: L, server: L, verdict: Verdict]> = [
      [L.ACCEPTED, L.QUEUED, { uuid: "u", action: "adopt", adopt: L.ACCEPTED }],
      [L.ACCEPTED, L.DISPATCHED, { uuid: "u", action: "adopt", adopt: L.ACCEPTED }],
      [L.RUNNING, L.DISPATCHED, { uuid: "u", action: "adopt", adopt: L.RUNNING }],
      [L.RUNNING, L.ACCEPTED, { uuid: "u", action: "adopt", adopt: L.RUNNING }],
      // A terminal agent entry counts as accepted (its events will move the server on).
      [L.SUCCEEDED, L.DISPATCHED, { uuid: "u", action: "adopt", adopt: L.ACCEPTED }],
      [L.FAILED, L.QUEUED, { uuid: "u", action: "adopt", adopt: L.ACCEPTED }],
      // Equal rank: keep.
      [L.ACCEPTED, L.ACCEPTED, { uuid: "u", action: "keep" }],
      [L.RUNNING, L.RUNNING, { uuid: "u", action: "keep" }],
      [L.SUCCEEDED, L.ACCEPTED, { uuid: "u", action: "keep" }],
      // Behind the server: keep.
      [L.ACCEPTED, L.RUNNING, { uuid: "u", action: "keep" }],
      [L.SUCCEEDED, L.RUNNING, { uuid: "u", action: "keep" }],
      // Further along but not to accepted/running: keep.
      [L.DISPATCHED, L.QUEUED, { uuid: "u", action: "keep" }],
      [L.QUEUED, L.QUEUED, { uuid: "u", action: "keep" }],
    ];
    for (const [a, s, want] of cases) {
      const got = judge1(av("u", a), sv("u", s));
      expect(got, `agent ${L[a]} server ${L[s]}`).toEqual(want);
      if (want.action === "keep") expect(Object.keys(got)).toEqual(["uuid", "action"]);
    }
  });

  it("R-D9 R-D12: one verdict per uuid: duplicates in the snapshot and requested commands the agent reported add nothing", () => {
    const requested = [sv("a", L.RUNNING), sv("b", L.DISPATCHED)];
    const res = classify(requested, (u) => requested.find((s) => s.uuid === u), [
      av("a", L.RUNNING),
      av("a", L.SUCCEEDED),
      av("z", L.RUNNING),
      av("y", L.SUCCEEDED),
    ]);
    expect(res.verdicts.map((v) => [v.uuid, v.action])).toEqual([
      ["a", "keep"],
      ["z", "terminate_local"],
      ["y", "terminate_local"],
      ["b", "requeue"],
    ]);
    expect(res.terminate).toEqual(["z", "y"]);
  });
});
