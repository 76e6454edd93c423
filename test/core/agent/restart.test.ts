// The agent after a restart: what it restores, what it interrupts.
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { defaultAgentConfig, restoreAgent, type AgentState } from "../../../core/index.js";
import { MAX_CHUNK_BYTES } from "../../../core/limits.js";
import { agentRow, stdinKey } from "../../../core/agent/store.js";
import { agentSnapshotOf } from "../../support/pair.js";
import { sha, argv, eventsIn, lifecycles, of, sends, AgentRig, stdinWrite, stdinAcks, chunk, commit, enc } from "./rig.js";

describe("restart", () => {
  it("R-F1 R-O2: a restart from durable storage restores commands, budgets, stdin, script chunks and the outbox exactly", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 1, maxQueued: 8, limits: { ...base, stdinPendingPerCommand: 1000 } });
    r.establish();
    r.run("run", argv("cat"));
    r.step({ type: "process_output", uuid: "run", stream: "stdout", data: new TextEncoder().encode("hello") });
    r.step({ type: "process_output", uuid: "run", stream: "stderr", data: new TextEncoder().encode("oops") });
    r.dispatch("in", { ...argv("cat"), stdinOpen: true });
    r.frame({
      case: "stdinWrite",
      value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: "in", writeSeq: 1n, data: new Uint8Array([1, 2]), appendNewline: false },
    });
    r.frame({ case: "stdinWrite", value: { $typeName: "rvbox.v1.StdinWrite", issueUuid: "in", writeSeq: 2n, data: new Uint8Array([3]), appendNewline: true } });
    const body = new Uint8Array(100).map((_, i) => i);
    r.dispatch("scr", { program: { case: "script", value: { sizeBytes: 100n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame({
      case: "scriptChunk",
      value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: "scr", offset: 0n, data: body.subarray(0, 40), sha256: sha(body.subarray(0, 40)) },
    });
    r.frame({
      case: "scriptChunk",
      value: { $typeName: "rvbox.v1.ScriptChunk", issueUuid: "scr", offset: 40n, data: body.subarray(40, 70), sha256: sha(body.subarray(40, 70)) },
    });
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    // What a server would be told is the same: the snapshot's records.
    expect(agentSnapshotOf(back)).toEqual(agentSnapshotOf(r.st));
    // internal: restore is exact, record by record (the working state every later answer is built from; its
    // observable effects are the snapshot above and the tests below)
    const norm = (st: AgentState) => ({
      commands: [...st.commands.entries()].map(([k, c]) => [k, { ...c, stdin: { ...c.stdin, inFlight: false } }]),
      outbox: [...st.outbox.commands.entries()].map(([k, cb]) => [k, { ...cb, pinned: cb.pinned.map((p) => ({ ...p, sentOn: 0 })) }]),
      metadataUsed: st.metadataUsed,
      scriptBytes: st.scriptBytes,
      rawTotal: st.outbox.rawTotal,
      sessionPinnedBytes: st.outbox.sessionPinnedBytes,
      summarizing: st.outbox.summarizing,
      instanceId: st.instanceId,
    });
    expect(norm(back)).toEqual(norm(r.st));
    expect(back.commands.get("in")!.stdin.pending.map((p) => [p.seq, [...p.data]])).toEqual([
      [1, [1, 2]],
      [2, [3, 10]],
    ]);
    expect(back.commands.get("in")!.stdin.pendingBytes).toBe(4);
    expect(back.commands.get("scr")!.script!.chunks.map((c) => c.length)).toEqual([40, 30]);
    expect(back.metadataUsed).toBe(3 * base.metadataPerCommand);
    expect(back.scriptBytes).toBe(100);
  });

  it("R-O1: restore does not depend on the order in which storage returns rows", () => {
    const base = defaultAgentConfig("x").limits;
    const KiB = 1024;
    const r = new AgentRig({ maxRunning: 1, limits: { ...base, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB } });
    r.establish();
    r.run("run", argv("cat"));
    for (let i = 0; i < 3; i++) r.step({ type: "process_output", uuid: "run", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES).fill(i) });
    r.step({ type: "process_output", uuid: "run", stream: "stderr", data: enc("tail") });
    r.dispatch("in", { ...argv("cat"), stdinOpen: true });
    for (let i = 1; i <= 3; i++) r.frame(stdinWrite("in", BigInt(i), [i]));
    const body = new Uint8Array(90).map((_, i) => i);
    r.dispatch("scr", { program: { case: "script", value: { sizeBytes: 90n, sha256: sha(body), interpreter: "/bin/sh" } } });
    for (let o = 0; o < 90; o += 30) r.frame(chunk("scr", o, body.subarray(o, o + 30)));
    // internal: the situation (unsent entries and pinned events both present; flow-control state)
    expect(r.st.outbox.commands.get("run")!.entries.length).toBeGreaterThan(1);
    expect(r.st.outbox.commands.get("run")!.pinned.length).toBeGreaterThan(1);
    const reversed = new Map([...r.disk.durable].map(([t, rows]) => [t, new Map([...rows].reverse())]));
    const a = restoreAgent(r.cfg, r.disk.tables(), 1);
    const b = restoreAgent(r.cfg, { get: (t) => reversed.get(t) }, 1);
    const byUuid = (x: ReturnType<typeof agentSnapshotOf>) => [...x].sort((p, q) => (p.issueUuid < q.issueUuid ? -1 : 1));
    expect(byUuid(agentSnapshotOf(b))).toEqual(byUuid(agentSnapshotOf(a))); // the same records, in any order
    // internal: the restored records are equal whatever the row order (the working state behind every later answer)
    expect(new Set(b.commands.keys())).toEqual(new Set(a.commands.keys()));
    for (const uuid of ["run", "in", "scr"]) {
      expect(b.commands.get(uuid), uuid).toEqual(a.commands.get(uuid));
      expect(b.outbox.commands.get(uuid), uuid).toEqual(a.outbox.commands.get(uuid));
    }
    expect(b.commands.get("in")!.stdin.pending.map((p) => p.seq)).toEqual([1, 2, 3]);
    expect(b.commands.get("scr")!.script!.chunks).toEqual([body.subarray(0, 30), body.subarray(30, 60), body.subarray(60, 90)]);
    expect(b.outbox.commands.get("run")!.entries.map((e) => e.idx)).toEqual(a.outbox.commands.get("run")!.entries.map((e) => e.idx));
    expect(b.outbox.commands.get("run")!.pinned.map((p) => p.seq)).toEqual(a.outbox.commands.get("run")!.pinned.map((p) => p.seq));
    expect(a.outbox.commands.get("run")!.pinned.map((p) => p.seq)).toEqual([...a.outbox.commands.get("run")!.pinned.map((p) => p.seq)].sort((x, y) => x - y));
  });

  it("R-D2: after a restart a launched command is reported interrupted and its leftover process killed, never relaunched", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("sleep", "100"), 555);
    r.autoDurable = false;
    r.dispatch("c2"); // launch authorization not durable: lost with the crash
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 555 }]);
    expect(back.snapshot().map((c) => [c.issueUuid, c.lifecycle])).toEqual([["c1", L.INTERRUPTED]]);
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const snap = back.reconcile([]);
    // The unacknowledged RUNNING event is resent, then the new INTERRUPTED one.
    expect(lifecycles(snap, "c1").map((l) => [l.state, l.reason])).toEqual([
      [L.RUNNING, ""],
      [L.INTERRUPTED, "agent restarted while the command was running; outcome unknown"],
    ]);
    expect(of(back.log, "spawn")).toEqual([]);
    const helloOf = (x: AgentRig) => (sends(x.log, "clientHello").at(-1)!.env.payload.value as { clientInstanceId: string }).clientInstanceId;
    expect(helloOf(back)).toBe(helloOf(r));
  });

  it("R-O8: a command interrupted by an agent restart gets an OutputIncomplete for both streams, with no byte count, right before INTERRUPTED", () => {
    // Found by the real chaos run (npm run chaos): after kill -9 of an agent, running
    // commands ended interrupted with no marker although their pipes were never drained.
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("sleep", "100"), 555);
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("partial") });
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    back.step({ type: "start" });
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const evs = eventsIn(back.reconcile([]), "c1");
    const tail = evs.slice(-2);
    expect(tail.map((e) => e.event.case)).toEqual(["incomplete", "lifecycle"]);
    expect(tail[0]!.event.value).toMatchObject({ streams: [1, 2], reason: "agent restarted: capture pipes not drained to EOF" });
    expect((tail[1]!.event.value as { state: L }).state).toBe(L.INTERRUPTED);
    expect(Number(tail[1]!.eventSeq)).toBe(Number(tail[0]!.eventSeq) + 1);
  });

  it("R-S1 R-C4: a restart interruption ends the command as every other end does: pending stdin answered, its rows gone, the script file discarded", () => {
    // Issue 13 item 3: interruption at restart had its own copy of "finish"
    // that skipped both, so a durable stdin write was never answered and the
    // prepared script file stayed on disk.
    const r = new AgentRig();
    r.establish();
    const body = new TextEncoder().encode("cat\n");
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: BigInt(body.length), sha256: sha(body), interpreter: "/bin/sh" } }, stdinOpen: true });
    r.frame(chunk("s1", 0, body));
    expect(of(r.frame(commit("s1", body.length, sha(body))), "write_script")).toHaveLength(1);
    expect(of(r.step({ type: "script_prepared", uuid: "s1", path: "/tmp/rvbox/s1.sh" }), "spawn").map((x) => x.scriptPath)).toEqual(["/tmp/rvbox/s1.sh"]);
    r.step({ type: "process_started", uuid: "s1", pid: 777 });
    // Durable and handed to the process, but the crash comes before it is confirmed.
    expect(of(r.frame(stdinWrite("s1", 1n, [1, 2, 3])), "write_stdin")).toHaveLength(1);
    const back = new AgentRig();
    back.disk = r.disk;
    back.disk.pending = [];
    back.st = restoreAgent(r.cfg, back.disk.tables(), 9);
    expect(back.cmd("s1").stdin.pending.map((p) => p.seq)).toEqual([1]); // internal: restored before start (nothing is sent until then)
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "s1", pid: 777 }]);
    expect(of(out, "discard_script")).toEqual([{ type: "discard_script", uuid: "s1", path: "/tmp/rvbox/s1.sh" }]);
    expect(back.snapshot().map((c) => [c.issueUuid, c.lifecycle])).toEqual([["s1", L.INTERRUPTED]]);
    expect(back.cmd("s1").stdin).toMatchObject({ pending: [], pendingBytes: 0 }); // internal: nothing held in memory either (its row and ack are checked below)
    expect(agentRow(back.disk.durable, "stdin", stdinKey("s1", 1))).toBeUndefined();
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    const tail = eventsIn(back.reconcile([]), "s1").slice(-3);
    expect(tail.map((e) => e.event.case)).toEqual(["incomplete", "stdinAck", "lifecycle"]);
    expect(tail[1]!.event.value).toMatchObject({ writeSeq: 1n, closed: false, failure: "agent restarted before the write was confirmed" });
    expect((tail[2]!.event.value as { state: L }).state).toBe(L.INTERRUPTED);
  });

  it("R-O1: events still in the local spool at a crash (the command's send window full) are sent after the restart: the exit and a stdin ack", () => {
    // A mutant that dropped the spool rows of lifecycle and stdin-ack events passed every core
    // test: each was sequenced (and persisted as an event) in the step that appended it.
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    const chunk = new Uint8Array(MAX_CHUNK_BYTES).map((_, i) => (i * 7919) % 251);
    for (let i = 0; i < 40; i++) r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: chunk });
    r.frame(stdinWrite("c1", 1n, [1, 2, 3]));
    r.step({ type: "stdin_written", uuid: "c1", seq: 1 });
    r.exit("c1", 3);
    // Nothing acknowledged: the window is full, so neither the ack nor the exit has a sequence yet.
    expect(stdinAcks(r.log, "c1")).toEqual([]);
    expect(r.lifecycleOf("c1")).toBe("running");
    const back = r.crashed();
    back.step({ type: "start" });
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    for (let i = 0; i < 100 && back.lifecycleOf("c1") === "running"; i++) back.ackAll("c1");
    expect(stdinAcks(back.log, "c1")).toEqual([[1, false, ""]]);
    expect(lifecycles(back.log, "c1").at(-1)).toMatchObject({ state: L.FAILED, exitCode: 3 });
  });

  it("R-O8: an interruption's OutputIncomplete still in the spool survives a second crash, before its INTERRUPTED", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", argv("cat"));
    const chunk = new Uint8Array(MAX_CHUNK_BYTES).map((_, i) => (i * 7919) % 251);
    for (let i = 0; i < 40; i++) r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: chunk });
    // First crash: the restart ends c1 interrupted, but the window is still full (nothing was acknowledged).
    const once = r.crashed();
    once.step({ type: "start" });
    expect(once.snapshot().map((c) => [c.issueUuid, c.lifecycle])).toEqual([["c1", L.INTERRUPTED]]);
    // Second crash before any of it was sent: both events are only in the spool.
    const twice = once.crashed(11);
    twice.step({ type: "start" });
    twice.step({ type: "transport_open", conn: twice.st.session.conn });
    twice.welcome(3, "s3");
    twice.reconcile([]);
    for (let i = 0; i < 100 && twice.lifecycleOf("c1") !== "interrupted"; i++) twice.ackAll("c1");
    const tail = eventsIn(twice.log, "c1").slice(-2);
    expect(tail.map((e) => e.event.case)).toEqual(["incomplete", "lifecycle"]);
    expect(tail[0]!.event.value).toMatchObject({ streams: [1, 2], reason: "agent restarted: capture pipes not drained to EOF" });
    expect((tail[1]!.event.value as { state: L }).state).toBe(L.INTERRUPTED);
  });

  it("R-O2: restored pinned events are only those above the acknowledged seq, and all are durable", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("a") });
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new TextEncoder().encode("b") });
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 2n } });
    // A stale pinned row an interrupted ack left behind is skipped on restore.
    r.disk.durable.get("event")!.set("c1/000000000001", { seq: 1, bytes: new Uint8Array([1]) });
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    // internal: the restored pin set (flow-control state; what is resent from it is R-D7's)
    expect(back.outbox.commands.get("c1")!.pinned.map((p) => [p.seq, p.durable, p.sentOn])).toEqual([[3, true, 0]]);
    expect(back.outbox.sessionPinnedBytes).toBe(back.outbox.commands.get("c1")!.pinnedBytes);
  });
});

