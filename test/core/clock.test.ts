// The two clocks of the reducer contract (docs/ARCHITECTURE.md): `now` is the
// deadline clock (monotonic, anchored to the epoch by the runner) and `wall`
// the wall clock, used only for timestamps. Here the wall clock is stepped an
// hour either way while the deadline clock runs on, as NTP or a resumed VM
// would do to a daemon.
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { restoreServer } from "../../core/index.js";
import { Code } from "../../core/errors.js";
import { AUTHORIZATION_TTL_MS, CAPACITY_RETRY_CAP_MS, DEFAULT_QUEUE_EXPIRY_MS } from "../../core/limits.js";
import { CommandLifecycle as L, ControlErrorSchema, ExecutionSpecSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { CommandDispatch, ServerWelcome } from "../../protos/gen/rvbox/v1/agent_pb.js";
import type { CommandEvent } from "../../protos/gen/rvbox/v1/common_pb.js";
import { Harness } from "../support/harness.js";
import { argv, expectClosed, ServerRig } from "../support/server-rig.js";
import { plainAuthorization, plainClaim } from "../support/pair.js";

const HOUR = 3_600_000;

describe("clock: deadlines on the deadline clock, timestamps from the wall clock", () => {
  for (const step of [HOUR, -HOUR]) {
    it(`R-F4 R-F5: with the wall clock stepped ${step > 0 ? "+" : "-"}1 h, server_time, issue, claim, incident and session times follow it; queue expiry and authorization stay on the deadline clock`, () => {
      const r = new ServerRig();
      r.wallStep = step;
      const wall = () => r.now + r.wallStep;
      const c = r.open();
      expect(timestampMs(r.session(c)!.openedTime!)).toBe(wall());
      const hello = r.hello(c, "a", "i1");
      const welcome = r.sent(hello, c, "serverWelcome")[0]!.env.payload.value as ServerWelcome;
      expect(timestampMs(welcome.serverTime!)).toBe(wall());
      expect(timestampMs(r.client("a")!.lastActivityTime!)).toBe(wall());
      r.snapshot(c);
      r.now += 1_000;
      const sub = r.step({ type: "control", request: { op: "submit", requestId: "s1", uuid: "u1", clientId: "a", spec: create(ExecutionSpecSchema, argv()) } });
      const d = r.sent(sub, c, "commandDispatch")[0]!.env.payload.value as CommandDispatch;
      expect(r.command("u1").createdAt).toBe(wall());
      expect(timestampMs(d.issueTime!)).toBe(wall());
      // The default expiry is a duration on the deadline clock, sent as a wall instant.
      expect(r.command("u1").queueExpiry, "shown as the wall instant its real duration away").toBe(r.now + r.wallStep + DEFAULT_QUEUE_EXPIRY_MS);
      expect(timestampMs(d.queueExpiryTime!)).toBe(wall() + DEFAULT_QUEUE_EXPIRY_MS);
      // A claim and an incident carry wall times.
      const x = r.open();
      expectClosed(r, r.hello(x, "a", "i2"), x, Code.IDENTITY_CONFLICT);
      expect(plainClaim(r.claimOf("a"))!.at).toBe(wall());
      r.frame(c, {
        case: "error",
        value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.STORE_INCIDENT, message: "disk" }), closeSession: false },
      });
      expect(r.incidents().map((i) => timestampMs(i.time!))).toEqual([wall()]);
      // An authorization lives AUTHORIZATION_TTL_MS of deadline-clock time.
      r.control({ op: "authorize", requestId: "au", clientId: "a", instanceId: "i2" });
      expect(plainAuthorization(r.client("a"))!.expiresAt, "shown as the wall instant the TTL away").toBe(wall() + AUTHORIZATION_TTL_MS);
    });
  }

  it("R-D1: the operator's queue_expiry_time is a wall instant: kept on the deadline clock, it passes after its real duration though the wall clock was stepped back 1 h", () => {
    const r = new ServerRig();
    const c = r.connect("a");
    r.step({ type: "conn_closed", conn: c, reason: "offline" });
    r.wallStep = -HOUR;
    const wall = () => r.now + r.wallStep;
    r.step({
      type: "control",
      request: { op: "submit", requestId: "s1", uuid: "q1", clientId: "a", spec: create(ExecutionSpecSchema, argv()), queueExpiry: wall() + 10_000 },
    });
    expect(r.command("q1").queueExpiry, "shown as the wall instant its real duration away").toBe(r.now + r.wallStep + 10_000);
    r.now += 9_999;
    r.step({ type: "tick" });
    expect(r.command("q1").state).toBe("queued");
    r.now += 1;
    r.step({ type: "tick" });
    expect(r.command("q1").state).toBe("expired");
  });

  it("R-D1: an agent keeps the dispatch's queue_expiry_time on its own deadline clock, and stamps its events with its wall clock", () => {
    const h = new Harness();
    h.wallStep = HOUR;
    h.addAgent("a", { maxRunning: 1, maxQueued: 4 });
    h.submit("a", "run");
    h.submit("a", "wait", {}, { queueExpiry: h.now + h.wallStep + 60_000 });
    expect(h.command("wait").queueExpiry, "shown as the wall instant its real duration away").toBe(h.now + h.wallStep + 60_000);
    // Accepted and held in the agent's queue (no process yet).
    expect(h.command("wait").state).toBe("accepted");
    expect(h.spawned("a")).toEqual(["run"]);
    // Internal on purpose: which clock the agent keeps the expiry on shows only when it passes (below).
    const held = h.agents.get("a")!.st.commands.get("wait")!;
    expect(held.queueExpiry).toBe(h.now + 60_000);
    expect(held.acceptedAt).toBe(h.now + h.wallStep);
    const times = h.sent("commandEvent").map((e) => timestampMs((e.payload.value as CommandEvent).time!));
    expect(times.length).toBeGreaterThan(0);
    for (const t of times) expect(t).toBe(h.now + h.wallStep);
    // It expires after its real 60 s, not an hour early.
    h.advance(59_000);
    expect(h.command("wait").state).toBe("accepted");
    h.advance(1_000);
    expect(h.command("wait").state).toBe("expired");
  });
});

