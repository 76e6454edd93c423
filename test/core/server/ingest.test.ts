// Event ingest at the server: acknowledgements, validation of every event kind, command times (core/server/ingest.ts).
// (Moved from test/core/server-node-edges.test.ts, which drove the server
// reducer directly with hand-made agent frames.)
import { rowOf } from "../../../core/server/store.js";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ByteRangeSchema,
  CommandEventSchema,
  CommandLifecycle as L,
  ControlErrorSchema,
  EventRangeSchema,
  OutputIncompleteSchema,
  OutputStream,
  OutputTruncationSchema,
  SignalKind,
  SignalResultSchema,
  StdinAckSchema,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { restoreServer, type ServerEffect, type ServerLimits } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { MAX_CHUNK_BYTES, MAX_INCIDENTS_KEPT, SERVER_RECENT_DIGESTS } from "../../../core/limits.js";

import { T0, type EventInit, argv, of, enc, lifecycle, output, ServerRig, expectClosed, expectRefused } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

describe("acknowledgements", () => {
  it("R-O3: events made durable in one batch are acknowledged once per command, cumulatively; none after the session ended", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.running(c, "c2");
    r.autoDurable = false;
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("a")));
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 1, enc("b")));
    r.event(c, "c2", 2, output(OutputStream.STDERR, 0, enc("z")));
    expect(r.st.conns.get(c)!.ingressPending).toBeGreaterThan(0); // internal: ingress accounting (flow control, no peer observes it)
    expect(r.sent(r.log, c, "eventAck").filter((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq > 1n)).toEqual([]);
    const out = r.flush();
    const acks = r.sent(out, c, "eventAck").map((s) => s.env.payload.value as { issueUuid: string; throughEventSeq: bigint });
    expect(acks.map((a) => [a.issueUuid, a.throughEventSeq])).toEqual([
      ["c1", 3n],
      ["c2", 2n],
    ]);
    expect(r.st.conns.get(c)!.ingressPending).toBe(0); // internal: ingress accounting released (flow control)
    expect([r.command("c1").storedThrough, r.command("c2").storedThrough]).toEqual([3, 2]);
    r.event(c, "c1", 4, output(OutputStream.STDOUT, 2, enc("c")));
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const late = r.flush();
    expect(r.sent(late)).toEqual([]);
    expect(r.command("c1").storedThrough).toBe(4);
  });
});

// ====================================================================== control requests

