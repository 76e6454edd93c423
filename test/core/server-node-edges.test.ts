// The server node reducer driven directly, with hand-made agent frames: every
// frame or control request the server refuses gets its exact error code and
// the exact close-or-not; registration, fencing, identity claims and
// authorizations at their time boundaries; heartbeat; acknowledgement
// coalescing; dispatch budgets, redelivery, stdin/signal/script pumping;
// event validation for every event kind; retention; incidents; request-id
// dedup; restart; and each invariant with a deliberately corrupted state.
import { createHash } from "node:crypto";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ClientHelloSchema,
  type AgentError,
  type CommandDispatch,
  type ReconcileRequest,
  ReconcileRequestSchema,
  ReconcileTargetSchema,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  ByteRangeSchema,
  CommandEventSchema,
  CommandLifecycle as L,
  ControlErrorSchema,
  EventRangeSchema,
  ExecutionSpecSchema,
  OutputIncompleteSchema,
  OutputStream,
  OutputTruncationSchema,
  ProtocolRangeSchema,
  ProtocolVersionSchema,
  ScriptUploadStatusSchema,
  SignalKind,
  SignalResultSchema,
  StdinAckSchema,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import {
  defaultServerConfig,
  restoreServer,
  serverInvariants,
  serverStep,
  type ControlRequest,
  type ServerEffect,
  type ServerLimits,
} from "../../core/index.js";
import { Code, InvariantViolation } from "../../core/errors.js";
import { encodeEnvelope, type Fence, type Payload } from "../../core/codec/frame-codec.js";
import { rangeToWire, SUPPORTED_PROTOCOL } from "../../core/codec/version.js";
import { nextFloat } from "../../core/rng.js";
import { MAX_CHUNK_BYTES, MAX_ENVELOPE_BYTES, MAX_INCIDENTS_KEPT, MAX_SCRIPT_BYTES, MAX_PENDING_SIGNALS, MAX_RECONCILE_TARGETS, MAX_REQUEST_IDS_PER_COMMAND, MAX_SERVER_CONNECTIONS, SERVER_RECENT_DIGESTS } from "../../core/limits.js";
import { testPorts } from "../support/ports.js";

import { T0, sha, type SpecInit, type StateInit, type EventInit, argv, of, enc, lifecycle, output, ServerRig, expectClosed, expectRefused } from "../support/server-rig.js";

describe("connections", () => {
  it("R-W1: a connection number opened twice is a programming error", () => {
    const r = new ServerRig();
    r.open();
    expect(() => serverStep(r.st, { type: "conn_open", conn: 1 }, T0, { ports: testPorts })).toThrow(/connection 1 opened twice/);
  });

  it("R-W1: the server holds at most MAX_SERVER_CONNECTIONS; one more is refused before it is tracked", () => {
    const r = new ServerRig();
    const fill = (n: number) => {
      for (let i = 0; i < n; i++) r.st.conns.set(1_000_000 + i, { conn: 1_000_000 + i, phase: "hello", clientId: "", instanceId: "", sessionId: "", generation: 0, version: null, hb: { lastInbound: T0, pinged: false }, ingressPending: 0, inflight: 0, openedAt: T0, snapshotReceived: false });
    };
    fill(MAX_SERVER_CONNECTIONS - 1);
    r.step({ type: "conn_open", conn: 1 });
    expect(r.st.conns.has(1)).toBe(true);
    const out = r.step({ type: "conn_open", conn: 2 });
    expect(of(out, "close")).toEqual([{ type: "close", conn: 2, reason: `CODE_CAPACITY: ${MAX_SERVER_CONNECTIONS} connections open` }]);
    expect(r.st.conns.has(2)).toBe(false);
    expect(r.st.conns.size).toBe(MAX_SERVER_CONNECTIONS);
  });

  it("R-W5: a full ingress queue closes the connection without an error frame; unknown connections are ignored", () => {
    const r = new ServerRig();
    const c = r.connect();
    expect(of(r.step({ type: "ingress_full", conn: 99 }), "close")).toEqual([]);
    const out = r.step({ type: "ingress_full", conn: c });
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "CAPACITY: ingress queue full" }]);
    expect(r.sent(out)).toEqual([]);
    expect(r.st.clients.get("a")!.conn).toBe(0);
  });

  it("R-H1: activity moves only that connection's heartbeat; frames for unknown connections change nothing", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now += 4_000;
    r.step({ type: "activity", conn: 77 });
    r.step({ type: "activity", conn: c });
    expect(r.st.conns.get(c)!.hb.lastInbound).toBe(T0 + 4_000);
    const out = r.step({ type: "frame", conn: 77, data: new Uint8Array([1, 2, 3]) });
    expect(out.filter((e) => e.type !== "wake")).toEqual([]);
  });

  it("R-H1 R-H2: the server pings at exactly 10 s of silence, once, and closes at exactly 30 s without an error frame", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 9_999;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: c }]);
    r.now = T0 + 20_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 29_999;
    expect(r.st.conns.has(c)).toBe(true);
    r.now = T0 + 30_000;
    const out = r.step({ type: "tick" });
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "UNSPECIFIED: heartbeat: no inbound activity for 30 s" }]);
    expect(r.sent(out)).toEqual([]);
    expect(r.st.conns.has(c)).toBe(false);
  });

  it("R-H1: the wake is the earliest of heartbeats, authorization expiries and command deadlines; nothing to wait for, no wake", () => {
    const r = new ServerRig();
    expect(of(r.step({ type: "tick" }), "wake")).toEqual([]);
    const c = r.connect();
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "x" });
    r.st.clients.get("a")!.authorization!.expiresAt = T0 + 3_000;
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 3_000);
    r.submit("offline", "q", argv(), { queueExpiry: T0 + 1_000 });
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 1_000);
    void c;
  });
});

describe("frames before and around registration", () => {
  it("R-T1 R-T2 R-W10: a text frame, garbage or an oversize frame gets its code and a close, before or after registration", () => {
    const r = new ServerRig();
    const c1 = r.open();
    expectClosed(r, r.step({ type: "frame", conn: c1, data: new Uint8Array([8, 1]), binary: false }), c1, Code.PROTOCOL_ERROR, "text frames are not part of the protocol");
    const c2 = r.open();
    expectClosed(r, r.step({ type: "frame", conn: c2, data: new Uint8Array(1024 * 1024 + 1) }), c2, Code.PAYLOAD_TOO_LARGE);
    const c3 = r.connect();
    expectClosed(r, r.step({ type: "frame", conn: c3, data: new Uint8Array([0xff, 0xff]) }), c3, Code.PROTOCOL_ERROR);
  });

  it("R-F2: anything but a ClientHello first is PROTOCOL_ERROR; anything before the welcome left too", () => {
    const r = new ServerRig();
    const c = r.open();
    expectClosed(r, r.frame(c, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }, null), c, Code.PROTOCOL_ERROR, "eventAck before ClientHello");
    r.autoDurable = false;
    const w = r.open();
    r.hello(w);
    expect(r.st.conns.get(w)!.phase).toBe("welcoming");
    expect(r.sent(r.log, w, "serverWelcome")).toEqual([]);
    expectClosed(r, r.hello(w), w, Code.PROTOCOL_ERROR, "clientHello before ServerWelcome");
  });

  it("R-F2: client and instance ids must be 1-128 printable ASCII characters", () => {
    const bad: Array<[string, string, string]> = [
      ["", "i", "client_id must be 1-128 printable ASCII characters"],
      ["c".repeat(129), "i", "client_id must be 1-128 printable ASCII characters"],
      ["a b", "i", "client_id must be 1-128 printable ASCII characters"],
      ["é", "i", "client_id must be 1-128 printable ASCII characters"],
      ["a", "", "client_instance_id must be 1-128 printable ASCII characters"],
      ["a", "i".repeat(129), "client_instance_id must be 1-128 printable ASCII characters"],
      ["a", "i\n", "client_instance_id must be 1-128 printable ASCII characters"],
    ];
    for (const [client, inst, msg] of bad) {
      const r = new ServerRig();
      const c = r.open();
      expectClosed(r, r.hello(c, client, inst), c, Code.VALIDATION, msg);
      expect(r.st.clients.size).toBe(0);
    }
    const r = new ServerRig();
    const c = r.open();
    r.hello(c, "c".repeat(128), "i".repeat(128));
    expect(r.st.conns.get(c)!.phase).toBe("reconciling");
  });

  it("R-T4: a missing or inverted protocol range, or one without overlap, is INCOMPATIBLE_VERSION", () => {
    const v = (major: number, minor: number) => create(ProtocolVersionSchema, { major, minor });
    const cases: Array<[MessageInitShape<typeof ClientHelloSchema>["supportedProtocol"] | undefined, string]> = [
      [undefined, "protocol range missing"],
      [create(ProtocolRangeSchema, { min: v(1, 0) }), "protocol range missing"],
      [create(ProtocolRangeSchema, { min: v(1, 2), max: v(1, 0) }), "protocol range min > max"],
      [create(ProtocolRangeSchema, { min: v(2, 0), max: v(2, 5) }), "no shared protocol version: ours 1.0-1.0, theirs 2.0-2.5"],
    ];
    for (const [range, msg] of cases) {
      const r = new ServerRig();
      const c = r.open();
      const hello = create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i", ...(range ? { supportedProtocol: range } : {}) });
      expectClosed(r, r.frame(c, { case: "clientHello", value: hello }, null), c, Code.INCOMPATIBLE_VERSION, msg);
    }
  });

  it("R-F2 R-D6: the welcome selects the version and a fresh session; the request names exactly this client's non-terminal commands, in-flight first, then queued", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.connect("b");
    r.running(a, "run");
    r.submit("a", "disp");
    r.submit("a", "acc");
    r.accept(a, "acc");
    r.submit("a", "done");
    r.accept(a, "done");
    r.event(a, "done", 1, lifecycle(L.REJECTED));
    r.submit("b", "other");
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    r.submit("a", "queued");
    r.event(a, "run", 2, lifecycle(L.RUNNING)); // ignored: connection gone
    const c = r.open();
    const out = r.hello(c, "a", "inst-a", { maxRunningCommands: 3, maxQueuedCommands: 4 });
    const welcome = r.sent(out, c, "serverWelcome");
    expect(welcome).toHaveLength(1);
    expect(welcome[0]!.lane).toBe("priority");
    expect(welcome[0]!.env.sessionGeneration).toBe(2n);
    expect(welcome[0]!.env.sessionId).toMatch(/^[0-9a-f]{32}$/);
    expect(welcome[0]!.env.sessionId).not.toBe(r.sent(r.log, a, "serverWelcome")[0]!.env.sessionId);
    expect(welcome[0]!.env.payload.value).toMatchObject({ selectedProtocol: { major: 1, minor: 0 }, serverTime: expect.anything() });
    const req = r.sent(out, c, "reconcileRequest")[0]!;
    expect(req.lane).toBe("data");
    const targets = (req.env.payload.value as ReconcileRequest).targets;
    expect(targets.map((t) => [t.issueUuid, Number(t.lastServerEventSeq), Number(t.commandRevision), Buffer.from(t.immutableRequestSha256).toString("hex")])).toEqual(
      ["run", "disp", "acc", "queued"].map((u) => [u, r.cmd(u).storedThrough, r.cmd(u).revision, r.cmd(u).hash]),
    );
    expect(r.cmd("run").storedThrough).toBe(1);
    expect(r.st.clients.get("a")!.capacity).toEqual({ running: 0, queued: 0, maxRunning: 3, maxQueued: 4 });
    expect(r.st.clients.get("a")!.lastSeen).toBe(T0);
  });

  it("R-D8: a welcome or reconcile result whose connection went away before the persist was durable is not sent", () => {
    const r = new ServerRig();
    r.autoDurable = false;
    const c = r.open();
    r.hello(c);
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    expect(r.sent(r.flush())).toEqual([]);
    const d = r.open();
    r.hello(d);
    r.flush();
    expect(r.st.conns.get(d)!.phase).toBe("reconciling");
    r.snapshot(d);
    r.step({ type: "conn_closed", conn: d, reason: "gone" });
    expect(r.sent(r.flush(), d, "reconcileResult")).toEqual([]);
  });

  it("R-F7: after the welcome every envelope must carry exactly the session id and generation", () => {
    for (const f of [(x: Fence) => ({ ...x, generation: x.generation + 1 }), (x: Fence) => ({ ...x, generation: x.generation - 1 }), (x: Fence) => ({ ...x, sessionId: "forged" }), () => null]) {
      const r = new ServerRig();
      const c = r.connect();
      const fence = f(r.fenceOf(c)!);
      expectClosed(r, r.frame(c, { case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 1, queuedCommands: 0, maxRunningCommands: 1, maxQueuedCommands: 1 } }, fence), c, Code.STALE_GENERATION, `envelope fenced to generation ${fence?.generation ?? 0}, current 1`);
    }
  });

  it("R-D7: a second snapshot on one session, a second hello or a server-only payload is PROTOCOL_ERROR", () => {
    const r = new ServerRig();
    const c = r.connect();
    expectClosed(r, r.snapshot(c), c, Code.PROTOCOL_ERROR, "second ReconcileSnapshot on one session");
    const h = new ServerRig();
    const d = h.connect();
    expectClosed(h, h.frame(d, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "inst-a" }) }), d, Code.PROTOCOL_ERROR, "unexpected clientHello from agent");
    const w = new ServerRig();
    const e = w.connect();
    expectClosed(w, w.frame(e, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }), e, Code.PROTOCOL_ERROR, "unexpected eventAck from agent");
  });

  it("R-W2: the agent's capacity report replaces the server's view, with limits capped at 65536", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.frame(c, { case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 2, queuedCommands: 5, maxRunningCommands: 70_000, maxQueuedCommands: 65_536 } });
    expect(r.st.clients.get("a")!.capacity).toEqual({ running: 2, queued: 5, maxRunning: 65_536, maxQueued: 65_536 });
    r.frame(c, { case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 65_535, maxQueuedCommands: 3 } });
    expect(r.st.clients.get("a")!.capacity).toEqual({ running: 0, queued: 0, maxRunning: 65_535, maxQueued: 3 });
  });

  it("R-D13 R-W10: an agent error opens a store incident or is traced; closeSession ends the session without an answer", () => {
    const r = new ServerRig();
    const c = r.connect();
    const err = (code: Code, message: string, closeSession: boolean): Payload => ({ case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code, message }), closeSession } });
    const store = r.frame(c, err(Code.STORE_INCIDENT, "journal crc", false));
    expect([...r.st.incidents.values()]).toEqual([{ id: "inc-1", clientId: "a", uuid: "", kind: "agent_store_incident", detail: "journal crc", at: T0, acknowledged: false }]);
    expect(r.disk.durable.get("incident")?.get("inc-1")).toMatchObject({ kind: "agent_store_incident" });
    expect(r.sent(store)).toEqual([]);
    const other = r.frame(c, err(Code.NOT_FOUND, "what", false));
    expect(of(other, "trace").filter((t) => t.event === "agent_error").map((t) => t.detail)).toEqual([{ conn: c, code: "NOT_FOUND", message: "what" }]);
    expect(r.st.incidents.size).toBe(1);
    expect(r.st.conns.has(c)).toBe(true);
    const bye = r.frame(c, err(Code.PROTOCOL_ERROR, "bye", true));
    expect(of(bye, "close")).toEqual([{ type: "close", conn: c, reason: "UNSPECIFIED: agent closed the session" }]);
    expect(r.sent(bye)).toEqual([]);
    expect(r.st.conns.has(c)).toBe(false);
  });
});

