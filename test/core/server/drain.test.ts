// Draining (cordoning) a client before an agent upgrade: the server core
// dispatches no new command to a draining client; what it already dispatched
// goes on; the flag is a durable client-record field.
import { rowOf } from "../../../core/server/store.js";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { restoreServer } from "../../../core/index.js";
import { argv, lifecycle, ServerRig, T0 } from "../../support/server-rig.js";

const drain = (r: ServerRig, clientId: string, draining: boolean, requestId = `drain-${clientId}-${draining}-${r.now}`) =>
  r.control({ op: "set_draining", requestId, clientId, draining });

const dispatches = (r: ServerRig, conn: number) => r.sent(r.log, conn, "commandDispatch").length;

describe("drain (set_draining)", () => {
  it("R-D1: a command submitted to a draining client stays queued (not dispatched) until the drain ends", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    expect(drain(r, "a", true)).toEqual({ ok: true, wasDraining: false });
    expect(r.client("a")!.draining).toBe(true);
    r.submit("a", "q1");
    r.now += 5_000; // within the heartbeat: the session stays up
    r.step({ type: "tick" });
    expect(r.command("q1").state).toBe("queued");
    expect(dispatches(r, a)).toBe(0);
    expect(drain(r, "a", false)).toEqual({ ok: true, wasDraining: true });
    expect(r.command("q1").state).toBe("dispatched");
    expect(dispatches(r, a)).toBe(1);
  });

  it("commands already dispatched, accepted or running go on while draining (redelivery included)", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const a = r.connect("a");
    r.running(a, "run1");
    r.submit("a", "d1");
    expect(r.command("d1").state).toBe("dispatched");
    drain(r, "a", true);
    // Unanswered: the dispatch is sent again after the redelivery timeout (R-D1).
    const before = dispatches(r, a);
    r.now += r.cfg.limits.redeliveryMs + 1;
    r.step({ type: "tick" });
    expect(dispatches(r, a)).toBe(before + 1);
    r.accept(a, "d1");
    expect(r.command("d1").state).toBe("accepted");
    r.event(a, "run1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.command("run1").state).toBe("succeeded");
  });

  it("queue expiry still applies to a command held back by a drain", () => {
    const r = new ServerRig();
    r.connect("a");
    drain(r, "a", true);
    r.submit("a", "x", argv(), { queueExpiry: T0 + 1_000 });
    r.now += 2_000;
    r.step({ type: "tick" });
    expect(r.command("x").state).toBe("expired");
  });

  it("the flag is durable: it survives a server restart, and an old record without it restores as not draining", () => {
    const r = new ServerRig();
    r.connect("a");
    drain(r, "a", true);
    expect(rowOf(r.disk.durable, "client", "a")!.draining).toBe(true);
    r.st = restoreServer(r.cfg, r.disk.tables(), 2);
    expect(r.client("a")!.draining).toBe(true);
    const a = r.connect("a");
    r.submit("a", "after");
    r.now += 10_000;
    r.step({ type: "tick" });
    expect(r.command("after").state).toBe("queued");
    expect(dispatches(r, a)).toBe(0);
    drain(r, "a", false);
    expect(r.command("after").state).toBe("dispatched");

    // A record persisted before the field existed.
    const rec = rowOf(r.disk.durable, "client", "a")!;
    delete rec.draining;
    const back = restoreServer(r.cfg, r.disk.tables(), 3);
    expect(back.clients.get("a")!.draining).toBe(false);
  });

  it("a new registration keeps the drain (the agent restart it was made for)", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    drain(r, "a", true);
    r.step({ type: "conn_closed", conn: a, reason: "agent restarted" });
    const a2 = r.connect("a");
    r.submit("a", "q");
    expect(r.command("q").state).toBe("queued");
    expect(dispatches(r, a2)).toBe(0);
    expect(r.client("a")!.draining).toBe(true);
  });

  it("an unknown client is refused with NOT_FOUND; setting the state it has is no error and persists nothing", () => {
    const r = new ServerRig();
    r.connect("alpha");
    const res = drain(r, "alpah", true);
    expect(res).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND } });
    expect(res!.ok === false && res!.error.message).toContain("did you mean alpha");
    drain(r, "alpha", true);
    const persists = r.log.filter((e) => e.type === "persist").length;
    expect(drain(r, "alpha", true)).toEqual({ ok: true, wasDraining: true });
    expect(r.log.filter((e) => e.type === "persist").length).toBe(persists);
  });
});
