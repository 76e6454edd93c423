// The agent's registration and frame handling, driven directly (no server):
// every frame it refuses gets its exact error code and close-or-not;
// registration, fencing and phase guards.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ServerWelcomeSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { ControlErrorSchema, ProtocolVersionSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { encodeEnvelope } from "../../../core/codec/frame-codec.js";
import { HEARTBEAT_DEAD_AFTER_MS, HEARTBEAT_PING_AFTER_MS } from "../../../core/limits.js";
import { T0, decode, sends, errorsIn, closes, of, accepts, AgentRig, expectClosed, require_toBinary } from "./rig.js";

describe("agent registration", () => {
  it("R-F2: start persists a fresh instance id, connects, and the hello carries the agent's identity and limits", () => {
    const r = new AgentRig({ maxRunning: 3, maxQueued: 9 });
    const out = r.step({ type: "start" });
    const instanceId = r.disk.durable.get("meta")?.get("instance_id");
    expect(instanceId).toMatch(/^[0-9a-f]{32}$/);
    expect(of(out, "connect")).toEqual([{ type: "connect", conn: 1 }]);
    expect(r.step({ type: "start" }).filter((e) => e.type === "connect")).toHaveLength(0); // start twice: once
    const hello = sends(r.step({ type: "transport_open", conn: 1 }), "clientHello");
    expect(hello).toHaveLength(1);
    expect(hello[0]!.lane).toBe("priority");
    expect(hello[0]!.env.sessionId).toBe("");
    expect(hello[0]!.env.sessionGeneration).toBe(0n);
    expect(hello[0]!.env.payload.value).toMatchObject({
      clientId: "agent-1",
      clientInstanceId: instanceId,
      maxRunningCommands: 3,
      maxQueuedCommands: 9,
      daemonCwd: "/",
      architecture: "x86_64",
      daemonVersion: "rvbox-agent/0.1.0",
    });
    expect(of(r.log, "send").map((x) => [x.kind, x.lane])).toEqual([["clientHello", "priority"]]);
  });

  it("R-T4: a welcome without a selected version, or with one outside our range, is INCOMPATIBLE_VERSION and closes", () => {
    for (const sel of [null, { major: 2, minor: 0 }, { major: 1, minor: 2 }, { major: 0, minor: 9 }]) {
      const r = new AgentRig();
      r.register();
      const out = r.welcome(1, "s", sel);
      expect(errorsIn(out).map((e) => [e.error?.code, e.error?.message, e.closeSession])).toEqual([
        [Code.INCOMPATIBLE_VERSION, "server selected a version outside our range", true],
      ]);
      expect(closes(out)).toHaveLength(1);
      expect(r.linkUp()).toBe(false);
      expect(r.st.session.fence).toBeNull(); // internal: the refused fence is not adopted (no frame can carry it: the link is closed)
    }
  });

  it("R-F2 R-F7: a welcome with an empty session id, generation 0, an unsafe generation or one below the highest seen is STALE_GENERATION", () => {
    const cases: Array<[string, number | bigint]> = [
      ["", 1],
      ["s", 0],
    ];
    for (const [sid, gen] of cases) {
      const r = new AgentRig();
      r.register();
      const out = r.welcome(Number(gen), sid);
      expect(errorsIn(out).map((e) => [e.error?.code, e.error?.message])).toEqual([[Code.STALE_GENERATION, `welcome with unusable fence (generation ${gen})`]]);
      expect(r.linkUp()).toBe(false);
    }
    const r = new AgentRig();
    r.register();
    const unsafe = r.step({
      type: "frame",
      conn: r.st.session.conn,
      data: (() => {
        const ok = encodeEnvelope(
          { sessionId: "s", generation: 1 },
          { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }) }) },
        );
        const env = decode(ok);
        env.sessionGeneration = 2n ** 53n;
        return new Uint8Array(Buffer.from(require_toBinary(env)));
      })(),
    });
    expect(errorsIn(unsafe).map((e) => e.error?.code)).toEqual([Code.STALE_GENERATION]);

    // Below the highest generation ever welcomed: refused; equal: accepted.
    const g = new AgentRig();
    g.establish(5);
    g.drop();
    g.register();
    const low = g.welcome(4, "older");
    expect(errorsIn(low).map((e) => e.error?.code)).toEqual([Code.STALE_GENERATION]);
    expect(g.linkUp()).toBe(false);
    g.register();
    g.welcome(5, "same-gen");
    // Established under that fence: the snapshot it answers with carries it.
    const snap = sends(g.reconcile([]), "reconcileSnapshot");
    expect(snap.map((x) => [x.env.sessionId, x.env.sessionGeneration])).toEqual([["same-gen", 5n]]);
    expect(g.reconciled()).toBe(true);
  });

  it("R-F4: an error while registering ends the attempt without answering it; anything else before the welcome is PROTOCOL_ERROR", () => {
    const r = new AgentRig();
    r.register();
    const out = r.frame(
      {
        case: "error",
        value: {
          $typeName: "rvbox.v1.AgentError",
          error: { $typeName: "rvbox.v1.ControlError", code: Code.IDENTITY_CONFLICT, message: "live elsewhere", issueUuid: "" },
          closeSession: true,
        },
      },
      null,
    );
    expect(errorsIn(out)).toEqual([]);
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "registration refused: IDENTITY_CONFLICT live elsewhere" }]);
    expect(r.linkUp()).toBe(false);

    const p = new AgentRig();
    p.register();
    const bad = p.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }, null);
    expect(errorsIn(bad).map((e) => [e.error?.code, e.error?.message, e.closeSession])).toEqual([[Code.PROTOCOL_ERROR, "eventAck before ServerWelcome", true]]);
    expect(p.linkUp()).toBe(false);
  });

  it("R-H6: frames on a connection that is still opening, or on a stale connection number, are ignored", () => {
    const r = new AgentRig();
    r.step({ type: "start" });
    expect(of(r.log, "connect")).toEqual([{ type: "connect", conn: 1 }]);
    expect(r.linkUp()).toBe(false); // connecting
    const out = r.welcome(1, "s");
    expect(sends(out)).toEqual([]);
    expect(closes(out)).toEqual([]);
    expect(r.linkUp()).toBe(false);
    r.step({ type: "transport_open", conn: 1 });
    const stale = r.step({
      type: "frame",
      conn: 2,
      data: encodeEnvelope(
        { sessionId: "s", generation: 1 },
        { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }) }) },
      ),
    });
    expect(sends(stale)).toEqual([]);
    // Still registering: the welcome on the current connection is taken (a second one would be PROTOCOL_ERROR).
    expect(sends(r.welcome(1, "s"))).toEqual([]);
    expect(sends(r.reconcile([]), "reconcileSnapshot")).toHaveLength(1);
    expect(r.reconciled()).toBe(true);
  });
});

