import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { type CommandDispatch, type ReconcileRequest, ReconcileRequestSchema, ReconcileTargetSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, OutputStream } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { ServerEffect } from "../../../core/index.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { touch } from "../../../core/server/active.js";
import { MAX_ENVELOPE_BYTES, MAX_INCIDENTS_KEPT, MAX_RECONCILE_TARGETS } from "../../../core/limits.js";

import { T0, type StateInit, enc, lifecycle, output, ServerRig } from "../../support/server-rig.js";

const dispatches = (r: ServerRig, effects: ServerEffect[], conn?: number) =>
  r.sent(effects, conn, "commandDispatch").map((s) => s.env.payload.value as CommandDispatch);
void MAX_INCIDENTS_KEPT;

describe("reconciliation at the server", () => {
  it("R-D6: a request names at most its target bound, in-flight commands first, then queued oldest first; the rest wait for a normal dispatch", () => {
    const n = 6;
    for (const total of [n, n + 1]) {
      const r = new ServerRig({ reconcileTargets: n });
      const a = r.connect("a");
      r.running(a, "run");
      r.step({ type: "conn_closed", conn: a, reason: "x" });
      const queued = Array.from({ length: total - 1 }, (_, k) => `q${k}`);
      for (const u of queued) r.submit("a", u);
      const c = r.open();
      const req = r.sent(r.hello(c, "a"), c, "reconcileRequest")[0]!;
      const names = (req.env.payload.value as ReconcileRequest).targets.map((t) => t.issueUuid);
      expect(names).toEqual(["run", ...queued].slice(0, n));
      // Listed or not, a queued command the agent does not hold is dispatched after the result.
      const out = r.snapshot(c, [
        // setup: the request's own hash
        { issueUuid: "run", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("run").hash, "hex") },
      ]);
      expect(r.command("run").state).toBe("running");
      expect(r.sent(out, c, "commandDispatch").map((d) => (d.env.payload.value as CommandDispatch).issueUuid)).toEqual(queued.slice(0, 7)); // maxRunning + maxQueued - 1 running
    }
  });

  it("R-D6 R-T2: MAX_RECONCILE_TARGETS targets of the largest kind fit one envelope", () => {
    const big = Array.from({ length: MAX_RECONCILE_TARGETS }, (_, k) =>
      create(ReconcileTargetSchema, {
        issueUuid: `${"f".repeat(28)}${String(k).padStart(8, "0")}`,
        lastServerEventSeq: 2n ** 53n - 1n,
        commandRevision: 2n ** 53n - 1n,
        immutableRequestSha256: new Uint8Array(32).fill(255),
      }),
    );
    const data = encodeEnvelope(
      { sessionId: "f".repeat(32), generation: 2 ** 53 - 1 },
      { case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets: big }) },
    );
    expect(data.length).toBeLessThan(MAX_ENVELOPE_BYTES);
  });

  const state = (r: ServerRig, uuid: string, lifecycleState: L, seq: number, over: Partial<StateInit> = {}) => ({
    issueUuid: uuid,
    lifecycle: lifecycleState,
    lastClientEventSeq: BigInt(seq),
    commandRevision: 1n,
    immutableRequestSha256: Buffer.from(r.st.commands.get(uuid)?.hash ?? "00".repeat(32), "hex"), // setup: the request's own hash
    ...over,
  });

  function offlineWith(setup: (r: ServerRig, c: number) => void): { r: ServerRig; d: number } {
    const r = new ServerRig();
    const c = r.connect();
    setup(r, c);
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    return { r, d };
  }

  it("R-D9: requested commands absent from the snapshot: dispatched ones requeue (dispatched again), accepted ones are interrupted with an incident", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "disp");
      r.submit("a", "acc");
      r.accept(c, "acc");
    });
    // setup: a retry pending 30 s ahead (within the longest retry delay, so it would hold the dispatch back), which the requeue must clear
    r.cmd("disp").dispatch.nextAttemptAt = T0 + 30_000;
    touch(r.st, r.cmd("disp"));
    r.snapshot(d, []);
    expect(r.command("acc")).toMatchObject({ state: "interrupted", terminalSource: "server", reason: "agent lost an accepted command" });
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["acc", "reconcile_interrupt"]]);
    // Requeued with no retry pending: dispatched again at once on the new session.
    // (checked by the dispatch below)
    expect(r.command("disp").state).toBe("dispatched");
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["disp"]);
    expect(r.disk.durable.get("reconcile")!.get("a")).toEqual({ generation: 2, terminate: [], discard: [] });
  });

  it("R-D8 R-D11: adopt, diverge, terminate unknown or foreign, discard terminal; the result lists them and is sent after it is durable", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "adopt");
      r.running(c, "div");
      r.event(c, "div", 2, output(OutputStream.STDOUT, 0, enc("x")));
      r.running(c, "fin");
      r.event(c, "fin", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    });
    r.submit("b", "foreign");
    r.autoDurable = false;
    r.snapshot(d, [
      state(r, "adopt", L.RUNNING, 1),
      state(r, "div", L.RUNNING, 1),
      state(r, "fin", L.SUCCEEDED, 2),
      state(r, "ghost", L.RUNNING, 3),
      state(r, "foreign", L.RUNNING, 0),
    ]);
    expect(r.sent(r.log, d, "reconcileResult")).toEqual([]);
    expect(r.session(d)?.phase).toBe("reconciling");
    r.autoDurable = true;
    const out = r.flush();
    const res = r.sent(out, d, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[]; discardLocalTerminalIssueUuids: string[] };
    expect(res.terminateLocalIssueUuids).toEqual(["div", "ghost", "foreign"]);
    expect(res.discardLocalTerminalIssueUuids).toEqual(["fin"]);
    expect(r.command("adopt")).toMatchObject({ state: "running", terminalSource: "" });
    expect(r.command("div")).toMatchObject({ state: "interrupted", terminalSource: "server" });
    expect(r.command("foreign").state).toBe("queued");
    expect(
      r
        .incidents()
        .map((i) => [i.issueUuid, i.kind])
        .sort(),
    ).toEqual([
      ["div", "reconcile_diverged"],
      ["foreign", "reconcile_terminate_local"],
      ["ghost", "reconcile_terminate_local"],
    ]);
    expect(r.session(d)?.phase).toBe("ready");
  });

  it("R-D10: a tombstone for a command the server still thinks is in flight interrupts it as already executed", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "t");
      r.accept(c, "t");
    });
    r.snapshot(d, [state(r, "t", L.UNSPECIFIED, 0, { tombstoned: true })]);
    expect(r.command("t")).toMatchObject({ state: "interrupted", reason: "agent tombstone: already executed; outcome not retained" });
    expect(r.incidents().map((i) => i.kind)).toEqual(["reconcile_already_executed"]);
  });
});

