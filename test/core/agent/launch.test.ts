// Launch at most once, queue expiry, process exits and output at the agent.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ControlErrorSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import { T0, argv, accepts, eventsIn, lifecycles, of, AgentRig } from "./rig.js";

describe("launch and queue expiry", () => {
  it("R-D1: a queued command expires exactly at its queue expiry (1 ms before it is still queued) and is never launched", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    const expiry = T0 + 5_000;
    const out = r.dispatch("waits", argv("true"), { expiry });
    expect(r.spawned()).toEqual(["busy"]); // "waits" is queued
    expect(of(out, "wake").at(-1)!.at).toBe(expiry); // earlier than the heartbeat
    r.now = expiry - 1;
    r.step({ type: "tick" });
    expect(r.lifecycleOf("waits"), "still queued").toBe("");
    expect(r.snapshot().map((c) => [c.issueUuid, c.lifecycle])).toContainEqual(["waits", L.ACCEPTED]);
    r.now = expiry;
    const exp = r.step({ type: "tick" });
    expect(r.lifecycleOf("waits")).toBe("expired");
    expect(lifecycles(exp, "waits")).toEqual([expect.objectContaining({ state: L.EXPIRED, reason: "queue expiry passed before launch" })]);
    r.exit("busy", 0);
    expect(r.spawned()).toEqual(["busy"]);
  });

  it("R-D1: a dispatch whose expiry has already passed is accepted but never launched; the next tick expires it", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("late", argv("true"), { expiry: T0 });
    expect(accepts(out)[0]!.accepted).toBe(true);
    expect(r.lifecycleOf("late")).toBe("");
    expect(r.retained()).toEqual(["late"]);
    expect(of(out, "spawn")).toEqual([]);
    r.step({ type: "tick" });
    expect(r.lifecycleOf("late")).toBe("expired");
    expect(of(r.log, "spawn")).toEqual([]);
  });

  it("R-H1: with nothing queued the wake is the session deadline; a launching command's expiry does not count", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("c1", argv("true"), { expiry: T0 + 1_000 });
    expect(r.spawned(), "launching: spawned").toEqual(["c1"]);
    expect(r.lifecycleOf("c1"), "its start not reported").toBe("");
    expect(of(out, "wake").at(-1)!.at).toBe(T0 + 10_000);
  });

  it("R-D1: the launch is authorized durably before the spawn; running is bounded by maxRunning", () => {
    const r = new AgentRig({ maxRunning: 2, maxQueued: 4 });
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.dispatch("c2");
    r.dispatch("c3");
    // internal: the launch authorizations ahead of their persist (nothing is sent or spawned yet; the flush below observes them)
    expect(["c1", "c2", "c3"].map((u) => r.cmd(u).phase)).toEqual(["launching", "launching", "queued"]);
    expect(of(r.log, "spawn")).toEqual([]);
    const out = r.flush();
    expect(of(out, "spawn").map((s) => s.uuid)).toEqual(["c1", "c2"]);
    expect(of(out, "spawn")[0]).toMatchObject({ scriptPath: "" });
  });

  it("R-D1: a command ended while its launch authorization is being made durable is never spawned (CODE_REPLACED ends every local command)", () => {
    const r = new AgentRig({ maxRunning: 2 });
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    expect(r.spawned()).toEqual([]);
    // Another instance took this client id over before the authorization reached the disk.
    r.frame({
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code: Code.REPLACED, message: "taken over" }), closeSession: true },
    });
    r.flush();
    expect(r.spawned()).toEqual([]);
    expect(r.retained()).toEqual([]);
    expect(r.tombstoned("c1")).toBe(true);
  });

  it("R-D1: spawn_failed and process_started are honoured only while launching", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const again = r.step({ type: "process_started", uuid: "c1", pid: 9 });
    // The first pid stays: after a crash now the agent would kill the orphan by it.
    const back = r.crashed();
    expect(of(back.step({ type: "start" }), "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 4242 }]);
    expect(lifecycles(again)).toEqual([]);
    r.step({ type: "spawn_failed", uuid: "c1", reason: "late" });
    expect(r.lifecycleOf("c1")).toBe("running");
    r.step({ type: "process_started", uuid: "ghost", pid: 1 });
    r.step({ type: "spawn_failed", uuid: "ghost", reason: "x" });
    expect(r.retained()).toEqual(["c1"]);
    const f = new AgentRig();
    f.establish();
    f.dispatch("c2");
    const fail = f.step({ type: "spawn_failed", uuid: "c2", reason: "ENOENT" });
    expect(lifecycles(fail, "c2")).toEqual([
      expect.objectContaining({ state: L.REJECTED, reason: "could not launch: ENOENT", error: expect.objectContaining({ code: Code.VALIDATION }) }),
    ]);
  });
});

