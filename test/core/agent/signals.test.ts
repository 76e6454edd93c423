// Signals at the agent.
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { agentRow } from "../../../core/agent/store.js";
import { sends, eventsIn, lifecycles, of, AgentRig, expectClosed, expectRefused, signal, signalResults, argv, accepts } from "./rig.js";

describe("signals at the agent", () => {
  it("R-S4: a signal for an unknown command is NOT_FOUND; revision 0 or beyond 2^53 closes; an unknown kind is VALIDATION", () => {
    const r = new AgentRig();
    r.establish();
    expectRefused(r, r.frame(signal("nope", 2n, SignalKind.USER1)), Code.NOT_FOUND);
    r.run("c1");
    expectRefused(r, r.frame(signal("c1", 2n, SignalKind.UNSPECIFIED)), Code.VALIDATION);
    expectRefused(r, r.frame(signal("c1", 2n, 99 as SignalKind)), Code.VALIDATION, "unknown signal 99");
    // The refused ones were not taken as applied: revision 2 is still new.
    expect(of(r.probe(signal("c1", 2n, SignalKind.USER1)), "signal")).toHaveLength(1);
    expectClosed(r, r.frame(signal("c1", 0n, SignalKind.USER1)), Code.SEQUENCE_VIOLATION, "signal without a usable revision");
    const u = new AgentRig();
    u.establish();
    u.run("c1");
    expectClosed(u, u.frame(signal("c1", 2n ** 60n, SignalKind.USER1)), Code.SEQUENCE_VIOLATION);
  });

  it("R-S4: a repeated or older revision is not applied again; signals to a done command are dropped", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expect(of(r.frame(signal("c1", 3n, SignalKind.USER1)), "signal")).toHaveLength(1);
    const same = r.frame(signal("c1", 3n, SignalKind.USER2));
    const older = r.frame(signal("c1", 2n, SignalKind.USER2));
    expect([...of(same, "signal"), ...of(older, "signal")]).toEqual([]);
    expect([...signalResults(same), ...signalResults(older)]).toEqual([]);
    expect(r.snapshot().map((c) => [c.issueUuid, c.commandRevision])).toEqual([["c1", 3n]]);
    r.exit("c1", 1);
    const late = r.frame(signal("c1", 4n, SignalKind.KILL));
    expect(of(late, "signal")).toEqual([]);
    expect(sends(late)).toEqual([]);
  });

  it("R-S4: every ending signal cancels a queued command with that revision; USER1/USER2 only report not running yet", () => {
    const kinds: Array<[SignalKind, string]> = [
      [SignalKind.CANCEL, "cancel"],
      [SignalKind.TERMINATE, "terminate"],
      [SignalKind.KILL, "kill"],
      [SignalKind.INTERRUPT, "interrupt"],
      [SignalKind.HANGUP, "hangup"],
      [SignalKind.QUIT, "quit"],
    ];
    for (const [kind, name] of kinds) {
      const r = new AgentRig({ maxRunning: 0 });
      r.establish();
      r.dispatch("q");
      const out = r.frame(signal("q", 5n, kind));
      const ev = eventsIn(out, "q").at(-1)!;
      expect(Number(ev.commandRevision), name).toBe(5);
      expect(ev.event.value, name).toMatchObject({ state: L.CANCELLED, reason: `${name} before launch` });
      expect(r.lifecycleOf("q"), name).toBe("cancelled");
      expect(r.spawned(), name).toEqual([]);
      expect(signalResults(out)).toEqual([]);
    }
    for (const kind of [SignalKind.USER1, SignalKind.USER2]) {
      const r = new AgentRig({ maxRunning: 0 });
      r.establish();
      r.dispatch("q");
      const out = r.frame(signal("q", 4n, kind));
      expect(signalResults(out, "q")).toEqual([[4, kind, false, "not running yet"]]);
      expect(r.spawned()).toEqual([]); // still queued
      expect(r.snapshot().map((c) => [c.issueUuid, c.lifecycle, c.commandRevision])).toEqual([["q", L.ACCEPTED, 4n]]);
      expect(signalResults(r.probe(signal("q", 4n, kind)), "q"), "revision 4 applied: not again").toEqual([]);
      expect(agentRow(r.disk.durable, "command", "q")!.revision).toBe(4);
    }
  });

  it("R-S4: while launching an ending signal is remembered and decides the launch: cancelled before launch, never spawned", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    expect(r.cmd("c1").phase).toBe("launching"); // internal: the launch waits on the acceptance's persist (ahead of anything sent)
    const u = r.frame(signal("c1", 2n, SignalKind.USER2));
    expect(signalResults(u)).toEqual([]); // not durable yet
    r.frame(signal("c1", 3n, SignalKind.TERMINATE));
    expect(r.cmd("c1").cancelRevision).toBe(3); // internal: remembered, not yet durable (what it decides is observed below)
    r.autoDurable = true; // the cancellation's own persist is then durable too
    const out = r.flush();
    expect(of(out, "spawn")).toEqual([]);
    expect(signalResults(out, "c1")).toEqual([[2, SignalKind.USER2, false, "not running yet"]]);
    const last = eventsIn(out, "c1").at(-1)!;
    expect(Number(last.commandRevision)).toBe(3);
    expect(last.event.value).toMatchObject({ state: L.CANCELLED, reason: "cancelled before launch" });
  });

  it("R-S4: an ending signal after the spawn but before the process reported its start is delivered as CANCEL once it starts", () => {
    const r = new AgentRig();
    r.establish();
    const d = r.dispatch("c1");
    expect(of(d, "spawn")).toHaveLength(1);
    expect(r.lifecycleOf("c1"), "spawned, its start not reported yet").toBe("");
    r.frame(signal("c1", 2n, SignalKind.INTERRUPT));
    const started = r.step({ type: "process_started", uuid: "c1", pid: 31 });
    expect(of(started, "signal")).toEqual([{ type: "signal", uuid: "c1", signal: SignalKind.CANCEL, revision: 2 }]);
    const out = r.exit("c1", 130);
    const last = lifecycles(out, "c1").at(-1)!;
    expect(last).toMatchObject({ state: L.CANCELLED, exitCode: 130, reason: "ended after an operator request" });
  });

  it("R-S4: a signal to a running process is delivered and reported; after an ending one a non-zero exit is cancelled and a zero exit still succeeded", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const u = r.frame(signal("c1", 2n, SignalKind.USER1));
    expect(of(u, "signal")).toEqual([{ type: "signal", uuid: "c1", signal: SignalKind.USER1, revision: 2 }]);
    expect(signalResults(u, "c1")).toEqual([[2, SignalKind.USER1, true, ""]]);
    const exitWith = (code: number) =>
      lifecycles(r.probeInput({ type: "process_exited", uuid: "c1", exitCode: code, signal: null, timedOut: false, incompleteStreams: [] }), "c1").at(-1);
    expect(exitWith(1), "USER1 asks for no end: a failure stays a failure").toMatchObject({ state: L.FAILED, exitCode: 1 });
    r.frame(signal("c1", 3n, SignalKind.TERMINATE));
    expect(exitWith(1), "after TERMINATE a non-zero exit is cancelled").toMatchObject({ state: L.CANCELLED, reason: "ended after an operator request" });
    const out = r.exit("c1", null, { signal: "SIGTERM" });
    const ev = eventsIn(out, "c1").at(-1)!;
    expect(Number(ev.commandRevision)).toBe(3);
    expect(ev.event.value).toMatchObject({ state: L.CANCELLED, signalName: "SIGTERM", reason: "ended after an operator request" });
    expect((ev.event.value as { exitCode?: number }).exitCode).toBeUndefined();

    const z = new AgentRig();
    z.establish();
    z.run("c1");
    z.frame(signal("c1", 2n, SignalKind.QUIT));
    const ok = z.exit("c1", 0);
    expect(lifecycles(ok, "c1").at(-1)).toMatchObject({ state: L.SUCCEEDED, exitCode: 0 });
  });
});

describe("signals edges (from the former agent edges file)", () => {
  it("R-S4: a signal revision below the command's revision is applied but never lowers the revision", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1", argv("true"), { rev: 5n });
    r.step({ type: "process_started", uuid: "c1", pid: 3 });
    const out = r.frame(signal("c1", 2n, SignalKind.USER1));
    expect(signalResults(out, "c1")).toEqual([[2, SignalKind.USER1, true, ""]]);
    expect(r.snapshot().map((c) => [c.issueUuid, c.commandRevision])).toEqual([["c1", 5n]]);
    expect(of(r.probe(signal("c1", 2n, SignalKind.USER1)), "signal"), "revision 2 applied").toEqual([]);
    expect(of(r.probe(signal("c1", 3n, SignalKind.USER1)), "signal"), "revision 3 is new").toHaveLength(1);
    expect(accepts(r.dispatch("c1", argv("true"), { rev: 5n }))[0]!.commandRevision).toBe(5n);
  });
});
