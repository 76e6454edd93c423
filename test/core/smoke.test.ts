import { describe, expect, it } from "vitest";
import { Harness } from "../support/harness.js";

describe("core smoke", () => {
  it("a command runs end to end: dispatch, accept, output, exit, ack, tombstone", () => {
    const h = new Harness();
    h.addAgent("host-a");
    expect(h.sessionFor("host-a")?.phase).toBe("ready");
    expect(h.submit("host-a", "cmd-1")).toEqual({ ok: true, uuid: "cmd-1", revision: 1 });
    expect(h.spawned("host-a")).toEqual(["cmd-1"]);
    h.output("host-a", "cmd-1", "hello\n");
    h.exit("host-a", "cmd-1", 0);
    expect(h.command("cmd-1").state).toBe("succeeded");
    const kinds = h.storedEvents("cmd-1").map((e) => e.kind);
    expect(kinds).toEqual(["lifecycle", "output", "lifecycle"]);
    expect(h.agents.get("host-a")!.st.commands.size).toBe(0);
    expect(h.agents.get("host-a")!.st.tombstones.has("cmd-1")).toBe(true);
  });
});