describe("command events", () => {
  function ready(over: Partial<ServerLimits> = {}) {
    const r = new ServerRig(over);
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    return { r, c };
  }

  it("R-O3: events for unknown or foreign commands are NOT_FOUND without closing; seq 0 or beyond 2^53 closes", () => {
    const { r, c } = ready();
    const b = r.connect("b");
    expectRefused(r, r.event(c, "ghost", 1, lifecycle(L.RUNNING)), c, Code.NOT_FOUND, "event for unknown command ghost");
    expect(r.errors(r.log, c).at(-1)!.error?.issueUuid).toBe("ghost");
    expectRefused(r, r.event(b, "c1", 2, lifecycle(L.SUCCEEDED)), b, Code.NOT_FOUND);
    expectClosed(r, r.event(c, "c1", 0, lifecycle(L.RUNNING)), c, Code.SEQUENCE_VIOLATION, "event_seq 0 impossible");
    const x = ready();
    expectClosed(x.r, x.r.event(x.c, "c1", 2n ** 60n, lifecycle(L.RUNNING)), x.c, Code.SEQUENCE_VIOLATION);
  });

  it("R-O2: a gap closes; an identical resend is acknowledged through what is stored; a different resend closes", () => {
    const { r, c } = ready();
    expectClosed(r, r.event(c, "c1", 3, output(OutputStream.STDOUT, 0, enc("x"))), c, Code.SEQUENCE_VIOLATION, "event 3 of c1 after 1: gap");
    const x = ready();
    x.r.event(x.c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    const again = x.r.event(x.c, "c1", 1, lifecycle(L.RUNNING));
    expect(x.r.sent(again, x.c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([2n]);
    expect(again.filter((e) => e.type === "persist")).toEqual([]);
    expectClosed(
      x.r,
      x.r.event(x.c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ZZ"))),
      x.c,
      Code.SEQUENCE_VIOLATION,
      "event 2 of c1 resent with different bytes",
    );
  });

  // Seeds 41092, 74040, 82175 (liveness) and 80305 (coverage) of the 100k
  // campaign, all with a clone of agent-0: both copies ran one command; the
  // server stored one copy's events and the other copy's next event
  // contradicted them. R-O2 pins resends, so closing alone repeated on every
  // session forever and the client's other commands never ran.
  function divergedCase(conflict: (r: ServerRig, c: number) => ServerEffect[], message: string): void {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    r.submit("a", "c2");
    r.accept(c, "c2");
    expectClosed(r, conflict(r, c), c, Code.SEQUENCE_VIOLATION, message);
    // The stored history is kept; the command is settled by the server with an incident.
    expect(r.command("c1")).toMatchObject({ state: "interrupted", terminalSource: "server" });
    expect(r.outputOf("c1").stdout).toBe("ab");
    expect(r.incidents(true).map((i) => [i.issueUuid, i.kind, i.detail.startsWith(message)])).toEqual([["c1", "history_diverged", true]]);
    // The agent's next session: the same event again is ignored, the
    // ReconcileResult terminates its copy, and the other command goes on.
    const d = r.open();
    r.hello(d);
    const res = r.snapshot(d, [
      {
        issueUuid: "c1",
        lifecycle: L.RUNNING,
        lastClientEventSeq: 3n,
        commandRevision: 1n,
        immutableRequestSha256: Buffer.from(r.st.commands.get("c1")!.hash, "hex"),
      },
      {
        issueUuid: "c2",
        lifecycle: L.ACCEPTED,
        lastClientEventSeq: 0n,
        commandRevision: 1n,
        immutableRequestSha256: Buffer.from(r.st.commands.get("c2")!.hash, "hex"),
      },
    ]);
    const result = r.sent(res, d, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[] };
    expect(result.terminateLocalIssueUuids).toEqual(["c1"]);
    expect(r.session(d)?.phase).toBe("ready");
    expect(r.sent(conflict(r, d))).toEqual([]);
    expect(r.session(d)?.phase).toBe("ready");
    r.event(d, "c2", 1, lifecycle(L.RUNNING));
    expect(r.command("c2").state).toBe("running");
  }
  it("R-O2 R-D11: output whose offset does not continue the stored stream interrupts the command as diverged; the next session goes on", () =>
    divergedCase((r, c) => r.event(c, "c1", 3, output(OutputStream.STDOUT, 7, enc("zz"))), "stdout offset 7, expected 2"));
  it("R-O2 R-D11: a resend with other bytes than the stored event interrupts the command as diverged; the next session goes on", () =>
    divergedCase((r, c) => r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ZZ"))), "event 2 of c1 resent with different bytes"));
  it("R-O2 R-O7 R-D11: a truncation marker that does not continue the stored stream interrupts the command as diverged; the next session goes on", () =>
    divergedCase(
      (r, c) => r.event(c, "c1", 3, { case: "truncation", value: { removedBytes: [{ stream: OutputStream.STDOUT, offset: 9n, length: 4n }] } }),
      "truncation of stdout at 9, expected 2",
    ));

  it("R-O3: a resend of an event received but not yet durable is not acknowledged early", () => {
    const { r, c } = ready();
    r.autoDurable = false;
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    const re = r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    expect(r.sent(re)).toEqual([]);
    expect(r.command("c1").storedThrough).toBe(1);
    expect(r.cmd("c1").ingest.receivedThrough).toBe(2); // internal: received ahead of the committed view
    // Once durable, the ack covers it, once.
    expect(r.sent(r.flush(), c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([2n]);
  });

  it("R-D11 R-O2: for a command the agent ended, an identical resend is acknowledged through its own seq; anything else is ignored", () => {
    const { r, c } = ready();
    r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    const same = r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.sent(same, c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([2n]);
    const early = r.event(c, "c1", 1, lifecycle(L.RUNNING));
    expect(r.sent(early, c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([1n]);
    const diff = r.event(c, "c1", 2, lifecycle(L.FAILED, { exitCode: 1 }));
    expect(r.sent(diff)).toEqual([]);
    expect(of(diff, "trace").filter((t) => t.event === "event_ignored")).toEqual([
      { type: "trace", event: "event_ignored", detail: { uuid: "c1", seq: 2, why: "command is terminal" } },
    ]);
    const beyond = r.event(c, "c1", 3, output(OutputStream.STDOUT, 0, enc("x")));
    expect(r.sent(beyond)).toEqual([]);
    expect(r.session(c)).toBeDefined();
    expect(r.command("c1").state).toBe("succeeded");
  });

  it("R-D11: events of a command the server ended itself are dropped silently, whatever their seq", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1", false, Code.ALREADY_EXECUTED);
    for (const seq of [1, 5, 1]) {
      const out = r.event(c, "c1", seq, lifecycle(L.RUNNING));
      expect(r.sent(out)).toEqual([]);
      expect(of(out, "trace")).toEqual([]);
    }
    expect(r.session(c)).toBeDefined();
  });

  it("R-D11: an event for a command pruned from history is ignored, traced with why, and nothing closes", () => {
    const r = new ServerRig({ historyMs: 1_000 });
    const c = r.connect();
    r.running(c, "old");
    r.event(c, "old", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.now += 1_000;
    r.step({ type: "tick" });
    expect(r.findCommand("old")).toBeUndefined();
    const late = r.event(c, "old", 3, output(OutputStream.STDOUT, 0, enc("x")));
    expect(r.sent(late)).toEqual([]);
    expect(of(late, "trace").filter((t) => t.event === "event_ignored")).toEqual([
      { type: "trace", event: "event_ignored", detail: { uuid: "old", seq: "3", why: "pruned from history" } },
    ]);
    expect(r.session(c)).toBeDefined();
  });

  it("R-D1: an event for a command still dispatched means its acceptance was lost: the server adopts accepted", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.event(c, "c1", 1, lifecycle(L.RUNNING));
    expect(r.command("c1").state).toBe("running");
    const states = of(r.log, "trace")
      .filter((t) => t.event === "state" && t.detail.uuid === "c1")
      .map((t) => t.detail.state);
    expect(states).toEqual(["ACCEPTED", "RUNNING"]);
  });

  it("R-W7: the ingress watermark is inclusive: exactly at it the event is taken, one byte over closes without acknowledging", () => {
    const probe = ready();
    const ev = create(CommandEventSchema, { issueUuid: "c1", eventSeq: 2n, commandRevision: 1n, event: output(OutputStream.STDOUT, 0, enc("hello")) });
    const size = encodeEnvelope(probe.r.fenceOf(probe.c), { case: "commandEvent", value: ev }).length;
    const ok = ready({ ingressHigh: size });
    ok.r.autoDurable = false;
    ok.r.frame(ok.c, { case: "commandEvent", value: ev });
    expect(ok.r.session(ok.c)).toBeDefined();
    expect(ok.r.st.conns.get(ok.c)!.ingressPending).toBe(size); // internal: ingress accounting (flow control)
    ok.r.flush();
    expect(ok.r.command("c1").storedThrough).toBe(2);
    const over = ready({ ingressHigh: size - 1 });
    const out = over.r.frame(over.c, { case: "commandEvent", value: ev });
    expectClosed(over.r, out, over.c, Code.CAPACITY, "server ingress high watermark");
    expect(over.r.command("c1").storedThrough).toBe(1);
    expect(over.r.outputOf("c1").stdout).toBe("");
    expect(over.r.sent(out, over.c, "eventAck")).toEqual([]);
  });

  it("R-O4 R-T3: output chunks are checked: stream, declared size, compressed size, offset and compression", () => {
    const cases: Array<[EventInit, Code, string?]> = [
      [output(OutputStream.UNSPECIFIED, 0, enc("x")), Code.PROTOCOL_ERROR, "output chunk without a stream"],
      [
        output(OutputStream.STDOUT, 0, enc("x"), { originalSize: MAX_CHUNK_BYTES + 1 }),
        Code.PAYLOAD_TOO_LARGE,
        `output chunk declares ${MAX_CHUNK_BYTES + 1} bytes`,
      ],
      [
        output(OutputStream.STDOUT, 0, enc("x"), { zstdData: new Uint8Array(MAX_CHUNK_BYTES + 1025) }),
        Code.PAYLOAD_TOO_LARGE,
        "compressed chunk larger than any 64 KiB input needs",
      ],
      // Exactly at the compressed bound the size passes, and the bytes are checked as a frame.
      [output(OutputStream.STDOUT, 0, enc("x"), { zstdData: new Uint8Array(MAX_CHUNK_BYTES + 1024) }), Code.BAD_COMPRESSION],
      [output(OutputStream.STDOUT, 1, enc("x")), Code.SEQUENCE_VIOLATION, "stdout offset 1, expected 0"],
      [output(OutputStream.STDERR, 0, enc("x"), { originalSize: 2 }), Code.BAD_COMPRESSION],
      [output(OutputStream.STDOUT, 0, enc("x"), { zstdData: new Uint8Array([1, 2, 3]) }), Code.BAD_COMPRESSION],
    ];
    for (const [ev, code, msg] of cases) {
      const { r, c } = ready();
      expectClosed(r, r.event(c, "c1", 2, ev), c, code, msg);
      expect(r.command("c1").storedThrough).toBe(1);
      expect(r.outputOf("c1").items.filter((i) => i.kind === "output")).toEqual([]);
    }
    // At the bounds: a 64 KiB chunk is fine.
    const { r, c } = ready();
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, new Uint8Array(MAX_CHUNK_BYTES)));
    expect(r.outputOf("c1").stdout).toHaveLength(MAX_CHUNK_BYTES);
    const rec = rowOf(r.disk.durable, "event", "c1/000000000002")!;
    expect(rec).toMatchObject({ seq: 2, revision: 1, kind: "output", stream: "stdout", offset: 0, originalSize: MAX_CHUNK_BYTES });
    // The stream continues exactly there: stdout at 64 KiB and stderr at 0 are taken, stdout at 0 again is not.
    r.event(c, "c1", 3, output(OutputStream.STDOUT, MAX_CHUNK_BYTES, enc("k")));
    r.event(c, "c1", 4, output(OutputStream.STDERR, 0, enc("e")));
    expect(r.command("c1").storedThrough).toBe(4);
    expectClosed(
      r,
      r.event(c, "c1", 5, output(OutputStream.STDOUT, 0, enc("x"))),
      c,
      Code.SEQUENCE_VIOLATION,
      `stdout offset 0, expected ${MAX_CHUNK_BYTES + 1}`,
    );
  });

  it("R-O7: truncation markers must continue each stream exactly and carry no event range", () => {
    const range = (stream: OutputStream, offset: number, length: number) => create(ByteRangeSchema, { stream, offset: BigInt(offset), length: BigInt(length) });
    const trunc = (ranges: ReturnType<typeof range>[], withEvents = false): EventInit => ({
      case: "truncation",
      value: create(OutputTruncationSchema, {
        removedBytes: ranges,
        cause: 2,
        ...(withEvents ? { removedEvents: create(EventRangeSchema, { firstEventSeq: 1n, lastEventSeq: 2n }) } : {}),
      }),
    });
    const cases: Array<[EventInit, Code, string]> = [
      [trunc([range(OutputStream.STDOUT, 0, 5)], true), Code.PROTOCOL_ERROR, "agent truncation markers carry no event range"],
      [trunc([range(OutputStream.UNSPECIFIED, 0, 5)]), Code.PROTOCOL_ERROR, "bad truncation range"],
      [trunc([range(OutputStream.STDOUT, 0, 0)]), Code.PROTOCOL_ERROR, "bad truncation range"],
      [trunc([range(OutputStream.STDOUT, 3, 5)]), Code.SEQUENCE_VIOLATION, "truncation of stdout at 3, expected 0"],
      [trunc([range(OutputStream.STDOUT, 0, 5), range(OutputStream.STDOUT, 6, 1)]), Code.SEQUENCE_VIOLATION, "truncation of stdout at 6, expected 5"],
    ];
    for (const [ev, code, msg] of cases) {
      const { r, c } = ready();
      expectClosed(r, r.event(c, "c1", 2, ev), c, code, msg);
      expect(r.command("c1").storedThrough).toBe(1);
      expect(r.outputOf("c1").items.filter((i) => i.kind === "truncation")).toEqual([]);
    }
    const { r, c } = ready();
    r.event(c, "c1", 2, trunc([range(OutputStream.STDOUT, 0, 5), range(OutputStream.STDERR, 0, 2), range(OutputStream.STDOUT, 5, 3)]));
    const shown = r.outputOf("c1");
    expect(shown.gaps).toBe(0);
    expect(shown.items.flatMap((i) => (i.kind === "truncation" ? i.ranges : []))).toEqual([
      { stream: "stdout", offset: 0, length: 5 },
      { stream: "stderr", offset: 0, length: 2 },
      { stream: "stdout", offset: 5, length: 3 },
    ]);
    // The streams continue after the marker: stdout at 8, then 9; stderr at 2.
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 8, enc("k")));
    r.event(c, "c1", 4, output(OutputStream.STDOUT, 9, enc("l")));
    r.event(c, "c1", 5, output(OutputStream.STDERR, 2, enc("e")));
    expect(r.command("c1").storedThrough).toBe(5);
    expect([r.outputOf("c1").stdout, r.outputOf("c1").stderr, r.outputOf("c1").gaps]).toEqual(["kl", "e", 0]);
  });

  it("R-O8 R-D4: lifecycle events must be legal transitions the agent may report; terminal ones clear pending signals", () => {
    const bad: Array<[L, Code]> = [
      [L.QUEUED, Code.SEQUENCE_VIOLATION],
      [L.DISPATCHED, Code.SEQUENCE_VIOLATION],
      [L.ACCEPTED, Code.SEQUENCE_VIOLATION],
      [L.EXPIRED, Code.SEQUENCE_VIOLATION],
      [L.REJECTED, Code.SEQUENCE_VIOLATION],
    ];
    for (const [to, code] of bad) {
      const { r, c } = ready();
      expectClosed(r, r.event(c, "c1", 2, lifecycle(to)), c, code, `lifecycle RUNNING -> ${L[to]} is not allowed`);
      expect(r.command("c1").state).toBe("running");
    }
    // ACCEPTED is a server-side state even where the transition exists.
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1");
    expectClosed(r, r.event(c, "c1", 1, lifecycle(L.ACCEPTED)), c, Code.PROTOCOL_ERROR, "agent lifecycle event ACCEPTED");
    // Same state again is no transition and is stored.
    const s = ready();
    s.r.event(s.c, "c1", 2, lifecycle(L.RUNNING));
    expect(s.r.command("c1").storedThrough).toBe(2);
    expect(s.r.outputOf("c1").states).toEqual(["running", "running"]);
    s.r.control({ op: "signal", requestId: "u", uuid: "c1", signal: SignalKind.USER1 });
    expect(s.r.sent(s.r.log, s.c, "signalCommand")).toHaveLength(1);
    expect(s.r.cmd("c1").signals).toHaveLength(1); // internal: the pending request (no view lists pending signals)
    s.r.event(
      s.c,
      "c1",
      3,
      lifecycle(L.FAILED, { exitCode: 2, signalName: "SIGSEGV", reason: "boom", error: create(ControlErrorSchema, { code: Code.VALIDATION, message: "m" }) }),
    );
    expect(s.r.command("c1")).toMatchObject({ state: "failed", exitCode: 2, signalName: "SIGSEGV", reason: "boom", terminalSource: "agent" });
    expect(s.r.cmd("c1").signals).toEqual([]); // internal: the pending request is cleared (no view lists pending signals)
    expect(s.r.disk.durable.get("event")!.get("c1/000000000003")).toMatchObject({
      kind: "lifecycle",
      state: L.FAILED,
      exitCode: 2,
      signalName: "SIGSEGV",
      reason: "boom",
      error: { code: Code.VALIDATION, message: "m" },
    });
    expect(s.r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "lifecycle", state: L.RUNNING, exitCode: null, error: null });
  });

  it("R-S1: a stdin ack for a write never assigned closes; acks advance and trim the queue, never go back", () => {
    const { r, c } = ready();
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("ab"), appendNewline: false });
    r.control({ op: "stdin", requestId: "w2", uuid: "c1", data: enc("cde"), appendNewline: false });
    const writes = () =>
      r.sent(r.log, c, "stdinWrite").map((s) => {
        const w = s.env.payload.value as { writeSeq: bigint; data: Uint8Array };
        return [w.writeSeq, Buffer.from(w.data).toString()];
      });
    expect(writes()).toEqual([
      [1n, "ab"],
      [2n, "cde"],
    ]);
    expect(r.cmd("c1").stdin.queuedBytes).toBe(5); // internal: bytes held for redelivery (flow-control accounting)
    const ack = (seq: number, ws: number) => r.event(c, "c1", seq, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: BigInt(ws) }) });
    ack(2, 2);
    expect(r.command("c1").stdinAckedThrough).toBe(2);
    expect(r.cmd("c1").stdin).toMatchObject({ queuedBytes: 0, queue: [] }); // internal: the acked writes are no longer held (flow control)
    ack(3, 1);
    expect(r.command("c1").stdinAckedThrough).toBe(2);
    expectClosed(r, ack(4, 3), c, Code.SEQUENCE_VIOLATION, "stdin ack for write 3 never sent");
  });

  it("R-S4: a signal result settles the requests up to its revision", () => {
    const { r, c } = ready();
    for (const id of ["s1", "s2", "s3"]) r.control({ op: "signal", requestId: id, uuid: "c1", signal: SignalKind.USER1 });
    expect(r.sent(r.log, c, "signalCommand").map((s) => (s.env.payload.value as { commandRevision: bigint }).commandRevision)).toEqual([2n, 3n, 4n]);
    expect(r.command("c1").revision).toBe(4);
    // internal: the pending requests (redelivered on a new session; no view lists them)
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([2, 3, 4]);
    r.event(c, "c1", 2, { case: "signalResult", value: create(SignalResultSchema, { signal: SignalKind.USER1, delivered: true }) }, 3n);
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([4]); // internal: as above
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({
      kind: "signal_result",
      revision: 3,
      signal: SignalKind.USER1,
      delivered: true,
    });
  });

  it("R-O8: an incomplete event is stored with its stream names; an event without a payload closes", () => {
    const { r, c } = ready();
    r.event(c, "c1", 2, { case: "incomplete", value: create(OutputIncompleteSchema, { streams: [OutputStream.STDERR, OutputStream.STDOUT], reason: "pipe" }) });
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "incomplete", streams: ["stderr", "stdout"], reason: "pipe" });
    expectClosed(r, r.event(c, "c1", 3, { case: undefined }), c, Code.PROTOCOL_ERROR, "command event without a recognized payload");
  });

  it("R-O2: only the most recent SERVER_RECENT_DIGESTS event digests are kept", () => {
    const { r, c } = ready();
    const cmd = r.cmd("c1"); // setup and the check below: the digest memory is internal (its effect is observed after)
    // As if events 2..SERVER_RECENT_DIGESTS+1 had been stored: the digest memory is full.
    cmd.ingest.digests = {};
    for (let s = 2; s <= SERVER_RECENT_DIGESTS + 1; s++) cmd.ingest.digests[s] = s;
    cmd.ingest.receivedThrough = cmd.ingest.storedThrough = SERVER_RECENT_DIGESTS + 1;
    r.event(c, "c1", SERVER_RECENT_DIGESTS + 2, output(OutputStream.STDOUT, 0, enc("x")));
    const keys = Object.keys(cmd.ingest.digests)
      .map(Number)
      .sort((a, b) => a - b);
    expect(keys[0]).toBe(3);
    expect(keys.at(-1)).toBe(SERVER_RECENT_DIGESTS + 2);
    expect(keys).toHaveLength(SERVER_RECENT_DIGESTS);
    // A forgotten seq can no longer be checked, so a resend is simply acknowledged ...
    const out = r.event(c, "c1", 2, lifecycle(L.FAILED));
    expect(r.session(c)).toBeDefined();
    expect(r.sent(out, c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([
      BigInt(SERVER_RECENT_DIGESTS + 2),
    ]);
    // ... while one still remembered must match.
    expectClosed(r, r.event(c, "c1", 3, lifecycle(L.FAILED)), c, Code.SEQUENCE_VIOLATION, "event 3 of c1 resent with different bytes");
  });
});

