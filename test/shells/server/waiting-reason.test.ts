// Command.waiting_reason: why a command that has not started still waits,
// computed per read from the server's state (no extra bookkeeping).
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { waitingReason, type FleetReader } from "../../../shells/server/control-service.js";
import { ServerRig, T0 } from "../../support/server-rig.js";

const reader = (r: ServerRig, activity = new Map<string, number>()): FleetReader => ({
  state: r.st,
  lastActivity: activity,
  sessionInfo: () => undefined,
  toWall: (t) => t,
});

describe("waiting reasons", () => {
  it("unknown, offline since its last activity, agent capacity full, server dispatch limit, nothing once it runs", () => {
    const r = new ServerRig({ maxInflightDispatches: 1 });
    r.submit("ghost", "g1");
    expect(waitingReason(r.st.commands.get("g1")!, reader(r))).toMatch(/^client ghost has never registered/);

    const c = r.connect("a", "inst-a", { maxRunningCommands: 1, maxQueuedCommands: 0 });
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    r.submit("a", "a1");
    const a1 = r.st.commands.get("a1")!;
    expect(a1.committed.state).toBe(L.QUEUED);
    expect(waitingReason(a1, reader(r, new Map([["a", T0 + 61_000]])))).toBe("client a offline since 2023-11-14T22:14:21Z");

    // Back with room for one: a1 is dispatched, a2 waits behind the dispatch limit / capacity.
    r.connect("a", "inst-a", { maxRunningCommands: 1, maxQueuedCommands: 0 });
    r.submit("a", "a2");
    const a2 = r.st.commands.get("a2")!;
    expect(waitingReason(r.st.commands.get("a1")!, reader(r))).toBe(""); // dispatched once: nothing to say yet
    expect(waitingReason(a2, reader(r))).toBe("queued behind 0 running, 1 being dispatched on a (agent capacity full: 1 running, 0 queued)");

    const b = r.connect("b", "inst-b", { maxRunningCommands: 8, maxQueuedCommands: 8 });
    r.submit("b", "b1");
    r.submit("b", "b2");
    expect(r.st.conns.get(b)!.inflight).toBe(1);
    expect(waitingReason(r.st.commands.get("b2")!, reader(r))).toBe("server capacity full: 1 dispatches to b await an answer (at most 1)");
    expect(waitingReason(r.st.commands.get("b2")!)).toBe(""); // no reader: not computed
  });
});
