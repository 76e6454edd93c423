import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { Harness } from "../../support/harness.js";
import { Code } from "../../../core/errors.js";
import { defaultServerConfig } from "../../../core/index.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { CommandLifecycle as L, ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { agentRow } from "../../../core/agent/store.js";

const KiB = 1024;
const events = (h: Harness, uuid: string) =>
  h.wire
    .filter((w) => w.env.payload.case === "commandEvent")
    .map(
      (w) => w.env.payload.value as { issueUuid: string; eventSeq: bigint; commandRevision: bigint; event: { case: string; value: Record<string, unknown> } },
    )
    .filter((e) => e.issueUuid === uuid);
const sha = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest());

function scriptSpec(bytes: Uint8Array, shaOverride?: Uint8Array) {
  return create(ExecutionSpecSchema, {
    program: { case: "script", value: { sizeBytes: BigInt(bytes.length), sha256: shaOverride ?? sha(bytes), interpreter: "/bin/sh" } },
  });
}

describe("stdin", () => {
  it("R-S1: stdin is binary-safe, ordered by write_seq, durably deduplicated and acknowledged by a sequenced event", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1", { stdinOpen: true });
    const blobs = [new Uint8Array([0, 255, 10, 13, 0]), new Uint8Array([1, 2, 3]), new Uint8Array(0)];
    blobs.forEach((b, i) =>
      expect(h.control({ op: "stdin", requestId: `w${i}`, uuid: "c1", data: b, appendNewline: false })).toEqual({ ok: true, uuid: "c1", writeSeq: i + 1 }),
    );
    const proc = h.process("a", "c1")!;
    expect(proc.stdin.map((b) => Array.from(b))).toEqual(blobs.map((b) => Array.from(b)));
    const acks = events(h, "c1")
      .filter((e) => e.event.case === "stdinAck")
      .map((e) => Number(e.event.value.writeSeq));
    expect(acks).toEqual([1, 2, 3]);
    // A resent write (same write_seq) is not applied twice.
    const w = h.wire.find((x) => x.env.payload.case === "stdinWrite")!;
    const a = h.agents.get("a")!;
    h.agentInput("a", { type: "frame", conn: a.conn, data: w.data });
    expect(proc.stdin).toHaveLength(3);
    // Durable: the dedup point survives a restart of the agent.
    expect(agentRow(a.disk.durable, "command", "c1")!.stdin.next).toBe(4);
    expect(h.command("c1").stdinAckedThrough).toBe(3);
  });

  it("R-S1: a write that skips a write_seq is a sequence violation", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1", { stdinOpen: true });
    const a = h.agents.get("a")!;
    const skip = encodeEnvelope(a.st.session.fence, {
      case: "stdinWrite",
      value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: "c1", writeSeq: 5n, data: new Uint8Array([1]), appendNewline: false },
    });
    h.agentInput("a", { type: "frame", conn: a.conn, data: skip });
    expect(h.sent("error", "server").at(-1)?.payload.value).toMatchObject({ error: { code: Code.SEQUENCE_VIOLATION } });
    expect(h.process("a", "c1")!.stdin).toHaveLength(0);
  });

  it("R-S2: append_newline is explicit on the wire and applied by the agent", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1", { stdinOpen: true });
    h.control({ op: "stdin", requestId: "w1", uuid: "c1", data: new TextEncoder().encode("yes"), appendNewline: true });
    h.control({ op: "stdin", requestId: "w2", uuid: "c1", data: new TextEncoder().encode("raw"), appendNewline: false });
    const wire = h.sent("stdinWrite").map((e) => e.payload.value as { appendNewline: boolean; data: Uint8Array });
    expect(wire.map((w) => [new TextDecoder().decode(w.data), w.appendNewline])).toEqual([
      ["yes", true],
      ["raw", false],
    ]);
    expect(h.process("a", "c1")!.stdin.map((b) => new TextDecoder().decode(b))).toEqual(["yes\n", "raw"]);
  });

  it("R-S3: CloseStdin is separate and idempotent; writes after it are refused", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1", { stdinOpen: true });
    h.control({ op: "stdin", requestId: "w1", uuid: "c1", data: new Uint8Array([65]), appendNewline: false });
    expect(h.control({ op: "close_stdin", requestId: "close1", uuid: "c1" })).toEqual({ ok: true, uuid: "c1", writeSeq: 2 });
    // The same request again is answered the same way, not applied twice.
    expect(h.control({ op: "close_stdin", requestId: "close1", uuid: "c1" })).toEqual({ ok: true, uuid: "c1", writeSeq: 2 });
    expect(h.control({ op: "stdin", requestId: "w3", uuid: "c1", data: new Uint8Array([66]), appendNewline: false })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION },
    });
    const proc = h.process("a", "c1")!;
    expect(proc.stdinClosed).toBe(true);
    // A resent CloseStdin frame is harmless.
    const cl = h.wire.find((x) => x.env.payload.case === "closeStdin")!;
    const a = h.agents.get("a")!;
    h.agentInput("a", { type: "frame", conn: a.conn, data: cl.data });
    const acks = events(h, "c1")
      .filter((e) => e.event.case === "stdinAck")
      .map((e) => [Number(e.event.value.writeSeq), e.event.value.closed]);
    expect(acks).toEqual([
      [1, false],
      [2, true],
    ]);
  });

  it("R-S1: writes queued before launch reach the process in order once it starts", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 1 });
    h.submit("a", "first");
    h.submit("a", "second", { stdinOpen: true });
    h.control({ op: "stdin", requestId: "w1", uuid: "second", data: new Uint8Array([1]), appendNewline: false });
    h.control({ op: "stdin", requestId: "w2", uuid: "second", data: new Uint8Array([2]), appendNewline: false });
    expect(h.process("a", "second")).toBeUndefined();
    h.exit("a", "first", 0);
    expect(h.process("a", "second")!.stdin.map((b) => b[0])).toEqual([1, 2]);
  });
});

