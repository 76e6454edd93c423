// Reconciliation at the agent and its tombstone ledger.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ReconcileCommandStateSchema, ReconcileSnapshotSchema, type ReconcileSnapshot } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, restoreAgent } from "../../../core/index.js";
import { fitSnapshot } from "../../../core/agent/reconcile.js";
import { retainedOf, tombstonedOf } from "../../support/pair.js";
import { Code, InvariantViolation } from "../../../core/errors.js";
import { MAX_ENVELOPE_BYTES } from "../../../core/limits.js";
import { toBinary } from "@bufbuild/protobuf";
import { sha, argv, sends, accepts, errorsIn, eventsIn, of, AgentRig, chunk, expectClosed, expectRefused, stdinWrite } from "./rig.js";

describe("reconciliation at the agent", () => {
  it("R-D7 R-T2: matching tombstones join the snapshot while it fits the envelope budget; the rest are left out, never a crash", () => {
    const entry = (uuid: string, tombstoned: boolean) =>
      create(ReconcileCommandStateSchema, {
        issueUuid: uuid,
        lifecycle: tombstoned ? L.UNSPECIFIED : L.RUNNING,
        tombstoned,
        immutableRequestSha256: new Uint8Array(32).fill(7),
      });
    const retained = [entry("r1", false), entry("r2", false)];
    const tombs = ["t1", "t2", "t3", "t4"].map((u) => entry(u, true));
    const sizeWith = (n: number) =>
      toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: [...retained, ...tombs.slice(0, n)] })).length;
    // A budget one byte above the size with exactly two tombstones admits two of four.
    const out = [...retained];
    expect(fitSnapshot(out, tombs, sizeWith(2) + 1)).toBe(2);
    expect(out.map((e) => e.issueUuid)).toEqual(["r1", "r2", "t1", "t2"]);
    expect(toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: out })).length).toBe(sizeWith(2));
    // At exactly that size, the second no longer fits (the budget is a strict upper bound).
    const out2 = [...retained];
    expect(fitSnapshot(out2, tombs, sizeWith(2))).toBe(3);
    // Everything fits in a roomy budget.
    const out3 = [...retained];
    expect(fitSnapshot(out3, tombs, MAX_ENVELOPE_BYTES)).toBe(0);
    expect(out3).toHaveLength(6);
    // Retained records that alone do not fit are a broken bound, not a peer's fault.
    expect(() => fitSnapshot([...retained], tombs, sizeWith(0))).toThrow(InvariantViolation);
  });

  it("R-D7 R-T2: the fit counts each tombstone's length prefix exactly, at every varint width (records around 128 and 16,384 bytes)", () => {
    const base = create(ReconcileCommandStateSchema, { issueUuid: "", tombstoned: true, immutableRequestSha256: new Uint8Array(32).fill(7) });
    const lengths = new Set<number>();
    for (const [from, to] of [
      [80, 100],
      [16_330, 16_400],
    ]) {
      for (let u = from!; u <= to!; u++) {
        const t = create(ReconcileCommandStateSchema, { ...base, issueUuid: "x".repeat(u) });
        const len = toBinary(ReconcileCommandStateSchema, t).length;
        lengths.add(len);
        const exact = toBinary(ReconcileSnapshotSchema, create(ReconcileSnapshotSchema, { retainedCommands: [t] })).length;
        // One byte over the exact size: it fits; at the exact size: it does not (a strict bound).
        expect(fitSnapshot([], [t], exact + 1), `record of ${len} bytes, budget ${exact + 1}`).toBe(0);
        expect(fitSnapshot([], [t], exact), `record of ${len} bytes, budget ${exact}`).toBe(1);
      }
    }
    // Both sides of each width's edge were tried.
    for (const edge of [0x80, 0x4000]) expect([edge - 1, edge].every((l) => lengths.has(l)) || [edge - 1, edge + 1].every((l) => lengths.has(l))).toBe(true);
  });

  it("R-D13: with a store incident the request is answered by STORE_INCIDENT (session kept), never by a snapshot", () => {
    const r = new AgentRig();
    r.register();
    r.welcome(1, "s");
    r.step({ type: "store_incident", detail: "journal" });
    const out = r.reconcile([]);
    expectRefused(r, out, Code.STORE_INCIDENT, "agent store incident, no complete snapshot possible: journal");
    expect(sends(out, "reconcileSnapshot")).toEqual([]);
    expect(r.reconciled()).toBe(false);
  });

  it("R-D7: a request with more targets than retained commands plus tombstones is PAYLOAD_TOO_LARGE and closes; exactly that many is fine", () => {
    const limits = { ...defaultAgentConfig("x").limits, maxRetained: 1, maxTombstones: 1 };
    const t = (i: number) => ({ issueUuid: `t${i}`, immutableRequestSha256: sha(`t${i}`) });
    const ok = new AgentRig({ limits });
    ok.register();
    ok.welcome(1, "s");
    expect(sends(ok.reconcile([t(1), t(2)]), "reconcileSnapshot")).toHaveLength(1);
    const r = new AgentRig({ limits });
    r.register();
    r.welcome(1, "s");
    expectClosed(r, r.reconcile([t(1), t(2), t(3)]), Code.PAYLOAD_TOO_LARGE, "reconcile request with 3 targets");
  });

  it("R-D7: a target's last stored seq is a cumulative ack; an impossible one closes; more than this agent assigned is not an ack", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("x") });
    expect(r.snapshot().map((c) => [c.issueUuid, c.lastClientEventSeq])).toEqual([["c1", 2n]]); // two events assigned
    r.drop();
    r.register();
    r.welcome(2, "s2");
    const out = r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 1n, immutableRequestSha256: sha("c1") }]);
    // Acknowledged through 1: event 1 is forgotten durably and the resend starts at 2.
    expect(of(out, "persist")[0]!.records.map((x) => [x.table, x.key, x.value === null])).toEqual([
      ["event", "c1/000000000001", true],
      ["outbox", "c1", false],
    ]);
    expect(eventsIn(out, "c1").map((e) => e.eventSeq)).toEqual([2n]); // resent from the first unacknowledged one
    r.drop();
    r.register();
    r.welcome(3, "s3");
    const div = r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 7n, immutableRequestSha256: sha("c1") }]);
    expect(
      eventsIn(div, "c1").map((e) => e.eventSeq),
      "not an ack: still resent from 2",
    ).toEqual([2n]);
    expect(of(div, "persist").flatMap((p) => p.records)).toEqual([]);
    expect(
      of(div, "trace")
        .filter((t) => t.event === "reconcile_diverged")
        .map((t) => t.detail),
    ).toEqual([{ uuid: "c1", serverStored: 7, assigned: 2 }]);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
    // Exactly the last assigned seq is an ack of everything.
    r.drop();
    r.register();
    r.welcome(4, "s4");
    const all = r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 2n, immutableRequestSha256: sha("c1") }]);
    expect(eventsIn(all, "c1"), "everything acknowledged: nothing resent").toEqual([]);
    expect(of(all, "persist").flatMap((p) => p.records.map((x) => [x.table, x.key, x.value === null]))).toEqual([
      ["event", "c1/000000000002", true],
      ["outbox", "c1", false],
    ]);
    r.drop();
    r.register();
    r.welcome(5, "s5");
    expectClosed(
      r,
      r.reconcile([{ issueUuid: "c1", lastServerEventSeq: 2n ** 60n, immutableRequestSha256: sha("c1") }]),
      Code.SEQUENCE_VIOLATION,
      `server claims an impossible event_seq ${2n ** 60n}`,
    );
  });

  it("R-D7 R-D10: the snapshot lists every retained command exactly, plus requested tombstones whose hash matches", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("done");
    r.exit("done", 0);
    r.ackAll("done");
    r.run("run");
    r.dispatch("queued", argv("true"), { rev: 1n });
    r.drop();
    r.register();
    r.welcome(2, "s2");
    const out = r.reconcile([
      { issueUuid: "done", immutableRequestSha256: sha("done") },
      { issueUuid: "other-hash", immutableRequestSha256: sha("x") },
      { issueUuid: "run", lastServerEventSeq: 1n, immutableRequestSha256: sha("WRONG") },
    ]);
    const snap = sends(out, "reconcileSnapshot")[0]!.env.payload.value as ReconcileSnapshot;
    expect(
      snap.retainedCommands.map((c) => ({
        uuid: c.issueUuid,
        life: c.lifecycle,
        seq: c.lastClientEventSeq,
        rev: c.commandRevision,
        tomb: c.tombstoned,
        hash: Buffer.from(c.immutableRequestSha256).toString("hex"),
      })),
    ).toEqual([
      { uuid: "run", life: L.RUNNING, seq: 1n, rev: 1n, tomb: false, hash: Buffer.from(sha("run")).toString("hex") },
      { uuid: "queued", life: L.ACCEPTED, seq: 0n, rev: 1n, tomb: false, hash: Buffer.from(sha("queued")).toString("hex") },
      { uuid: "done", life: L.UNSPECIFIED, seq: 0n, rev: 0n, tomb: true, hash: Buffer.from(sha("done")).toString("hex") },
    ]);
    // A target with a different hash is no ack: "run" is resent from its first event.
    expect(eventsIn(out, "run").map((e) => e.eventSeq)).toEqual([1n]);
    // internal: the hits are dropped once sent (no peer observes it: the next request replaces them; only memory would grow)
    expect(r.st.pendingSnapshotTombstones).toEqual([]);
    // The tombstone hits were for that request only: the next snapshot, asked nothing, has none.
    r.drop();
    r.register();
    r.welcome(3, "s3");
    const next = sends(r.reconcile([]), "reconcileSnapshot")[0]!.env.payload.value as ReconcileSnapshot;
    expect(next.retainedCommands.map((c) => [c.issueUuid, c.tombstoned])).toEqual([
      ["run", false],
      ["queued", false],
    ]);
  });

  /** Session s2 asked for a snapshot that waits for a dispatch's persist (not yet durable). */
  function snapshotWaitingOnPersist(): AgentRig {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.drop();
    r.register();
    r.welcome(2, "s2");
    expect(sends(r.reconcile([]), "reconcileSnapshot")).toEqual([]);
    expect(r.reconciled()).toBe(false);
    return r;
  }

  it("R-D7: the snapshot waits until everything persisted is durable, and only for the connection that asked", () => {
    const r = snapshotWaitingOnPersist();
    r.drop(); // the session that asked is gone before the persist is durable
    const out = r.flush();
    expect(sends(out)).toEqual([]);
    expect(r.reconciled()).toBe(false);
  });

  it("R-D7: a snapshot deferred for a session that is gone is not sent on the next session; that session gets its own", () => {
    const r = snapshotWaitingOnPersist();
    r.drop();
    r.register();
    r.welcome(3, "s3");
    // The persist becomes durable while the next session is registered but has asked nothing yet.
    expect(sends(r.flush(), "reconcileSnapshot")).toEqual([]);
    expect(r.reconciled()).toBe(false);
    const own = r.reconcile([]);
    const snaps = sends(own, "reconcileSnapshot");
    expect(snaps).toHaveLength(1);
    expect(snaps[0]!.env.sessionId).toBe("s3");
  });

  it("R-D11 R-D12: the result kills and tombstones running commands, discards only terminal ones, and is idempotent", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("run", argv("sleep", "9"), 77);
    r.dispatch("queued");
    const out = r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["run", "queued", "missing"], discardLocalTerminalIssueUuids: [] },
    });
    expect(of(out, "signal")).toEqual([{ type: "signal", uuid: "run", signal: SignalKind.KILL, revision: 1 }]);
    expect(r.retained()).toEqual([]);
    expect(["run", "queued", "missing"].map((u) => r.tombstoned(u))).toEqual([true, true, false]);
    expect([...r.st.tombstones.keys()]).toEqual(["run", "queued"]); // internal: the ledger's order (which is forgotten first)

    const d = new AgentRig();
    d.establish();
    d.run("live");
    d.run("fin");
    d.exit("fin", 1);
    const disc = d.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: [], discardLocalTerminalIssueUuids: ["live", "fin", "missing"] },
    });
    expect(d.retained()).toEqual(["live"]);
    expect(d.tombstoned("fin")).toBe(true);
    expect(of(disc, "signal")).toEqual([]);
    const again = d.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["fin"], discardLocalTerminalIssueUuids: ["fin"] },
    });
    expect(of(again, "persist")).toEqual([]);
    expect(d.retained()).toEqual(["live"]);
    expect(["fin", "live", "missing"].map((u) => d.tombstoned(u))).toEqual([true, false, false]);
  });

  it("R-D11 R-C3: terminating a script command mid-upload deletes its journaled chunks: after a restart nothing of it is left and its script budget is free", () => {
    const r = new AgentRig({ limits: { ...defaultAgentConfig("x").limits, scriptTotal: 100 } });
    r.establish();
    const body = new Uint8Array(100).map((_, i) => i);
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 100n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body.subarray(0, 40)));
    r.frame(chunk("s1", 40, body.subarray(40, 70)));
    expect([...(r.disk.durable.get("chunk")?.keys() ?? [])]).toHaveLength(2); // internal: the journaled chunks
    r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["s1"], discardLocalTerminalIssueUuids: [] },
    });
    expect(r.tombstoned("s1")).toBe(true);
    expect([...(r.disk.durable.get("chunk")?.keys() ?? [])]).toEqual([]);
    const back = r.crashed();
    back.step({ type: "start" });
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    expect(back.retained()).toEqual([]);
    // The whole script budget is free again: a script of the full size is accepted.
    expect(
      accepts(back.dispatch("s2", { program: { case: "script", value: { sizeBytes: 100n, sha256: sha(body), interpreter: "/bin/sh" } } }))[0]!.accepted,
    ).toBe(true);
  });

  it("R-D7: a second ReconcileRequest on the same session is answered again, and every unacknowledged event is retransmitted after its snapshot", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("cat"));
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("one\n") });
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("two\n") });
    const sent = eventsIn(r.log, "c1").map((e) => Number(e.eventSeq));
    expect(sent.length).toBeGreaterThanOrEqual(2);
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: BigInt(sent[0]!) } });
    const out = r.reconcile([]);
    expect(sends(out, "reconcileSnapshot")).toHaveLength(1);
    // From the first unacknowledged event on, in order, after the snapshot.
    expect(eventsIn(out, "c1").map((e) => Number(e.eventSeq))).toEqual(sent.slice(1));
    const kinds = of(out, "send").map((x) => x.kind);
    expect(kinds.indexOf("reconcileSnapshot")).toBeLessThan(kinds.indexOf("commandEvent"));
  });

  it("R-D11: terminating a done command neither signals nor fails; it becomes a tombstone", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    const out = r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] },
    });
    expect(of(out, "signal")).toEqual([]);
    expect(errorsIn(out)).toEqual([]);
    expect(r.retained()).toEqual([]);
    expect(r.tombstoned("c1")).toBe(true);
  });
});

