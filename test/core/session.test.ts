import { describe, expect, it } from "vitest";
import { rowOf } from "../../core/server/store.js";
import fc from "fast-check";
import { Harness } from "../support/harness.js";
import { Code } from "../../core/errors.js";
import { backoffCeiling, backoffDelay } from "../../core/session/backoff.js";
import {
  newAgentSession,
  sessionConnect,
  sessionTick,
  sessionTransportClosed,
  sessionTransportOpen,
  sessionWelcome,
  type SessionAction,
} from "../../core/session/agent-session.js";
import { rngFromSeed } from "../../core/rng.js";
import { BACKOFF_CAP_MS, HEARTBEAT_DEAD_AFTER_MS, HEARTBEAT_PING_AFTER_MS } from "../../core/limits.js";

const lastError = (h: Harness, to: string) => h.sent("error", to).at(-1)?.payload.value as { error?: { code: number } } | undefined;

describe("heartbeat", () => {
  it("R-H1: 10 s without inbound activity sends one ping, on both endpoints", () => {
    const h = new Harness();
    h.addAgent("a");
    h.serverEffects.length = 0;
    h.agentEffects.length = 0;
    h.advance(HEARTBEAT_PING_AFTER_MS - 1);
    expect(h.serverEffects.some((e) => e.type === "ping")).toBe(false);
    h.advance(1);
    expect(h.serverEffects.filter((e) => e.type === "ping")).toHaveLength(1);
    expect(h.agentEffects.filter((x) => x.e.type === "ping")).toHaveLength(1);
    h.advance(1000);
    expect(h.serverEffects.filter((e) => e.type === "ping")).toHaveLength(1);
  });

  it("R-H1 R-H3: a pong (activity) or any frame resets the deadline", () => {
    const h = new Harness();
    h.addAgent("a");
    const a = h.agents.get("a")!;
    for (let i = 0; i < 10; i++) {
      h.advance(9_000);
      h.agentInput("a", { type: "activity", conn: a.conn });
      h.serverInput({ type: "activity", conn: a.serverConn });
    }
    expect(h.agentEffects.some((x) => x.e.type === "ping")).toBe(false);
    expect(h.sessionFor("a")?.phase).toBe("ready");
  });

  it("R-H2: 30 s without inbound activity closes the session on both sides", () => {
    const h = new Harness();
    h.addAgent("a");
    const serverConn = h.agents.get("a")!.serverConn;
    h.advance(HEARTBEAT_DEAD_AFTER_MS - 1);
    expect(h.session(serverConn)).toBeDefined();
    h.autoDeliver = false; // look at both decisions before the closes cross
    h.advance(1);
    expect(h.serverEffects.some((e) => e.type === "close" && e.conn === serverConn)).toBe(true);
    expect(h.agentEffects.some((x) => x.e.type === "close")).toBe(true);
    expect(h.session(serverConn)).toBeUndefined();
    expect(h.linkUp("a")).toBe(false);
  });
});