describe("restart edges (from the former agent edges file)", () => {
  it("R-W6 R-O7: a restart restores unsent output entries, truncation markers, raw accounting and the summarizing state", () => {
    const base = defaultAgentConfig("x").limits;
    const KiB = 1024;
    const limits = { ...base, windowPerCommand: 96 * KiB, windowPerSession: 96 * KiB, rawHigh: 100 * KiB, rawLow: 50 * KiB };
    const r = new AgentRig({ limits });
    r.establish();
    r.run("c1");
    for (let i = 0; i < 3; i++) r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES).fill(65 + i) });
    r.step({ type: "process_output", uuid: "c1", stream: "stderr", data: new Uint8Array(10) });
    // internal throughout: the unsent entries, raw accounting and summarizing state are flow-control state
    // no peer observes before they are sent (what is sent in the end is output-flow's R-W6)
    const cb = r.st.outbox.commands.get("c1")!;
    expect(cb.entries.map((e) => e.kind)).toEqual(["output", "output", "truncation"]);
    expect(r.st.outbox.summarizing).toBe(true);
    const back = restoreAgent(r.cfg, r.disk.tables(), 3);
    expect(back.outbox.commands.get("c1")!.entries).toEqual(cb.entries);
    expect(back.outbox.commands.get("c1")!.rawBytes).toBe(cb.rawBytes);
    expect(back.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(back.outbox.summarizing).toBe(true);
    // Below the high watermark a restored outbox is not summarizing.
    const low = new AgentRig({ limits: { ...limits, rawHigh: 2 * MAX_CHUNK_BYTES, rawLow: 0 } });
    low.establish();
    low.run("c1");
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    low.step({ type: "process_output", uuid: "c1", stream: "stdout", data: new Uint8Array(MAX_CHUNK_BYTES) });
    expect(low.st.outbox.rawTotal).toBe(2 * MAX_CHUNK_BYTES);
    expect(restoreAgent(low.cfg, low.disk.tables(), 3).outbox.summarizing).toBe(false);
  });
  it("R-D1: before start nothing is admitted or launched; a command queued before a restart launches after it (it was never started)", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("waiting");
    expect(r.spawned()).toEqual(["busy"]); // "waiting" is queued
    const back = new AgentRig({ maxRunning: 2 }); // a slot is free even before "busy" is settled
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const early = back.step({ type: "tick" });
    expect(early.filter((e) => e.type === "persist")).toEqual([]);
    expect(early).toEqual([]);
    expect(back.spawned()).toEqual([]);
    const started = back.step({ type: "start" });
    expect(of(started, "kill_orphan").map((k) => k.uuid)).toEqual(["busy"]);
    expect(back.spawned()).toEqual(["waiting"]);
    expect(of(started, "spawn").map((s) => s.uuid)).toEqual(["waiting"]);
    expect(
      of(started, "persist")
        .flatMap((p) => p.records)
        .some((x) => x.table === "meta"),
    ).toBe(false); // the instance id is kept, not rewritten
    // The interrupted command is done like any other: once acknowledged it becomes a tombstone.
    back.step({ type: "transport_open", conn: back.st.session.conn });
    back.welcome(2, "s2");
    back.reconcile([]);
    back.ackAll("busy");
    expect(back.tombstoned("busy")).toBe(true);
    expect(back.retained()).toEqual(["waiting"]);
  });
  it("R-D2: a launch authorized before a crash is reported interrupted and its possible process killed by the shell's own record (pid 0)", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1");
    expect(r.spawned()).toEqual(["c1"]); // launching: spawned, the process not reported started
    expect(r.lifecycleOf("c1")).toBe("");
    const back = new AgentRig();
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 4);
    const out = back.step({ type: "start" });
    expect(of(out, "kill_orphan")).toEqual([{ type: "kill_orphan", uuid: "c1", pid: 0 }]);
    expect(back.snapshot().map((c) => [c.issueUuid, c.lifecycle])).toEqual([["c1", L.INTERRUPTED]]);
    expect(of(out, "spawn")).toEqual([]);
  });
});