// ====================================================================== scripts, stdin and signal pumping

describe("command times", () => {
  it("started and ended times come from the agent's RUNNING and terminal events, reach readers once durable, and survive a restart", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.submit("a", "c");
    r.accept(a, "c");
    const started = T0 + 5_000;
    const ended = T0 + 9_250;
    r.event(a, "c", 1, lifecycle(L.RUNNING), 1n);
    expect(r.command("c").startedAt).toBe(T0); // no event time: the server's wall clock
    r.autoDurable = false;
    const ev = (seq: number, state: L, t: number, extra = {}) =>
      r.frame(a, {
        case: "commandEvent",
        value: create(CommandEventSchema, {
          issueUuid: "c",
          eventSeq: BigInt(seq),
          commandRevision: 1n,
          time: timestampFromMs(t),
          event: lifecycle(state, extra),
        }),
      });
    ev(2, L.SUCCEEDED, ended, { exitCode: 0 });
    expect(r.cmd("c")).toMatchObject({ startedTime: T0, endedTime: ended }); // internal: the working state, ahead of the committed view
    expect(r.command("c").endedAt).toBeNull(); // not durable yet: readers do not see it
    r.flush();
    expect(r.command("c")).toMatchObject({ startedAt: T0, endedAt: ended });
    // A second command with an event time on RUNNING.
    r.autoDurable = true;
    r.submit("a", "d");
    r.accept(a, "d");
    r.frame(a, {
      case: "commandEvent",
      value: create(CommandEventSchema, { issueUuid: "d", eventSeq: 1n, commandRevision: 1n, time: timestampFromMs(started), event: lifecycle(L.RUNNING) }),
    });
    expect(r.command("d")).toMatchObject({ startedAt: started, endedAt: null });
    const back = new ServerRig();
    back.st = restoreServer(r.cfg, r.disk.tables(), 2);
    expect(back.command("c")).toMatchObject({ startedAt: T0, endedAt: ended });
    expect(back.command("d")).toMatchObject({ startedAt: started, endedAt: null });
  });

  it("a command the server ends itself gets the server's wall time as its end, and no start", () => {
    const r = new ServerRig();
    r.step({ type: "conn_closed", conn: r.connect("a"), reason: "offline" });
    r.submit("a", "q");
    r.now = T0 + 1000;
    r.control({ op: "signal", requestId: "x", uuid: "q", signal: SignalKind.CANCEL });
    expect(r.command("q").state).toBe("cancelled");
    expect(r.command("q")).toMatchObject({ startedAt: null, endedAt: T0 + 1000 });
  });
});