describe("process exits and output", () => {
  it("R-O8: an undrained pipe yields one incomplete event naming the streams before the terminal lifecycle", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.exit("c1", 0, { incompleteStreams: ["stderr", "stdout"] });
    const evs = eventsIn(out, "c1");
    expect(evs.map((e) => e.event.case)).toEqual(["incomplete", "lifecycle"]);
    expect(evs[0]!.event.value).toMatchObject({ streams: [2, 1], reason: "capture pipe not drained to EOF (a descendant may still hold it open)" });
    const none = new AgentRig();
    none.establish();
    none.run("c2");
    expect(eventsIn(none.exit("c2", 0), "c2").map((e) => e.event.case)).toEqual(["lifecycle"]);
  });

  it("R-O8: exit 0 succeeds; a timeout, a non-zero code or a signal fails with what is known", () => {
    const cases: Array<[number | null, string | null, boolean, Record<string, unknown>]> = [
      [0, null, false, { state: L.SUCCEEDED, exitCode: 0, reason: "", signalName: "" }],
      [0, null, true, { state: L.FAILED, exitCode: 0, reason: "timed out" }],
      [3, null, false, { state: L.FAILED, exitCode: 3, reason: "", signalName: "" }],
      [null, "SIGSEGV", false, { state: L.FAILED, signalName: "SIGSEGV", reason: "" }],
      [null, "SIGKILL", true, { state: L.FAILED, signalName: "SIGKILL", reason: "timed out" }],
    ];
    for (const [code, sig, timedOut, want] of cases) {
      const r = new AgentRig();
      r.establish();
      r.run("c1");
      const l = lifecycles(r.exit("c1", code, { signal: sig, timedOut }), "c1").at(-1)!;
      expect(l).toMatchObject(want);
      if (code === null) expect(l.exitCode).toBeUndefined();
    }
  });

  it("R-O8: an exit while still launching implies the start (pid 0); exits of unknown or finished commands are ignored", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    const out = r.exit("c1", 0);
    expect(lifecycles(out, "c1").map((l) => l.state)).toEqual([L.RUNNING, L.SUCCEEDED]);
    const again = r.exit("c1", 1);
    expect(eventsIn(again)).toEqual([]);
    expect(r.exit("ghost", 0).some((e) => e.type === "persist")).toBe(false);
    expect(r.cmd("c1").pid).toBe(0); // internal: no pid recorded for a finished command (a restart kills nothing for it)
  });

  it("R-O1: output is taken only while running and is cut into chunks of at most 64 KiB with continuous offsets", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.dispatch("c0");
    r.dispatch("q");
    expect(r.step({ type: "process_output", uuid: "q", stream: "stdout", data: new Uint8Array(5) }).some((e) => e.type === "persist")).toBe(false);
    r.step({ type: "process_started", uuid: "c0", pid: 1 });
    const data = new Uint8Array(MAX_CHUNK_BYTES + 10).fill(65);
    const out = r.step({ type: "process_output", uuid: "c0", stream: "stderr", data });
    const chunks = eventsIn(out, "c0")
      .filter((e) => e.event.case === "output")
      .map((e) => {
        const v = e.event.value as { stream: number; streamOffset: bigint; originalSize: number };
        return [v.stream, Number(v.streamOffset), v.originalSize];
      });
    expect(chunks).toEqual([
      [2, 0, MAX_CHUNK_BYTES],
      [2, MAX_CHUNK_BYTES, 10],
    ]);
    r.exit("c0", 0);
    expect(r.step({ type: "process_output", uuid: "c0", stream: "stdout", data: new Uint8Array(5) }).some((e) => e.type === "persist")).toBe(false);
  });

  it("R-W10: reasons are cut to 1024 characters and signal names to 64", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    const out = r.step({ type: "spawn_failed", uuid: "c1", reason: "x".repeat(5000) });
    const l = lifecycles(out, "c1").at(-1)!;
    expect(l.reason).toHaveLength(1024);
    expect(l.reason.startsWith("could not launch: xxx")).toBe(true);
    expect((l.error as { message?: string }).message).toBe(l.reason);
    const s = new AgentRig();
    s.establish();
    s.run("c2");
    expect(lifecycles(s.exit("c2", null, { signal: "S".repeat(100) }), "c2").at(-1)!.signalName).toBe("S".repeat(64));
  });
});