describe("identity: fencing, claims and authorizations", () => {
  it("R-F3: the same instance registering again fences the old session with STALE_GENERATION and takes the next generation", () => {
    const r = new ServerRig();
    const old = r.connect("a", "i1");
    const c = r.open();
    const out = r.hello(c, "a", "i1");
    expectClosed(r, out, old, Code.STALE_GENERATION, "fenced by a newer registration of this client");
    expect(r.st.clients.get("a")).toMatchObject({ generation: 2, conn: c, instanceId: "i1" });
    expect((r.disk.durable.get("client")!.get("a") as { generation: number; conn: number }).generation).toBe(2);
    expect((r.disk.durable.get("client")!.get("a") as { conn: number }).conn).toBe(0);
  });

  it("R-F4: another instance while a session is live is IDENTITY_CONFLICT and becomes the pending claim; repeated attempts are counted", () => {
    const r = new ServerRig();
    const a = r.connect("a", "i1");
    const c1 = r.open();
    expectClosed(r, r.hello(c1, "a", "i2"), c1, Code.IDENTITY_CONFLICT, "client id a is live under another instance; recorded as a pending claim");
    expect(r.st.clients.get("a")!.pendingClaim).toEqual({ instanceId: "i2", at: T0, attempts: 1 });
    r.now += 5;
    const c2 = r.open();
    r.hello(c2, "a", "i2");
    expect(r.st.clients.get("a")!.pendingClaim).toEqual({ instanceId: "i2", at: T0 + 5, attempts: 2 });
    const c3 = r.open();
    r.hello(c3, "a", "i3");
    expect(r.st.clients.get("a")!.pendingClaim).toEqual({ instanceId: "i3", at: T0 + 5, attempts: 1 });
    expect((r.disk.durable.get("client")!.get("a") as { pendingClaim: unknown }).pendingClaim).toEqual({ instanceId: "i3", at: T0 + 5, attempts: 1 });
    expect(r.st.clients.get("a")!).toMatchObject({ conn: a, generation: 1, instanceId: "i1" });
  });

  it("R-F6: with no live session another instance is accepted; a pending claim of that instance is cleared, another's is kept", () => {
    const r = new ServerRig();
    const a = r.connect("a", "i1");
    r.hello(r.open(), "a", "i2"); // claim by i2
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    expect(r.st.clients.get("a")!.conn).toBe(0);
    const c = r.connect("a", "i3");
    expect(r.st.clients.get("a")).toMatchObject({ conn: c, instanceId: "i3", generation: 2 });
    expect(r.st.clients.get("a")!.pendingClaim).toMatchObject({ instanceId: "i2" });
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    r.connect("a", "i2");
    expect(r.st.clients.get("a")!.pendingClaim).toBeNull();
  });

  it("R-F5: an authorization admits exactly that instance until 1 ms before its expiry, once", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    const a = r.connect("a", "i1");
    expect(r.control({ op: "authorize", requestId: "x", clientId: "nobody", instanceId: "i2" })).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND, message: "no client nobody has registered with this server" } });
    expect(r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" })).toEqual({ ok: true, instanceId: "i2", expiresAt: T0 + 1_000 });
    expect(r.st.clients.get("a")!.authorization).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
    expect((r.disk.durable.get("client")!.get("a") as { authorization: unknown }).authorization).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
    // A different instance does not use it.
    const x = r.open();
    expectClosed(r, r.hello(x, "a", "i9"), x, Code.IDENTITY_CONFLICT);
    expect(r.st.clients.get("a")!.authorization).not.toBeNull();
    r.now = T0 + 999;
    const b = r.open();
    const out = r.hello(b, "a", "i2");
    expect(of(out, "trace").some((t) => t.event === "authorization_consumed")).toBe(true);
    expect(r.st.conns.has(a)).toBe(false); // fenced
    expect(r.st.clients.get("a")).toMatchObject({ conn: b, instanceId: "i2", authorization: null });
    // one-shot: i1 is now refused (as the instance this takeover replaced)
    const back = r.open();
    expectClosed(r, r.hello(back, "a", "i1"), back, Code.REPLACED);
  });

  it("R-F5: at exactly its expiry an authorization no longer admits, and the tick clears it durably", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    r.connect("a", "i1");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    r.now = T0 + 1_000;
    const b = r.open();
    expectClosed(r, r.hello(b, "a", "i2"), b, Code.IDENTITY_CONFLICT);
    const t = new ServerRig({ authorizationTtlMs: 1_000 });
    t.connect("a", "i1");
    t.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    t.now = T0 + 999;
    t.step({ type: "tick" });
    expect(t.st.clients.get("a")!.authorization).not.toBeNull();
    t.now = T0 + 1_000;
    const out = t.step({ type: "tick" });
    expect(t.st.clients.get("a")!.authorization).toBeNull();
    expect(of(out, "persist").flatMap((p) => p.records).filter((x) => x.table === "client")).toEqual([expect.objectContaining({ key: "a", value: expect.objectContaining({ authorization: null }) })]);
  });

  it("R-F5 R-F6: the authorized instance's first accepted registration consumes the authorization even when no session was live", () => {
    const r = new ServerRig();
    const i = r.open();
    r.hello(i, "a", "I");
    r.snapshot(i);
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J"), j, Code.IDENTITY_CONFLICT);
    expect(r.st.clients.get("a")!.pendingClaim?.instanceId).toBe("J");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J" });
    // I goes away; J registers normally (R-F6: no live session) and is welcomed.
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    const j2 = r.open();
    const out = r.hello(j2, "a", "J");
    expect(r.sent(out, j2, "serverWelcome")).toHaveLength(1);
    expect(r.st.clients.get("a")!.authorization).toBeNull();
    expect(r.disk.durable.get("client")?.get("a")).toMatchObject({ authorization: null });
    r.snapshot(j2);
    r.step({ type: "conn_closed", conn: j2, reason: "gone" });
    // I comes back: J took over by an operator's authorization, so I is told it was replaced
    // (no pending claim); authorized again, I is accepted.
    const i1 = r.open();
    expectClosed(r, r.hello(i1, "a", "I"), i1, Code.REPLACED);
    expect(r.st.clients.get("a")!.pendingClaim).toBeNull();
    expect(r.control({ op: "authorize", requestId: "auth-i", clientId: "a", instanceId: "I", instanceNotYetSeen: false })).toMatchObject({ ok: true });
    const i2 = r.open();
    r.hello(i2, "a", "I");
    r.snapshot(i2);
    // J comes back: without a new authorization it is refused, and I keeps its session.
    const j3 = r.open();
    expectClosed(r, r.hello(j3, "a", "J"), j3, Code.REPLACED);
    expect(r.st.conns.get(i2)?.phase).toBe("ready");
    expect(r.st.clients.get("a")!.instanceId).toBe("I");
  });

  it("R-F5: an authorization for another instance survives a normal registration of this one", () => {
    const r = new ServerRig();
    const i = r.connect("a", "I");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J" });
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    r.connect("a", "I");
    expect(r.st.clients.get("a")!.authorization?.instanceId).toBe("J");
  });

  it("R-F5: a registration drops an expired authorization it did not use", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    const a = r.connect("a", "i1");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    r.now = T0 + 1_000; // expired, and no tick ran yet
    r.st.clients.get("a")!.authorization!.expiresAt = T0 + 1_000;
    const c = r.open();
    serverStep(r.st, { type: "frame", conn: c, data: encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i1", supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL) }) }) }, r.now, { ports: testPorts });
    expect(r.st.clients.get("a")!.authorization).toBeNull();
    const s = new ServerRig({ authorizationTtlMs: 1_000 });
    const b = s.connect("a", "i1");
    s.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    s.step({ type: "conn_closed", conn: b, reason: "x" });
    s.now = T0 + 999;
    const d = s.open();
    serverStep(s.st, { type: "frame", conn: d, data: encodeEnvelope(null, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i1", supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL) }) }) }, s.now, { ports: testPorts });
    expect(s.st.clients.get("a")!.authorization).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
  });
});

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
    expect(r.st.conns.get(c)!.ingressPending).toBeGreaterThan(0);
    const out = r.flush();
    const acks = r.sent(out, c, "eventAck").map((s) => s.env.payload.value as { issueUuid: string; throughEventSeq: bigint });
    expect(acks.map((a) => [a.issueUuid, a.throughEventSeq])).toEqual([
      ["c1", 3n],
      ["c2", 2n],
    ]);
    expect(r.st.conns.get(c)!.ingressPending).toBe(0);
    r.event(c, "c1", 4, output(OutputStream.STDOUT, 2, enc("c")));
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const late = r.flush();
    expect(r.sent(late)).toEqual([]);
    expect(r.cmd("c1").storedThrough).toBe(4);
  });
});

// ====================================================================== control requests