describe("clock: event timestamps after an agent restart", () => {
  it("R-C4 R-O8: the OutputIncomplete and the interrupted lifecycle of a command found running after a restart carry the agent's wall clock, not its deadline clock", () => {
    const h = new Harness();
    h.wallStep = HOUR;
    h.addAgent("a");
    h.submit("a", "r1", { argv: ["sleep", "60"] });
    expect(h.agentRunning("a")).toEqual(["r1"]);
    h.restartAgent("a");
    h.reconnectNow("a");
    const events = h
      .sent("commandEvent")
      .map((e) => e.payload.value as CommandEvent)
      .filter((e) => e.issueUuid === "r1");
    const incomplete = events.filter((e) => e.event.case === "incomplete");
    expect(incomplete.length).toBeGreaterThan(0);
    const life = events.filter((e) => e.event.case === "lifecycle" && e.event.value.state === L.INTERRUPTED);
    expect(life.length).toBeGreaterThan(0);
    for (const e of [...incomplete, ...life]) expect(timestampMs(e.time!), e.event.case).toBe(h.now + h.wallStep);
  });
});

describe("clock: persisted deadlines across a restart", () => {
  it("R-F5 R-D3: an authorization and a capacity retry persisted before a restart keep their instants when the deadline clock carries on, and are bounded when it was re-anchored 1 h back", () => {
    const r = new ServerRig();
    const a = r.connect("a", "i1");
    r.control({ op: "authorize", requestId: "au", clientId: "a", instanceId: "i2" });
    const expiresAt = r.now + AUTHORIZATION_TTL_MS;
    // A capacity rejection requeues with backoff.
    r.submit("a", "busy");
    r.accept(a, "busy", false, Code.CAPACITY, "queue full");
    const retryAt = r.cmd("busy").dispatch.nextAttemptAt; // internal: the retry instant (no view shows it; the dispatch after the last restart observes it)
    expect(r.command("busy").state).toBe("queued");
    // Restart 10 s later on a deadline clock that carried on (anchored to a
    // wall clock that was not stepped): the same instants, still pending.
    r.now += 10_000;
    r.st = restoreServer(r.cfg, r.disk.tables(), 2);
    expect(plainAuthorization(r.client("a"))).toEqual({ instanceId: "i2", expiresAt: expiresAt + r.wallStep });
    expect(r.cmd("busy").dispatch.nextAttemptAt).toBe(retryAt); // internal: as above
    // Restart again after the wall clock was stepped back 1 h: the new
    // process anchors its deadline clock an hour earlier. The one-shot
    // authorization must not live an hour longer, and the queued command
    // must not wait an hour for its retry.
    r.now -= HOUR;
    r.wallStep = HOUR;
    r.st = restoreServer(r.cfg, r.disk.tables(), 3);
    const b = r.connect("a", "i1");
    expect(r.client("a")!.authorizedInstanceId).toBe("");
    expect(r.command("busy").state).toBe("dispatched");
    expect(r.sent(r.log, b, "commandDispatch").map((x) => (x.env.payload.value as { issueUuid: string }).issueUuid)).toEqual(["busy"]);
    expect(CAPACITY_RETRY_CAP_MS).toBeLessThan(HOUR);
  });
});
