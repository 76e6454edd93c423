// The active index (core/server/active.ts): a server step costs what the
// clients with a ready session hold, not what every client holds; the timers
// of clients without a session still fire on time; and a command changed
// without `touch` is caught by the invariants.
import { describe, expect, it } from "vitest";
import { serverStep } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { DEFAULT_QUEUE_EXPIRY_MS, WAKE_HEAP_SLACK } from "../../../core/limits.js";
import { nextQueueExpiry } from "../../../core/server/active.js";
import { activeIndexInvariants } from "../../../core/server/invariants.js";
import type { ServerInput } from "../../../core/server/server-types.js";
import { CommandLifecycle as L, OutputStream, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { create } from "@bufbuild/protobuf";
import { encodeEnvelope, type Payload } from "../../../core/codec/frame-codec.js";
import { CommandAcceptedSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandEventSchema, ExecutionSpecSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { testPorts } from "../../support/ports.js";
import { walked } from "../../support/walked.js";
import { argv, enc, lifecycle, output, ServerRig, T0 } from "../../support/server-rig.js";

/** Command records the reducer looks up during one step (its invariants are not run here). */
function readsIn(r: ServerRig, input: ServerInput): number {
  const commands = r.st.commands;
  let reads = 0;
  const get = commands.get;
  commands.get = function (this: typeof commands, k: string) {
    reads++;
    return get.call(this, k);
  };
  try {
    serverStep(r.st, input, r.now, { ports: testPorts }, r.now);
  } finally {
    commands.get = get;
  }
  return reads;
}

/** A server with `n` commands queued for client "off" (no session) and one running command "x" on client "a". */
function offlineBacklog(n: number): { r: ServerRig; conn: number } {
  const r = new ServerRig();
  r.store = false;
  const off = r.connect("off");
  r.step({ type: "conn_closed", conn: off, reason: "gone" });
  for (let i = 0; i < n; i++) r.submit("off", `q${i}`);
  const conn = r.connect("a");
  r.running(conn, "x");
  return { r, conn };
}

/** A server whose client "busy" (room for 4) has `n` commands submitted: 4 dispatched, the rest queued behind them. */
function busyBacklog(n: number): { r: ServerRig; busy: number } {
  const r = new ServerRig();
  r.store = false;
  const busy = r.connect("busy", "i", { maxRunningCommands: 2, maxQueuedCommands: 2 });
  for (let i = 0; i < n; i++) r.submit("busy", `q${i}`);
  return { r, busy };
}

/** A server with `n` agents h0..h(n-1), one command f0..f(n-1) submitted to each (and dispatched). */
function oneEach(n: number): { r: ServerRig; conns: number[] } {
  const r = new ServerRig();
  r.store = false;
  const conns = Array.from({ length: n }, (_, a) => r.connect(`h${a}`));
  for (let a = 0; a < n; a++) r.submit(`h${a}`, `f${a}`);
  return { r, conns };
}

describe("active index", () => {
  it("R-D1: a step's lookups do not grow with the commands queued for a client without a session", () => {
    const reads: number[] = [];
    for (const n of [10, 400]) {
      const { r, conn } = offlineBacklog(n);
      r.step({ type: "tick" }); // the offline client's timers are worked out once here, then reused
      let total = 0;
      for (let i = 0; i < 10; i++) {
        r.now += 10;
        total += readsIn(r, { type: "tick" });
      }
      total += readsIn(r, { type: "activity", conn });
      reads.push(total);
      expect(r.command("q0").state).toBe("queued");
    }
    // The same work with 400 queued as with 10 (before the index: every active command was read
    // at least three times per step, over 13,000 lookups here).
    expect(reads[1]).toBe(reads[0]);
    expect(reads[1]).toBeLessThan(100);
  });

  it("R-D1: output from a connected client is stored while hundreds wait for an offline one, and each still expires at its queue expiry", () => {
    const { r, conn } = offlineBacklog(300);
    r.event(conn, "x", 2, output(OutputStream.STDOUT, 0, enc("hello")));
    expect(r.command("x").storedThrough).toBe(2);
    r.event(conn, "x", 3, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.command("x").state).toBe("succeeded");
    r.step({ type: "conn_closed", conn, reason: "gone" });
    expect(r.st.wake?.at).toBe(T0 + DEFAULT_QUEUE_EXPIRY_MS);
    r.now = T0 + DEFAULT_QUEUE_EXPIRY_MS - 1;
    r.step({ type: "tick" });
    expect(r.command("q299").state).toBe("queued");
    r.now = T0 + DEFAULT_QUEUE_EXPIRY_MS;
    r.step({ type: "tick" });
    for (const uuid of ["q0", "q150", "q299"]) expect(r.command(uuid).state).toBe("expired");
    expect(r.st.activeIndex.byClient.has("off")).toBe(false);
    expect(r.st.active.size).toBe(0);
  });

  it("R-D1: a queue expiry passing expires that command alone and looks up none of the others waiting", () => {
    const reads: number[] = [];
    for (const n of [20, 600]) {
      const r = new ServerRig();
      r.store = false;
      r.step({ type: "conn_closed", conn: r.connect("off"), reason: "gone" });
      const t0 = r.now;
      for (let i = 0; i < n; i++) {
        r.now += 10;
        r.submit("off", `q${i}`);
      }
      let total = 0;
      for (const i of [0, 1, 2]) {
        r.now = t0 + 10 * (i + 1) + DEFAULT_QUEUE_EXPIRY_MS;
        total += readsIn(r, { type: "tick" });
        r.step({ type: "durable", through: r.st.gate.lastId });
        expect(r.command(`q${i}`).state).toBe("expired");
        expect(r.command(`q${i + 1}`).state).toBe("queued");
      }
      activeIndexInvariants(r.st);
      reads.push(total);
    }
    // The same lookups with 600 waiting as with 20 (before: every active command, at each expiry).
    expect(reads[1]).toBe(reads[0]);
  });

  it("R-D3: a capacity retry of a client that went away is still the wake once the client is offline", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "q1");
    r.accept(c, "q1", false, Code.CAPACITY, "full");
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    const retryAt = r.cmd("q1").dispatch.nextAttemptAt; // internal: when the retry is due
    expect(r.st.wake?.at).toBe(retryAt);
    // Reused on the next steps (nothing of the client changed) and still right.
    r.now += 1;
    r.step({ type: "tick" });
    expect(r.st.wake?.at).toBe(retryAt);
    expect(r.st.activeIndex.wakes.has("q1")).toBe(true); // internal: the kept answer
  });

  it("R-S1 R-S4: a step looks up no running command that has nothing to send, yet a stdin write or signal for one goes out at once", () => {
    const reads: number[] = [];
    let last: ServerRig | null = null;
    let lastConn = 0;
    for (const n of [3, 150]) {
      const r = new ServerRig();
      r.store = false;
      const conns = Array.from({ length: n }, (_, i) => r.connect(`h${i}`));
      conns.forEach((c, i) => r.running(c, `x${i}`, { ...argv("cat"), stdinOpen: true }));
      r.step({ type: "tick" }); // the pump finds nothing to send for any of them and marks them quiet
      let total = 0;
      for (let i = 0; i < 10; i++) {
        r.now += 1;
        total += readsIn(r, { type: "activity", conn: conns[i % n]! });
      }
      reads.push(total);
      [last, lastConn] = [r, conns[n - 1]!];
    }
    // The same lookups with 150 running as with 3 (before: every running command of every ready client, each step).
    expect(reads[1]).toBe(reads[0]);
    // Nor does the next wake walk the clients: their kept answers sit in a heap (timers.ts).
    const r0 = last!;
    r0.now += 1;
    expect(walked(r0.st.activeIndex.byClient, () => void readsIn(r0, { type: "activity", conn: lastConn }))).toBe(0);
    const r = last!;
    const uuid = "x149";
    expect(r.st.activeIndex.quiet.has(uuid)).toBe(true); // internal: the mark
    r.control({ op: "stdin", requestId: "w1", uuid, data: enc("hi"), appendNewline: false });
    expect(r.sent(r.log, lastConn, "stdinWrite").map((x) => (x.env.payload.value as { issueUuid: string }).issueUuid)).toEqual([uuid]);
    r.control({ op: "signal", requestId: "s1", uuid, signal: SignalKind.USER1 });
    expect(r.sent(r.log, lastConn, "signalCommand").map((x) => (x.env.payload.value as { issueUuid: string }).issueUuid)).toEqual([uuid]);
  });

  it("R-D1 R-D3: a step looks up none of a backlog queued behind an agent with no free capacity", () => {
    const reads: number[] = [];
    for (const n of [20, 600]) {
      const { r, busy } = busyBacklog(n);
      const other = r.connect("b");
      expect(r.command("q3").state).toBe("dispatched");
      expect(r.command("q4").state).toBe("queued");
      r.step({ type: "tick" });
      let total = 0;
      for (let i = 0; i < 10; i++) {
        r.now += 1;
        total += readsIn(r, { type: "activity", conn: i % 2 ? busy : other });
      }
      reads.push(total);
    }
    // The same lookups behind 600 as behind 20 (before: the whole backlog, every step of any agent).
    expect(reads[1]).toBe(reads[0]);
    expect(reads[1]).toBeLessThan(100);
  });

  it("R-D1 R-D3: a command through an agent with hundreds queued behind it looks up no more than with a few", () => {
    const reads: number[] = [];
    for (const n of [20, 600]) {
      const { r, busy } = busyBacklog(n);
      r.step({ type: "tick" });
      // Each step on its own, then made durable, as the shell would (the rig's own steps run the invariants, which read everything).
      const step = (input: ServerInput): number => {
        const before = r.st.gate.lastId;
        let k = readsIn(r, input);
        if (r.st.gate.lastId !== before) k += readsIn(r, { type: "durable", through: r.st.gate.lastId });
        return k;
      };
      const frame = (payload: Payload): ServerInput => ({ type: "frame", conn: busy, data: encodeEnvelope(r.fenceOf(busy), payload) });
      let total = 0;
      for (const [i, uuid] of ["q0", "q1", "q2"].entries()) {
        r.now += 1;
        total += step(frame({ case: "commandAccepted", value: create(CommandAcceptedSchema, { issueUuid: uuid, commandRevision: 1n, accepted: true }) }));
        total += step(
          frame({
            case: "commandEvent",
            value: create(CommandEventSchema, { issueUuid: uuid, eventSeq: 1n, commandRevision: 1n, event: lifecycle(L.RUNNING) }),
          }),
        );
        total += step(
          frame({
            case: "commandEvent",
            value: create(CommandEventSchema, { issueUuid: uuid, eventSeq: 2n, commandRevision: 1n, event: lifecycle(L.SUCCEEDED, { exitCode: 0 }) }),
          }),
        );
        total += step({
          type: "control",
          request: { op: "submit", requestId: `more${i}`, uuid: `more${i}`, clientId: "busy", spec: create(ExecutionSpecSchema, argv()) },
        });
      }
      expect(r.command("q2").state).toBe("succeeded");
      expect(r.command("q5").state).toBe("dispatched");
      activeIndexInvariants(r.st);
      reads.push(total);
    }
    // The same lookups behind 600 as behind 20 (before: the pump and the client's timers walked the whole backlog, each step).
    expect(reads[1]).toBe(reads[0]);
  });

  it("R-D1: in a fan-out to hundreds of agents, each CommandAccepted looks up no more than with a few", () => {
    const reads: number[] = [];
    for (const n of [20, 400]) {
      const { r, conns } = oneEach(n);
      r.step({ type: "tick" });
      expect(r.command(`f${n - 1}`).state).toBe("dispatched");
      // Unanswered dispatches wait quietly for their answer or their redelivery (internal: the mark).
      expect(r.st.activeIndex.quiet.has("f0")).toBe(true);
      let total = 0;
      for (let a = 0; a < 10; a++) {
        r.now += 1;
        const frame = encodeEnvelope(r.fenceOf(conns[a]!), {
          case: "commandAccepted",
          value: create(CommandAcceptedSchema, { issueUuid: `f${a}`, commandRevision: 1n, accepted: true }),
        });
        const before = r.st.gate.lastId;
        total += readsIn(r, { type: "frame", conn: conns[a]!, data: frame });
        if (r.st.gate.lastId !== before) total += readsIn(r, { type: "durable", through: r.st.gate.lastId });
        expect(r.command(`f${a}`).state).toBe("accepted");
      }
      activeIndexInvariants(r.st);
      reads.push(total);
    }
    // The same lookups among 400 as among 20 (before: every accept walked every unanswered dispatch of the fleet).
    expect(reads[1]).toBe(reads[0]);
  });

  it("R-D1: an unanswered dispatch waiting quietly is sent again when its redelivery comes due, and only then", () => {
    const r = new ServerRig({ redeliveryMs: 5_000 });
    const conn = r.connect("a");
    const other = r.connect("b");
    r.submit("a", "x");
    const dispatches = (): number => r.sent(r.log, conn, "commandDispatch").length;
    expect(dispatches()).toBe(1);
    expect(r.st.activeIndex.quiet.has("x")).toBe(true); // internal: not visited by the pump until then
    const due = r.st.commands.get("x")!.dispatch.dispatchedAt + 5_000;
    // Steps before it is due (another agent's frames, this one's, a tick) send nothing for it.
    r.now = due - 1;
    r.step({ type: "activity", conn: other });
    r.step({ type: "activity", conn });
    r.step({ type: "tick" });
    expect(dispatches()).toBe(1);
    // Due: the first step at or after that instant sends it again, whatever the step is.
    r.now = due + 3;
    r.step({ type: "activity", conn: other });
    expect(dispatches()).toBe(2);
    r.now = due + 4_999 + 3;
    r.step({ type: "activity", conn });
    expect(dispatches()).toBe(2);
    expect(r.st.activeIndex.quiet.has("x")).toBe(true); // quiet again, until the next redelivery
    r.now = due + 5_000 + 3;
    r.step({ type: "tick" });
    expect(dispatches()).toBe(3);
  });

  it("R-D3: after a fleet-wide CAPACITY rejection a step looks up none of the commands waiting out their backoff", () => {
    const reads: number[] = [];
    for (const n of [20, 400]) {
      const { r, conns } = oneEach(n);
      const other = r.connect("other");
      for (let a = 0; a < n; a++) r.accept(conns[a]!, `f${a}`, false, Code.CAPACITY, "agent full");
      const waiting = Array.from({ length: n }, (_, a) => `f${a}`).filter((u) => r.st.commands.get(u)!.state === L.QUEUED);
      expect(waiting.length).toBeGreaterThan(n / 2);
      for (const u of waiting) expect(r.st.activeIndex.quiet.has(u)).toBe(true); // internal: the mark
      let total = 0;
      for (let i = 0; i < 10; i++) total += readsIn(r, { type: "activity", conn: other });
      reads.push(total);
    }
    // The same lookups among 400 as among 20 (before: every step of any agent walked every command in backoff).
    expect(reads[1]).toBe(reads[0]);
  });

  it("R-D3: a command waiting out its capacity backoff quietly is dispatched again at its retry, not before", () => {
    const r = new ServerRig();
    const conn = r.connect("a");
    const other = r.connect("b");
    r.submit("a", "x");
    r.accept(conn, "x", false, Code.CAPACITY, "agent full");
    const c = r.st.commands.get("x")!;
    // (Full jitter may draw no wait at all: then it was sent again at once. Draw until it waits.)
    for (let i = 0; c.state !== L.QUEUED && i < 20; i++) r.accept(conn, "x", false, Code.CAPACITY, "agent full");
    expect(c.state).toBe(L.QUEUED);
    expect(r.st.activeIndex.quiet.has("x")).toBe(true); // internal: not visited until then
    const sent = (): number => r.sent(r.log, conn, "commandDispatch").length;
    const before = sent();
    const at = c.dispatch.nextAttemptAt;
    r.now = at - 1;
    r.step({ type: "activity", conn: other });
    r.step({ type: "tick" });
    expect(sent()).toBe(before);
    r.now = at;
    r.step({ type: "activity", conn: other });
    expect(sent()).toBe(before + 1);
    expect(r.command("x").state).toBe("dispatched");
  });

  it("R-D3: a deadline clock stepped back 1 h dispatches a command waiting quietly in backoff at once (its retry is implausibly far)", () => {
    const r = new ServerRig();
    const conn = r.connect("a");
    r.submit("a", "x");
    r.accept(conn, "x", false, Code.CAPACITY, "agent full");
    const c = r.st.commands.get("x")!;
    for (let i = 0; c.state !== L.QUEUED && i < 20; i++) r.accept(conn, "x", false, Code.CAPACITY, "agent full");
    expect(r.st.activeIndex.quiet.has("x")).toBe(true);
    const sent = (): number => r.sent(r.log, conn, "commandDispatch").length;
    const before = sent();
    r.now -= 3_600_000;
    r.step({ type: "activity", conn });
    expect(sent()).toBe(before + 1);
  });

  it("R-D1 R-D3 R-W2: a backlog waiting for room is dispatched oldest first whenever room grows, ahead of newer commands", () => {
    const r = new ServerRig();
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    for (const u of ["c1", "c2", "c3", "c4", "c5", "c6"]) r.submit("a", u);
    const sent = (): string[] => r.sent(r.log, c, "commandDispatch").map((x) => (x.env.payload.value as { issueUuid: string }).issueUuid);
    expect(sent()).toEqual(["c1", "c2"]);
    // An answer leaves one fewer in flight: the oldest waiting goes, not the newest submitted.
    r.submit("a", "new");
    r.accept(c, "c1");
    expect(sent()).toEqual(["c1", "c2", "c3"]);
    // The agent reports more room: the next oldest fill it.
    const capacity = (running: number, queued: number, max: number) =>
      r.frame(c, {
        case: "clientCapacity",
        value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: running, queuedCommands: queued, maxRunningCommands: max, maxQueuedCommands: max },
      });
    capacity(1, 1, 1);
    expect(sent()).toEqual(["c1", "c2", "c3"]); // no room: c3 still unanswered
    r.accept(c, "c2");
    r.accept(c, "c3");
    capacity(1, 1, 3);
    expect(sent()).toEqual(["c1", "c2", "c3", "c4", "c5", "c6", "new"]);
    // Drained, then undrained: what waited goes out in order when the drain ends.
    for (const u of ["c4", "c5", "c6", "new"]) r.accept(c, u);
    capacity(0, 0, 8);
    r.control({ op: "set_draining", requestId: "d1", clientId: "a", draining: true });
    for (const u of ["d1", "d2"]) r.submit("a", u);
    expect(sent()).not.toContain("d1");
    r.control({ op: "set_draining", requestId: "d2", clientId: "a", draining: false });
    expect(sent().slice(-2)).toEqual(["d1", "d2"]);
  });

  it("R-D3: a parked command still waiting for its capacity retry does not hold back a later one when room grows", () => {
    const r = new ServerRig();
    const c = r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 1 });
    for (const u of ["c1", "c2", "c3", "c4"]) r.submit("a", u);
    const sent = (): string[] => r.sent(r.log, c, "commandDispatch").map((x) => (x.env.payload.value as { issueUuid: string }).issueUuid);
    expect(sent()).toEqual(["c1", "c2"]);
    // c2 is refused for capacity: back in the queue with a retry ahead; c3 takes its place.
    r.accept(c, "c2", false, Code.CAPACITY, "full");
    expect(sent()).toEqual(["c1", "c2", "c3"]);
    r.step({ type: "tick" }); // no room: c2 (retry ahead) and c4 both wait
    expect(r.cmd("c2").dispatch.nextAttemptAt).toBeGreaterThan(r.now); // internal: its retry is not due
    // c1 answered: one place. c2 may not go yet, so c4 takes it.
    r.accept(c, "c1");
    expect(sent()).toEqual(["c1", "c2", "c3", "c4"]);
    expect(r.command("c2").state).toBe("queued");
  });

  it("room that grows without unpark() leaves a parked command behind, and the invariants name it", () => {
    const r = new ServerRig();
    r.connect("a", "i", { maxRunningCommands: 1, maxQueuedCommands: 0 });
    for (const u of ["c1", "c2"]) r.submit("a", u);
    expect(r.st.activeIndex.parked.get("a")?.live.has("c2")).toBe(true); // internal: the mark
    activeIndexInvariants(r.st);
    r.st.clients.get("a")!.capacity.maxQueued = 4; // a write that bypasses unpark()
    expect(() => activeIndexInvariants(r.st)).toThrow(/a: 1 commands parked but it has room/);
  });

  it("the kept-wake heaps stay within WAKE_HEAP_SLACK + 2 × active commands when a command ends (campaign seed 2523)", () => {
    const r = new ServerRig();
    r.store = false;
    const clients = Array.from({ length: 8 }, (_, i) => `off${i}`);
    for (const id of clients) {
      r.step({ type: "conn_closed", conn: r.connect(id), reason: "gone" });
      r.submit(id, `${id}-q`, { ...argv("cat"), stdinOpen: true });
    }
    // Each stdin write to a queued command works its answer out again and pushes it, leaving the old entry stale.
    let ended = 0;
    for (let i = 0; i < 400 && ended < clients.length - 2; i++) {
      const ix = r.st.activeIndex;
      if (ix.wakeHeap.length >= WAKE_HEAP_SLACK + 2 * r.st.active.size - 1) {
        // A command ends: the bound shrinks by two with no push (the rig runs the invariants after the step).
        // The latest submitted go first: off0's entry stays the top, so no stale entry is popped.
        const id = clients[clients.length - 2 - ended++]!;
        r.control({ op: "signal", requestId: `k${i}`, uuid: `${id}-q`, signal: SignalKind.KILL });
        expect(r.command(`${id}-q`).state).toBe("cancelled");
      } else expect(r.control({ op: "stdin", requestId: `w${i}`, uuid: "off7-q", data: enc("x"), appendNewline: false })).toMatchObject({ ok: true });
    }
    expect(ended).toBe(clients.length - 2);
    expect(r.st.activeIndex.wakeHeap.length).toBeLessThanOrEqual(WAKE_HEAP_SLACK + 2 * r.st.active.size);
  });

  it("a quiet command given something to send past touch() is named by the invariants", () => {
    const r = new ServerRig();
    const c = r.connect("a");
    r.running(c, "x");
    r.step({ type: "tick" });
    expect(r.st.activeIndex.quiet.has("x")).toBe(true); // internal: the mark
    activeIndexInvariants(r.st);
    r.cmd("x").signals.push({ revision: 1, signal: SignalKind.USER1, requestId: "s", sentOn: 0 }); // a write past touch()
    expect(() => activeIndexInvariants(r.st)).toThrow(/x: marked quiet but has something to send/);
  });

  it("a command changed without touch() leaves a stale kept wake, and the invariants name it", () => {
    const { r } = offlineBacklog(3);
    r.step({ type: "tick" });
    expect(r.st.activeIndex.wakes.has("q1")).toBe(true); // internal: the kept answer
    activeIndexInvariants(r.st);
    r.cmd("q1").dispatch.nextAttemptAt = r.now + 5_000; // a write that bypasses touch()
    expect(() => activeIndexInvariants(r.st)).toThrow(/wake kept for q1 went stale/);
  });

  it("the index follows submit, end, queue expiries and charge", () => {
    const { r, conn } = offlineBacklog(2);
    expect([...r.st.activeIndex.byClient.keys()].sort()).toEqual(["a", "off"]);
    expect(nextQueueExpiry(r.st)).toBe(T0 + DEFAULT_QUEUE_EXPIRY_MS);
    const charged = [...r.st.active].reduce((s, u) => s + r.cmd(u).charged, 0);
    expect(r.st.activeIndex.charged).toBe(charged);
    r.event(conn, "x", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    expect(r.st.activeIndex.byClient.has("a")).toBe(false);
    activeIndexInvariants(r.st);
    // A broken charge is caught.
    r.st.activeIndex.charged += 1;
    expect(() => activeIndexInvariants(r.st)).toThrow(/active metadata charge/);
  });
});