describe("submit", () => {
  it("R-D1: issue uuids must be 1-128 characters of [A-Za-z0-9._:-] starting with a letter or digit", () => {
    const r = new ServerRig();
    for (const bad of ["", "-lead", ".lead", "a b", "a/b", "x".repeat(129), "é"]) {
      expect(r.submit("a", bad), bad).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "issue uuid must be 1-128 characters of [A-Za-z0-9._:-]" } });
    }
    for (const good of ["a", "Z9._:-x", "x".repeat(128)]) expect(r.submit("a", good), good).toMatchObject({ ok: true, uuid: good, revision: 1 });
    expect(r.st.commands.size).toBe(3);
  });

  it("R-D1: a submit needs a client id and a program", () => {
    const r = new ServerRig();
    expect(r.submit("", "c1")).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "client id is required" } });
    expect(r.submit("a", "c2", {})).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "no program (argv, shell or script)" } });
    expect(r.st.commands.size).toBe(0);
  });

  it("R-C1: a script submit needs 1..16 MiB of bytes matching its descriptor", () => {
    const r = new ServerRig();
    const body = enc("echo hi\n");
    const desc = (size: number, digest: Uint8Array): SpecInit => ({ program: { case: "script", value: { sizeBytes: BigInt(size), sha256: digest, interpreter: "/bin/sh" } } });
    expect(r.submit("a", "s0", desc(body.length, sha(body)))).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "script of 1..16777216 bytes required" } });
    expect(r.submit("a", "s1", desc(0, sha("")), { script: new Uint8Array(0) })).toMatchObject({ ok: false, error: { code: Code.VALIDATION } });
    expect(r.submit("a", "s2", desc(body.length + 1, sha(body)), { script: body })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "script descriptor does not match the script bytes" } });
    expect(r.submit("a", "s3", desc(body.length, sha("x")), { script: body })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "script descriptor does not match the script bytes" } });
    expect(r.submit("a", "s4", desc(body.length, sha(body)), { script: body })).toMatchObject({ ok: true });
    expect(r.disk.durable.get("script")?.get("s4")).toEqual({ data: body });
  });

  it("R-D1: without an explicit expiry a command expires 24 h after submission; at exactly its expiry (not before) an undispatched command expires", () => {
    const r = new ServerRig();
    r.submit("offline", "d");
    expect(r.cmd("d").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "z", argv(), { queueExpiry: 0 });
    expect(r.cmd("z").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "neg", argv(), { queueExpiry: -5 });
    expect(r.cmd("neg").queueExpiry).toBe(T0 + 24 * 60 * 60_000);
    r.submit("offline", "e", argv(), { queueExpiry: T0 + 500 });
    expect(r.cmd("e").queueExpiry).toBe(T0 + 500);
    r.now = T0 + 499;
    r.step({ type: "tick" });
    expect(r.cmd("e").state).toBe(L.QUEUED);
    r.now = T0 + 500;
    r.step({ type: "tick" });
    expect(r.cmd("e")).toMatchObject({ state: L.EXPIRED, terminalSource: "server", reason: "queue expiry passed before dispatch" });
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
    expect(r.control({ op: "submit", requestId: "retry2", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv()) })).toEqual({ ok: true, uuid: "c1", revision: 1 });
    expect(r.control({ op: "submit", requestId: "other", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv("false")) })).toEqual({
      ok: false,
      error: { code: Code.CONFLICT, message: "issue uuid already used by a different request", issueUuid: "c1" },
    });
    expect(r.control({ op: "submit", requestId: "other2", uuid: "c1", clientId: "b", spec: create(ExecutionSpecSchema, argv()) })).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    expect(r.control({ op: "submit", requestId: "other3", uuid: "c1", clientId: "a", spec: create(ExecutionSpecSchema, argv()), queueExpiry: T0 + 5 })).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    expect(r.cmd("c1").requests).toEqual({ "submit-c1": 1 });
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
  const stdin = (uuid: string, requestId: string, data: Uint8Array, appendNewline = false): ControlRequest => ({ op: "stdin", requestId, uuid, data, appendNewline });

  it("R-S1: stdin requests are refused with exact codes: unknown, terminal, not open, closed, too large, queue full", () => {
    const r = new ServerRig({ stdinQueue: 10 });
    expect(r.control(stdin("nope", "r0", enc("x")))).toEqual({ ok: false, error: { code: Code.NOT_FOUND, message: "no command nope", issueUuid: "nope" } });
    r.submit("off", "closed-spec");
    expect(r.control(stdin("closed-spec", "r1", enc("x")))).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "the command was submitted without open stdin", issueUuid: "closed-spec" } });
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    expect(r.control(stdin("c1", "big", new Uint8Array(MAX_CHUNK_BYTES + 1)))).toMatchObject({ ok: false, error: { code: Code.PAYLOAD_TOO_LARGE, message: `stdin writes are at most ${MAX_CHUNK_BYTES} bytes` } });
    expect(r.control(stdin("c1", "w1", new Uint8Array(6)))).toEqual({ ok: true, uuid: "c1", writeSeq: 1 });
    expect(r.control(stdin("c1", "w2", new Uint8Array(4)))).toEqual({ ok: true, uuid: "c1", writeSeq: 2 }); // exactly the queue bound
    expect(r.control(stdin("c1", "w3", new Uint8Array(1)))).toEqual({ ok: false, error: { code: Code.CAPACITY, message: "stdin queue for this command is full; retry later", issueUuid: "c1" } });
    expect(r.control({ op: "close_stdin", requestId: "cl", uuid: "c1" })).toEqual({ ok: true, uuid: "c1", writeSeq: 3 });
    expect(r.control(stdin("c1", "w4", new Uint8Array(0)))).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "stdin is already closed", issueUuid: "c1" } });
    expect(r.control({ op: "close_stdin", requestId: "cl2", uuid: "c1" })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "stdin is already closed" } });
    expect(r.cmd("c1").stdin).toMatchObject({ nextSeq: 4, queuedBytes: 10, closeRequested: true });
    r.control({ op: "signal", requestId: "k", uuid: "c1", signal: SignalKind.KILL });
    expect(r.control(stdin("c1", "w5", enc("x")))).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "command is already cancelled", issueUuid: "c1" } });
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
    expect(r.cmd("c1").stdin.queue.map((o) => [o.seq, o.data.length, o.appendNewline, o.close, o.requestId])).toEqual([[1, MAX_CHUNK_BYTES, false, false, "w1"]]);
  });

  it("R-S5: request ids are remembered per command up to the bound; the oldest is forgotten first", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
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
    expect(c.requests["w1"]).toBe(1);
    r.control(stdin("c1", "new2", new Uint8Array(0)));
    expect(c.requests["w1"]).toBeUndefined();
    expect(c.requests["w2"]).toBe(2);
    // A forgotten id is a new request.
    expect(r.control(stdin("c1", "w1", new Uint8Array(0)))).toEqual({ ok: true, uuid: "c1", writeSeq: MAX_REQUEST_IDS_PER_COMMAND + 2 });
  });

  it("R-S4 R-S5: signal requests are refused with exact codes; a retry returns the original revision", () => {
    const r = new ServerRig();
    expect(r.control({ op: "signal", requestId: "s0", uuid: "nope", signal: SignalKind.KILL })).toEqual({ ok: false, error: { code: Code.NOT_FOUND, message: "no command nope", issueUuid: "nope" } });
    const c = r.connect();
    r.running(c, "c1");
    expect(r.control({ op: "signal", requestId: "s1", uuid: "c1", signal: SignalKind.UNSPECIFIED })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "unknown signal" } });
    expect(r.control({ op: "signal", requestId: "s2", uuid: "c1", signal: 42 as SignalKind })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "unknown signal" } });
    expect(r.cmd("c1").revision).toBe(1);
    expect(r.control({ op: "signal", requestId: "s3", uuid: "c1", signal: SignalKind.USER2 })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    expect(r.control({ op: "signal", requestId: "s3", uuid: "c1", signal: SignalKind.KILL })).toEqual({ ok: true, uuid: "c1", revision: 2 });
    expect(r.cmd("c1").signals.map((s) => [s.revision, s.signal, s.requestId])).toEqual([[2, SignalKind.USER2, "s3"]]);
    r.event(c, "c1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.control({ op: "signal", requestId: "s4", uuid: "c1", signal: SignalKind.KILL })).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "command is already succeeded", issueUuid: "c1" } });
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
      expect(r.control({ op: "signal", requestId: "u", uuid: "q", signal: SignalKind.USER1 })).toEqual({ ok: false, error: { code: Code.VALIDATION, message: "the command is not running yet", issueUuid: "q" } });
      expect(r.cmd("q").revision).toBe(1);
      expect(r.cmd("q").requests).toEqual({ "submit-q": 1 });
      expect(r.control({ op: "signal", requestId: "e", uuid: "q", signal: kind })).toEqual({ ok: true, uuid: "q", revision: 2 });
      expect(r.cmd("q")).toMatchObject({ state: L.CANCELLED, terminalSource: "server", reason: `${name} before dispatch`, signals: [] });
    }
  });

  it("R-S4: signal requests are bounded per command at exactly MAX_PENDING_SIGNALS", () => {
    const r = new ServerRig();
    r.submit("off", "c1");
    r.cmd("c1").state = L.DISPATCHED; // as if sent to an agent that is now away
    for (let i = 0; i < MAX_PENDING_SIGNALS; i++) expect(r.control({ op: "signal", requestId: `s${i}`, uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: true });
    expect(r.control({ op: "signal", requestId: "over", uuid: "c1", signal: SignalKind.USER1 })).toMatchObject({ ok: false, error: { code: Code.CAPACITY, message: `${MAX_PENDING_SIGNALS} signals already outstanding; retry once they are answered` } });
  });

  it("R-D5: incidents are acknowledged durably; an unknown id is NOT_FOUND", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.frame(c, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "m" }), closeSession: false } });
    expect(r.control({ op: "ack_incident", requestId: "x", incidentId: "inc-9" })).toEqual({ ok: false, error: { code: Code.NOT_FOUND, message: "no incident inc-9" } });
    expect(r.control({ op: "ack_incident", requestId: "y", incidentId: "inc-1" })).toEqual({ ok: true });
    expect(r.st.incidents.get("inc-1")!.acknowledged).toBe(true);
    expect(r.disk.durable.get("incident")!.get("inc-1")).toMatchObject({ acknowledged: true });
  });
  // The incident bounds (per client, in total, kept) are in bounds.test.ts.
});

// ====================================================================== dispatch

const dispatches = (r: ServerRig, effects: ServerEffect[], conn?: number) => r.sent(effects, conn, "commandDispatch").map((s) => s.env.payload.value as CommandDispatch);