describe("signals", () => {
  it("R-S4 R-S5: a signal carries a new revision; the result and the lifecycle echo it; request_id stays at the server", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    const r = h.control({ op: "signal", requestId: "op-42", uuid: "c1", signal: SignalKind.USER1 });
    expect(r).toEqual({ ok: true, uuid: "c1", revision: 2 });
    const r2 = h.control({ op: "signal", requestId: "op-43", uuid: "c1", signal: SignalKind.CANCEL });
    expect(r2).toEqual({ ok: true, uuid: "c1", revision: 3 });
    expect(h.control({ op: "signal", requestId: "op-42", uuid: "c1", signal: SignalKind.USER1 })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    const sigs = h.sent("signalCommand").map((e) => e.payload.value as { commandRevision: bigint; signal: number });
    expect(sigs.map((s) => [Number(s.commandRevision), s.signal])).toEqual([
      [2, SignalKind.USER1],
      [3, SignalKind.CANCEL],
    ]);
    expect(h.process("a", "c1")!.signals).toEqual([SignalKind.USER1, SignalKind.CANCEL]);
    h.exit("a", "c1", null, "SIGTERM");
    const results = events(h, "c1").filter((e) => e.event.case === "signalResult");
    expect(results.map((e) => Number(e.commandRevision))).toEqual([2, 3]);
    const last = events(h, "c1").at(-1)!;
    expect(last.event.value.state).toBe(L.CANCELLED);
    expect(Number(last.commandRevision)).toBe(3);
    expect(h.command("c1").state).toBe("cancelled");
    // The request ids are remembered: asked again, each is answered with its own revision, and nothing more is sent.
    const sentBefore = h.wire.length;
    expect(h.control({ op: "signal", requestId: "op-42", uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: true, revision: 2 });
    expect(h.control({ op: "signal", requestId: "op-43", uuid: "c1", signal: SignalKind.CANCEL })).toMatchObject({ ok: true, revision: 3 });
    expect(h.wire.length).toBe(sentBefore);
    expect(h.cmd("c1").requests).toMatchObject({ "op-42": 2, "op-43": 3 }); // internal: the table that answers them
    // request ids never cross the agent protocol.
    for (const w of h.wire) expect(Buffer.from(w.data).includes(Buffer.from("op-42"))).toBe(false);
  });

  it("R-S4: a duplicate or stale signal revision is not applied twice", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.control({ op: "signal", requestId: "s1", uuid: "c1", signal: SignalKind.USER2 });
    const frame = h.wire.find((w) => w.env.payload.case === "signalCommand")!;
    const a = h.agents.get("a")!;
    h.agentInput("a", { type: "frame", conn: a.conn, data: frame.data });
    expect(h.process("a", "c1")!.signals).toEqual([SignalKind.USER2]);
  });

  it("R-S4: cancel before launch settles the start/kill race: cancelled with that revision and never launched", () => {
    const h = new Harness();
    h.addAgent("a", { maxRunning: 1 });
    h.submit("a", "busy");
    h.submit("a", "waiting");
    expect(h.command("waiting").state).toBe("accepted");
    expect(h.control({ op: "signal", requestId: "c", uuid: "waiting", signal: SignalKind.CANCEL })).toEqual({ ok: true, uuid: "waiting", revision: 2 });
    expect(h.command("waiting").state).toBe("cancelled");
    const last = events(h, "waiting").at(-1)!;
    expect(Number(last.commandRevision)).toBe(2);
    h.exit("a", "busy", 0);
    expect(h.spawned("a")).toEqual(["busy"]);
  });

  it("R-S4: cancel of a queued command that never reached an agent ends it at the server", () => {
    const h = new Harness();
    h.submit("offline", "c1");
    expect(h.control({ op: "signal", requestId: "c", uuid: "c1", signal: SignalKind.CANCEL })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    expect(h.command("c1").state).toBe("cancelled");
    expect(h.command("c1").terminalSource).toBe("server");
    h.addAgent("offline");
    expect(h.spawned("offline")).toEqual([]);
  });

  it("R-S4: a cancel that lands between launch authorization and spawn suppresses the spawn", () => {
    const h = new Harness();
    h.addAgent("a");
    h.autoDurable = false;
    h.submit("a", "c1");
    h.flush("server"); // created
    h.flush("server"); // dispatched recorded: the dispatch reaches the agent; accept + launch authorization are persisting
    const a = h.agents.get("a")!;
    // Launching: the dispatch reached the agent, no process yet.
    expect(h.framesSent("a", "commandDispatch", "down").map((e) => (e.payload.value as { issueUuid: string }).issueUuid)).toEqual(["c1"]);
    expect(h.spawned("a")).toEqual([]);
    const cancel = encodeEnvelope(a.st.session.fence, {
      case: "signalCommand",
      value: { $typeName: "rvbox.v1.SignalCommand", issueUuid: "c1", commandRevision: 2n, signal: SignalKind.CANCEL },
    });
    h.agentInput("a", { type: "frame", conn: a.conn, data: cancel });
    h.autoDurable = true;
    h.flush("a");
    h.flush("server");
    expect(a.spawns).toEqual([]);
    expect(h.command("c1").state).toBe("cancelled");
    const last = events(h, "c1").at(-1)!;
    expect(Number(last.commandRevision)).toBe(2);
  });

  it("R-S4: an exit nobody asked for is failed, not cancelled", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.exit("a", "c1", null, "SIGSEGV");
    expect(h.command("c1").state).toBe("failed");
    expect(h.command("c1").signalName).toBe("SIGSEGV");
  });
});

