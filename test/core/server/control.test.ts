import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ControlErrorSchema, ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { serverInvariants, type ControlRequest } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { touch } from "../../../core/server/active.js";
import { CONTROL_STDIN_WRITE_BYTES, MAX_CHUNK_BYTES, MAX_INCIDENTS_KEPT, MAX_PENDING_SIGNALS, MAX_REQUEST_IDS_PER_COMMAND } from "../../../core/limits.js";

import { T0, sha, type SpecInit, argv, enc, lifecycle, ServerRig } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

describe("submit", () => {
  it("R-D1: issue uuids must be 1-128 characters of [A-Za-z0-9._:-] starting with a letter or digit", () => {
    const r = new ServerRig();
    for (const bad of ["", "-lead", ".lead", "a b", "a/b", "x".repeat(129), "é"]) {
      expect(r.submit("a", bad), bad).toEqual({
        ok: false,
        error: { code: Code.VALIDATION, message: "issue uuid must be 1-128 characters of [A-Za-z0-9._:-]" },
      });
    }
    for (const good of ["a", "Z9._:-x", "x".repeat(128)]) expect(r.submit("a", good), good).toMatchObject({ ok: true, uuid: good, revision: 1 });
    expect(r.listCommands().length).toBe(3);
  });

  it("R-D1: a submit needs a client id and a program", () => {
    const r = new ServerRig();
    expect(r.submit("", "c1")).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "client id is required" } });
    expect(r.submit("a", "c2", {})).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "no program (argv, shell or script)" } });
    expect(r.listCommands().length).toBe(0);
  });

  it("R-C1: a script submit needs 1..16 MiB of bytes matching its descriptor", () => {
    const r = new ServerRig();
    const body = enc("echo hi\n");
    const desc = (size: number, digest: Uint8Array): SpecInit => ({
      program: { case: "script", value: { sizeBytes: BigInt(size), sha256: digest, interpreter: "/bin/sh" } },
    });
    expect(r.submit("a", "s0", desc(body.length, sha(body)))).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "script of 1..16777216 bytes required" },
    });
    expect(r.submit("a", "s1", desc(0, sha("")), { script: new Uint8Array(0) })).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(r.submit("a", "s2", desc(body.length + 1, sha(body)), { script: body })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "script descriptor does not match the script bytes" },
    });
    expect(r.submit("a", "s3", desc(body.length, sha("x")), { script: body })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "script descriptor does not match the script bytes" },
    });
    expect(r.submit("a", "s4", desc(body.length, sha(body)), { script: body })).toMatchObject({ ok: true });
    expect(r.disk.durable.get("script")?.get("s4")).toEqual({ data: body });
  });

  it("R-D1: without an explicit expiry a command expires 24 h after submission; at exactly its expiry (not before) an undispatched command expires", () => {
    const r = new ServerRig();
    r.submit("offline", "d");
    expect(r.command("d").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "z", argv(), { queueExpiry: 0 });
    expect(r.command("z").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "neg", argv(), { queueExpiry: -5 });
    expect(r.command("neg").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "e", argv(), { queueExpiry: T0 + 500 });
    expect(r.command("e").queueExpiry).toBe(T0 + 500);
    r.now = T0 + 499;
    r.step({ type: "tick" });
    expect(r.command("e").state).toBe("queued");
    r.now = T0 + 500;
    r.step({ type: "tick" });
    expect(r.command("e")).toMatchObject({ state: "expired", terminalSource: "server", reason: "queue expiry passed before dispatch" });
  });

  it("R-D2: a retried submit is answered like the original, only once durable; a different request under the same uuid is CONFLICT", () => {
    const r = new ServerRig();
    r.autoDurable = false;
    expect(r.submit("a", "c1")).toBeUndefined();
    expect(r.control({ op: "submit", requestId: "retry", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv()) })).toBeUndefined();
    r.flush();
    expect(r.replies.get("submit-c1")).toEqual({ ok: true, uuid: "c1", revision: 1 });
    expect(r.replies.get("retry")).toEqual({ ok: true, uuid: "c1", revision: 1 });
    r.autoDurable = true;
    r.control({ op: "signal", requestId: "sig", uuid: "c1", signal: SignalKind.USER1 }); // queued: refused, revision unchanged
    expect(r.control({ op: "submit", requestId: "retry2", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv()) })).toEqual({
      ok: true,
      uuid: "c1",
      revision: 1,
    });
    expect(r.control({ op: "submit", requestId: "other", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv("false")) })).toEqual({
      ok: false,
      error: { code: Code.CONFLICT, message: "issue uuid already used by a different request", issueUuid: "c1" },
    });
    expect(r.control({ op: "submit", requestId: "other2", uuid: "c1", clientId: "b", spec: create(ExecutionSpecSchema, argv()) })).toMatchObject({
      ok: false,
      error: { code: Code.CONFLICT },
    });
    expect(
      r.control({ op: "submit", requestId: "other3", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv()), queueExpiry: T0 + 5 }),
    ).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    expect(r.cmd("c1").requests).toEqual({ "submit-c1": 1 }); // internal: the refused ids are not remembered (no view lists request ids)
  });

  it("R-W2: a client may hold maxActivePerClient non-terminal commands; terminal ones and other clients' do not count", () => {
    const r = new ServerRig({ maxActivePerClient: 2 });
    expect(r.submit("a", "c1")).toMatchObject({ ok: true });
    expect(r.submit("a", "c2")).toMatchObject({ ok: true });
    expect(r.submit("b", "b1")).toMatchObject({ ok: true });
    expect(r.submit("a", "c3")).toEqual({ ok: false, error: { code: Code.CAPACITY, message: "client a has 2 active commands" } });
    r.control({ op: "signal", requestId: "k", uuid: "c1", signal: SignalKind.CANCEL });
    expect(r.submit("a", "c3")).toMatchObject({ ok: true });
  });
});

