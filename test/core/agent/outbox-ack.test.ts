// Event acknowledgements at the agent.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { sha, sends, of, AgentRig, expectClosed, eventsIn, enc } from "./rig.js";

describe("event acknowledgements", () => {
  it("R-O3: an ack for an unknown or retired command is ignored; one beyond the last assigned seq is SEQUENCE_VIOLATION and closes", () => {
    const r = new AgentRig();
    r.establish();
    const unknown = r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "nope", throughEventSeq: 99n } });
    expect(sends(unknown)).toEqual([]);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
    r.run("c1");
    const last = Number(r.snapshot()[0]!.lastClientEventSeq);
    expect(last).toBe(1);
    expectClosed(
      r,
      r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: BigInt(last + 1) } }),
      Code.SEQUENCE_VIOLATION,
      "EventAck through 2 for c1 beyond last assigned 1",
    );
    const u = new AgentRig();
    u.establish();
    u.run("c1");
    expectClosed(
      u,
      u.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n ** 60n } }),
      Code.SEQUENCE_VIOLATION,
    );
  });

  it("R-O6: an ack through exactly the last seq releases the pinned events; a done command then becomes a tombstone", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    expect(r.resentOnReconnect("c1"), "nothing acknowledged: both would be sent again").toEqual([1, 2]);
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 1n } });
    expect(r.resentOnReconnect("c1")).toEqual([2]);
    expect(r.retained()).toEqual(["c1"]);
    const out = r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n } });
    expect(r.retained()).toEqual([]);
    expect(r.tombstoned("c1")).toBe(true);
    expect(r.resentOnReconnect("c1")).toEqual([]);
    // internal: the outbox and the metadata budget's share are released (accounting; their durable rows are checked below)
    expect(r.st.outbox.commands.has("c1")).toBe(false);
    expect(r.st.metadataUsed).toBe(0);
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "command", key: "c1", value: null });
    expect(recs).toContainEqual({ table: "outbox", key: "c1", value: null });
    expect(recs).toContainEqual({ table: "tombstone", key: "c1", value: { hash: Buffer.from(sha("c1")).toString("hex"), order: 1 } });
  });
});

describe("outbox-ack edges (from the former agent edges file)", () => {
  it("R-O2: an event already sent on this session is not sent again until a new session asks", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("x") });
    expect(eventsIn(out, "c1").map((e) => e.eventSeq)).toEqual([2n]);
    expect(eventsIn(r.step({ type: "tick" }))).toEqual([]);
    expect(eventsIn(r.step({ type: "activity", conn: r.st.session.conn }))).toEqual([]); // setup: the current connection
  });
});
