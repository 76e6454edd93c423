import { describe, expect, it } from "vitest";
import type { CommandDispatch } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { ServerEffect } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { nextFloat } from "../../../core/rng.js";
import { MAX_INCIDENTS_KEPT } from "../../../core/limits.js";

import { T0, argv, of, lifecycle, ServerRig, expectClosed, expectRefused } from "../../support/server-rig.js";
import { plainIncident } from "../../support/pair.js";

const dispatches = (r: ServerRig, effects: ServerEffect[], conn?: number) =>
  r.sent(effects, conn, "commandDispatch").map((s) => s.env.payload.value as CommandDispatch);
void MAX_INCIDENTS_KEPT;

describe("dispatch", () => {
  it("R-D1: the dispatch carries the command exactly: revision, target generation, times, spec and request hash", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 7;
    r.submit("a", "c1", argv("echo", "x"), { queueExpiry: T0 + 90_000 });
    const d = dispatches(r, r.log, c);
    expect(d).toHaveLength(1);
    expect(d[0]).toMatchObject({ issueUuid: "c1", commandRevision: 1n, targetSessionGeneration: 1n });
    expect(Number(d[0]!.issueTime!.seconds) * 1000 + d[0]!.issueTime!.nanos / 1e6).toBe(T0 + 7);
    expect(Number(d[0]!.queueExpiryTime!.seconds) * 1000 + d[0]!.queueExpiryTime!.nanos / 1e6).toBe(T0 + 90_000);
    expect(Buffer.from(d[0]!.immutableRequestSha256).toString("hex")).toBe(r.cmd("c1").hash); // internal: the server's record of the request hash (what it must carry)
    expect(d[0]!.spec?.program).toMatchObject({ case: "argv", value: { argv: ["echo", "x"] } });
    expect(r.command("c1")).toMatchObject({ state: "dispatched", attempts: 1 });
    // internal: the dispatch record (on session generation 1 at T0 + 7: the frame's target and issue time above; the redelivery tests observe the instant)
    expect(r.cmd("c1").dispatch).toMatchObject({ everDispatched: true, dispatchedOn: 1, dispatchedAt: T0 + 7 });
  });

  it("R-D3: the server sends no more dispatches than the agent's free capacity minus those unanswered", () => {
    const r = new ServerRig();
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    r.accept(c, "c1");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
    r.frame(c, {
      case: "clientCapacity",
      value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 1, queuedCommands: 1, maxRunningCommands: 1, maxQueuedCommands: 1 },
    });
    r.submit("a", "c4");
    r.accept(c, "c2");
    r.accept(c, "c3");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
  });

  it("R-D1: at most maxInflightDispatches dispatches are unanswered per session", () => {
    const r = new ServerRig({ maxInflightDispatches: 2 });
    const c = r.connect();
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    expect(r.st.conns.get(c)!.inflight).toBe(2); // internal: the session's unanswered-dispatch count (flow control)
    r.accept(c, "c2");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
  });

  it("R-D1: redelivery happens exactly at dispatchedAt + redeliveryMs with the same bytes, and the wake says so", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const c = r.connect();
    r.submit("a", "c1");
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 5_000);
    r.now = T0 + 4_999;
    expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
    r.now = T0 + 5_000;
    const out = r.step({ type: "tick" });
    expect(dispatches(r, out, c)).toHaveLength(1);
    const first = r.sent(r.log, c, "commandDispatch")[0]!;
    expect(
      Buffer.from(of(out, "send").find((s) => s.kind === "commandDispatch")!.data).equals(
        Buffer.from(of(r.log, "send").find((s) => s.kind === "commandDispatch")!.data),
      ),
    ).toBe(true);
    void first;
    expect(r.command("c1")).toMatchObject({ state: "dispatched", attempts: 2 });
    // The next redelivery counts from this one (activity keeps the session alive; any step may send it).
    const sent = () => dispatches(r, r.log, c).length;
    r.now = T0 + 9_999;
    r.step({ type: "activity", conn: c });
    r.step({ type: "tick" });
    expect(sent()).toBe(2);
    r.now = T0 + 10_000;
    r.step({ type: "tick" });
    expect(sent()).toBe(3);
  });

  it("R-D1: no redelivery before the dispatched record is durable, however long the disk takes", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const c = r.connect();
    r.autoDurable = false;
    r.submit("a", "c1");
    r.now = T0 + 9_000; // well past the redelivery time, before the heartbeat ping
    const out = r.step({ type: "tick" });
    expect(dispatches(r, r.log)).toEqual([]);
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 10_000); // no redelivery deadline yet
    r.flush();
    expect(dispatches(r, r.log, c)).toHaveLength(1); // dispatched at T0 + 9 s: the redelivery below comes 5 s after that
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.now = T0 + 13_999;
    r.step({ type: "activity", conn: c });
    expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
    r.now = T0 + 14_000;
    expect(dispatches(r, r.step({ type: "tick" }), c)).toHaveLength(1);
  });

  it("R-D1: the first dispatch is released only on the same ready session it was recorded for", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.autoDurable = false;
    r.submit("a", "c1"); // created and dispatched in one batch, not yet durable
    expect(r.findCommand("c1")?.state, "nothing durable: a reader sees no state yet").toBe("unknown");
    expect(dispatches(r, r.log)).toEqual([]);
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    expect(dispatches(r, r.flush())).toEqual([]);
    // On a live session the same batch becoming durable releases it.
    r.autoDurable = true;
    const d = r.connect(); // c1 is requeued by reconciliation and dispatched again
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["c1"]);
    r.autoDurable = false;
    r.submit("a", "c2");
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["c1"]);
    expect(dispatches(r, r.flush(), d).map((x) => x.issueUuid)).toEqual(["c2"]);
  });

  it("R-D3: a transient rejection requeues with full jitter over min(60 s, 1 s * 2^attempts); nothing is dispatched before that time", () => {
    for (const code of [Code.CAPACITY, Code.STORE_INCIDENT, Code.STALE_GENERATION]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      const rng = { ...r.st.rng }; // setup: the server's random stream, to predict its jitter
      const expected = T0 + Math.floor(nextFloat(rng) * 2_000);
      r.accept(c, "c1", false, code, "busy");
      expect(r.command("c1").state).toBe("queued");
      expect(r.session(c)).toBeDefined();
      if (expected > T0) {
        r.now = expected - 1;
        expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
        expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(expected);
      }
      r.now = expected;
      expect(dispatches(r, r.step({ type: "tick" })).map((d) => d.issueUuid)).toEqual(["c1"]);
      // The second rejection uses attempt 2: ceiling 4 s.
      const rng2 = { ...r.st.rng }; // setup: as above
      const t = r.now;
      r.accept(c, "c1", false, code, "busy");
      const again = t + Math.floor(nextFloat(rng2) * 4_000);
      const sent = () => dispatches(r, r.log, c).length;
      const before = sent();
      if (again > t) {
        r.now = again - 1;
        r.step({ type: "tick" });
        expect(sent(), "not before its retry").toBe(before);
      }
      r.now = again;
      r.step({ type: "tick" });
      expect(sent(), "at its retry").toBe(before + 1);
    }
  });

  it("R-D1 R-D3: each send is traced with its attempt; a requeue with its code and retry time, and silently (no state trace); acceptance as a state from the agent", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    const rng = { ...r.st.rng }; // setup: the server's random stream, to predict its jitter
    const retryAt = T0 + Math.floor(nextFloat(rng) * 2_000);
    r.accept(c, "c1", false, Code.CAPACITY, "busy");
    r.now = retryAt;
    r.step({ type: "tick" });
    r.accept(c, "c1");
    const traces = r.log.flatMap((e) => (e.type === "trace" && ["dispatch", "requeue", "state"].includes(e.event) ? [[e.event, e.detail]] : []));
    expect(traces).toEqual([
      ["dispatch", { uuid: "c1", conn: c, generation: 1, attempt: 1 }],
      ["requeue", { uuid: "c1", code: "CAPACITY", retryAt }],
      ["dispatch", { uuid: "c1", conn: c, generation: 1, attempt: 2 }],
      ["state", { uuid: "c1", state: "ACCEPTED", source: "agent", reason: "" }],
    ]);
  });

  it("R-D4: a permanent rejection ends rejected with the code in the reason; an unusable rejection code closes", () => {
    for (const code of [Code.VALIDATION, Code.UNSUPPORTED_PLATFORM, Code.CONFLICT]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      r.accept(c, "c1", false, code, "no");
      expect(r.command("c1")).toMatchObject({ state: "rejected", terminalSource: "server", reason: `${Code[code]}: no` });
    }
    for (const code of [Code.PROTOCOL_ERROR, Code.NOT_FOUND, undefined]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      const out = r.accept(c, "c1", false, code);
      expectClosed(r, out, c, Code.PROTOCOL_ERROR, `rejection with code ${code ?? 0} is not a dispatch answer`);
      expect(r.command("c1").state).toBe("dispatched");
    }
  });

  it("R-D5: ALREADY_EXECUTED interrupts the command with an incident instead of rejecting it", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1", false, Code.ALREADY_EXECUTED, "tomb");
    expect(r.command("c1")).toMatchObject({
      state: "interrupted",
      terminalSource: "server",
      reason: "agent reports it already executed this request; outcome not retained",
    });
    expect(r.incidents().map(plainIncident)).toEqual([expect.objectContaining({ uuid: "c1", kind: "already_executed", detail: "tomb", clientId: "a" })]);
  });

  it("R-D2: CommandAccepted for an unknown or foreign command is NOT_FOUND (no close); a late one is ignored", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.submit("b", "theirs");
    const out = r.accept(a, "theirs");
    expectRefused(r, out, a, Code.NOT_FOUND);
    expect(r.errors(out, a)[0]!.error?.issueUuid).toBe("theirs");
    expectRefused(r, r.accept(a, "ghost"), a, Code.NOT_FOUND, "CommandAccepted for unknown command ghost");
    expect(r.command("theirs").state).toBe("dispatched");
    r.accept(b, "theirs");
    r.event(b, "theirs", 1, lifecycle(L.RUNNING));
    const late = r.accept(b, "theirs", false, Code.CAPACITY);
    expect(late.filter((e) => e.type === "persist")).toEqual([]);
    expect(r.command("theirs").state).toBe("running");
  });
});

// ====================================================================== events