describe("agent frame handling once established", () => {
  it("R-T1 R-W10: a text frame or undecodable bytes are PROTOCOL_ERROR and close the session", () => {
    const r = new AgentRig();
    r.establish();
    expectClosed(
      r,
      r.step({
        type: "frame",
        conn: r.st.session.conn,
        data: encodeEnvelope(r.st.session.fence, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 0n } }),
        binary: false,
      }),
      Code.PROTOCOL_ERROR,
    );
    const g = new AgentRig();
    g.establish();
    expectClosed(g, g.step({ type: "frame", conn: g.st.session.conn, data: new Uint8Array([0xff, 0xff, 0xff]) }), Code.PROTOCOL_ERROR);
    const t = new AgentRig();
    t.establish();
    expectClosed(
      t,
      t.step({ type: "frame", conn: t.st.session.conn, data: new Uint8Array(2), binary: false }),
      Code.PROTOCOL_ERROR,
      "text frames are not part of the protocol",
    );
  });

  it("R-F7: an envelope with another session id or generation is STALE_GENERATION and closes", () => {
    for (const fence of [{ sessionId: "sess-1", generation: 2 }, { sessionId: "other", generation: 1 }, null]) {
      const r = new AgentRig();
      r.establish(1, "sess-1");
      expectClosed(
        r,
        r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 0n } }, fence),
        Code.STALE_GENERATION,
        `envelope fenced to generation ${fence?.generation ?? 0}, current 1`,
      );
    }
  });

  it("R-W10: a server error that closes the session ends it without an answer; one that does not is only traced", () => {
    const r = new AgentRig();
    r.establish();
    const keep = r.frame({
      case: "error",
      value: {
        $typeName: "rvbox.v1.AgentError",
        error: { $typeName: "rvbox.v1.ControlError", code: Code.NOT_FOUND, message: "nope", issueUuid: "" },
        closeSession: false,
      },
    });
    expect(sends(keep)).toEqual([]);
    expect(
      of(keep, "trace")
        .filter((t) => t.event === "server_error")
        .map((t) => t.detail),
    ).toEqual([{ code: "NOT_FOUND", message: "nope" }]);
    expect(closes(keep)).toEqual([]);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
    const end = r.frame({
      case: "error",
      value: {
        $typeName: "rvbox.v1.AgentError",
        error: { $typeName: "rvbox.v1.ControlError", code: Code.CAPACITY, message: "full", issueUuid: "" },
        closeSession: true,
      },
    });
    expect(errorsIn(end)).toEqual([]);
    expect(of(end, "close")).toEqual([{ type: "close", conn: 1, reason: "server error: CAPACITY full" }]);
    expect(r.linkUp()).toBe(false);
  });

  it("R-W10: a payload only an agent sends, or a second welcome, is PROTOCOL_ERROR and closes", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.welcome(1, "sess-1");
    expectClosed(r, out, Code.PROTOCOL_ERROR);
    expect(errorsIn(out)[0]!.error?.message).toBe("unexpected serverWelcome from server");
    const a = new AgentRig();
    a.establish();
    expectClosed(
      a,
      a.frame({
        case: "clientCapacity",
        value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 0, maxQueuedCommands: 0 },
      }),
      Code.PROTOCOL_ERROR,
    );
  });

  it("R-W5: a full ingress queue on the current connection closes it; a report for a stale connection is ignored", () => {
    const r = new AgentRig();
    r.establish();
    expect(closes(r.step({ type: "ingress_full", conn: 99 }))).toHaveLength(0);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
    const out = r.step({ type: "ingress_full", conn: r.st.session.conn });
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "ingress queue full" }]);
    expect(r.linkUp()).toBe(false);
  });

  it("R-D13: store_repaired re-registers only when there was an incident", () => {
    const r = new AgentRig();
    r.establish();
    expect(closes(r.step({ type: "store_repaired" }))).toHaveLength(0);
    expect(r.linkUp()).toBe(true);
    expect(r.reconciled()).toBe(true);
    r.step({ type: "store_incident", detail: "crc" });
    // The incident is open: a dispatch is refused with it.
    expect(accepts(r.dispatch("c1")).map((a) => a.rejection?.message)).toEqual(["agent store incident: crc"]);
    const out = r.step({ type: "store_repaired" });
    expect(of(out, "close")).toEqual([{ type: "close", conn: 1, reason: "store repaired: re-registering" }]);
    // Repaired: the next session reconciles with a complete snapshot, and dispatches are taken.
    r.register();
    r.welcome(2, "sess-2");
    const again = r.reconcile([]);
    expect(errorsIn(again)).toEqual([]);
    expect(sends(again, "reconcileSnapshot")).toHaveLength(1);
    expect(accepts(r.dispatch("c1"))[0]!.accepted).toBe(true);
  });

  it("R-H1: an activity report on the current connection moves the heartbeat; a stale one does not", () => {
    const r = new AgentRig();
    r.establish();
    r.now = T0 + 5_000;
    r.step({ type: "activity", conn: 7 });
    // Stale: the idle time still counts from T0, so the ping is due HEARTBEAT_PING_AFTER_MS after it.
    r.now = T0 + HEARTBEAT_PING_AFTER_MS - 1;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + HEARTBEAT_PING_AFTER_MS;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
    const c = new AgentRig();
    c.establish();
    c.now = T0 + 5_000;
    c.step({ type: "activity", conn: c.st.session.conn });
    // Current: the idle time counts from the report.
    c.now = T0 + 5_000 + HEARTBEAT_PING_AFTER_MS - 1;
    expect(of(c.step({ type: "tick" }), "ping")).toEqual([]);
    c.now = T0 + 5_000 + HEARTBEAT_PING_AFTER_MS;
    expect(of(c.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
  });

  it("R-H1 R-H2: a valid frame from the server is activity by itself: frames every 5 s keep the session 60 s without a ping or a close", () => {
    const r = new AgentRig();
    r.establish();
    const quiet = {
      $typeName: "rvbox.v1.AgentError",
      error: create(ControlErrorSchema, { code: Code.CAPACITY, message: "busy" }),
      closeSession: false,
    } as const;
    for (let t = 5_000; t <= 60_000; t += 5_000) {
      r.now = T0 + t;
      const out = [...r.frame({ case: "error", value: quiet }), ...r.step({ type: "tick" })];
      expect(of(out, "ping"), `at ${t} ms`).toEqual([]);
      expect(of(out, "close"), `at ${t} ms`).toEqual([]);
    }
    expect(r.linkUp()).toBe(true);
    // Silence from there on: the ping after 10 s, the close after 30 s.
    r.now = T0 + 60_000 + HEARTBEAT_PING_AFTER_MS;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
    r.now = T0 + 60_000 + HEARTBEAT_DEAD_AFTER_MS;
    r.step({ type: "tick" });
    expect(r.linkUp()).toBe(false);
  });

  it("R-W2: capacity is reported once the session is reconciled, once per change, and again on every new session", () => {
    const r = new AgentRig({ maxRunning: 2, maxQueued: 3 });
    r.register();
    expect(sends(r.welcome(1, "s1"), "clientCapacity")).toEqual([]); // not before the snapshot
    const first = sends(r.reconcile([]), "clientCapacity");
    expect(first.map((s) => s.env.payload.value)).toEqual([
      expect.objectContaining({ runningCommands: 0, queuedCommands: 0, maxRunningCommands: 2, maxQueuedCommands: 3 }),
    ]);
    expect(sends(r.step({ type: "tick" }), "clientCapacity")).toEqual([]);
    const after = sends(r.dispatch("c1"), "clientCapacity");
    expect(after.map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 1, queuedCommands: 0 })]);
    r.drop();
    r.register();
    r.welcome(2, "s2");
    expect(sends(r.reconcile([]), "clientCapacity").map((s) => s.env.payload.value)).toEqual([
      expect.objectContaining({ runningCommands: 1, queuedCommands: 0 }),
    ]);
  });
});

describe("registration edges (from the former agent edges file)", () => {
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
