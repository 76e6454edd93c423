// Server edges found by the mutation run: each test killed a surviving mutant of the server core (docs/MUTATION.md).
// (Moved from test/core/server-node-edges.test.ts, which drove the server
// reducer directly with hand-made agent frames.)
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import type { AgentError, CommandDispatch } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import {
  ByteRangeSchema,
  CommandLifecycle as L,
  ControlErrorSchema,
  ExecutionSpecSchema,
  OutputStream,
  OutputTruncationSchema,
  ScriptUploadStatusSchema,
  SignalKind,
  StdinAckSchema,
} from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultServerConfig, restoreServer, serverInvariants, type ServerEffect } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { MAX_INCIDENTS_KEPT, MAX_SCRIPT_BYTES } from "../../../core/limits.js";
import { testPorts } from "../../support/ports.js";

import { plainIncident } from "../../support/pair.js";
import { T0, sha, type EventInit, argv, of, enc, lifecycle, output, ServerRig, expectClosed } from "../../support/server-rig.js";
import { touch } from "../../../core/server/active.js";

const dispatches = (r: ServerRig, effects: ServerEffect[], conn?: number) =>
  r.sent(effects, conn, "commandDispatch").map((s) => s.env.payload.value as CommandDispatch);
void MAX_INCIDENTS_KEPT;