describe("dispatch", () => {
  it("R-D1: the dispatch carries the command exactly: revision, target generation, times, spec and request hash", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 7;
    r.submit("a", "c1", argv("echo", "x"), { queueExpiry: T0 + 90_000 });
    const d = dispatches(r, r.log, c);
    expect(d).toHaveLength(1);
    expect(d[0]).toMatchObject({ issueUuid: "c1", commandRevision: 1n, targetSessionGeneration: 1n });
    expect(Number(d[0]!.issueTime!.seconds) * 1000 + d[0]!.issueTime!.nanos / 1e6).toBe(T0 + 7);
    expect(Number(d[0]!.queueExpiryTime!.seconds) * 1000 + d[0]!.queueExpiryTime!.nanos / 1e6).toBe(T0 + 90_000);
    expect(Buffer.from(d[0]!.immutableRequestSha256).toString("hex")).toBe(r.cmd("c1").hash);
    expect(d[0]!.spec?.program).toMatchObject({ case: "argv", value: { argv: ["echo", "x"] } });
    expect(r.cmd("c1")).toMatchObject({ state: L.DISPATCHED, everDispatched: true, dispatchedOn: 1, attempts: 1, dispatchedAt: T0 + 7 });
  });

  it("R-D3: the server sends no more dispatches than the agent's free capacity minus those unanswered", () => {
    const r = new ServerRig();
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    r.accept(c, "c1");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
    r.frame(c, { case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 1, queuedCommands: 1, maxRunningCommands: 1, maxQueuedCommands: 1 } });
    r.submit("a", "c4");
    r.accept(c, "c2");
    r.accept(c, "c3");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
  });

  it("R-D1: at most maxInflightDispatches dispatches are unanswered per session", () => {
    const r = new ServerRig({ maxInflightDispatches: 2 });
    const c = r.connect();
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    expect(r.st.conns.get(c)!.inflight).toBe(2);
    r.accept(c, "c2");
    expect(dispatches(r, r.log).map((d) => d.issueUuid)).toEqual(["c1", "c2", "c3"]);
  });

  it("R-D1: redelivery happens exactly at dispatchedAt + redeliveryMs with the same bytes, and the wake says so", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const c = r.connect();
    r.submit("a", "c1");
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 5_000);
    r.now = T0 + 4_999;
    expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
    r.now = T0 + 5_000;
    const out = r.step({ type: "tick" });
    expect(dispatches(r, out, c)).toHaveLength(1);
    const first = r.sent(r.log, c, "commandDispatch")[0]!;
    expect(Buffer.from(of(out, "send").find((s) => s.kind === "commandDispatch")!.data).equals(Buffer.from(of(r.log, "send").find((s) => s.kind === "commandDispatch")!.data))).toBe(true);
    void first;
    expect(r.cmd("c1")).toMatchObject({ attempts: 2, dispatchedAt: T0 + 5_000, state: L.DISPATCHED });
  });

  it("R-D1: no redelivery before the dispatched record is durable, however long the disk takes", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const c = r.connect();
    r.autoDurable = false;
    r.submit("a", "c1");
    r.now = T0 + 9_000; // well past the redelivery time, before the heartbeat ping
    const out = r.step({ type: "tick" });
    expect(dispatches(r, r.log)).toEqual([]);
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 10_000); // no redelivery deadline yet
    r.flush();
    expect(dispatches(r, r.log, c)).toHaveLength(1);
    expect(r.cmd("c1").dispatchedAt).toBe(T0 + 9_000);
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.now = T0 + 13_999;
    r.step({ type: "activity", conn: c });
    expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
    r.now = T0 + 14_000;
    expect(dispatches(r, r.step({ type: "tick" }), c)).toHaveLength(1);
  });

  it("R-D1: the first dispatch is released only on the same ready session it was recorded for", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.autoDurable = false;
    r.submit("a", "c1"); // created and dispatched in one batch, not yet durable
    expect(r.cmd("c1").state).toBe(L.DISPATCHED);
    expect(dispatches(r, r.log)).toEqual([]);
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    expect(dispatches(r, r.flush())).toEqual([]);
    // On a live session the same batch becoming durable releases it.
    r.autoDurable = true;
    const d = r.connect(); // c1 is requeued by reconciliation and dispatched again
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["c1"]);
    r.autoDurable = false;
    r.submit("a", "c2");
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["c1"]);
    expect(dispatches(r, r.flush(), d).map((x) => x.issueUuid)).toEqual(["c2"]);
  });

  it("R-D3: a transient rejection requeues with full jitter over min(60 s, 1 s * 2^attempts); nothing is dispatched before that time", () => {
    for (const code of [Code.CAPACITY, Code.STORE_INCIDENT, Code.STALE_GENERATION]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      const rng = { ...r.st.rng };
      const expected = T0 + Math.floor(nextFloat(rng) * 2_000);
      r.accept(c, "c1", false, code, "busy");
      expect(r.cmd("c1")).toMatchObject({ state: L.QUEUED, nextAttemptAt: expected });
      expect(r.st.conns.has(c)).toBe(true);
      if (expected > T0) {
        r.now = expected - 1;
        expect(dispatches(r, r.step({ type: "tick" }))).toEqual([]);
        expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(expected);
      }
      r.now = expected;
      expect(dispatches(r, r.step({ type: "tick" })).map((d) => d.issueUuid)).toEqual(["c1"]);
      // The second rejection uses attempt 2: ceiling 4 s.
      const rng2 = { ...r.st.rng };
      const t = r.now;
      r.accept(c, "c1", false, code, "busy");
      expect(r.cmd("c1").nextAttemptAt).toBe(t + Math.floor(nextFloat(rng2) * 4_000));
    }
  });

  it("R-D4: a permanent rejection ends rejected with the code in the reason; an unusable rejection code closes", () => {
    for (const code of [Code.VALIDATION, Code.UNSUPPORTED_PLATFORM, Code.CONFLICT]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      r.accept(c, "c1", false, code, "no");
      expect(r.cmd("c1")).toMatchObject({ state: L.REJECTED, terminalSource: "server", reason: `${Code[code]}: no` });
    }
    for (const code of [Code.PROTOCOL_ERROR, Code.NOT_FOUND, undefined]) {
      const r = new ServerRig();
      const c = r.connect();
      r.submit("a", "c1");
      const out = r.accept(c, "c1", false, code);
      expectClosed(r, out, c, Code.PROTOCOL_ERROR, `rejection with code ${code ?? 0} is not a dispatch answer`);
      expect(r.cmd("c1").state).toBe(L.DISPATCHED);
    }
  });

  it("R-D5: ALREADY_EXECUTED interrupts the command with an incident instead of rejecting it", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1", false, Code.ALREADY_EXECUTED, "tomb");
    expect(r.cmd("c1")).toMatchObject({ state: L.INTERRUPTED, terminalSource: "server", reason: "agent reports it already executed this request; outcome not retained" });
    expect([...r.st.incidents.values()]).toEqual([expect.objectContaining({ uuid: "c1", kind: "already_executed", detail: "tomb", clientId: "a" })]);
  });

  it("R-D2: CommandAccepted for an unknown or foreign command is NOT_FOUND (no close); a late one is ignored", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.submit("b", "theirs");
    const out = r.accept(a, "theirs");
    expectRefused(r, out, a, Code.NOT_FOUND);
    expect(r.errors(out, a)[0]!.error?.issueUuid).toBe("theirs");
    expectRefused(r, r.accept(a, "ghost"), a, Code.NOT_FOUND, "CommandAccepted for unknown command ghost");
    expect(r.cmd("theirs").state).toBe(L.DISPATCHED);
    r.accept(b, "theirs");
    r.event(b, "theirs", 1, lifecycle(L.RUNNING));
    const late = r.accept(b, "theirs", false, Code.CAPACITY);
    expect(late.filter((e) => e.type === "persist")).toEqual([]);
    expect(r.cmd("theirs").state).toBe(L.RUNNING);
  });
});

// ====================================================================== events

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
    expectClosed(x.r, x.r.event(x.c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ZZ"))), x.c, Code.SEQUENCE_VIOLATION, "event 2 of c1 resent with different bytes");
  });

  it("R-O3: a resend of an event received but not yet durable is not acknowledged early", () => {
    const { r, c } = ready();
    r.autoDurable = false;
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    const re = r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("ab")));
    expect(r.sent(re)).toEqual([]);
    expect(r.cmd("c1")).toMatchObject({ receivedThrough: 2, storedThrough: 1 });
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
    expect(of(diff, "trace").filter((t) => t.event === "event_ignored")).toHaveLength(1);
    const beyond = r.event(c, "c1", 3, output(OutputStream.STDOUT, 0, enc("x")));
    expect(r.sent(beyond)).toEqual([]);
    expect(r.st.conns.has(c)).toBe(true);
    expect(r.cmd("c1").state).toBe(L.SUCCEEDED);
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
    expect(r.st.conns.has(c)).toBe(true);
  });

  it("R-D1: an event for a command still dispatched means its acceptance was lost: the server adopts accepted", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.event(c, "c1", 1, lifecycle(L.RUNNING));
    expect(r.cmd("c1").state).toBe(L.RUNNING);
    const states = of(r.log, "trace").filter((t) => t.event === "state" && t.detail["uuid"] === "c1").map((t) => t.detail["state"]);
    expect(states).toEqual(["ACCEPTED", "RUNNING"]);
  });

  it("R-W7: the ingress watermark is inclusive: exactly at it the event is taken, one byte over closes without acknowledging", () => {
    const probe = ready();
    const ev = create(CommandEventSchema, { issueUuid: "c1", eventSeq: 2n, commandRevision: 1n, event: output(OutputStream.STDOUT, 0, enc("hello")) });
    const size = encodeEnvelope(probe.r.fenceOf(probe.c), { case: "commandEvent", value: ev }).length;
    const ok = ready({ ingressHigh: size });
    ok.r.autoDurable = false;
    ok.r.frame(ok.c, { case: "commandEvent", value: ev });
    expect(ok.r.cmd("c1").receivedThrough).toBe(2);
    expect(ok.r.st.conns.get(ok.c)!.ingressPending).toBe(size);
    const over = ready({ ingressHigh: size - 1 });
    const out = over.r.frame(over.c, { case: "commandEvent", value: ev });
    expectClosed(over.r, out, over.c, Code.CAPACITY, "server ingress high watermark");
    expect(over.r.cmd("c1").receivedThrough).toBe(1);
    expect(over.r.sent(out, over.c, "eventAck")).toEqual([]);
  });

  it("R-O4 R-T3: output chunks are checked: stream, declared size, compressed size, offset and compression", () => {
    const cases: Array<[EventInit, Code, string?]> = [
      [output(OutputStream.UNSPECIFIED, 0, enc("x")), Code.PROTOCOL_ERROR, "output chunk without a stream"],
      [output(OutputStream.STDOUT, 0, enc("x"), { originalSize: MAX_CHUNK_BYTES + 1 }), Code.PAYLOAD_TOO_LARGE, `output chunk declares ${MAX_CHUNK_BYTES + 1} bytes`],
      [output(OutputStream.STDOUT, 0, enc("x"), { zstdData: new Uint8Array(MAX_CHUNK_BYTES + 1025) }), Code.PAYLOAD_TOO_LARGE, "compressed chunk larger than any 64 KiB input needs"],
      [output(OutputStream.STDOUT, 1, enc("x")), Code.SEQUENCE_VIOLATION, "stdout offset 1, expected 0"],
      [output(OutputStream.STDERR, 0, enc("x"), { originalSize: 2 }), Code.BAD_COMPRESSION],
      [output(OutputStream.STDOUT, 0, enc("x"), { zstdData: new Uint8Array([1, 2, 3]) }), Code.BAD_COMPRESSION],
    ];
    for (const [ev, code, msg] of cases) {
      const { r, c } = ready();
      expectClosed(r, r.event(c, "c1", 2, ev), c, code, msg);
      expect(r.cmd("c1").receivedThrough).toBe(1);
    }
    // At the bounds: a 64 KiB chunk is fine.
    const { r, c } = ready();
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, new Uint8Array(MAX_CHUNK_BYTES)));
    expect(r.cmd("c1").streamNext).toEqual({ stdout: MAX_CHUNK_BYTES, stderr: 0 });
    const rec = r.disk.durable.get("event")!.get("c1/000000000002") as Record<string, unknown>;
    expect(rec).toMatchObject({ seq: 2, revision: 1, kind: "output", stream: "stdout", offset: 0, originalSize: MAX_CHUNK_BYTES });
  });

  it("R-O7: truncation markers must continue each stream exactly and carry no event range", () => {
    const range = (stream: OutputStream, offset: number, length: number) => create(ByteRangeSchema, { stream, offset: BigInt(offset), length: BigInt(length) });
    const trunc = (ranges: ReturnType<typeof range>[], withEvents = false): EventInit => ({
      case: "truncation",
      value: create(OutputTruncationSchema, { removedBytes: ranges, cause: 2, ...(withEvents ? { removedEvents: create(EventRangeSchema, { firstEventSeq: 1n, lastEventSeq: 2n }) } : {}) }),
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
      expect(r.cmd("c1").streamNext).toEqual({ stdout: 0, stderr: 0 });
    }
    const { r, c } = ready();
    r.event(c, "c1", 2, trunc([range(OutputStream.STDOUT, 0, 5), range(OutputStream.STDERR, 0, 2), range(OutputStream.STDOUT, 5, 3)]));
    expect(r.cmd("c1").streamNext).toEqual({ stdout: 8, stderr: 2 });
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 8, enc("k")));
    expect(r.cmd("c1").streamNext.stdout).toBe(9);
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
      expect(r.cmd("c1").state).toBe(L.RUNNING);
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
    expect(s.r.cmd("c1").receivedThrough).toBe(2);
    s.r.control({ op: "signal", requestId: "u", uuid: "c1", signal: SignalKind.USER1 });
    expect(s.r.cmd("c1").signals).toHaveLength(1);
    s.r.event(s.c, "c1", 3, lifecycle(L.FAILED, { exitCode: 2, signalName: "SIGSEGV", reason: "boom", error: create(ControlErrorSchema, { code: Code.VALIDATION, message: "m" }) }));
    expect(s.r.cmd("c1")).toMatchObject({ state: L.FAILED, exitCode: 2, signalName: "SIGSEGV", reason: "boom", terminalSource: "agent", signals: [] });
    expect(s.r.disk.durable.get("event")!.get("c1/000000000003")).toMatchObject({ kind: "lifecycle", state: L.FAILED, exitCode: 2, signalName: "SIGSEGV", reason: "boom", error: { code: Code.VALIDATION, message: "m" } });
    expect(s.r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "lifecycle", state: L.RUNNING, exitCode: null, error: null });
  });

  it("R-S1: a stdin ack for a write never assigned closes; acks advance and trim the queue, never go back", () => {
    const { r, c } = ready();
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("ab"), appendNewline: false });
    r.control({ op: "stdin", requestId: "w2", uuid: "c1", data: enc("cde"), appendNewline: false });
    expect(r.cmd("c1").stdin).toMatchObject({ nextSeq: 3, queuedBytes: 5 });
    const ack = (seq: number, ws: number) => r.event(c, "c1", seq, { case: "stdinAck", value: create(StdinAckSchema, { writeSeq: BigInt(ws) }) });
    ack(2, 2);
    expect(r.cmd("c1").stdin).toMatchObject({ ackedThrough: 2, queuedBytes: 0, queue: [] });
    ack(3, 1);
    expect(r.cmd("c1").stdin.ackedThrough).toBe(2);
    expectClosed(r, ack(4, 3), c, Code.SEQUENCE_VIOLATION, "stdin ack for write 3 never sent");
  });

  it("R-S4: a signal result settles the requests up to its revision", () => {
    const { r, c } = ready();
    for (const id of ["s1", "s2", "s3"]) r.control({ op: "signal", requestId: id, uuid: "c1", signal: SignalKind.USER1 });
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([2, 3, 4]);
    r.event(c, "c1", 2, { case: "signalResult", value: create(SignalResultSchema, { signal: SignalKind.USER1, delivered: true }) }, 3n);
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([4]);
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "signal_result", revision: 3, signal: SignalKind.USER1, delivered: true });
  });

  it("R-O8: an incomplete event is stored with its stream names; an event without a payload closes", () => {
    const { r, c } = ready();
    r.event(c, "c1", 2, { case: "incomplete", value: create(OutputIncompleteSchema, { streams: [OutputStream.STDERR, OutputStream.STDOUT], reason: "pipe" }) });
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "incomplete", streams: ["stderr", "stdout"], reason: "pipe" });
    expectClosed(r, r.event(c, "c1", 3, { case: undefined }), c, Code.PROTOCOL_ERROR, "command event without a recognized payload");
  });

  it("R-O2: only the most recent SERVER_RECENT_DIGESTS event digests are kept", () => {
    const { r, c } = ready();
    const cmd = r.cmd("c1");
    // As if events 2..SERVER_RECENT_DIGESTS+1 had been stored: the digest memory is full.
    cmd.digests = {};
    for (let s = 2; s <= SERVER_RECENT_DIGESTS + 1; s++) cmd.digests[s] = s;
    cmd.receivedThrough = cmd.storedThrough = SERVER_RECENT_DIGESTS + 1;
    r.event(c, "c1", SERVER_RECENT_DIGESTS + 2, output(OutputStream.STDOUT, 0, enc("x")));
    const keys = Object.keys(cmd.digests).map(Number).sort((a, b) => a - b);
    expect(keys[0]).toBe(3);
    expect(keys.at(-1)).toBe(SERVER_RECENT_DIGESTS + 2);
    expect(keys).toHaveLength(SERVER_RECENT_DIGESTS);
    // A forgotten seq can no longer be checked, so a resend is simply acknowledged ...
    const out = r.event(c, "c1", 2, lifecycle(L.FAILED));
    expect(r.st.conns.has(c)).toBe(true);
    expect(r.sent(out, c, "eventAck").map((s) => (s.env.payload.value as { throughEventSeq: bigint }).throughEventSeq)).toEqual([BigInt(SERVER_RECENT_DIGESTS + 2)]);
    // ... while one still remembered must match.
    expectClosed(r, r.event(c, "c1", 3, lifecycle(L.FAILED)), c, Code.SEQUENCE_VIOLATION, "event 3 of c1 resent with different bytes");
  });
});