describe("stdin, signal, incident requests", () => {
  const stdin = (uuid: string, requestId: string, data: Uint8Array, appendNewline = false): ControlRequest => ({
    op: "stdin",
    requestId,
    uuid,
    data,
    appendNewline,
  });

  it("R-S1: stdin requests are refused with exact codes: unknown, terminal, not open, closed, too large, queue full", () => {
    const r = new ServerRig({ stdinQueue: 10 });
    expect(r.control(stdin("nope", "r0", enc("x")))).toEqual({ ok: false, error: { code: Code.NOT_FOUND, message: "no command nope", issueUuid: "nope" } });
    r.submit("off", "closed-spec");
    expect(r.control(stdin("closed-spec", "r1", enc("x")))).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: "the command was submitted without open stdin", issueUuid: "closed-spec" },
    });
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    expect(r.control(stdin("c1", "big", new Uint8Array(CONTROL_STDIN_WRITE_BYTES + 1)))).toMatchObject({
      ok: false,
      error: { code: Code.PAYLOAD_TOO_LARGE, message: `stdin writes are at most ${CONTROL_STDIN_WRITE_BYTES} bytes` },
    });
    expect(r.control(stdin("c1", "w1", new Uint8Array(6)))).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
    expect(r.control(stdin("c1", "w2", new Uint8Array(4)))).toEqual({ ok: true, uuid: "c1", writeSeq: 2 }); // exactly the queue bound
    expect(r.control(stdin("c1", "w3", new Uint8Array(1)))).toEqual({
      ok: false,
      error: { code: Code.CAPACITY, message: "stdin queue for this command is full; retry later", issueUuid: "c1" },
    });
    expect(r.control({ op: "close_stdin", requestId: "cl", uuid: "c1" })).toEqual({ ok: true, uuid: "c1", writeSeq: 3 });
    expect(r.control(stdin("c1", "w4", new Uint8Array(0)))).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: "stdin is already closed", issueUuid: "c1" },
    });
    expect(r.control({ op: "close_stdin", requestId: "cl2", uuid: "c1" })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "stdin is already closed" },
    });
    // The close took write_seq 3 and a second close is refused (above); internal: the bytes held for delivery
    expect(r.cmd("c1").stdin).toMatchObject({ nextSeq: 4, queuedBytes: 10, closeRequested: true });
    r.control({ op: "signal", requestId: "k", uuid: "c1", signal: SignalKind.KILL });
    expect(r.control(stdin("c1", "w5", enc("x")))).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: "command is already cancelled", issueUuid: "c1" },
    });
    // A retry of an answered request still gets its original answer, even now.
    expect(r.control(stdin("c1", "w1", enc("different")))).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
  });

  it("R-S1: a stdin request of exactly 64 KiB is accepted, and its answer waits for durability", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    expect(r.control(stdin("c1", "w1", new Uint8Array(MAX_CHUNK_BYTES)))).toBeUndefined();
    r.flush();
    expect(r.replies.get("w1")).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
    // internal: held for an agent that is away (nothing sent; no view lists queued writes)
    expect(r.cmd("c1").stdin.queue.map((o) => [o.seq, o.data.length, o.appendNewline, o.close, o.requestId])).toEqual([
      [1, MAX_CHUNK_BYTES, false, false, "w1"],
    ]);
  });

  it("R-S5: request ids are remembered per command up to the bound; the oldest is forgotten first", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    // internal throughout: the request-id memory, poked full as setup; its observable effect is the answer to a retried id
    const c = r.cmd("c1");
    // As if 1023 earlier writes had been answered and acknowledged: the memory (submit + writes) is full.
    for (let i = 1; i < MAX_REQUEST_IDS_PER_COMMAND; i++) c.requests[`w${i}`] = i;
    c.stdin.nextSeq = MAX_REQUEST_IDS_PER_COMMAND;
    c.stdin.ackedThrough = c.stdin.sentThrough = MAX_REQUEST_IDS_PER_COMMAND - 1;
    serverInvariants(r.st);
    expect(r.control(stdin("c1", "w1", new Uint8Array(0)))).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
    expect(r.control(stdin("c1", "new1", new Uint8Array(0)))).toEqual({ ok: true, uuid: "c1", writeSeq: MAX_REQUEST_IDS_PER_COMMAND });
    expect(Object.keys(c.requests)).toHaveLength(MAX_REQUEST_IDS_PER_COMMAND);
    expect(c.requests["submit-c1"]).toBeUndefined();
    expect(c.requests.w1).toBe(1);
    r.control(stdin("c1", "new2", new Uint8Array(0)));
    expect(c.requests.w1).toBeUndefined();
    expect(c.requests.w2).toBe(2);
    // A forgotten id is a new request.
    expect(r.control(stdin("c1", "w1", new Uint8Array(0)))).toEqual({ ok: true, uuid: "c1", writeSeq: MAX_REQUEST_IDS_PER_COMMAND + 2 });
  });

  it("R-S4 R-S5: signal requests are refused with exact codes; a retry returns the original revision", () => {
    const r = new ServerRig();
    expect(r.control({ op: "signal", requestId: "s0", uuid: "nope", signal: SignalKind.KILL })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no command nope", issueUuid: "nope" },
    });
    const c = r.connect();
    r.running(c, "c1");
    expect(r.control({ op: "signal", requestId: "s1", uuid: "c1", signal: SignalKind.UNSPECIFIED })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "unknown signal" },
    });
    expect(r.control({ op: "signal", requestId: "s2", uuid: "c1", signal: 42 as SignalKind })).toMatchObject({
      ok: false,
      error: { code: Code.VALIDATION, message: "unknown signal" },
    });
    expect(r.command("c1").revision).toBe(1);
    expect(r.control({ op: "signal", requestId: "s3", uuid: "c1", signal: SignalKind.USER2 })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    expect(r.control({ op: "signal", requestId: "s3", uuid: "c1", signal: SignalKind.KILL })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    expect(
      r.sent(r.log, c, "signalCommand").map((x) => (x.env.payload.value as { signal: SignalKind }).signal),
      "the retry sent nothing",
    ).toEqual([SignalKind.USER2]);
    expect(r.cmd("c1").signals.map((s) => [s.revision, s.signal, s.requestId])).toEqual([[2, SignalKind.USER2, "s3"]]); // internal: one pending request
    r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.control({ op: "signal", requestId: "s4", uuid: "c1", signal: SignalKind.KILL })).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: "command is already succeeded", issueUuid: "c1" },
    });
  });

  it("R-S4: a queued command refuses USER1/USER2 without using a revision, and any ending signal cancels it at the server", () => {
    for (const [kind, name] of [
      [SignalKind.CANCEL, "cancel"],
      [SignalKind.TERMINATE, "terminate"],
      [SignalKind.KILL, "kill"],
      [SignalKind.INTERRUPT, "interrupt"],
      [SignalKind.HANGUP, "hangup"],
      [SignalKind.QUIT, "quit"],
    ] as const) {
      const r = new ServerRig();
      r.submit("off", "q");
      expect(r.control({ op: "signal", requestId: "u", uuid: "q", signal: SignalKind.USER1 })).toEqual({
        ok: false,
        error: { code: Code.VALIDATION, message: "the command is not running yet", issueUuid: "q" },
      });
      expect(r.command("q").revision).toBe(1);
      expect(r.cmd("q").requests).toEqual({ "submit-q": 1 }); // internal: the refused id is not remembered
      expect(r.control({ op: "signal", requestId: "e", uuid: "q", signal: kind })).toEqual({ ok: true, uuid: "q", revision: 2 });
      expect(r.command("q")).toMatchObject({ state: "cancelled", terminalSource: "server", reason: `${name} before dispatch` });
      expect(r.cmd("q").signals).toEqual([]); // internal: nothing left pending
    }
  });

  it("R-S4: signal requests are bounded per command at exactly MAX_PENDING_SIGNALS", () => {
    const r = new ServerRig();
    r.submit("off", "c1");
    r.cmd("c1").state = L.DISPATCHED; // setup: as if sent to an agent that is now away
    touch(r.st, r.cmd("c1")); // (a write beside setState: the active index must hear of it)
    for (let i = 0; i < MAX_PENDING_SIGNALS; i++)
      expect(r.control({ op: "signal", requestId: `s${i}`, uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: true });
    expect(r.control({ op: "signal", requestId: "over", uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({
      ok: false,
      error: { code: Code.CAPACITY, message: `${MAX_PENDING_SIGNALS} signals already outstanding; retry once they are answered` },
    });
  });

  it("R-D5: incidents are acknowledged durably; an unknown id is NOT_FOUND", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.frame(c, {
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "m" }), closeSession: false },
    });
    expect(r.control({ op: "ack_incident", requestId: "x", incidentId: "inc-9" })).toEqual({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no incident inc-9" },
    });
    expect(r.control({ op: "ack_incident", requestId: "y", incidentId: "inc-1" })).toEqual({ ok: true });
    expect(r.incidents().find((i) => i.incidentId === "inc-1")!.acknowledged).toBe(true);
    expect(r.disk.durable.get("incident")!.get("inc-1")).toMatchObject({ acknowledged: true });
  });
  // The incident bounds (per client, in total, kept) are in bounds.test.ts.
});

// ====================================================================== dispatch