describe("reconnect backoff", () => {
  it("R-H4: full jitter within [0, min(60 s, 1 s * 2^attempt))", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 1_000_000 }), fc.integer({ min: 0, max: 40 }), (seed, attempt) => {
        const d = backoffDelay(rngFromSeed(seed), attempt);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThan(backoffCeiling(attempt));
        expect(backoffCeiling(attempt)).toBeLessThanOrEqual(BACKOFF_CAP_MS);
      }),
    );
    expect([0, 1, 2, 5, 6, 7].map(backoffCeiling)).toEqual([1000, 2000, 4000, 32000, 60000, 60000]);
  });

  it("R-H4: delays are jittered (not all equal) and spread over the interval", () => {
    const rng = rngFromSeed(42);
    const ds = Array.from({ length: 200 }, () => backoffDelay(rng, 6));
    expect(Math.min(...ds)).toBeLessThan(10_000);
    expect(Math.max(...ds)).toBeGreaterThan(50_000);
  });

  it("R-H4: attempts grow while sessions fail, and a session stable for 60 s resets them", () => {
    const s = newAgentSession();
    const rng = rngFromSeed(1);
    const acts: SessionAction[] = [];
    let now = 0;
    sessionConnect(s, now, acts);
    for (let i = 0; i < 8; i++) {
      sessionTransportClosed(s, s.conn, "refused", now, rng, acts);
      expect(s.retryAt - now).toBeLessThan(backoffCeiling(i));
      now = s.retryAt;
      sessionTick(s, now, rng, acts);
      expect(s.phase).toBe("connecting");
    }
    expect(s.attempt).toBe(8);
    sessionTransportOpen(s, s.conn, now, acts);
    sessionWelcome(s, s.conn, { sessionId: "x", generation: 1 }, { major: 1, minor: 0 }, now, acts);
    // Stays up 59 s with traffic, then drops: no reset.
    for (let t = 5_000; t < 60_000; t += 5_000) {
      now += 5_000;
      s.hb.lastInbound = now;
      sessionTick(s, now, rng, acts);
    }
    expect(s.attempt).toBe(8); // 55 s up
    now += 6_000;
    s.hb.lastInbound = now;
    sessionTick(s, now, rng, acts);
    expect(s.attempt).toBe(0);
    sessionTransportClosed(s, s.conn, "dropped", now, rng, acts);
    expect(s.retryAt - now).toBeLessThan(backoffCeiling(0));
  });

  it("R-H5: the server never initiates a connection", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.advance(31_000);
    h.advance(31_000);
    const kinds = new Set(h.serverEffects.map((e) => e.type));
    expect(kinds.has("connect" as never)).toBe(false);
    for (const k of kinds) expect(["persist", "send", "ping", "close", "wake", "trace", "reply", "drop_output"]).toContain(k);
  });
});

