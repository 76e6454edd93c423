import { describe, expect, it } from "vitest";
import { Pair } from "../support/pair.js";

describe("core smoke", () => {
  it("a command runs end to end: dispatch, accept, output, exit, ack, tombstone", () => {
    const h = new Pair();
    h.addAgent("host-a");
    expect(h.sessionFor("host-a")?.phase).toBe("ready");
    expect(h.submit("host-a", "cmd-1")).toEqual({ ok: true, uuid: "cmd-1", revision: 1 });
    expect(h.spawned("host-a")).toEqual(["cmd-1"]);
    h.output("host-a", "cmd-1", "hello\n");
    h.exit("host-a", "cmd-1", 0);
    expect(h.command("cmd-1")).toMatchObject({ state: "succeeded", exitCode: 0 });
    const shown = h.outputOf("cmd-1");
    expect(shown.items.map((e) => e.kind)).toEqual(["lifecycle", "output", "lifecycle"]);
    expect(shown).toMatchObject({ stdout: "hello\n", stderr: "", states: ["running", "succeeded"], gaps: 0 });
    expect(h.agentRunning("host-a")).toEqual([]);
    // Internal on purpose: once acknowledged the agent retains only the
    // tombstone, which no peer sees until the same uuid is dispatched again.
    const agent = h.agents.get("host-a")!.st;
    expect(agent.commands.size).toBe(0);
    expect(agent.tombstones.has("cmd-1")).toBe(true);
  });
});