describe("scripts", () => {
  const bytes = new Uint8Array(300 * KiB).map((_, i) => (i * 7) % 251);

  it("R-C1 R-C2: a script dispatch carries the descriptor, then chunks and a commit; the agent verifies before launching", () => {
    const h = new Harness();
    h.addAgent("a");
    expect(h.control({ op: "submit", requestId: "s", uuid: "sc1", clientId: "a", spec: scriptSpec(bytes), script: bytes })).toMatchObject({ ok: true });
    const order = h.wire.filter((w) => w.from === "server" && w.to === "a").map((w) => w.env.payload.case);
    const d = order.indexOf("commandDispatch");
    const firstChunk = order.indexOf("scriptChunk");
    const commit = order.indexOf("scriptCommit");
    expect(d).toBeGreaterThan(-1);
    expect(firstChunk).toBeGreaterThan(d);
    expect(commit).toBeGreaterThan(order.lastIndexOf("scriptChunk"));
    const spawnAt = h.agentEffects.findIndex((x) => x.e.type === "spawn");
    const writeAt = h.agentEffects.findIndex((x) => x.e.type === "write_script");
    expect(writeAt).toBeGreaterThan(-1);
    expect(spawnAt).toBeGreaterThan(writeAt);
    const ws = h.agentEffects[writeAt]!.e as { data: Uint8Array };
    expect(Buffer.from(ws.data).equals(Buffer.from(bytes))).toBe(true);
    expect(h.command("sc1").state).toBe("running");
  });

  it("R-C3: received_bytes is a cumulative durable acknowledgement; the server keeps at most its window in flight", () => {
    const h = new Harness();
    h.addAgent("a");
    h.autoDeliver = false;
    h.control({ op: "submit", requestId: "s", uuid: "sc1", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    const window = defaultServerConfig().limits.scriptWindow;
    let maxInFlight = 0;
    while (h.queue.length > 0) {
      h.queue.shift()!();
      const c = h.cmd("sc1"); // internal: the upload window's accounting (flow control; the chunks sent are checked below)
      maxInFlight = Math.max(maxInFlight, c.script.sent - c.script.acked);
    }
    expect(maxInFlight).toBe(window);
    const progress = events(h, "sc1")
      .filter((e) => e.event.case === "scriptUpload")
      .map((e) => Number(e.event.value.receivedBytes));
    expect(progress).toEqual([64, 128, 192, 256, 300, 300].map((k) => k * KiB));
    expect(
      events(h, "sc1")
        .filter((e) => e.event.case === "scriptUpload")
        .at(-1)!.event.value.complete,
    ).toBe(true);
    // Each progress event was durable at the agent before it was sent (events go out after their persist).
    expect(h.sent("scriptChunk")).toHaveLength(5);
    expect(h.command("sc1").state).toBe("running");
  });

  it("R-C3: after a reconnect the upload resumes from the acknowledged offset; a resent chunk is idempotent", () => {
    const h = new Harness();
    h.addAgent("a");
    h.autoDeliver = false;
    h.control({ op: "submit", requestId: "s", uuid: "sc1", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    // Deliver the dispatch, acceptance and two chunks, then cut the link.
    for (let i = 0; i < 6 && h.queue.length > 0; i++) h.queue.shift()!();
    h.queue.length = 0;
    const a = h.agents.get("a")!;
    // What the agent acknowledged: its last upload progress event.
    const got = Number(
      events(h, "sc1")
        .filter((e) => e.event.case === "scriptUpload")
        .at(-1)!.event.value.receivedBytes,
    );
    expect(got).toBeGreaterThan(0);
    expect(got).toBeLessThan(bytes.length);
    const oldChunk = h.wire.find((w) => w.env.payload.case === "scriptChunk")!;
    h.autoDeliver = true;
    h.cutLink("a");
    h.reconnectNow("a");
    expect(h.command("sc1").state).toBe("running");
    const offsets = h.sent("scriptChunk").map((e) => Number((e.payload.value as { offset: bigint }).offset));
    expect(offsets.filter((o) => o === 0).length).toBeLessThanOrEqual(2);
    // A chunk resent with the same content is ignored; the upload is not disturbed.
    const re = encodeEnvelope(a.st.session.fence, oldChunk.env.payload as never); // setup: the old chunk, fenced for the new session
    h.agentInput("a", { type: "frame", conn: a.conn, data: re });
    expect(a.spawns).toEqual(["sc1"]);
  });

  it("R-C4: a checksum mismatch ends rejected before any launch, never failed", () => {
    const h = new Harness();
    h.addAgent("a");
    const wrong = new Uint8Array(32).fill(1);
    // The server itself refuses a descriptor that does not match the bytes.
    expect(h.control({ op: "submit", requestId: "s0", uuid: "bad0", clientId: "a", spec: scriptSpec(bytes, wrong), script: bytes })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION },
    });
    // An agent that receives bytes differing from the descriptor rejects.
    h.control({ op: "submit", requestId: "s1", uuid: "bad1", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    expect(h.command("bad1").state).toBe("running"); // good upload runs
    const h2 = new Harness();
    h2.addAgent("a");
    h2.autoDeliver = false;
    h2.control({ op: "submit", requestId: "s", uuid: "bad2", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    // Tamper with the server's copy after submit: the chunks no longer match the descriptor.
    h2.cmd("bad2").script.bytes = new Uint8Array(bytes.length).fill(9); // setup: poked
    h2.autoDeliver = true;
    h2.deliver();
    expect(h2.command("bad2").state).toBe("rejected");
    expect(h2.spawned("a")).toEqual([]);
  });

  it("R-C4: failure to prepare the executable is rejected; cancel during upload is cancelled; a crash after launch authorization is interrupted; none is failed", () => {
    const h = new Harness();
    h.addAgent("a");
    h.prepareFails.add("noprep");
    h.control({ op: "submit", requestId: "s1", uuid: "noprep", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    expect(h.command("noprep").state).toBe("rejected");
    h.spawnFails.add("nolaunch");
    h.submit("a", "nolaunch", { argv: ["/nonexistent"] });
    expect(h.command("nolaunch").state).toBe("rejected");
    expect(h.command("nolaunch").reason).toMatch(/could not launch/);

    h.autoDeliver = false;
    h.control({ op: "submit", requestId: "s2", uuid: "cancelme", clientId: "a", spec: scriptSpec(bytes), script: bytes });
    while (h.command("cancelme").state !== "accepted") h.queue.shift()!(); // dispatch, accept
    h.control({ op: "signal", requestId: "x", uuid: "cancelme", signal: SignalKind.CANCEL }); // queued behind the first chunks
    h.autoDeliver = true;
    h.deliver();
    expect(h.command("cancelme").state).toBe("cancelled");
    expect(h.spawned("a")).not.toContain("cancelme");

    const h2 = new Harness();
    h2.addAgent("b");
    h2.autoDurable = false;
    h2.submit("b", "crash");
    h2.flush("server");
    h2.flush("server");
    expect(h2.framesSent("b", "commandDispatch", "down")).toHaveLength(1);
    expect(h2.spawned("b"), "launching: no process yet").toEqual([]);
    h2.flush("b"); // launch authorization durable, spawn issued, process started (not yet durable)
    expect(h2.spawned("b")).toEqual(["crash"]);
    h2.autoDurable = true;
    h2.restartAgent("b");
    expect(h2.command("crash").state).toBe("interrupted");
    expect(h2.spawned("b")).toEqual(["crash"]); // launched once, never again after the crash
    for (const c of [...h.listCommands(), ...h2.listCommands()]) expect(c.state).not.toBe("failed");
  });
});

describe("bounds", () => {
  it("R-S4: outstanding signal requests per command are bounded; past the bound the request gets a transient capacity error", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.autoDeliver = false; // nothing is answered
    for (let i = 0; i < 64; i++) expect(h.control({ op: "signal", requestId: `s${i}`, uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: true });
    expect(h.control({ op: "signal", requestId: "s64", uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: false, error: { code: Code.CAPACITY } });
    expect(h.command("c1").revision).toBe(65);
    h.autoDeliver = true;
    h.deliver();
    expect(h.cmd("c1").signals).toHaveLength(0); // internal: the pending requests are settled (no view lists them; the next request fits again below)
    expect(h.control({ op: "signal", requestId: "s65", uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: true, revision: 66 });
  });
});
