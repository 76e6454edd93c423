// Stdin at the agent.
import { describe, expect, it } from "vitest";
import { SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { agentRow } from "../../../core/agent/store.js";
import { argv, sends, closes, errorsIn, eventsIn, of, AgentRig, expectClosed, expectRefused, stdinWrite, closeStdin, signal, stdinAcks } from "./rig.js";

describe("stdin at the agent", () => {
  it("R-S1: stdin for an unknown command is NOT_FOUND without closing; for a tombstoned one it is silently dropped", () => {
    const r = new AgentRig();
    r.establish();
    expectRefused(r, r.frame(stdinWrite("nope", 1n, [1])), Code.NOT_FOUND, "unknown command nope");
    expectRefused(r, r.frame(closeStdin("nope", 1n)), Code.NOT_FOUND);
    r.run("old");
    r.exit("old", 0);
    r.ackAll("old");
    expect(sends(r.frame(stdinWrite("old", 1n, [1])))).toEqual([]);
    expect(sends(r.frame(closeStdin("old", 1n)))).toEqual([]);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
  });

  it("R-S1: a write_seq beyond the next expected (or beyond 2^53) closes with SEQUENCE_VIOLATION; an earlier one is a duplicate", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [7]));
    const dup = r.frame(stdinWrite("c1", 1n, [8]));
    expect(of(dup, "write_stdin")).toEqual([]);
    expect(of(dup, "persist")).toEqual([]);
    expect(r.expectedWriteSeq("c1")).toBe(2);
    expectClosed(r, r.frame(stdinWrite("c1", 3n, [9])), Code.SEQUENCE_VIOLATION, "stdin write_seq 3, expected 2");
    for (const [payload, name] of [
      [stdinWrite("c1", 2n ** 60n, [1]), "write"],
      [closeStdin("c1", 3n), "close"],
      [closeStdin("c1", 2n ** 60n), "close unsafe"],
    ] as const) {
      const x = new AgentRig();
      x.establish();
      x.run("c1", { ...argv("cat"), stdinOpen: true });
      x.frame(stdinWrite("c1", 1n, [7]));
      const out = x.frame(payload);
      expect(
        errorsIn(out).map((e) => e.error?.code),
        name,
      ).toEqual([Code.SEQUENCE_VIOLATION]);
      if (name === "close") expect(errorsIn(out)[0]!.error?.message).toBe("close_stdin write_seq 3, expected 2");
      expect(closes(out), name).toHaveLength(1);
      expect(x.linkUp(), name).toBe(false);
    }
  });

  it("R-S1: writes reach the process one at a time in order; the ack carries the executor's failure", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    const w1 = r.frame(stdinWrite("c1", 1n, [1, 2]));
    expect(of(w1, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([1, 2]) }]);
    const w2 = r.frame(stdinWrite("c1", 2n, [3], true));
    expect(of(w2, "write_stdin")).toEqual([]); // one write in flight at a time
    expect(r.cmd("c1").stdin.pendingBytes).toBe(4); // internal: buffered bytes (flow-control accounting; the bound's test below observes it)
    const wrong = r.step({ type: "stdin_written", uuid: "c1", seq: 2 });
    expect(stdinAcks(wrong)).toEqual([]);
    const done1 = r.step({ type: "stdin_written", uuid: "c1", seq: 1, failure: "EPIPE" });
    expect(stdinAcks(done1, "c1")).toEqual([[1, false, "EPIPE"]]);
    expect(of(done1, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 2, data: new Uint8Array([3, 10]) }]);
    expect(of(done1, "persist").flatMap((p) => p.records)).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    const cl = r.frame(closeStdin("c1", 3n));
    expect(of(cl, "close_stdin")).toEqual([]);
    const done2 = r.step({ type: "stdin_written", uuid: "c1", seq: 2 });
    expect(stdinAcks(done2, "c1")).toEqual([[2, false, ""]]);
    expect(of(done2, "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 3 }]);
    const done3 = r.step({ type: "stdin_written", uuid: "c1", seq: 3 });
    expect(stdinAcks(done3, "c1")).toEqual([[3, true, ""]]);
    expect(r.expectedWriteSeq("c1")).toBe(4);
    expect(stdinAcks(r.probe(stdinWrite("c1", 4n, [1])), "c1"), "closed: a write now is answered as such").toEqual([[4, false, "stdin already closed"]]);
    // internal: nothing buffered or in flight (flow-control state)
    expect(r.cmd("c1").stdin).toMatchObject({ pending: [], pendingBytes: 0, inFlight: false });
  });

  it("R-S1: writes before the launch wait; they reach the process once it has started", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    expect(of(r.frame(stdinWrite("c1", 1n, [5])), "write_stdin")).toEqual([]);
    expect(r.step({ type: "stdin_written", uuid: "c1", seq: 1 }).some((e) => e.type === "persist")).toBe(false); // not running: ignored
    const out = r.exit("busy", 0);
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c1"]);
    const started = r.step({ type: "process_started", uuid: "c1", pid: 5 });
    expect(of(started, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([5]) }]);
  });

  it("R-S1: without open stdin, or after it was closed, a write is acknowledged with a failure and consumes its seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("shut", argv("true"));
    const a = r.frame(stdinWrite("shut", 1n, [1]));
    expect(stdinAcks(a, "shut")).toEqual([[1, false, "stdin is not open for this command"]]);
    expect(r.expectedWriteSeq("shut")).toBe(2);
    r.run("open", { ...argv("cat"), stdinOpen: true });
    r.frame(closeStdin("open", 1n));
    r.step({ type: "stdin_written", uuid: "open", seq: 1 });
    const b = r.frame(stdinWrite("open", 2n, [1]));
    expect(stdinAcks(b, "open")).toEqual([[2, false, "stdin already closed"]]);
    expect(of(b, "write_stdin")).toEqual([]);
  });

  it("R-S3: CloseStdin on a closed or never-open stdin is acknowledged as closed; on a done command it only consumes the seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("never", argv("true"));
    const a = r.frame(closeStdin("never", 1n));
    expect(stdinAcks(a, "never")).toEqual([[1, true, ""]]);
    expect(stdinAcks(r.probe(stdinWrite("never", 2n, [1])), "never"), "closed now").toEqual([[2, false, "stdin already closed"]]);
    const b = r.frame(closeStdin("never", 2n));
    expect(stdinAcks(b, "never")).toEqual([[2, true, ""]]);
    expect(of(b, "close_stdin")).toEqual([]);
    r.exit("never", 0);
    const c = r.frame(closeStdin("never", 3n));
    expect(stdinAcks(c)).toEqual([]);
    expect(r.expectedWriteSeq("never")).toBe(4);
    const d = r.frame(stdinWrite("never", 4n, [1]));
    expect(stdinAcks(d)).toEqual([]);
    expect(r.expectedWriteSeq("never")).toBe(5);
    expect(agentRow(r.disk.durable, "command", "never")!.stdin.next).toBe(5);
  });

  it("R-W2 R-S1: the pending stdin bound is inclusive; past it the write is CAPACITY without closing and its seq is not consumed", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 1, limits: { ...base, stdinPendingPerCommand: 4 } });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1, 2, 3], true)); // 3 + newline = exactly 4
    expect(errorsIn(r.probe(stdinWrite("c1", 2n, []))), "exactly at the bound: an empty write still fits").toEqual([]);
    const full = r.frame(stdinWrite("c1", 2n, [9]));
    expectRefused(r, full, Code.CAPACITY);
    expect(errorsIn(full)[0]!.error?.message).toBe("stdin buffer for c1 is full; resend later");
    expect(r.expectedWriteSeq("c1")).toBe(2);
  });

  it("R-S1: a command that ends with writes still pending answers each of them as failed, then ends", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame(closeStdin("c1", 2n));
    const out = r.frame(signal("c1", 2n, SignalKind.CANCEL));
    const evs = eventsIn(out, "c1").map((e) => e.event.case);
    expect(evs).toEqual(["stdinAck", "stdinAck", "lifecycle"]);
    expect(stdinAcks(out, "c1")).toEqual([
      [1, false, "command ended before the write"],
      [2, true, "command ended before the write"],
    ]);
    const recs = of(out, "persist").flatMap((p) => p.records);
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000001", value: null });
    expect(recs).toContainEqual({ table: "stdin", key: "c1/0000000000000002", value: null });
    expect(r.cmd("c1").stdin).toMatchObject({ pending: [], pendingBytes: 0, inFlight: false }); // internal: nothing left buffered (flow-control state)
  });
});

describe("stdin edges (from the former agent edges file)", () => {
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
    expect(r.expectedWriteSeq("c1")).toBe(2);
  });

  it("R-S1: a write_seq taken by a command that has already finished survives a crash: the next write after the restart is in sequence", () => {
    for (const kind of ["write", "close"] as const) {
      const r = new AgentRig();
      r.establish();
      r.run("c1", { ...argv("cat"), stdinOpen: true });
      r.exit("c1", 0);
      // The exit is not yet acknowledged: c1 is retained, and a write for it still takes its write_seq.
      r.frame(kind === "write" ? stdinWrite("c1", 1n, [1]) : closeStdin("c1", 1n));
      const back = r.crashed();
      back.establish();
      const out = back.frame(stdinWrite("c1", 2n, [2]));
      expect(errorsIn(out), kind).toEqual([]);
      expect(back.linkUp(), kind).toBe(true);
      expect(back.expectedWriteSeq("c1"), kind).toBe(3);
    }
  });
});
