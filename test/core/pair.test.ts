// The Pair rig itself (test/support/pair.ts): its link faults and its
// observation helpers behave as the tests that use them assume.
import { describe, expect, it } from "vitest";
import { defaultServerConfig } from "../../core/index.js";
import { Pair } from "../support/pair.js";

describe("the Pair rig", () => {
  it("R-O3: a follower is shown output only once the server durably stored it, and exactly what the process wrote", () => {
    const p = new Pair();
    p.addAgent("a");
    p.submit("a", "c1");
    p.autoDurable = false;
    p.output("a", "c1", "one ");
    p.flush("a");
    expect(p.outputOf("c1").stdout, "received, not yet durable").toBe("");
    p.flush("server");
    expect(p.outputOf("c1").stdout).toBe("one ");
    p.autoDurable = true;
    p.flush("a");
    p.flush("server");
    p.output("a", "c1", "two");
    p.output("a", "c1", "err", "stderr");
    p.exit("a", "c1", 3);
    expect(p.outputOf("c1")).toMatchObject({ stdout: "one two", stderr: "err", states: ["running", "failed"], gaps: 0 });
    expect(p.command("c1")).toMatchObject({ state: "failed", exitCode: 3 });
  });

  it("a held link delivers its frames in order on release while other links flow", () => {
    const p = new Pair();
    p.addAgent("a");
    p.addAgent("b");
    p.hold("a");
    p.submit("a", "ca");
    p.submit("b", "cb");
    expect(p.spawned("a")).toEqual([]);
    expect(p.spawned("b")).toEqual(["cb"]);
    expect(p.command("ca").state).toBe("dispatched");
    p.release("a");
    expect(p.spawned("a")).toEqual(["ca"]);
    expect(p.agentRunning("a")).toEqual(["ca"]);
    expect(p.command("ca").state).toBe("running");
  });

  it("R-D1 R-D2: a dispatch lost on the link is sent again after the redelivery interval, and launched once", () => {
    const d = defaultServerConfig();
    const p = new Pair({ ...d, limits: { ...d.limits, redeliveryMs: 5_000 } });
    p.addAgent("a");
    p.dropNext("a");
    p.submit("a", "c1");
    expect(p.framesSent("a", "commandDispatch", "down")).toHaveLength(1);
    expect(p.spawned("a")).toEqual([]);
    p.advance(p.serverConfig.limits.redeliveryMs);
    expect(p.framesSent("a", "commandDispatch", "down")).toHaveLength(2);
    expect(p.spawned("a")).toEqual(["c1"]);
    p.advance(p.serverConfig.limits.redeliveryMs);
    expect(p.spawned("a")).toEqual(["c1"]);
  });

  it("R-F1 R-H6: after a server crash the agent registers again with its instance id and the operator still sees the command", () => {
    const p = new Pair();
    p.addAgent("a");
    p.submit("a", "c1");
    const id = p.helloOf("a")!.clientInstanceId;
    p.restartServer();
    expect(p.linkUp("a")).toBe(false);
    p.reconnectNow("a");
    expect(p.sessionFor("a")).toMatchObject({ phase: "ready", instanceId: id });
    expect(p.client("a")).toMatchObject({ connected: true, instanceId: id });
    expect(p.command("c1").state).toBe("running");
    expect(p.agentRunning("a")).toEqual(["c1"]);
  });
});