// ====================================================================== scripts, stdin and signal pumping

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
    r.snapshot(d, [{ issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("c1").hash, "hex") }]);
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
    expect(r.sent(r.log, c, "signalCommand").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 2n, signal: SignalKind.USER1 })]);
    r.autoDurable = true;
    r.step({ type: "tick" });
    expect(r.sent(r.log, c, "signalCommand")).toHaveLength(1);
    r.control({ op: "signal", requestId: "s2", uuid: "c1", signal: SignalKind.USER2 });
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    // The agent already applied revision 2: only revision 3 is sent again.
    r.snapshot(d, [{ issueUuid: "c1", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 2n, immutableRequestSha256: Buffer.from(r.cmd("c1").hash, "hex") }]);
    expect(r.cmd("c1").signals.map((s) => s.revision)).toEqual([3]);
    expect(r.sent(r.log, d, "signalCommand").map((s) => Number((s.env.payload.value as { commandRevision: bigint }).commandRevision))).toEqual([3]);
  });

  it("R-C3: script chunks stay within the window, the commit goes once per session after every byte is acknowledged", () => {
    const body = new Uint8Array(150 * 1024).map((_, i) => i % 256);
    const r = new ServerRig({ scriptWindow: 128 * 1024 }); // exactly two chunks
    const c = r.connect();
    r.submit("a", "s1", { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } }, { script: body });
    r.accept(c, "s1");
    const chunks = () => r.sent(r.log, c, "scriptChunk").map((s) => [Number((s.env.payload.value as { offset: bigint }).offset), (s.env.payload.value as { data: Uint8Array }).data.length]);
    expect(chunks()).toEqual([
      [0, 65536],
      [65536, 65536],
    ]);
    const chunk0 = r.sent(r.log, c, "scriptChunk")[0]!.env.payload.value as { sha256: Uint8Array; data: Uint8Array };
    expect(Buffer.from(chunk0.sha256).equals(Buffer.from(sha(chunk0.data)))).toBe(true);
    const up = (seq: number, got: number, complete = false) => r.event(c, "s1", seq, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: BigInt(got), complete }) });
    up(1, 65536);
    expect(chunks().at(-1)).toEqual([131072, 150 * 1024 - 131072]);
    expect(r.sent(r.log, c, "scriptCommit")).toEqual([]);
    up(2, 131072);
    up(3, 150 * 1024);
    expect(r.sent(r.log, c, "scriptCommit").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ issueUuid: "s1", sizeBytes: BigInt(body.length) })]);
    r.step({ type: "tick" });
    expect(r.sent(r.log, c, "scriptCommit")).toHaveLength(1);
    up(4, 150 * 1024, true);
    expect(r.cmd("s1")).toMatchObject({ scriptCommitted: true, script: null, scriptAcked: 150 * 1024 });
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
    const up = (x: { r: ServerRig; c: number }, seq: number, got: bigint, uuid = "s1") => x.r.event(x.c, uuid, seq, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: got }) });
    const a = mk();
    up(a, 1, 100n);
    expect(a.r.cmd("s1").scriptAcked).toBe(100);
    const b = mk();
    expectClosed(b.r, up(b, 1, 101n), b.c, Code.SEQUENCE_VIOLATION, "script progress 101 impossible");
    const d = mk();
    up(d, 1, 50n);
    expectClosed(d.r, up(d, 2, 49n), d.c, Code.SEQUENCE_VIOLATION);
    const e = mk();
    up(e, 1, 50n);
    up(e, 2, 50n);
    expect(e.r.cmd("s1").scriptAcked).toBe(50);
    const f = mk();
    f.r.running(f.c, "plain");
    expectClosed(f.r, up(f, 2, 0n, "plain"), f.c, Code.SEQUENCE_VIOLATION);
  });
});

// ====================================================================== reconcile

describe("command times", () => {
  it("started and ended times come from the agent's RUNNING and terminal events, reach readers once durable, and survive a restart", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.submit("a", "c");
    r.accept(a, "c");
    const started = T0 + 5_000;
    const ended = T0 + 9_250;
    r.event(a, "c", 1, lifecycle(L.RUNNING), 1n);
    expect(r.cmd("c").startedTime).toBe(T0); // no event time: the server's wall clock
    r.autoDurable = false;
    const ev = (seq: number, state: L, t: number, extra = {}) =>
      r.frame(a, { case: "commandEvent", value: create(CommandEventSchema, { issueUuid: "c", eventSeq: BigInt(seq), commandRevision: 1n, time: timestampFromMs(t), event: lifecycle(state, extra) }) });
    ev(2, L.SUCCEEDED, ended, { exitCode: 0 });
    expect(r.cmd("c")).toMatchObject({ startedTime: T0, endedTime: ended });
    expect(r.cmd("c").committed.endedTime).toBe(0); // not durable yet: readers do not see it
    r.flush();
    expect(r.cmd("c").committed).toMatchObject({ startedTime: T0, endedTime: ended });
    // A second command with an event time on RUNNING.
    r.autoDurable = true;
    r.submit("a", "d");
    r.accept(a, "d");
    r.frame(a, { case: "commandEvent", value: create(CommandEventSchema, { issueUuid: "d", eventSeq: 1n, commandRevision: 1n, time: timestampFromMs(started), event: lifecycle(L.RUNNING) }) });
    expect(r.cmd("d").committed).toMatchObject({ startedTime: started, endedTime: 0 });
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    expect(back.commands.get("c")!.committed).toMatchObject({ startedTime: T0, endedTime: ended });
    expect(back.commands.get("d")!.committed).toMatchObject({ startedTime: started, endedTime: 0 });
  });

  it("a command the server ends itself gets the server's wall time as its end, and no start", () => {
    const r = new ServerRig();
    r.step({ type: "conn_closed", conn: r.connect("a"), reason: "offline" });
    r.submit("a", "q");
    r.now = T0 + 1000;
    r.control({ op: "signal", requestId: "x", uuid: "q", signal: SignalKind.CANCEL });
    expect(r.cmd("q").state).toBe(L.CANCELLED);
    expect(r.cmd("q").committed).toMatchObject({ startedTime: 0, endedTime: T0 + 1000 });
  });
});

