import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ScriptUploadStatusSchema, SignalKind, StdinAckSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { MAX_INCIDENTS_KEPT } from "../../../core/limits.js";

import { sha, argv, enc, lifecycle, ServerRig, expectClosed } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

/** The request hash the server's CommandDispatch of `uuid` carried (what the agent holds it under). */
const dispatchedHash = (r: ServerRig, uuid: string) =>
  (
    r.sent(r.log, undefined, "commandDispatch").find((x) => (x.env.payload.value as { issueUuid: string }).issueUuid === uuid)!.env.payload.value as {
      immutableRequestSha256: Uint8Array;
    }
  ).immutableRequestSha256;

describe("pumping stdin, signals and scripts", () => {
  it("R-S1: stdin goes out in order within the window (each write costs its bytes + 1); the first write always fits; it resumes after acks", () => {
    const r = new ServerRig({ stdinWindow: 10 });
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    const writes = () => r.sent(r.log, c, "stdinWrite").map((s) => Number((s.env.payload.value as { writeSeq: bigint }).writeSeq));
    const ack = (seq: number, ws: number) => r.event(c, "c1", seq, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: BigInt(ws) }) });
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: new Uint8Array(20), appendNewline: true });
    r.control({ op: "stdin", requestId: "w2", uuid: "c1", data: new Uint8Array(3), appendNewline: false });
    expect(writes()).toEqual([1]); // alone over the window, but nothing else in flight
    expect(r.sent(r.log, c, "stdinWrite")[0]!.env.payload.value).toMatchObject({ appendNewline: true });
    ack(2, 1);
    expect(writes()).toEqual([1, 2]); // in flight: 3 + 1 = 4
    r.control({ op: "stdin", requestId: "w3", uuid: "c1", data: new Uint8Array(7), appendNewline: false });
    expect(writes()).toEqual([1, 2]); // 4 + 7 > 10
    ack(3, 2);
    expect(writes()).toEqual([1, 2, 3]); // in flight: 8
    r.control({ op: "stdin", requestId: "w4", uuid: "c1", data: new Uint8Array(2), appendNewline: false });
    expect(writes()).toEqual([1, 2, 3, 4]); // 8 + 2 = 10: fits exactly; in flight 11
    r.control({ op: "close_stdin", requestId: "cl", uuid: "c1" });
    // internal: the close is held behind the window (not sent; the ack below releases it)
    expect(r.cmd("c1").stdin.queue.at(-1)).toEqual({ seq: 5, data: new Uint8Array(0), appendNewline: false, close: true, requestId: "cl" });
    expect(r.sent(r.log, c, "closeStdin")).toEqual([]); // 11 + 0 > 10
    ack(4, 4);
    expect(r.sent(r.log, c, "closeStdin").map((s) => Number((s.env.payload.value as { writeSeq: bigint }).writeSeq))).toEqual([5]);
  });

  it("R-S1: a write_seq is never sent before it is durable, and is sent again on a new session from the last ack", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("a"), appendNewline: false });
    expect(r.sent(r.log, c, "stdinWrite")).toEqual([]);
    r.flush();
    expect(r.sent(r.log, c, "stdinWrite")).toHaveLength(1);
    r.autoDurable = true;
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    r.snapshot(d, [{ issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: dispatchedHash(r, "c1") }]);
    expect(r.sent(r.log, d, "stdinWrite").map((s) => Number((s.env.payload.value as { writeSeq: bigint }).writeSeq))).toEqual([1]);
  });

  it("R-S4: a signal goes out once per session and only once its revision is durable; applied ones are dropped on reconcile", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.autoDurable = false;
    r.control({ op: "signal", requestId: "s1", uuid: "c1", signal: SignalKind.USER1 });
    expect(r.sent(r.log, c, "signalCommand")).toEqual([]);
    r.flush();
    expect(r.sent(r.log, c, "signalCommand").map((s) => s.env.payload.value)).toEqual([
      expect.objectContaining({ issueUuid: "c1", commandRevision: 2n, signal: SignalKind.USER1 }),
    ]);
    r.autoDurable = true;
    r.step({ type: "tick" });
    expect(r.sent(r.log, c, "signalCommand")).toHaveLength(1);
    r.control({ op: "signal", requestId: "s2", uuid: "c1", signal: SignalKind.USER2 });
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    // The agent already applied revision 2: only revision 3 is sent again.
    r.snapshot(d, [{ issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 2n, immutableRequestSha256: dispatchedHash(r, "c1") }]);
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([3]); // internal: the pending requests (no view lists them; the frames sent follow)
    expect(r.sent(r.log, d, "signalCommand").map((s) => Number((s.env.payload.value as { commandRevision: bigint }).commandRevision))).toEqual([3]);
  });

  it("R-S4: a signal sent while the command was accepted is still owed after its RUNNING event: the next session sends it again", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1");
    r.control({ op: "signal", requestId: "s1", uuid: "c1", signal: SignalKind.USER1 });
    expect(r.sent(r.log, c, "signalCommand")).toHaveLength(1);
    r.event(c, "c1", 1, lifecycle(L.RUNNING)); // the process started; the signal's result has not come
    expect(r.command("c1").state).toBe("running");
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    // The agent has not applied revision 2 (its snapshot says revision 1).
    r.snapshot(d, [{ issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: dispatchedHash(r, "c1") }]);
    expect(r.sent(r.log, d, "signalCommand").map((s) => s.env.payload.value)).toEqual([
      expect.objectContaining({ issueUuid: "c1", commandRevision: 2n, signal: SignalKind.USER1 }),
    ]);
  });

  it("R-C3: script chunks stay within the window, the commit goes once per session after every byte is acknowledged", () => {
    const body = new Uint8Array(150 * 1024).map((_, i) => i % 256);
    const r = new ServerRig({ scriptWindow: 128 * 1024 }); // exactly two chunks
    const c = r.connect();
    r.submit(
      "a",
      "s1",
      { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } },
      { script: body },
    );
    r.accept(c, "s1");
    const chunks = () =>
      r
        .sent(r.log, c, "scriptChunk")
        .map((s) => [Number((s.env.payload.value as { offset: bigint }).offset), (s.env.payload.value as { data: Uint8Array }).data.length]);
    expect(chunks()).toEqual([
      [0, 65536],
      [65536, 65536],
    ]);
    const chunk0 = r.sent(r.log, c, "scriptChunk")[0]!.env.payload.value as { sha256: Uint8Array; data: Uint8Array };
    expect(Buffer.from(chunk0.sha256).equals(Buffer.from(sha(chunk0.data)))).toBe(true);
    const up = (seq: number, got: number, complete = false) =>
      r.event(c, "s1", seq, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: BigInt(got), complete }) });
    up(1, 65536);
    expect(chunks().at(-1)).toEqual([131072, 150 * 1024 - 131072]);
    expect(r.sent(r.log, c, "scriptCommit")).toEqual([]);
    up(2, 131072);
    up(3, 150 * 1024);
    expect(r.sent(r.log, c, "scriptCommit").map((s) => s.env.payload.value)).toEqual([
      expect.objectContaining({ issueUuid: "s1", sizeBytes: BigInt(body.length) }),
    ]);
    r.step({ type: "tick" });
    expect(r.sent(r.log, c, "scriptCommit")).toHaveLength(1);
    up(4, 150 * 1024, true);
    // internal: the upload's record (committed, its bytes dropped, acked through the end; the durable row's deletion follows)
    expect(r.cmd("s1")).toMatchObject({ script: { committed: true, bytes: null, acked: 150 * 1024 } });
    expect(r.disk.durable.get("script")?.has("s1")).toBe(false);
  });

  it("R-C3: script progress that goes back, beyond the size, or for a non-script command closes", () => {
    const body = new Uint8Array(100).fill(3);
    const mk = () => {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "s1", { program: { case: "script", value: { sizeBytes: 100n, sha256: sha(body), interpreter: "/bin/sh" } } }, { script: body });
      r.accept(c, "s1");
      return { r, c };
    };
    const up = (x: { r: ServerRig; c: number }, seq: number, got: bigint, uuid = "s1") =>
      x.r.event(x.c, uuid, seq, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: got }) });
    const a = mk();
    up(a, 1, 100n);
    expect(a.r.session(a.c), "taken").toBeDefined();
    // Acknowledged through 100: a report of 99 now goes back.
    expectClosed(a.r, up(a, 2, 99n), a.c, Code.SEQUENCE_VIOLATION);
    const b = mk();
    expectClosed(b.r, up(b, 1, 101n), b.c, Code.SEQUENCE_VIOLATION, "script progress 101 impossible");
    const d = mk();
    up(d, 1, 50n);
    expectClosed(d.r, up(d, 2, 49n), d.c, Code.SEQUENCE_VIOLATION);
    const e = mk();
    up(e, 1, 50n);
    up(e, 2, 50n);
    expect(e.r.session(e.c), "a repeat is taken").toBeDefined();
    // Through exactly 50: the repeat was taken (not beyond 50), and 49 goes back.
    expectClosed(e.r, up(e, 3, 49n), e.c, Code.SEQUENCE_VIOLATION);
    const f = mk();
    f.r.running(f.c, "plain");
    expectClosed(f.r, up(f, 2, 0n, "plain"), f.c, Code.SEQUENCE_VIOLATION);
    // A count no JavaScript number holds exactly, as the very first progress report.
    const g = mk();
    expectClosed(g.r, up(g, 1, 2n ** 60n), g.c, Code.SEQUENCE_VIOLATION, `script progress ${2n ** 60n} impossible`);
  });
});

// ====================================================================== reconcile
