import { describe, expect, it } from "vitest";
import { Harness } from "../support/harness.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";

describe("core smoke", () => {
  it("a command runs end to end: dispatch, accept, output, exit, ack, tombstone", () => {
    const h = new Harness();
    h.addAgent("host-a");
    expect(h.agents.get("host-a")!.st.session.phase).toBe("established");
    expect(h.submit("host-a", "cmd-1")).toEqual({ ok: true, uuid: "cmd-1", revision: 1 });
    expect(h.agents.get("host-a")!.spawns).toEqual(["cmd-1"]);
    h.output("host-a", "cmd-1", "hello\n");
    h.exit("host-a", "cmd-1", 0);
    expect(h.cmd("cmd-1").state).toBe(L.SUCCEEDED);
    const kinds = h.storedEvents("cmd-1").map((e) => e.kind);
    expect(kinds).toEqual(["lifecycle", "output", "lifecycle"]);
    expect(h.agents.get("host-a")!.st.commands.size).toBe(0);
    expect(h.agents.get("host-a")!.st.tombstones.has("cmd-1")).toBe(true);
  });
});