describe("tombstone ledger", () => {
  it("R-D10: the ledger keeps at most maxTombstones, forgetting the oldest first, and its order survives a restart", () => {
    const limits = { ...defaultAgentConfig("x").limits, maxTombstones: 2 };
    const r = new AgentRig({ limits });
    r.establish();
    for (const u of ["t1", "t2", "t3"]) {
      r.run(u);
      r.exit(u, 0);
      const out = r.ackAll(u);
      if (u === "t3") expect(of(out, "persist").flatMap((p) => p.records)).toContainEqual({ table: "tombstone", key: "t1", value: null });
    }
    expect(["t1", "t2", "t3"].map((u) => r.tombstoned(u))).toEqual([false, true, true]);
    // internal: the ledger's order and insertion counter (they decide which is forgotten next; no peer observes them)
    expect([...r.st.tombstones.keys()]).toEqual(["t2", "t3"]);
    expect(r.st.tombstoneSeq).toBe(3);
    // A forgotten UUID is new again.
    expect(accepts(r.dispatch("t1"))[0]!.accepted).toBe(true);
    const back = restoreAgent(r.cfg, r.disk.tables(), 1);
    expect(["t2", "t3"].map((u) => tombstonedOf(back, u))).toEqual([true, true]);
    expect(retainedOf(back)).toEqual(["t1"]);
    expect([...back.tombstones.entries()]).toEqual([...r.st.tombstones.entries()]); // internal: restored in the same order
    expect(back.tombstoneSeq).toBe(3);
    // The restored order decides which goes next.
    expect([...r.disk.durable.get("tombstone")!.keys()].sort()).toEqual(["t2", "t3"]);
  });

  it("R-D10: restore orders the ledger by insertion order, not by key, and continues the counter", () => {
    const cfg = defaultAgentConfig("x");
    const tables = new Map<string, Map<string, unknown>>([
      [
        "tombstone",
        new Map<string, unknown>([
          ["b", { hash: "hb", order: 7 }],
          ["a", { hash: "ha", order: 9 }],
          ["c", { hash: "hc", order: 3 }],
        ]),
      ],
    ]);
    const st = restoreAgent(cfg, { get: (t) => tables.get(t) }, 1);
    // internal: the restored order and counter (which is forgotten next)
    expect([...st.tombstones.entries()]).toEqual([
      ["c", "hc"],
      ["b", "hb"],
      ["a", "ha"],
    ]);
    expect(st.tombstoneSeq).toBe(9);
    expect(restoreAgent(cfg, { get: () => undefined }, 1).tombstoneSeq).toBe(0);
  });
});

describe("reconcile edges (from the former agent edges file)", () => {
  it("R-D11: a command terminated by the reconcile result drops its pending stdin rows, chunks, events and record", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 1, limits: { ...base, metadataBudget: 2 * base.metadataPerCommand } });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame(stdinWrite("c1", 2n, [2]));
    const out = r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] },
    });
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000002", value: null });
    expect(recs).toContainEqual({ table: "command", key: "c1", value: null });
    expect(r.disk.durable.get("stdin")?.size ?? 0).toBe(0);
    expect(r.disk.durable.get("command")?.has("c1")).toBe(false);
    // Its metadata budget is free again: one more command fits, and only one.
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c3")).map((a) => a.rejection?.message)).toEqual(["metadata budget full"]);
  });
});