describe("takeovers seen in reconciliation", () => {
  it("R-F3 R-D9: after a takeover the commands the displaced instance held end interrupted as a takeover, naming both instances; a command lost on the new instance's own session is an ordinary loss", () => {
    const r = new ServerRig();
    const i = r.connect("a", "I");
    r.running(i, "run1");
    r.submit("a", "acc1");
    r.accept(i, "acc1");
    // J claims a while I is live; an operator authorizes it; J takes over and holds nothing.
    r.hello(r.open(), "a", "J");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J", instanceNotYetSeen: false });
    const j = r.open();
    r.hello(j, "a", "J");
    const out = r.snapshot(j, []);
    expect([r.command("run1"), r.command("acc1")].map((c) => [c.state, c.reason])).toEqual([
      ["interrupted", "client taken over by instance J; the command was running on the previous instance I"],
      ["interrupted", "client taken over by instance J; the command was accepted by the previous instance I"],
    ]);
    const tail = "; its process may still run there until that instance reconnects and is told it was replaced";
    const incidentsOf = (uuid: string) =>
      r
        .incidents()
        .filter((x) => x.issueUuid === uuid)
        .map((x) => [x.kind, x.detail]);
    expect(incidentsOf("run1")).toEqual([["takeover_interrupt", `a was taken over by instance J; the command was running on the previous instance I${tail}`]]);
    expect(incidentsOf("acc1")).toEqual([["takeover_interrupt", `a was taken over by instance J; the command was accepted by the previous instance I${tail}`]]);
    expect(out.flatMap((e) => (e.type === "trace" && e.event === "reconciled" ? [e.detail] : []))).toEqual([
      { conn: j, client: "a", terminate: 0, discard: 0 },
    ]);
    // J's own command, dispatched on J's session, then lost by J: not a takeover.
    r.submit("a", "acc2");
    r.accept(j, "acc2");
    r.step({ type: "conn_closed", conn: j, reason: "gone" });
    const j2 = r.open();
    r.hello(j2, "a", "J");
    r.snapshot(j2, []);
    expect([r.command("acc2").state, r.command("acc2").reason]).toEqual(["interrupted", "agent lost an accepted command"]);
    expect(incidentsOf("acc2").map(([kind]) => kind)).toEqual(["reconcile_interrupt"]);
  });

  it("R-F3 R-D9: a new instance registering while no session was live: the previous instance's running command ends interrupted, with why", () => {
    const r = new ServerRig();
    const i = r.connect("b", "I2");
    r.running(i, "run2");
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    const k = r.open();
    r.hello(k, "b", "K");
    r.snapshot(k, []);
    expect([r.command("run2").state, r.command("run2").reason]).toEqual([
      "interrupted",
      "client re-registered from instance K; the command was running on the previous instance I2",
    ]);
    expect(
      r
        .incidents()
        .filter((x) => x.issueUuid === "run2")
        .map((x) => [x.kind, x.detail]),
    ).toEqual([
      [
        "takeover_interrupt",
        "b registered from a new instance K; the command was running on the previous instance I2 while no session was live; its process may still run on the previous instance",
      ],
    ]);
  });
});

// ====================================================================== retention