describe("registration and fencing", () => {
  it("R-F1: the instance id is generated once, persisted and kept across restarts and reconnects", () => {
    const h = new Harness();
    h.addAgent("a");
    const id = h.helloOf("a")!.clientInstanceId;
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(h.agents.get("a")!.disk.durable.get("meta")?.get("instance_id")).toBe(id);
    h.restartAgent("a", 999);
    expect(h.helloOf("a")!.clientInstanceId).toBe(id);
    h.advance(31_000); // heartbeat loss -> reconnect
    h.advance(61_000);
    const hellos = h.sent("clientHello").map((e) => (e.payload.value as { clientInstanceId: string }).clientInstanceId);
    expect(hellos.length).toBeGreaterThanOrEqual(2);
    expect(new Set(hellos)).toEqual(new Set([id]));
  });

  it("R-F2: the welcome assigns a random session id and a generation; every later envelope carries both", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "c1");
    h.output("a", "c1", "x");
    h.exit("a", "c1", 0);
    const welcome = h.sent("serverWelcome")[0]!;
    expect(welcome.sessionId).toMatch(/^[0-9a-f]{32}$/);
    expect(welcome.sessionGeneration).toBe(1n);
    const later = h.wire.filter((w) => w.env.payload.case !== "clientHello");
    expect(later.length).toBeGreaterThan(5);
    for (const w of later) {
      expect(w.env.sessionId).toBe(welcome.sessionId);
      expect(w.env.sessionGeneration).toBe(1n);
    }
  });

  it("R-F3: a new registration from the same instance fences and disconnects the prior session", () => {
    const h = new Harness();
    h.addAgent("a");
    const oldConn = h.agents.get("a")!.serverConn;
    h.addAgent("a-clone", { clientId: "a" }, 3, "a"); // same disk, same instance id
    expect(h.helloOf("a-clone")!.clientInstanceId).toBe(h.helloOf("a")!.clientInstanceId);
    expect(h.session(oldConn)).toBeUndefined();
    expect(lastError(h, "a")?.error?.code).toBe(Code.STALE_GENERATION);
    expect(h.client("a")!.generation).toBe(2n);
    expect(h.sessionFor("a-clone")?.generation).toBe(2n);
  });

  it("R-F4: a different instance claiming a live client id is rejected and recorded as the pending claim", () => {
    const h = new Harness();
    h.addAgent("a");
    h.addAgent("intruder", { clientId: "a" }, 99);
    expect(lastError(h, "intruder")?.error?.code).toBe(Code.IDENTITY_CONFLICT);
    expect(h.linkUp("intruder")).toBe(false);
    expect(h.sessionFor("a")?.phase).toBe("ready");
    const claim = h.claimOf("a");
    expect(claim?.instanceId).toBe(h.helloOf("intruder")!.clientInstanceId);
    expect(rowOf(h.serverDisk.durable, "client", "a")!.pendingClaim!.instanceId).toBe(h.helloOf("intruder")!.clientInstanceId);
  });

  it("R-F5: an operator authorization admits that exact instance once and expires after 5 minutes", () => {
    const h = new Harness();
    h.addAgent("a");
    h.addAgent("b", { clientId: "a" }, 99);
    const a = h.agents.get("a")!;
    const b = h.agents.get("b")!;
    /** Advance while "a" keeps its session alive; "b" keeps retrying. */
    const live = (ms: number): void => {
      for (let t = 0; t < ms; t += 5_000) {
        h.advance(Math.min(5_000, ms - t));
        if (a.conn) h.agentInput("a", { type: "activity", conn: a.conn });
        if (a.serverConn) h.serverInput({ type: "activity", conn: a.serverConn });
      }
    };
    expect(h.control({ op: "authorize", requestId: "r1", clientId: "a", instanceId: h.helloOf("b")!.clientInstanceId })).toEqual({
      ok: true,
      instanceId: h.helloOf("b")!.clientInstanceId,
      expiresAt: h.now + 5 * 60_000,
    });
    // While b is in backoff the authorization expires unused.
    b.st.session.retryAt = h.now + 10 * 60_000; // setup: hold b's next attempt back
    live(5 * 60_000 + 5_000);
    expect(h.client("a")!.authorizedInstanceId).toBe("");
    b.st.session.retryAt = h.now; // setup: and let it go now
    h.agentInput("b", { type: "tick" });
    expect(h.linkUp("b")).toBe(false);
    expect(lastError(h, "b")?.error?.code).toBe(Code.IDENTITY_CONFLICT);
    expect(h.claimOf("a")?.attempts).toBe(2);
    // Authorized again: the next attempt of exactly that instance consumes it and fences "a".
    h.control({ op: "authorize", requestId: "r2", clientId: "a", instanceId: h.helloOf("b")!.clientInstanceId });
    h.reconnectNow("b");
    expect(h.sessionFor("b")?.phase).toBe("ready");
    expect(h.client("a")!.authorizedInstanceId).toBe("");
    expect(h.client("a")!.instanceId).toBe(h.helloOf("b")!.clientInstanceId);
    expect(h.claimOf("a")).toBeUndefined();
    expect(h.linkUp("a")).toBe(false);
    // One-shot: the old instance is now the different one and is refused; it was
    // taken over, so it is told so (CODE_REPLACED) instead of becoming the next claim.
    h.reconnectNow("a");
    expect(h.linkUp("a")).toBe(false);
    expect(lastError(h, "a")?.error?.code).toBe(Code.REPLACED);
    expect(h.claimOf("a")).toBeUndefined();
  });

  it("R-F6: with no live session for the client id, a new instance is accepted normally", () => {
    const h = new Harness();
    h.addAgent("a");
    const first = h.helloOf("a")!.clientInstanceId;
    h.agentInput("a", { type: "transport_closed", conn: h.agents.get("a")!.conn, reason: "gone" });
    h.serverInput({ type: "conn_closed", conn: h.agents.get("a")!.serverConn, reason: "gone" });
    h.agents.get("a")!.serverConn = 0;
    h.addAgent("replacement", { clientId: "a" }, 1234);
    expect(h.sessionFor("replacement")?.phase).toBe("ready");
    expect(h.client("a")!.instanceId).not.toBe(first);
  });

  it("R-F7: the server refuses an envelope of another generation and closes", () => {
    const h = new Harness();
    h.addAgent("a");
    const a = h.agents.get("a")!;
    const sc = a.serverConn;
    const stale = structuredClone(h.wire.find((w) => w.from === "server" && w.env.payload.case === "serverWelcome")!.env);
    // Craft an agent envelope with a wrong generation.
    const { encodeEnvelope } = require_codec();
    const bad = encodeEnvelope(
      { sessionId: stale.sessionId, generation: 7 },
      {
        case: "clientCapacity",
        value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 1, maxQueuedCommands: 1 },
      },
    );
    h.serverInput({ type: "frame", conn: sc, data: bad });
    expect(h.session(sc)).toBeUndefined();
    expect(lastError(h, "a")?.error?.code).toBe(Code.STALE_GENERATION);
  });

  it("R-F7: the agent refuses a dispatch that targets another generation", () => {
    const h = new Harness();
    h.addAgent("a");
    const a = h.agents.get("a")!;
    const fence = a.st.session.fence!; // setup: the agent's fence, to craft a frame the server might send
    const { encodeEnvelope } = require_codec();
    const dispatch = encodeEnvelope(fence, {
      case: "commandDispatch",
      value: {
        $typeName: "rvbox.v1.CommandDispatch",
        issueUuid: "x",
        commandRevision: 1n,
        targetSessionGeneration: BigInt(fence.generation + 1),
        immutableRequestSha256: new Uint8Array(32),
        spec: undefined,
        issueTime: undefined,
        queueExpiryTime: undefined,
      },
    });
    h.agentInput("a", { type: "frame", conn: a.conn, data: dispatch });
    const acc = h.sent("commandAccepted").at(-1)!.payload.value as { accepted: boolean; rejection?: { code: number } };
    expect(acc.accepted).toBe(false);
    expect(acc.rejection?.code).toBe(Code.STALE_GENERATION);
    expect(h.retained("a")).toEqual([]);
  });

  it("R-H6: a reconnect registers again with a new generation, resends unacknowledged output, and reconciles only non-terminal commands", () => {
    const h = new Harness();
    h.addAgent("a");
    h.submit("a", "done-1");
    h.exit("a", "done-1", 0);
    h.submit("a", "live-1");
    h.autoDeliver = false;
    h.output("a", "live-1", "unacked bytes");
    const firstSend = h.wire.filter((w) => w.env.payload.case === "commandEvent").at(-1)!;
    // The link breaks before the server sees it.
    h.queue.length = 0;
    h.autoDeliver = true;
    h.cutLink("a");
    h.reconnectNow("a");
    expect(h.sessionFor("a")?.generation).toBe(2n);
    const req = h.sent("reconcileRequest").at(-1)!.payload.value as { targets: Array<{ issueUuid: string }> };
    expect(req.targets.map((t) => t.issueUuid)).toEqual(["live-1"]);
    const resent = h.wire.filter((w) => w.env.payload.case === "commandEvent").at(-1)!;
    const ev = (e: typeof resent) => e.env.payload.value as { eventSeq: bigint };
    expect(ev(resent).eventSeq).toBe(ev(firstSend).eventSeq);
    expect(h.storedEvents("live-1").some((e) => e.kind === "output")).toBe(true);
    expect(h.command("live-1").state).toBe("running");
  });
});

import * as codec from "../../core/codec/frame-codec.js";
function require_codec() {
  return codec;
}
