// The agent's named timers (core/agent/timers.ts): the wake-up instant is the
// earliest of the session's timers and the waiting commands' queue expiries,
// and nextWake names which one it is.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle, ExecutionSpecSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, newAgent, type AgentCommand } from "../../../core/index.js";
import { nextWake } from "../../../core/agent/timers.js";
import {
  newAgentSession,
  sessionConnect,
  sessionTransportClosed,
  sessionTransportOpen,
  sessionWelcome,
  sessionDeadline,
  type SessionAction,
} from "../../../core/session/agent-session.js";
import { newCommandOutbox } from "../../../core/window/outbox.js";
import { rngFromSeed } from "../../../core/rng.js";
import { argv, of, AgentRig } from "./rig.js";

const T0 = 1_700_000_000_000;

function waiting(uuid: string, queueExpiry: number, phase: AgentCommand["phase"] = "queued"): AgentCommand {
  return {
    uuid,
    hash: "00".repeat(32),
    revision: 1,
    spec: create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["true"] } } }),
    queueExpiry,
    acceptedAt: T0,
    phase,
    lifecycle: CommandLifecycle.ACCEPTED,
    pid: 0,
    script: null,
    stdin: { next: 1, pending: [], pendingBytes: 0, inFlight: false, closed: false },
    lastSignalRevision: 0,
    cancelRevision: 0,
  };
}

describe("agent timers", () => {
  it("R-H1 R-H2 R-H4: the session names its timer: heartbeat ping, the 60 s backoff reset, reconnect", () => {
    const s = newAgentSession();
    const acts: SessionAction[] = [];
    const st = newAgent(defaultAgentConfig("a"), 1);
    st.session = s;
    expect(nextWake(st)).toBeNull();
    sessionConnect(s, T0, acts);
    expect(nextWake(st)).toBeNull(); // connecting: the transport's own timeout, not the core's
    sessionTransportOpen(s, s.conn, T0, acts);
    expect(nextWake(st)).toEqual({ at: T0 + 10_000, timer: { timer: "heartbeat", due: "ping" } });
    s.hb.pinged = true;
    expect(nextWake(st)).toEqual({ at: T0 + 30_000, timer: { timer: "heartbeat", due: "dead" } });
    s.hb.pinged = false;
    sessionWelcome(s, s.conn, { sessionId: "s", generation: 1 }, { major: 1, minor: 0 }, T0 + 55_000, acts);
    s.hb.lastInbound = T0 + 110_000;
    expect(nextWake(st)).toEqual({ at: T0 + 115_000, timer: { timer: "backoff_reset" } });
    s.stableReset = true;
    expect(nextWake(st)).toEqual({ at: T0 + 120_000, timer: { timer: "heartbeat", due: "ping" } });
    sessionTransportClosed(s, s.conn, "gone", T0 + 120_000, rngFromSeed(3), acts);
    expect(nextWake(st)).toEqual({ at: s.retryAt, timer: { timer: "reconnect" } });
    expect(sessionDeadline(s)).toBe(s.retryAt);
  });

  it("a waiting command's queue expiry wakes the agent when it comes first; launched ones have none", () => {
    const st = newAgent(defaultAgentConfig("a"), 1);
    const add = (c: AgentCommand): void => {
      st.commands.set(c.uuid, c);
      st.outbox.commands.set(c.uuid, newCommandOutbox(c.uuid));
    };
    add(waiting("late", T0 + 9_000));
    add(waiting("soon", T0 + 5_000, "preparing"));
    add(waiting("running", T0 + 1_000, "running"));
    add(waiting("none", 0));
    expect(nextWake(st)).toEqual({ at: T0 + 5_000, timer: { timer: "queue_expiry", uuid: "soon" } });
  });
});

describe("timers edges (from the former agent edges file)", () => {
  it("R-H1: the wake never lies in the past, and a queued command without expiry adds no deadline", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    const q = r.dispatch("q");
    expect(of(q, "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.now = T0 + 100;
    const late = r.dispatch("late", argv("true"), { expiry: T0 + 50 });
    expect(of(late, "wake").at(-1)!.at).toBe(T0 + 100);
  });
  it("R-H1: after 10 s of silence the agent asks its runner for a ping on the current connection", () => {
    const r = new AgentRig();
    r.establish();
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: 1 }]);
  });
});