describe("server edges found by the mutation run", () => {
  // In every row order: the highest id first, in the middle, last (restoring from the first row only passed when it was first).
  for (const order of [
    ["inc-5", "inc-2", "legacy"],
    ["inc-2", "inc-5", "legacy"],
    ["inc-2", "legacy", "inc-5"],
  ])
    it(`R-D5: restore keeps every incident as stored and continues numbering after the highest id (rows ${order.join(", ")})`, () => {
      const inc = (id: string) => ({ id, clientId: "a", uuid: "u", kind: "k", detail: "d", at: 5, acknowledged: id === "inc-2" });
      const rows = new Map<string, unknown>(order.map((id) => [id, inc(id)]));
      const st = restoreServer(defaultServerConfig(), { get: (t) => (t === "incident" ? rows : undefined) }, 1);
      serverInvariants(st);
      const r = new ServerRig();
      r.st = st;
      // ListIncidents shows each as stored.
      expect(r.incidents().map(plainIncident)).toEqual(
        order.map((id) => ({ id, clientId: "a", uuid: "u", kind: "k", detail: "d", at: 5, acknowledged: id === "inc-2" })),
      );
      // The next incident is numbered after the highest id.
      const c = r.connect("a");
      r.frame(c, {
        case: "error",
        value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "m" }), closeSession: false },
      });
      expect(r.incidents().map((i) => i.incidentId)).toEqual([...order, "inc-6"]);
    });

  it("R-W10: errors to a connection that has not registered carry no fence and no issue uuid; its close names no client", () => {
    const r = new ServerRig();
    const c = r.open();
    const out = r.frame(c, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }, null);
    const err = r.sent(out, c, "error")[0]!;
    expect([err.env.sessionId, err.env.sessionGeneration]).toEqual(["", 0n]);
    expect((err.env.payload.value as AgentError).error?.issueUuid).toBe("");
    expect(of(out, "trace").find((t) => t.event === "conn_closed")!.detail).toMatchObject({ client: "" });
  });

  it("R-W10: an agent error without an error body is traced as UNSPECIFIED and opens no incident", () => {
    const r = new ServerRig();
    const c = r.connect();
    const out = r.frame(c, { case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: false } });
    expect(
      of(out, "trace")
        .filter((t) => t.event === "agent_error")
        .map((t) => t.detail),
    ).toEqual([{ conn: c, code: "UNSPECIFIED", message: "" }]);
    expect(r.incidents().length).toBe(0);
  });

  it("R-H1 R-F5: the wake is the earliest heartbeat of all connections; a later authorization does not delay it; alone, it is the wake", () => {
    const r = new ServerRig({ authorizationTtlMs: 60_000 });
    r.open();
    r.now = T0 + 5_000;
    r.open();
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    const a = new ServerRig({ authorizationTtlMs: 60_000 });
    const c = a.connect();
    a.control({ op: "authorize", requestId: "x", clientId: "a", instanceId: "other" });
    expect(of(a.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    a.step({ type: "conn_closed", conn: c, reason: "x" });
    expect(of(a.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 60_000);
    const q = new ServerRig();
    q.submit("offline", "c1", argv(), { queueExpiry: T0 + 777 });
    expect(of(q.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 777);
  });

  it("R-D1: a running command adds no redelivery deadline; nor does a dispatched one restored without a session", () => {
    const r = new ServerRig({ redeliveryMs: 3_000 });
    const c = r.connect();
    r.running(c, "c1");
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    const d = new ServerRig({ redeliveryMs: 3_000 });
    d.connect();
    d.submit("a", "c2");
    expect(d.command("c2").state).toBe("dispatched");
    d.st = restoreServer(d.cfg, d.disk.tables(), 2);
    expect(d.st.commands.get("c2")!.dispatch.dispatchedOn).toBe(0); // internal: on no session (its consequence, no deadline, is the next line)
    expect(of(d.step({ type: "tick" }), "wake")).toEqual([]);
  });

  it("R-O5 R-S5: a restart restores segments, the retention marker, request ids and the per-client output index exactly", () => {
    const raw = new Uint8Array(30).fill(2);
    const zlen = testPorts.compress(raw).length;
    const r = new ServerRig({ segmentBytes: zlen, outputPerCommand: 2 * zlen });
    const c = r.connect();
    r.running(c, "c1");
    for (let i = 0; i < 4; i++) r.event(c, "c1", 2 + i, output(i % 2 ? OutputStream.STDERR : OutputStream.STDOUT, i < 2 ? 0 : 30, raw));
    r.control({ op: "signal", requestId: "sig", uuid: "c1", signal: SignalKind.USER1 });
    r.submit("b", "quiet");
    expect(r.command("c1").retentionMarkers).toBe(1);
    const back = restoreServer(r.cfg, r.disk.tables(), 9);
    const backRig = new ServerRig();
    backRig.st = back;
    expect(backRig.command("c1")).toEqual(r.command("c1"));
    expect(backRig.clientList().map((x) => [x.clientId, x.retainedOutputBytes])).toEqual(r.clientList().map((x) => [x.clientId, x.retainedOutputBytes]));
    // internal: the restore is exact for the segment layout, the marker, request ids and the retention index
    // (pinned by the mutation run; what a reader sees of them is checked above)
    const c1 = back.commands.get("c1")!;
    expect(c1.output.segments).toEqual(r.cmd("c1").output.segments);
    expect(c1.output.retention).toEqual(r.cmd("c1").output.retention);
    expect(c1.requests).toEqual(r.cmd("c1").requests);
    expect(c1.output.storedOutputBytes).toBe(r.command("c1").retainedBytes);
    expect(back.clientOutput).toEqual(r.st.clientOutput);
    expect(back.clientOutput.has("b")).toBe(false);
  });

  it("R-D5: below the incident bound a new incident drops nothing, acknowledged or not", () => {
    const r = new ServerRig();
    const c = r.connect();
    const store = () =>
      r.frame(c, {
        case: "error",
        value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "m" }), closeSession: false },
      });
    store();
    r.control({ op: "ack_incident", requestId: "a", incidentId: "inc-1" });
    const out = store();
    expect(r.incidents().map((i) => [i.incidentId, i.acknowledged])).toEqual([
      ["inc-1", true],
      ["inc-2", false],
    ]);
    expect(
      of(out, "persist")
        .flatMap((p) => p.records)
        .filter((x) => x.table === "incident" && x.value === null),
    ).toEqual([]);
  });

  it("R-D1: non-terminal transitions leave reason and signal name empty; the initial record and view are the empty ones", () => {
    const r = new ServerRig();
    r.autoDurable = false;
    r.submit("offline", "c1");
    // Not durable yet: no committed state, so ListCommands does not list it.
    expect(r.listCommands()).toEqual([]);
    // internal: the initial working record and committed view, field by field (pinned by the mutation run)
    expect(r.cmd("c1")).toMatchObject({
      revision: 1,
      state: L.QUEUED,
      exit: { terminalSource: "", exitCode: null, signalName: "", reason: "" },
      dispatch: { everDispatched: false, dispatchedOn: 0, attempts: 0, nextAttemptAt: 0 },
      script: { bytes: null },
      createdAt: T0,
      queueExpiry: T0 + 24 * 60 * 60_000,
    });
    expect(r.cmd("c1").committed).toEqual({
      // internal: the committed view's record, as above
      state: L.UNSPECIFIED,
      exitCode: null,
      signalName: "",
      reason: "",
      storedThrough: 0,
      revision: 0,
      stdinAssigned: 0,
      startedTime: 0,
      endedTime: 0,
    });
    r.flush();
    expect(r.command("c1")).toMatchObject({
      state: "queued",
      revision: 1,
      exitCode: null,
      signalName: "",
      reason: "",
      terminalSource: "",
      storedThrough: 0,
      startedAt: null,
      endedAt: null,
      createdAt: T0,
      queueExpiry: T0 + 24 * 60 * 60_000,
      attempts: 0,
    });
    expect(r.cmd("c1").committed).toEqual({
      // internal: the committed view's record, as above
      state: L.QUEUED,
      exitCode: null,
      signalName: "",
      reason: "",
      storedThrough: 0,
      revision: 1,
      stdinAssigned: 0,
      startedTime: 0,
      endedTime: 0,
    });
    r.autoDurable = true;
    const s = new ServerRig();
    const c = s.connect();
    s.running(c, "c2");
    expect(s.command("c2")).toMatchObject({ reason: "", signalName: "", terminalSource: "" });
  });

  it("R-C1: a script kept for upload is deleted from storage once the command ends; a stray script on an argv submit is not kept", () => {
    const body = enc("echo x\n");
    const r = new ServerRig();
    r.submit(
      "off",
      "s1",
      { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } },
      { script: body },
    );
    expect(r.disk.durable.get("script")?.get("s1")).toEqual({ data: body });
    r.control({ op: "signal", requestId: "k", uuid: "s1", signal: SignalKind.CANCEL });
    expect(r.disk.durable.get("script")?.has("s1")).toBe(false);
    expect(r.cmd("s1").script.bytes).toBeNull(); // internal: nor held in memory (no peer sees the held bytes)
    r.submit("off", "a1", argv("true"), { script: body });
    expect(r.cmd("a1").script.bytes).toBeNull(); // internal: as above
    expect(r.disk.durable.get("script")?.has("a1")).toBe(false);
  });

  it("R-C1: a script of exactly 16 MiB is accepted; one byte more is refused", () => {
    const r = new ServerRig();
    r.store = false;
    const big = new Uint8Array(MAX_SCRIPT_BYTES);
    const digest = sha(big);
    expect(
      r.submit("off", "s1", { program: { case: "script", value: { sizeBytes: BigInt(big.length), sha256: digest, interpreter: "/bin/sh" } } }, { script: big }),
    ).toMatchObject({ ok: true });
    const over = new Uint8Array(MAX_SCRIPT_BYTES + 1);
    expect(
      r.submit(
        "off",
        "s2",
        { program: { case: "script", value: { sizeBytes: BigInt(over.length), sha256: digest, interpreter: "/bin/sh" } } },
        { script: over },
      ),
    ).toEqual({ ok: false, error: { code: Code.VALIDATION, message: `the script is ${MAX_SCRIPT_BYTES + 1} bytes; the limit is ${MAX_SCRIPT_BYTES}` } });
  });

  it("R-D2: the request hash encodes the client id as UTF-8 at every code point width boundary", async () => {
    const { toBinary } = await import("@bufbuild/protobuf");
    const r = new ServerRig();
    const spec = create(ExecutionSpecSchema, argv("x"));
    const ids = ["\u007f", "\u0080", "\u07ff", "\u0800", "\uffff", "\u{10000}", "\u{10ffff}"];
    ids.forEach((client, i) => {
      r.control({ op: "submit", requestId: `r${i}`, uuid: `u${i}`, clientId: client, spec });
      const head = Buffer.from(`rvbox.v1/request\nu${i}\n${client}\n0\n`, "utf8");
      // internal: the request hash (a peer sees it only in a dispatch; no agent of these ids is connected)
      expect(r.cmd(`u${i}`).hash, JSON.stringify(client)).toBe(
        createHash("sha256")
          .update(Buffer.concat([head, Buffer.from(toBinary(ExecutionSpecSchema, spec))]))
          .digest("hex"),
      );
    });
  });

  it("R-D3: commands queued while the agent was away are dispatched up to its capacity in one go", () => {
    const r = new ServerRig();
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    expect(dispatches(r, r.log, c).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    expect(r.command("c3").state).toBe("queued");
  });

  it("R-D1: an accepted command is never redelivered, even before its acceptance is durable", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const c = r.connect();
    r.submit("a", "c1");
    r.now = T0 + 6_000;
    r.autoDurable = false;
    r.accept(c, "c1");
    r.step({ type: "tick" });
    expect(dispatches(r, r.log)).toHaveLength(1);
    const w = new ServerRig({ redeliveryMs: 3_000 });
    const d = w.connect();
    w.submit("a", "c1");
    w.autoDurable = false;
    w.accept(d, "c1");
    expect(of(w.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000); // no redelivery deadline for it
  });

  it("R-D1: command deadlines: the earliest expiry wins; a dispatch not yet durable, or one whose session is gone, sets none", () => {
    const r = new ServerRig();
    r.submit("off", "c1", argv(), { queueExpiry: T0 + 300 });
    r.submit("off", "c2", argv(), { queueExpiry: T0 + 500 });
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 300);
    const n = new ServerRig({ redeliveryMs: 5_000 });
    n.connect();
    n.autoDurable = false;
    n.submit("a", "c1");
    expect(n.cmd("c1").state).toBe(L.DISPATCHED); // internal: the working state, not durable yet, no reader sees it
    expect(of(n.log, "wake").at(-1)!.at).toBe(T0 + 10_000);
    const g = new ServerRig({ redeliveryMs: 5_000 });
    const c = g.connect();
    g.submit("a", "c1");
    g.step({ type: "conn_closed", conn: c, reason: "gone" });
    g.now = T0 + 6_000;
    expect(of(g.step({ type: "tick" }), "wake")).toEqual([]);
  });

  it("R-S1: several durable stdin writes leave in one go as far as the window allows", () => {
    const r = new ServerRig({ stdinWindow: 10 });
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    for (const id of ["w1", "w2", "w3"]) r.control({ op: "stdin", requestId: id, uuid: "c1", data: new Uint8Array(3), appendNewline: false });
    expect(r.sent(r.log, c, "stdinWrite")).toEqual([]);
    const out = r.flush();
    // 3 + 1, then 4 + 3 <= 10 (in flight 8), then 8 + 3 > 10: the third waits.
    expect(r.sent(out, c, "stdinWrite").map((s) => Number((s.env.payload.value as { writeSeq: bigint }).writeSeq))).toEqual([1, 2]);
    // The third goes once the first is acknowledged (it was held, not sent).
    r.autoDurable = true;
    const acked = r.event(c, "c1", 2, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: 1n }) });
    expect(r.sent(acked, c, "stdinWrite").map((s) => Number((s.env.payload.value as { writeSeq: bigint }).writeSeq))).toEqual([3]);
  });

  it("R-S4 R-S5: USER2 is refused on a queued command like USER1", () => {
    const r = new ServerRig();
    r.submit("off", "q");
    expect(r.control({ op: "signal", requestId: "u2", uuid: "q", signal: SignalKind.USER2 })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "the command is not running yet" },
    });
    expect(r.command("q").state).toBe("queued");
  });

  it("R-D8 R-H6: one client's reconciliation never touches another client's commands, nor its own queued ones", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.submit("a", "qa");
    r.accept(a, "qa", false, Code.CAPACITY);
    // setup (and the check at the end): the retry instant is internal (no view shows it)
    const retryAt = r.cmd("qa").dispatch.nextAttemptAt;
    r.cmd("qa").dispatch.nextAttemptAt = retryAt + 50_000; // make sure it lies ahead
    touch(r.st, r.cmd("qa"));
    r.running(b, "cb");
    r.control({ op: "signal", requestId: "s", uuid: "cb", signal: SignalKind.USER1 });
    r.submit("b", "cb2");
    r.accept(b, "cb2");
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    const a2 = r.open();
    r.hello(a2, "a");
    r.snapshot(a2, [
      {
        issueUuid: "cb",
        lifecycle: L.RUNNING,
        lastClientEventSeq: 1n,
        commandRevision: 9n,
        immutableRequestSha256: dispatches(r, r.log, b).find((x) => x.issueUuid === "cb")!.immutableRequestSha256,
      },
    ]);
    expect(r.cmd("cb").signals.map((s) => s.revision)).toEqual([2]); // internal: b's pending signal request untouched (no view lists them)
    expect(r.command("cb").state).toBe("running");
    expect(r.command("cb2").state).toBe("accepted");
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["cb", "reconcile_terminate_local"]]);
    expect(r.command("qa").state).toBe("queued");
    expect(r.cmd("qa").dispatch.nextAttemptAt).toBe(retryAt + 50_000); // internal: its retry untouched
  });

  it("R-O3: a resend of a terminal event not yet durable is not acknowledged early; at exactly the stored seq it is", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.autoDurable = false;
    r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.sent(r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 })), c, "eventAck")).toEqual([]);
    r.autoDurable = true;
    r.flush();
    const s = new ServerRig();
    const d = s.connect();
    s.running(d, "c1");
    s.event(d, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    const again = s.event(d, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    expect(s.sent(again, d, "eventAck").map((x) => (x.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([2n]);
  });

  it("R-O7: a truncation marker is stored with its ranges; an offset or length beyond 2^53 is a bad range", () => {
    const range = (stream: OutputStream, offset: bigint, length: bigint) => create(ByteRangeSchema, { stream, offset, length });
    const trunc = (ranges: ReturnType<typeof range>[]): EventInit => ({
      case: "truncation",
      value: create(OutputTruncationSchema, { removedBytes: ranges, cause: 2 }),
    });
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, trunc([range(OutputStream.STDERR, 0n, 4n), range(OutputStream.STDOUT, 0n, 9n)]));
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({
      kind: "truncation",
      cause: 2,
      ranges: [
        { stream: "stderr", offset: 0, length: 4 },
        { stream: "stdout", offset: 0, length: 9 },
      ],
    });
    for (const bad of [range(OutputStream.STDOUT, 2n ** 60n, 1n), range(OutputStream.STDOUT, 9n, 2n ** 60n)]) {
      const x = new ServerRig();
      const d = x.connect();
      x.running(d, "c1");
      x.event(d, "c1", 2, output(OutputStream.STDOUT, 0, new Uint8Array(9)));
      expectClosed(x, x.event(d, "c1", 3, trunc([bad])), d, Code.PROTOCOL_ERROR, "bad truncation range");
    }
  });

  it("R-O8 R-S1 R-C3: impossible values close: an unknown lifecycle state, a stdin ack or script progress beyond 2^53; good ones are stored by kind", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    expectClosed(r, r.event(c, "c1", 2, lifecycle(99 as L)), c, Code.SEQUENCE_VIOLATION, "lifecycle RUNNING -> 99 is not allowed");
    const s = new ServerRig();
    const d = s.connect();
    s.running(d, "c1", { ...argv("cat"), stdinOpen: true });
    s.control({ op: "stdin", requestId: "w", uuid: "c1", data: enc("x"), appendNewline: false });
    s.event(d, "c1", 2, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: 1n, closed: false, failure: "EPIPE" }) });
    expect(s.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "stdin_ack", writeSeq: 1, closed: false, failure: "EPIPE" });
    expectClosed(s, s.event(d, "c1", 3, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: 2n ** 60n }) }), d, Code.SEQUENCE_VIOLATION);
    const body = new Uint8Array(10);
    const u = new ServerRig();
    const e = u.connect();
    u.submit("a", "s1", { program: { case: "script", value: { sizeBytes: 10n, sha256: sha(body), interpreter: "/bin/sh" } } }, { script: body });
    u.accept(e, "s1");
    u.event(e, "s1", 1, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: 4n }) });
    expect(u.disk.durable.get("event")!.get("s1/000000000001")).toMatchObject({ kind: "script_upload", receivedBytes: 4, complete: false });
    expectClosed(
      u,
      u.event(e, "s1", 2, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: 2n ** 60n }) }),
      e,
      Code.SEQUENCE_VIOLATION,
    );
  });
});