describe("reconciliation at the server", () => {
  it("R-D6: a request names at most its target bound, in-flight commands first, then queued oldest first; the rest wait for a normal dispatch", () => {
    const n = 6;
    for (const total of [n, n + 1]) {
      const r = new ServerRig({ reconcileTargets: n });
      const a = r.connect("a");
      r.running(a, "run");
      r.step({ type: "conn_closed", conn: a, reason: "x" });
      const queued = Array.from({ length: total - 1 }, (_, k) => `q${k}`);
      for (const u of queued) r.submit("a", u);
      const c = r.open();
      const req = r.sent(r.hello(c, "a"), c, "reconcileRequest")[0]!;
      const names = (req.env.payload.value as ReconcileRequest).targets.map((t) => t.issueUuid);
      expect(names).toEqual(["run", ...queued].slice(0, n));
      // Listed or not, a queued command the agent does not hold is dispatched after the result.
      const out = r.snapshot(c, [{ issueUuid: "run", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("run").hash, "hex") }]);
      expect(r.cmd("run").state).toBe(L.RUNNING);
      expect(r.sent(out, c, "commandDispatch").map((d) => (d.env.payload.value as CommandDispatch).issueUuid)).toEqual(queued.slice(0, 7)); // maxRunning + maxQueued - 1 running
    }
  });

  it("R-D6 R-T2: MAX_RECONCILE_TARGETS targets of the largest kind fit one envelope", () => {
    const big = Array.from({ length: MAX_RECONCILE_TARGETS }, (_, k) =>
      create(ReconcileTargetSchema, { issueUuid: `${"f".repeat(28)}${String(k).padStart(8, "0")}`, lastServerEventSeq: 2n ** 53n - 1n, commandRevision: 2n ** 53n - 1n, immutableRequestSha256: new Uint8Array(32).fill(255) }),
    );
    const data = encodeEnvelope({ sessionId: "f".repeat(32), generation: 2 ** 53 - 1 }, { case: "reconcileRequest", value: create(ReconcileRequestSchema, { targets: big }) });
    expect(data.length).toBeLessThan(MAX_ENVELOPE_BYTES);
  });

  const state = (r: ServerRig, uuid: string, lifecycleState: L, seq: number, over: Partial<StateInit> = {}) => ({
    issueUuid: uuid,
    lifecycle: lifecycleState,
    lastClientEventSeq: BigInt(seq),
    commandRevision: 1n,
    immutableRequestSha256: Buffer.from(r.st.commands.get(uuid)?.hash ?? "00".repeat(32), "hex"),
    ...over,
  });

  function offlineWith(setup: (r: ServerRig, c: number) => void): { r: ServerRig; d: number } {
    const r = new ServerRig();
    const c = r.connect();
    setup(r, c);
    r.step({ type: "conn_closed", conn: c, reason: "x" });
    const d = r.open();
    r.hello(d);
    return { r, d };
  }

  it("R-D9: requested commands absent from the snapshot: dispatched ones requeue (dispatched again), accepted ones are interrupted with an incident", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "disp");
      r.submit("a", "acc");
      r.accept(c, "acc");
    });
    r.cmd("disp").nextAttemptAt = T0 + 99_999;
    r.snapshot(d, []);
    expect(r.cmd("acc")).toMatchObject({ state: L.INTERRUPTED, terminalSource: "server", reason: "agent lost an accepted command" });
    expect([...r.st.incidents.values()].map((i) => [i.uuid, i.kind])).toEqual([["acc", "reconcile_interrupt"]]);
    expect(r.cmd("disp").nextAttemptAt).toBe(0);
    expect(r.cmd("disp").state).toBe(L.DISPATCHED); // requeued and dispatched again on the new session
    expect(dispatches(r, r.log, d).map((x) => x.issueUuid)).toEqual(["disp"]);
    expect(r.disk.durable.get("reconcile")!.get("a")).toEqual({ generation: 2, terminate: [], discard: [] });
  });

  it("R-D8 R-D11: adopt, diverge, terminate unknown or foreign, discard terminal; the result lists them and is sent after it is durable", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "adopt");
      r.running(c, "div");
      r.event(c, "div", 2, output(OutputStream.STDOUT, 0, enc("x")));
      r.running(c, "fin");
      r.event(c, "fin", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    });
    r.submit("b", "foreign");
    r.autoDurable = false;
    r.snapshot(d, [
      state(r, "adopt", L.RUNNING, 1),
      state(r, "div", L.RUNNING, 1),
      state(r, "fin", L.SUCCEEDED, 2),
      state(r, "ghost", L.RUNNING, 3),
      state(r, "foreign", L.RUNNING, 0),
    ]);
    expect(r.sent(r.log, d, "reconcileResult")).toEqual([]);
    expect(r.st.conns.get(d)!.phase).toBe("reconciling");
    r.autoDurable = true;
    const out = r.flush();
    const res = r.sent(out, d, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[]; discardLocalTerminalIssueUuids: string[] };
    expect(res.terminateLocalIssueUuids).toEqual(["div", "ghost", "foreign"]);
    expect(res.discardLocalTerminalIssueUuids).toEqual(["fin"]);
    expect(r.cmd("adopt")).toMatchObject({ state: L.RUNNING, terminalSource: "" });
    expect(r.cmd("div")).toMatchObject({ state: L.INTERRUPTED, terminalSource: "server" });
    expect(r.cmd("foreign").state).toBe(L.QUEUED);
    expect([...r.st.incidents.values()].map((i) => [i.uuid, i.kind]).sort()).toEqual([
      ["div", "reconcile_diverged"],
      ["foreign", "reconcile_terminate_local"],
      ["ghost", "reconcile_terminate_local"],
    ]);
    expect(r.st.conns.get(d)!.phase).toBe("ready");
  });

  it("R-D10: a tombstone for a command the server still thinks is in flight interrupts it as already executed", () => {
    const { r, d } = offlineWith((r, c) => {
      r.submit("a", "t");
      r.accept(c, "t");
    });
    r.snapshot(d, [state(r, "t", L.UNSPECIFIED, 0, { tombstoned: true })]);
    expect(r.cmd("t")).toMatchObject({ state: L.INTERRUPTED, reason: "agent tombstone: already executed; outcome not retained" });
    expect([...r.st.incidents.values()].map((i) => i.kind)).toEqual(["reconcile_already_executed"]);
  });
});

// ====================================================================== retention

describe("retention", () => {
  it("R-O5: output segments roll at segmentBytes; past the per-command budget whole old segments go, with one cumulative marker", () => {
    const raw = new Uint8Array(40).fill(7);
    const zlen = testPorts.compress(raw).length;
    const r = new ServerRig({ segmentBytes: 2 * zlen, outputPerCommand: 4 * zlen });
    const c = r.connect();
    r.running(c, "c1");
    let seq = 2;
    let off = 0;
    const put = (stream = OutputStream.STDOUT) => {
      const out = r.event(c, "c1", seq++, output(stream, stream === OutputStream.STDOUT ? off : r.cmd("c1").streamNext.stderr, raw));
      if (stream === OutputStream.STDOUT) off += raw.length;
      return out;
    };
    put();
    put();
    expect(r.cmd("c1").segments).toEqual([{ firstSeq: 2, lastSeq: 3, bytes: 2 * zlen, ranges: [{ stream: "stdout", offset: 0, length: 80 }] }]);
    put(OutputStream.STDERR);
    put();
    expect(r.cmd("c1").segments[1]).toEqual({ firstSeq: 4, lastSeq: 5, bytes: 2 * zlen, ranges: [{ stream: "stderr", offset: 0, length: 40 }, { stream: "stdout", offset: 80, length: 40 }] });
    expect(r.cmd("c1").storedOutputBytes).toBe(4 * zlen); // exactly the budget: nothing dropped
    expect(r.cmd("c1").retention).toEqual([]);
    r.now = T0 + 5;
    const drop = put();
    expect(r.cmd("c1").segments.map((s) => [s.firstSeq, s.lastSeq])).toEqual([
      [4, 5],
      [6, 6],
    ]);
    expect(r.cmd("c1").retention).toEqual([{ firstSeq: 2, lastSeq: 3, ranges: [{ stream: "stdout", offset: 0, length: 80 }], at: T0 + 5 }]);
    expect(of(drop, "drop_output")).toEqual([{ type: "drop_output", uuid: "c1", throughSeq: 3 }]);
    expect(r.disk.durable.get("retention")!.get("c1")).toEqual({ uuid: "c1", firstSeq: 2, lastSeq: 3, ranges: [{ stream: "stdout", offset: 0, length: 80 }], at: T0 + 5 });
    put();
    put();
    expect(r.cmd("c1").retention).toEqual([
      {
        firstSeq: 2,
        lastSeq: 5,
        ranges: [
          { stream: "stdout", offset: 0, length: 120 },
          { stream: "stderr", offset: 0, length: 40 },
        ],
        at: T0 + 5,
      },
    ]);
    expect(r.st.clientOutput.get("a")!.bytes).toBe(r.cmd("c1").storedOutputBytes);
  });

  it("R-O5: past the per-client budget the client's oldest output goes first, never a command's only segment", () => {
    const raw = new Uint8Array(40).fill(1);
    const zlen = testPorts.compress(raw).length;
    const r = new ServerRig({ segmentBytes: zlen, outputPerClient: 3 * zlen });
    const c = r.connect();
    r.running(c, "old");
    r.running(c, "new");
    r.event(c, "old", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "new", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "new", 3, output(OutputStream.STDOUT, 40, raw));
    expect(r.st.clientOutput.get("a")!.bytes).toBe(3 * zlen); // exactly the budget
    r.event(c, "new", 4, output(OutputStream.STDOUT, 80, raw));
    expect(r.cmd("old").segments).toEqual([]);
    expect(r.cmd("old").retention).toHaveLength(1);
    expect(r.cmd("new").segments).toHaveLength(3);
    expect([...r.st.clientOutput.get("a")!.uuids]).toEqual(["new"]);
    r.event(c, "new", 5, output(OutputStream.STDOUT, 120, raw));
    expect(r.cmd("new").segments.map((s) => s.firstSeq)).toEqual([3, 4, 5]);
    expect(r.st.clientOutput.get("a")!.bytes).toBe(3 * zlen);
  });
});

// ====================================================================== restart

describe("server restart", () => {
  it("R-O3 R-D1: a restart restores clients, incidents, commands, the active index, the output index and recent digests", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.control({ op: "stdin", requestId: "w1", uuid: "c1", data: enc("x"), appendNewline: false });
    r.running(c, "c2");
    r.event(c, "c2", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.submit("a", "q");
    r.frame(c, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "x" }), closeSession: false } });
    r.frame(c, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "y" }), closeSession: false } });
    r.st.incidents.delete("inc-1");
    r.disk.durable.get("incident")!.delete("inc-1");
    const back = restoreServer(r.cfg, r.disk.tables(), 5);
    serverInvariants(back);
    expect(back.conns.size).toBe(0);
    expect(back.clients.get("a")).toEqual({ ...r.st.clients.get("a"), conn: 0 });
    expect([...back.active]).toEqual(["c1", "q"]);
    expect(back.incidentSeq).toBe(2);
    expect([...back.incidents.keys()]).toEqual(["inc-2"]);
    const c1 = back.commands.get("c1")!;
    expect(c1).toMatchObject({ state: L.RUNNING, storedThrough: 2, receivedThrough: 2, dispatchedOn: 0, streamNext: { stdout: 5, stderr: 0 } });
    expect(c1.committed).toEqual({ state: L.RUNNING, exitCode: null, signalName: "", reason: "", storedThrough: 2, revision: 1, stdinAssigned: 1, startedTime: T0, endedTime: 0 });
    expect(Object.keys(c1.digests).map(Number)).toEqual([1, 2]);
    expect(c1.digests).toEqual(r.cmd("c1").digests);
    expect(c1.stdin).toEqual({ ...r.cmd("c1").stdin, sentThrough: r.cmd("c1").stdin.ackedThrough });
    expect(back.clientOutput.get("a")).toEqual({ bytes: r.cmd("c1").storedOutputBytes, uuids: new Set(["c1"]) });
    expect(back.commands.get("q")).toMatchObject({ state: L.DISPATCHED, everDispatched: true, dispatchedOn: 0 });
    expect(back.commands.get("c2")).toMatchObject({ state: L.SUCCEEDED, terminalSource: "agent", exitCode: 0 });
  });

  it("R-O2: after a restart only digests newer than storedThrough - SERVER_RECENT_DIGESTS are kept", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    const rec = r.disk.durable.get("command")!.get("c1") as Record<string, unknown>;
    const events = r.disk.durable.get("event")!;
    const top = SERVER_RECENT_DIGESTS + 5;
    for (let s = 2; s <= top; s++) events.set(`c1/${String(s).padStart(12, "0")}`, { seq: s, digest: s * 3 });
    r.disk.durable.get("command")!.set("c1", { ...rec, storedThrough: top });
    const back = restoreServer(r.cmd("c1") ? r.cfg : r.cfg, r.disk.tables(), 2);
    const keys = Object.keys(back.commands.get("c1")!.digests).map(Number).sort((a, b) => a - b);
    expect(keys[0]).toBe(top - SERVER_RECENT_DIGESTS + 1);
    expect(keys.at(-1)).toBe(top);
    expect(keys).toHaveLength(SERVER_RECENT_DIGESTS);
  });
});

// ====================================================================== invariants

