// Further agent edges, and the traces other tools read.
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, restoreAgent } from "../../../core/index.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import { T0, argv, sends, accepts, eventsIn, of, AgentRig, stdinWrite, closeStdin, signal, signalResults, enc } from "./rig.js";

describe("more agent edges", () => {
  it("R-W6 R-O7: a restart restores unsent output entries, truncation markers, raw accounting and the summarizing state", () => {
    const base = defaultAgentConfig("x").limits;
    const KiB = 1024;
    const limits = { ...base, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB, rawHigh: 100 * KiB, rawLow: 50 * KiB };
    const r = new AgentRig({ limits });
    r.establish();
    r.run("c1");
    for (let i = 0; i < 3; i++) r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES).fill(65 + i) });
    r.step({ type: "process_output", uuid: "c1", stream: "stderr", data: new Uint8Array(10) });
    const cb = r.st.outbox.commands.get("c1")!;
    expect(cb.entries.map((e) => e.kind)).toEqual(["output", "output", "truncation"]);
    expect(r.st.outbox.summarizing).toBe(true);
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    expect(back.outbox.commands.get("c1")!.entries).toEqual(cb.entries);
    expect(back.outbox.commands.get("c1")!.rawBytes).toBe(cb.rawBytes);
    expect(back.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(back.outbox.summarizing).toBe(true);
    // Below the high watermark a restored outbox is not summarizing.
    const low = new AgentRig({ limits: { ...limits, rawHigh: 2 * MAX_CHUNK_BYTES, rawLow: 0 } });
    low.establish();
    low.run("c1");
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    expect(low.st.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(restoreAgent(low.cfg, low.disk.tables(), 3).outbox.summarizing).toBe(false);
  });

  it("R-D1: before start nothing is admitted or launched; a command queued before a restart launches after it (it was never started)", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("waiting");
    expect(r.cmd("waiting").phase).toBe("queued");
    const back = new AgentRig({ maxRunning: 2 }); // a slot is free even before "busy" is settled
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const early = back.step({ type: "tick" });
    expect(early.filter((e) => e.type === "persist")).toEqual([]);
    expect(back.st.commands.get("waiting")!.phase).toBe("queued");
    const started = back.step({ type: "start" });
    expect(of(started, "kill_orphan").map((k) => k.uuid)).toEqual(["busy"]);
    expect(back.st.commands.get("waiting")!.phase).toBe("launching");
    expect(of(started, "spawn").map((s) => s.uuid)).toEqual(["waiting"]);
    expect(
      of(started, "persist")
        .flatMap((p) => p.records)
        .some((x) => x.table === "meta"),
    ).toBe(false); // the instance id is kept, not rewritten
    // The interrupted command is done like any other: once acknowledged it becomes a tombstone.
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    back.ackAll("busy");
    expect(back.st.tombstones.has("busy")).toBe(true);
  });

  it("R-H1: the wake never lies in the past, and a queued command without expiry adds no deadline", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    const q = r.dispatch("q");
    expect(of(q, "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.now = T0 + 100;
    const late = r.dispatch("late", argv("true"), { expiry: T0 + 50 });
    expect(of(late, "wake").at(-1)!.at).toBe(T0 + 100);
  });

  it("R-O2: an event already sent on this session is not sent again until a new session asks", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("x") });
    expect(eventsIn(out, "c1").map((e) => e.eventSeq)).toEqual([2n]);
    expect(eventsIn(r.step({ type: "tick" }))).toEqual([]);
    expect(eventsIn(r.step({ type: "activity", conn: r.st.session.conn }))).toEqual([]);
  });

  it("R-S4: a signal revision below the command's revision is applied but never lowers the revision", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1", argv("true"), { rev: 5n });
    r.step({ type: "process_started", uuid: "c1", pid: 3 });
    const out = r.frame(signal("c1", 2n, SignalKind.USER1));
    expect(signalResults(out, "c1")).toEqual([[2, SignalKind.USER1, true, ""]]);
    expect(r.cmd("c1").revision).toBe(5);
    expect(r.cmd("c1").lastSignalRevision).toBe(2);
    expect(accepts(r.dispatch("c1", argv("true"), { rev: 5n }))[0]!.commandRevision).toBe(5n);
  });

  it("R-D11: a command terminated by the reconcile result drops its pending stdin rows, chunks, events and record", () => {
    const r = new AgentRig({ maxRunning: 1 });
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
    expect(r.st.metadataUsed).toBe(defaultAgentConfig("x").limits.metadataPerCommand);
  });
});

describe("traces other tools read", () => {
  it("R-W10: the agent traces established, protocol_failure and session_lost with the details the daemon log and the simulator use", () => {
    const r = new AgentRig();
    r.register();
    const est = r.welcome(3, "s3");
    expect(
      of(est, "trace")
        .filter((t) => t.event === "established")
        .map((t) => t.detail),
    ).toEqual([{ conn: 1, generation: 3 }]);
    const bad = r.frame({
      case: "clientCapacity",
      value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 0, maxQueuedCommands: 0 },
    });
    expect(
      of(bad, "trace")
        .filter((t) => t.event === "protocol_failure")
        .map((t) => t.detail),
    ).toEqual([{ code: "PROTOCOL_ERROR", message: "unexpected clientCapacity from server" }]);
    expect(
      of(bad, "trace")
        .filter((t) => t.event === "session_lost")
        .map((t) => t.detail),
    ).toEqual([{ conn: 1, reason: "PROTOCOL_ERROR: unexpected clientCapacity from server" }]);
    expect(of(bad, "close")).toEqual([{ type: "close", conn: 1, reason: "PROTOCOL_ERROR: unexpected clientCapacity from server" }]);
  });
});

describe("agent edges, second pass", () => {
  it("R-W2: finished (unacknowledged) commands count neither as running nor as queued", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.exit("c1", 0);
    expect(sends(out, "clientCapacity").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 0, queuedCommands: 0 })]);
    expect(r.st.commands.has("c1")).toBe(true);
  });

  it("R-S3: a duplicate CloseStdin changes nothing; a CloseStdin with nothing in flight reaches the process once durable", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    const cl = r.frame(closeStdin("c1", 1n));
    expect(of(cl, "close_stdin")).toEqual([]);
    expect(of(r.flush(), "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 1 }]);
    r.autoDurable = true;
    const dup = r.frame(closeStdin("c1", 1n));
    expect(dup.some((e) => e.type === "persist" || e.type === "close_stdin")).toBe(false);
    expect(r.cmd("c1").stdin.next).toBe(2);
  });

  it("R-D2: a launch authorized before a crash is reported interrupted and its possible process killed by the shell's own record (pid 0)", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    expect(r.cmd("c1").phase).toBe("launching");
    const back = new AgentRig();
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 0 }]);
    expect(back.st.commands.get("c1")).toMatchObject({ phase: "done", lifecycle: L.INTERRUPTED });
    expect(of(out, "spawn")).toEqual([]);
  });

  it("R-H1: after 10 s of silence the agent asks its runner for a ping on the current connection", () => {
    const r = new AgentRig();
    r.establish();
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
  });
});