describe("server invariants catch every corruption they check", () => {
  function healthy(): { r: ServerRig; c: number } {
    const r = new ServerRig({ segmentBytes: 16 });
    const c = r.connect();
    r.running(c, "c1", { ...argv("cat"), stdinOpen: true });
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.submit("a", "s1", { program: { case: "script", value: { sizeBytes: 3n, sha256: sha("abc"), interpreter: "/bin/sh" } } }, { script: enc("abc") });
    r.running(c, "done");
    r.event(c, "done", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    serverInvariants(r.st);
    return { r, c };
  }
  const C = (r: ServerRig, u = "c1") => r.cmd(u);
  const cases: Array<[string, (r: ServerRig, c: number) => void, RegExp]> = [
    ["conn key mismatch", (r, c) => void (r.st.conns.get(c)!.conn = 99), /conn key mismatch/],
    ["ingress below zero", (r, c) => void (r.st.conns.get(c)!.ingressPending = -1), /ingress accounting below zero/],
    ["conn of an unknown client", (r, c) => void (r.st.conns.get(c)!.clientId = "zz"), /for unknown client/],
    ["conn not its client's current one", (r) => void (r.st.clients.get("a")!.conn = 0), /is not its client's current connection/],
    ["generation mismatch", (r, c) => void (r.st.conns.get(c)!.generation = 5), /generation 5 != client 1/],
    ["client points at a foreign conn", (r) => void (r.st.clients.set("b", { ...r.st.clients.get("a")!, clientId: "b" })), /client b points at a foreign conn/],
    ["durable beyond last persist", (r) => void (r.st.gate.durableThrough = r.st.gate.lastId + 1), /durable beyond last persist/],
    ["active index out of step", (r) => void r.st.active.delete("c1"), /c1: active index out of step/],
    ["terminal in the active index", (r) => void r.st.active.add("done"), /done: active index out of step/],
    ["committed terminal state changed", (r) => void ((C(r, "done").state = L.FAILED)), /done: committed terminal state/],
    ["committed revision ahead", (r) => void (C(r).committed = { ...C(r).committed, revision: 9 }), /c1: committed view ahead of memory/],
    ["committed stdin ahead", (r) => void (C(r).committed = { ...C(r).committed, stdinAssigned: 1 }), /c1: committed view ahead of memory/],
    ["stdin sent before durable", (r) => void (C(r).stdin.sentThrough = 1), /c1: stdin sent before it was durable/],
    ["readers see undurable events", (r) => void (C(r).committed = { ...C(r).committed, storedThrough: 3 }), /c1: readers would see events not yet durable/],
    ["command key mismatch", (r) => void (C(r).uuid = "x"), /command key mismatch/],
    ["stored beyond received", (r) => void (C(r).storedThrough = 3), /c1: stored beyond received/],
    ["stdin acked beyond assigned", (r) => void (C(r).stdin.ackedThrough = 1), /c1: stdin acked beyond assigned/],
    ["stdin queue accounting", (r) => void (C(r).stdin.queuedBytes = 4), /c1: stdin queue accounting/],
    ["segment accounting", (r) => void (C(r).storedOutputBytes += 1), /c1: segment accounting|retained output index drift/],
    ["retention exceeded", (r) => void ((r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerCommand: 1 } }), C(r).segments.push({ firstSeq: 3, lastSeq: 3, bytes: 0, ranges: [] })), /c1: retention exceeded/],
    ["two retention markers", (r) => void (C(r).retention = [{ firstSeq: 1, lastSeq: 1, ranges: [], at: 0 }, { firstSeq: 2, lastSeq: 2, ranges: [], at: 0 }]), /c1: a per-command bound exceeded/],
    ["too many signals", (r) => void (C(r).signals = Array.from({ length: MAX_PENDING_SIGNALS + 1 }, (_, i) => ({ revision: i, signal: SignalKind.USER1, requestId: `r${i}`, sentOn: 0 }))), /c1: a per-command bound exceeded/],
    ["too many request ids", (r) => void (C(r).requests = Object.fromEntries(Array.from({ length: MAX_REQUEST_IDS_PER_COMMAND + 1 }, (_, i) => [`r${i}`, 1]))), /c1: a per-command bound exceeded/],
    ["script progress beyond size", (r) => void (C(r, "s1").scriptAcked = 4), /s1: script progress beyond size/],
    ["script progress on a non-script command", (r) => void (C(r).scriptAcked = 1), /c1: script progress beyond size/],
    ["terminal without a source", (r) => void (C(r, "done").terminalSource = ""), /done: terminal without a source/],
    ["terminal with pending signals", (r) => void (C(r, "done").signals = [{ revision: 2, signal: SignalKind.USER1, requestId: "x", sentOn: 0 }]), /done: terminal with pending work/],
    ["terminal with queued stdin", (r) => void (C(r, "done").stdin.queue = [{ seq: 1, data: new Uint8Array(0), appendNewline: false, close: true, requestId: "x" }]), /done: terminal with pending work/],
    ["output index drift", (r) => void (r.st.clientOutput.get("a")!.bytes += 1), /a: retained output index drift/],
    ["per-client retention exceeded", (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: 0, segmentBytes: 0 } }), /a: per-client retention exceeded/],
  ];
  for (const [name, corrupt, message] of cases) {
    it(`refuses: ${name}`, () => {
      const { r, c } = healthy();
      corrupt(r, c);
      expect(() => serverInvariants(r.st)).toThrow(InvariantViolation);
      expect(() => serverInvariants(r.st)).toThrow(message);
    });
  }

  it("refuses more connections or incidents than their bounds", () => {
    const { r } = healthy();
    for (let i = 0; i < MAX_SERVER_CONNECTIONS; i++) r.st.conns.set(1_000_000 + i, { conn: 1_000_000 + i, phase: "hello", clientId: "", instanceId: "", sessionId: "", generation: 0, version: null, hb: { lastInbound: 0, pinged: false }, ingressPending: 0, inflight: 0, openedAt: 0, snapshotReceived: false });
    expect(() => serverInvariants(r.st)).toThrow(/connections over their bound/);
    const k = healthy().r;
    for (let i = 0; i <= MAX_INCIDENTS_KEPT; i++) k.st.incidents.set(`x${i}`, { id: `x${i}`, clientId: "a", uuid: "", kind: "k", detail: "", at: 0, acknowledged: true });
    expect(() => serverInvariants(k.st)).toThrow(/incidents over their bound/);
  });
});

void MAX_INCIDENTS_KEPT;

describe("more server edges", () => {
  it("R-H1: any valid frame counts as activity: no ping while the agent talks", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 9_000;
    r.frame(c, { case: "clientCapacity", value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 1, maxQueuedCommands: 1 } });
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 19_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: c }]);
  });

  it("R-D2: the request hash is SHA-256 over a UTF-8 header (uuid, client, requested expiry) and the encoded spec", async () => {
    const { toBinary } = await import("@bufbuild/protobuf");
    const r = new ServerRig();
    const spec = create(ExecutionSpecSchema, argv("echo", "ünï"));
    for (const [client, expiry] of [
      ["plain", undefined],
      ["é-client", T0 + 5],
      ["€uro", 0],
      ["emoji-😀", undefined],
    ] as const) {
      const uuid = `u-${r.st.commands.size}`;
      r.control({ op: "submit", requestId: uuid, uuid, clientId: client, spec, ...(expiry !== undefined ? { queueExpiry: expiry } : {}) });
      const head = Buffer.from(`rvbox.v1/request\n${uuid}\n${client}\n${expiry ?? 0}\n`, "utf8");
      const want = createHash("sha256").update(Buffer.concat([head, Buffer.from(toBinary(ExecutionSpecSchema, spec))])).digest("hex");
      expect(r.cmd(uuid).hash, client).toBe(want);
    }
  });

  it("R-D1: the server expires only commands still queued; a dispatched one waits for its agent", () => {
    const r = new ServerRig({ redeliveryMs: 1_000_000 });
    const c = r.connect();
    r.submit("a", "d", argv(), { queueExpiry: T0 + 1_000 });
    expect(r.cmd("d").state).toBe(L.DISPATCHED);
    r.now = T0 + 5_000;
    r.step({ type: "activity", conn: c });
    r.step({ type: "tick" });
    expect(r.cmd("d").state).toBe(L.DISPATCHED);
  });

  it("R-D3: a late acceptance of a command requeued after a transient rejection is taken", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "c1");
    r.accept(c, "c1", false, Code.CAPACITY);
    expect(r.cmd("c1").state).toBe(L.QUEUED);
    r.accept(c, "c1", true);
    expect(r.cmd("c1").state).toBe(L.ACCEPTED);
  });

  it("R-H6: a reconnect resends pending signals only to that client, not to other clients' sessions", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.running(a, "ca");
    r.running(b, "cb");
    r.control({ op: "signal", requestId: "sa", uuid: "ca", signal: SignalKind.USER1 });
    r.control({ op: "signal", requestId: "sb", uuid: "cb", signal: SignalKind.USER1 });
    expect(r.sent(r.log, b, "signalCommand")).toHaveLength(1);
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    const a2 = r.open();
    r.hello(a2, "a");
    r.snapshot(a2, [{ issueUuid: "ca", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: Buffer.from(r.cmd("ca").hash, "hex") }]);
    expect(r.sent(r.log, a2, "signalCommand")).toHaveLength(1);
    expect(r.sent(r.log, b, "signalCommand")).toHaveLength(1);
  });

  it("R-O3: the stored event keeps the agent's time when it has one, else the server's", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.now = T0 + 50;
    r.frame(c, { case: "commandEvent", value: create(CommandEventSchema, { issueUuid: "c1", eventSeq: 2n, commandRevision: 1n, time: { $typeName: "google.protobuf.Timestamp", seconds: 1_600_000_000n, nanos: 5_000_000 }, event: output(OutputStream.STDOUT, 0, enc("a")) }) });
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 1, enc("b")), 7n);
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ time: 1_600_000_000_005, revision: 1 });
    expect(r.disk.durable.get("event")!.get("c1/000000000003")).toMatchObject({ time: T0 + 50, revision: 7 });
  });

  it("R-S4 R-C3: a restart restores pending signals as unsent and a script still uploading with its bytes", () => {
    const body = enc("#!/bin/sh\necho hi\n");
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.control({ op: "signal", requestId: "s", uuid: "c1", signal: SignalKind.USER2 });
    expect(r.cmd("c1").signals[0]!.sentOn).toBe(1);
    r.submit("a", "s1", { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } }, { script: body });
    r.accept(c, "s1");
    r.event(c, "s1", 1, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: 5n }) });
    const back = restoreServer(r.cfg, r.disk.tables(), 3);
    expect(back.commands.get("c1")!.signals).toEqual([{ revision: 2, signal: SignalKind.USER2, requestId: "s", sentOn: 0 }]);
    expect(back.commands.get("s1")).toMatchObject({ script: body, scriptAcked: 5, scriptSent: 5, scriptCommitSentOn: 0, scriptCommitted: false });
    expect(back.commands.get("c1")!.stdin.sentThrough).toBe(0);
  });
});

describe("traces other tools read", () => {
  it("R-W10: conn_closed carries the connection, client, code and message the simulator reports", () => {
    const r = new ServerRig();
    const c = r.connect();
    const out = r.step({ type: "frame", conn: c, data: new Uint8Array([1]), binary: false });
    expect(of(out, "trace").filter((t) => t.event === "conn_closed").map((t) => t.detail)).toEqual([{ conn: c, client: "a", code: "PROTOCOL_ERROR", message: "text frames are not part of the protocol" }]);
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "PROTOCOL_ERROR: text frames are not part of the protocol" }]);
  });
});

describe("server edges found by the mutation run", () => {
  it("R-D5: restore keeps every incident as stored and continues numbering after the highest id", () => {
    const inc = (id: string) => ({ id, clientId: "a", uuid: "u", kind: "k", detail: "d", at: 5, acknowledged: id === "inc-2" });
    const rows = new Map<string, unknown>([
      ["inc-5", inc("inc-5")],
      ["inc-2", inc("inc-2")],
      ["legacy", inc("legacy")],
    ]);
    const st = restoreServer(defaultServerConfig(), { get: (t) => (t === "incident" ? rows : undefined) }, 1);
    expect(st.incidentSeq).toBe(5);
    expect([...st.incidents.values()]).toEqual([inc("inc-5"), inc("inc-2"), inc("legacy")]);
    serverInvariants(st);
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
    expect(of(out, "trace").filter((t) => t.event === "agent_error").map((t) => t.detail)).toEqual([{ conn: c, code: "UNSPECIFIED", message: "" }]);
    expect(r.st.incidents.size).toBe(0);
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
    expect(d.cmd("c2").state).toBe(L.DISPATCHED);
    d.st = restoreServer(d.cfg, d.disk.tables(), 2);
    expect(d.st.commands.get("c2")!.dispatchedOn).toBe(0);
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
    expect(r.cmd("c1").retention).toHaveLength(1);
    const back = restoreServer(r.cfg, r.disk.tables(), 9);
    const c1 = back.commands.get("c1")!;
    expect(c1.segments).toEqual(r.cmd("c1").segments);
    expect(c1.retention).toEqual(r.cmd("c1").retention);
    expect(c1.requests).toEqual(r.cmd("c1").requests);
    expect(c1.storedOutputBytes).toBe(r.cmd("c1").storedOutputBytes);
    expect(back.clientOutput).toEqual(r.st.clientOutput);
    expect(back.clientOutput.has("b")).toBe(false);
  });

  it("R-D5: below the incident bound a new incident drops nothing, acknowledged or not", () => {
    const r = new ServerRig();
    const c = r.connect();
    const store = () => r.frame(c, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "m" }), closeSession: false } });
    store();
    r.control({ op: "ack_incident", requestId: "a", incidentId: "inc-1" });
    const out = store();
    expect([...r.st.incidents.keys()]).toEqual(["inc-1", "inc-2"]);
    expect(of(out, "persist").flatMap((p) => p.records).filter((x) => x.table === "incident" && x.value === null)).toEqual([]);
  });

  it("R-D1: non-terminal transitions leave reason and signal name empty; the initial record and view are the empty ones", () => {
    const r = new ServerRig();
    r.autoDurable = false;
    r.submit("offline", "c1");
    expect(r.cmd("c1")).toMatchObject({ revision: 1, state: L.QUEUED, terminalSource: "", everDispatched: false, dispatchedOn: 0, attempts: 0, nextAttemptAt: 0, exitCode: null, signalName: "", reason: "", script: null, createdAt: T0, queueExpiry: T0 + 24 * 60 * 60_000 });
    expect(r.cmd("c1").committed).toEqual({ state: L.UNSPECIFIED, exitCode: null, signalName: "", reason: "", storedThrough: 0, revision: 0, stdinAssigned: 0, startedTime: 0, endedTime: 0 });
    r.flush();
    expect(r.cmd("c1").committed).toEqual({ state: L.QUEUED, exitCode: null, signalName: "", reason: "", storedThrough: 0, revision: 1, stdinAssigned: 0, startedTime: 0, endedTime: 0 });
    r.autoDurable = true;
    const s = new ServerRig();
    const c = s.connect();
    s.running(c, "c2");
    expect(s.cmd("c2")).toMatchObject({ reason: "", signalName: "", terminalSource: "" });
  });

  it("R-C1: a script kept for upload is deleted from storage once the command ends; a stray script on an argv submit is not kept", () => {
    const body = enc("echo x\n");
    const r = new ServerRig();
    r.submit("off", "s1", { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } } }, { script: body });
    expect(r.disk.durable.get("script")?.get("s1")).toEqual({ data: body });
    r.control({ op: "signal", requestId: "k", uuid: "s1", signal: SignalKind.CANCEL });
    expect(r.disk.durable.get("script")?.has("s1")).toBe(false);
    expect(r.cmd("s1").script).toBeNull();
    r.submit("off", "a1", argv("true"), { script: body });
    expect(r.cmd("a1").script).toBeNull();
    expect(r.disk.durable.get("script")?.has("a1")).toBe(false);
  });

  it("R-C1: a script of exactly 16 MiB is accepted; one byte more is refused", () => {
    const r = new ServerRig();
    r.store = false;
    const big = new Uint8Array(MAX_SCRIPT_BYTES);
    const digest = sha(big);
    expect(r.submit("off", "s1", { program: { case: "script", value: { sizeBytes: BigInt(big.length), sha256: digest, interpreter: "/bin/sh" } } }, { script: big })).toMatchObject({ ok: true });
    const over = new Uint8Array(MAX_SCRIPT_BYTES + 1);
    expect(r.submit("off", "s2", { program: { case: "script", value: { sizeBytes: BigInt(over.length), sha256: digest, interpreter: "/bin/sh" } } }, { script: over })).toEqual({ ok: false, error: { code: Code.VALIDATION, message: `script of 1..${MAX_SCRIPT_BYTES} bytes required` } });
  });

  it("R-D2: the request hash encodes the client id as UTF-8 at every code point width boundary", async () => {
    const { toBinary } = await import("@bufbuild/protobuf");
    const r = new ServerRig();
    const spec = create(ExecutionSpecSchema, argv("x"));
    const ids = ["\u007f", "\u0080", "\u07ff", "\u0800", "\uffff", "\u{10000}", "\u{10ffff}"];
    ids.forEach((client, i) => {
      r.control({ op: "submit", requestId: `r${i}`, uuid: `u${i}`, clientId: client, spec });
      const head = Buffer.from(`rvbox.v1/request\nu${i}\n${client}\n0\n`, "utf8");
      expect(r.cmd(`u${i}`).hash, JSON.stringify(client)).toBe(createHash("sha256").update(Buffer.concat([head, Buffer.from(toBinary(ExecutionSpecSchema, spec))])).digest("hex"));
    });
  });

  it("R-D3: commands queued while the agent was away are dispatched up to its capacity in one go", () => {
    const r = new ServerRig();
    for (const u of ["c1", "c2", "c3"]) r.submit("a", u);
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    expect(dispatches(r, r.log, c).map((d) => d.issueUuid)).toEqual(["c1", "c2"]);
    expect(r.cmd("c3").state).toBe(L.QUEUED);
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
    expect(n.cmd("c1").state).toBe(L.DISPATCHED);
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
    expect(r.cmd("c1").stdin.sentThrough).toBe(2);
  });

  it("R-S4 R-S5: USER2 is refused on a queued command like USER1", () => {
    const r = new ServerRig();
    r.submit("off", "q");
    expect(r.control({ op: "signal", requestId: "u2", uuid: "q", signal: SignalKind.USER2 })).toMatchObject({ ok: false, error: { code: Code.VALIDATION, message: "the command is not running yet" } });
    expect(r.cmd("q").state).toBe(L.QUEUED);
  });

  it("R-D8 R-H6: one client's reconciliation never touches another client's commands, nor its own queued ones", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const b = r.connect("b");
    r.submit("a", "qa");
    r.accept(a, "qa", false, Code.CAPACITY);
    const retryAt = r.cmd("qa").nextAttemptAt;
    r.cmd("qa").nextAttemptAt = retryAt + 50_000; // make sure it lies ahead
    r.running(b, "cb");
    r.control({ op: "signal", requestId: "s", uuid: "cb", signal: SignalKind.USER1 });
    r.submit("b", "cb2");
    r.accept(b, "cb2");
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    const a2 = r.open();
    r.hello(a2, "a");
    r.snapshot(a2, [{ issueUuid: "cb", lifecycle: L.RUNNING, lastClientEventSeq: 1n, commandRevision: 9n, immutableRequestSha256: Buffer.from(r.cmd("cb").hash, "hex") }]);
    expect(r.cmd("cb").signals.map((s) => s.revision)).toEqual([2]);
    expect(r.cmd("cb2").state).toBe(L.ACCEPTED);
    expect([...r.st.incidents.values()].map((i) => [i.uuid, i.kind])).toEqual([["cb", "reconcile_terminate_local"]]);
    expect(r.cmd("qa")).toMatchObject({ state: L.QUEUED, nextAttemptAt: retryAt + 50_000 });
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
    const trunc = (ranges: ReturnType<typeof range>[]): EventInit => ({ case: "truncation", value: create(OutputTruncationSchema, { removedBytes: ranges, cause: 2 }) });
    const r = new ServerRig();
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, trunc([range(OutputStream.STDERR, 0n, 4n), range(OutputStream.STDOUT, 0n, 9n)]));
    expect(r.disk.durable.get("event")!.get("c1/000000000002")).toMatchObject({ kind: "truncation", cause: 2, ranges: [{ stream: "stderr", offset: 0, length: 4 }, { stream: "stdout", offset: 0, length: 9 }] });
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
    expectClosed(u, u.event(e, "s1", 2, { case: "scriptUpload", value: create(ScriptUploadStatusSchema, { receivedBytes: 2n ** 60n }) }), e, Code.SEQUENCE_VIOLATION);
  });
});

describe("retention edges", () => {
  const raw = new Uint8Array(40).fill(5);
  const zlen = testPorts.compress(raw).length;

  it("R-O5: a segment's ranges merge only when the same stream continues exactly", () => {
    const r = new ServerRig({ segmentBytes: 1_000_000 });
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, output(OutputStream.STDERR, 0, raw));
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "c1", 4, output(OutputStream.STDERR, 40, raw)); // lines up with stdout's end, but another stream
    r.event(c, "c1", 5, output(OutputStream.STDOUT, 40, raw));
    r.event(c, "c1", 6, { case: "truncation", value: create(OutputTruncationSchema, { removedBytes: [create(ByteRangeSchema, { stream: OutputStream.STDOUT, offset: 80n, length: 60n })], cause: 2 }) });
    r.event(c, "c1", 7, output(OutputStream.STDOUT, 140, raw)); // same stream after a gap
    r.event(c, "c1", 8, output(OutputStream.STDOUT, 180, raw)); // continues exactly
    expect(r.cmd("c1").segments).toEqual([
      {
        firstSeq: 2,
        lastSeq: 8,
        bytes: 6 * zlen,
        ranges: [
          { stream: "stderr", offset: 0, length: 40 },
          { stream: "stdout", offset: 0, length: 40 },
          { stream: "stderr", offset: 40, length: 40 },
          { stream: "stdout", offset: 40, length: 40 },
          { stream: "stdout", offset: 140, length: 80 },
        ],
      },
    ]);
  });

  it("R-O5: one segment is never dropped, however far over the per-command or per-client budget", () => {
    const r = new ServerRig({ segmentBytes: 1_000_000, outputPerCommand: 2 * zlen, outputPerClient: 2 * zlen });
    const c = r.connect();
    r.running(c, "c1");
    for (let i = 0; i < 4; i++) r.event(c, "c1", 2 + i, output(OutputStream.STDOUT, 40 * i, raw));
    expect(r.cmd("c1").segments).toHaveLength(1);
    expect(r.cmd("c1").storedOutputBytes).toBe(4 * zlen);
    expect(r.cmd("c1").retention).toEqual([]);
    expect(of(r.log, "drop_output")).toEqual([]);
  });

  it("R-O5: the retention marker extends each stream's range only where that stream continues exactly", () => {
    const r = new ServerRig({ segmentBytes: zlen, outputPerCommand: zlen });
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "c1", 3, output(OutputStream.STDERR, 0, raw));
    r.event(c, "c1", 4, output(OutputStream.STDERR, 40, raw));
    r.event(c, "c1", 5, { case: "truncation", value: create(OutputTruncationSchema, { removedBytes: [create(ByteRangeSchema, { stream: OutputStream.STDOUT, offset: 40n, length: 60n })], cause: 2 }) });
    r.event(c, "c1", 6, output(OutputStream.STDOUT, 100, raw));
    r.event(c, "c1", 7, output(OutputStream.STDOUT, 140, raw));
    expect(r.cmd("c1").segments.map((s) => s.firstSeq)).toEqual([7]);
    expect(r.cmd("c1").retention).toEqual([
      {
        firstSeq: 2,
        lastSeq: 6,
        at: T0,
        ranges: [
          { stream: "stdout", offset: 0, length: 40 },
          { stream: "stderr", offset: 0, length: 80 },
          { stream: "stdout", offset: 100, length: 40 },
        ],
      },
    ]);
  });
});

describe("server invariants: accounting edges", () => {
  function twoWithOutput(): ServerRig {
    const r = new ServerRig({ segmentBytes: 8 });
    const c = r.connect();
    r.running(c, "c1");
    r.running(c, "c2");
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    r.event(c, "c2", 2, output(OutputStream.STDOUT, 0, enc("world")));
    return r;
  }

  it("refuses segments that do not add up to the stored bytes", () => {
    const r = twoWithOutput();
    r.cmd("c1").segments[0]!.bytes += 1;
    expect(() => serverInvariants(r.st)).toThrow(/c1: segment accounting/);
  });

  it("refuses a stdin queue over its limit even when the accounting adds up", () => {
    const r = new ServerRig();
    r.submit("off", "c1", { ...argv("cat"), stdinOpen: true });
    r.control({ op: "stdin", requestId: "w", uuid: "c1", data: new Uint8Array(5), appendNewline: false });
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, stdinQueue: 4 } };
    expect(() => serverInvariants(r.st)).toThrow(/c1: stdin queue accounting/);
  });

  it("accepts a single segment over the per-command budget, but not two", () => {
    const r = twoWithOutput();
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerCommand: 1 } };
    serverInvariants(r.st);
    r.cmd("c1").segments.push({ firstSeq: 3, lastSeq: 3, bytes: 0, ranges: [] });
    expect(() => serverInvariants(r.st)).toThrow(/c1: retention exceeded/);
  });

  it("the per-client bound is budget + one segment per command holding output, inclusive", () => {
    const r = twoWithOutput();
    const bytes = r.st.clientOutput.get("a")!.bytes;
    expect(r.st.clientOutput.get("a")!.uuids.size).toBe(2);
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: bytes - 2 * 8 } };
    serverInvariants(r.st);
    r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, outputPerClient: bytes - 2 * 8 - 1 } };
    expect(() => serverInvariants(r.st)).toThrow(/a: per-client retention exceeded/);
  });
});
