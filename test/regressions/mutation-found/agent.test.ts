// Agent edges found by the mutation run (Stryker): each test kills mutants
// that survived before it (docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { agentInvariants, restoreAgent } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { agentRow, stdinKey } from "../../../core/agent/store.js";
import { T0, sha, argv, sends, eventsIn, lifecycles, of, AgentRig, stdinWrite, closeStdin, signal, chunk, commit, enc } from "../../core/agent/rig.js";

describe("agent edges found by the mutation run", () => {
  it("R-O1: restore ignores rows whose command or outbox is gone, and an empty ledger starts the counter at 0", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const durable = structuredClone(r.disk.durable);
    durable.set("tombstone", new Map());
    durable.set(
      "chunk",
      new Map<string, unknown>([
        ["ghost/0000000000000000", { data: new Uint8Array([1]) }],
        ["c1/0000000000000000", { data: new Uint8Array([2]) }],
      ]),
    );
    durable.set("stdin", new Map<string, unknown>([["ghost/0000000000000001", { seq: 1, data: new Uint8Array([1]), close: false }]]));
    durable.get("entry")?.set("ghost/000000000001", { idx: 1, kind: "meta", event: {}, revision: 1, time: 0 });
    durable.get("event")!.set("ghost/000000000001", { seq: 1, bytes: new Uint8Array([1]) });
    const back = restoreAgent(r.cfg, { get: (t) => durable.get(t) }, 1);
    expect(back.tombstoneSeq).toBe(0);
    expect([...back.commands.keys()]).toEqual(["c1"]);
    expect(back.commands.get("c1")!.script).toBeNull();
    expect([...back.outbox.commands.keys()]).toEqual(["c1"]);
    agentInvariants(back);
  });

  it("R-O2: a stored event at exactly the acknowledged seq is not restored as pinned", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("a") });
    r.frame({ case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "c1", throughEventSeq: 1n } });
    r.disk.durable.get("event")!.set("c1/000000000001", { seq: 1, bytes: new Uint8Array([9]) });
    const back = restoreAgent(r.cfg, r.disk.tables(), 2);
    expect(back.outbox.commands.get("c1")!.pinned.map((p) => p.seq)).toEqual([2]);
  });

  it("R-S1: stdin that waited across a restart reaches the process once the command launches", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [7, 8]));
    r.frame(closeStdin("c1", 2n));
    const back = new AgentRig({ maxRunning: 1 });
    back.disk = r.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 5);
    // internal: the restored buffer before start (nothing is sent or written until then; the writes reaching the process are checked below)
    expect(back.st.commands.get("c1")!.stdin).toEqual({
      next: 3,
      pending: [
        { seq: 1, data: new Uint8Array([7, 8]), close: false },
        { seq: 2, data: new Uint8Array(0), close: true },
      ],
      pendingBytes: 2,
      inFlight: false,
      closed: true,
    });
    const started = back.step({ type: "start" });
    expect(of(started, "spawn").map((x) => x.uuid)).toEqual(["c1"]);
    const run = back.step({ type: "process_started", uuid: "c1", pid: 9 });
    expect(of(run, "write_stdin")).toEqual([{ type: "write_stdin", uuid: "c1", seq: 1, data: new Uint8Array([7, 8]) }]);
    expect(of(back.step({ type: "stdin_written", uuid: "c1", seq: 1 }), "close_stdin")).toEqual([{ type: "close_stdin", uuid: "c1", seq: 2 }]);
  });

  it("R-O1: the command record carries neither stdin data nor script chunks: those have their own rows", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true });
    r.frame(stdinWrite("c1", 1n, [1, 2, 3]));
    const body = new Uint8Array(10).fill(4);
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 10n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body.subarray(0, 5)));
    expect(agentRow(r.disk.durable, "command", "c1")!.stdin).toEqual({ next: 2, pending: [], pendingBytes: 0, inFlight: false, closed: false });
    expect(agentRow(r.disk.durable, "command", "s1")!.script).toEqual({
      size: 10,
      sha256: Buffer.from(sha(body)).toString("hex"),
      received: 5,
      chunks: [],
      committed: false,
      path: "",
    });
    expect(agentRow(r.disk.durable, "stdin", stdinKey("c1", 1))).toEqual({ seq: 1, data: new Uint8Array([1, 2, 3]), close: false });
  });

  it("R-O8: only a lifecycle with an error code carries an error; a clean exit has none", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const ok = lifecycles(r.exit("c1", 0), "c1").at(-1)!;
    expect(ok.error).toBeUndefined();
    const f = new AgentRig();
    f.establish();
    f.dispatch("c2");
    const bad = lifecycles(f.step({ type: "spawn_failed", uuid: "c2", reason: "" }), "c2").at(-1)!;
    expect(bad.error).toMatchObject({ code: Code.VALIDATION, message: "could not launch: ", issueUuid: "c2" });
  });

  it("R-T4: the welcome's selected version is recorded", () => {
    const r = new AgentRig();
    r.register();
    r.welcome(1, "s", { major: 1, minor: 0 });
    expect(r.st.session.selected).toEqual({ major: 1, minor: 0 }); // internal: recorded (no frame carries it back to a peer)
  });

  it("R-W10: server errors without an error body are handled as code UNSPECIFIED with an empty message", () => {
    const reg = new AgentRig();
    reg.register();
    const a = reg.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: true } }, null);
    expect(of(a, "close")).toEqual([{ type: "close", conn: 1, reason: "registration refused: UNSPECIFIED " }]);
    const est = new AgentRig();
    est.establish();
    const b = est.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: false } });
    expect(
      of(b, "trace")
        .filter((t) => t.event === "server_error")
        .map((t) => t.detail),
    ).toEqual([{ code: "UNSPECIFIED", message: "" }]);
    const c = est.frame({ case: "error", value: { $typeName: "rvbox.v1.AgentError", closeSession: true } });
    expect(of(c, "close")).toEqual([{ type: "close", conn: 1, reason: "server error: UNSPECIFIED " }]);
  });

  it("R-H6: while connecting there is no deadline and no wake, unless a queued command expires", () => {
    const r = new AgentRig();
    expect(of(r.step({ type: "start" }), "wake")).toEqual([]);
    const q = new AgentRig({ maxRunning: 0 });
    q.establish();
    q.dispatch("c1", argv("true"), { expiry: T0 + 90_000 });
    const back = new AgentRig({ maxRunning: 0 });
    back.disk = q.disk;
    back.st = restoreAgent(back.cfg, back.disk.tables(), 3);
    expect(of(back.step({ type: "start" }), "wake").at(-1)!.at).toBe(T0 + 90_000);
  });

  it("R-H1: a queued command's expiry later than the heartbeat does not push the wake back", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    expect(of(r.dispatch("c1", argv("true"), { expiry: T0 + 90_000 }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    expect(of(r.dispatch("c2", argv("true"), { expiry: T0 + 5_000 }), "wake").at(-1)!.at).toBe(T0 + 5_000);
    expect(of(r.dispatch("c3", argv("true"), { expiry: T0 + 7_000 }), "wake").at(-1)!.at).toBe(T0 + 5_000);
  });

  it("R-D11: deferred event and stdin work of a command the reconcile result removed is dropped quietly", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.autoDurable = false;
    r.step({ type: "process_output", uuid: "c1", stream: "stdout", data: enc("pending") });
    r.frame(stdinWrite("c1", 1n, [1]));
    r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] },
    });
    const out = r.flush();
    expect(eventsIn(out)).toEqual([]);
    expect(of(out, "write_stdin")).toEqual([]);
    expect(r.retained()).toEqual([]);
    expect(r.tombstoned("c1")).toBe(true);
  });

  it("R-C2: a script that starts preparing takes the slot in that same step: the next queued command waits", () => {
    const body = new Uint8Array(20).fill(1);
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body));
    r.frame(commit("s1", 20, sha(body)));
    r.dispatch("c2");
    // Both queued behind "busy": the script is not written out yet, nothing else spawned.
    expect(of(r.log, "write_script")).toEqual([]);
    expect(r.spawned()).toEqual(["busy"]);
    const out = r.exit("busy", 0);
    // The script starts preparing (its file is written) and takes the slot: c2 is not spawned.
    expect(of(out, "write_script").map((x) => x.uuid)).toEqual(["s1"]);
    expect(of(out, "spawn")).toEqual([]);
    expect(r.spawned()).toEqual(["busy"]);
  });

  it("R-C4 R-O1: executor reports for commands in another phase, or unknown, change nothing", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    expect(r.step({ type: "script_failed", uuid: "c1", reason: "x" }).some((e) => e.type === "persist")).toBe(false);
    expect(r.lifecycleOf("c1")).toBe("running");
    expect(r.step({ type: "process_output", uuid: "ghost", stream: "stdout", data: enc("x") }).some((e) => e.type === "persist")).toBe(false);
    expect(r.step({ type: "stdin_written", uuid: "ghost", seq: 1 }).some((e) => e.type === "persist")).toBe(false);
  });

  it("R-D1: a queue expiry only ends commands that have not launched", () => {
    const r = new AgentRig();
    r.establish();
    r.dispatch("c1", argv("true"), { expiry: T0 + 1_000 });
    r.step({ type: "process_started", uuid: "c1", pid: 2 });
    r.now = T0 + 2_000;
    r.step({ type: "activity", conn: r.st.session.conn });
    r.step({ type: "tick" });
    expect(r.lifecycleOf("c1")).toBe("running");
  });

  it("R-S1 R-S3: writes and closes for a finished command with open stdin only consume their seq", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1", { ...argv("cat"), stdinOpen: true });
    r.exit("c1", 0);
    const w = r.frame(stdinWrite("c1", 1n, [5]));
    const c = r.frame(closeStdin("c1", 2n));
    expect(r.expectedWriteSeq("c1")).toBe(3);
    // internal: nothing buffered and stdin not marked closed (a finished command; no peer observes its stdin state)
    expect(r.cmd("c1").stdin).toMatchObject({ pending: [], pendingBytes: 0, inFlight: false, closed: false });
    expect([...of(w, "persist"), ...of(c, "persist")].flatMap((p) => p.records).filter((x) => x.table === "stdin")).toEqual([]);
  });

  it("R-S4: a signal to a finished command leaves its revision alone; USER2 while launching does not stop the launch", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    r.frame(signal("c1", 7n, SignalKind.KILL));
    expect(r.snapshot().map((c) => [c.issueUuid, c.commandRevision])).toEqual([["c1", 1n]]);
    expect(r.cmd("c1").lastSignalRevision).toBe(0); // internal: a finished command applies no signal, so no peer can observe this
    const l = new AgentRig();
    l.establish();
    l.autoDurable = false;
    l.dispatch("c2");
    l.frame(signal("c2", 2n, SignalKind.USER2));
    expect(l.cmd("c2").cancelRevision).toBe(0); // internal: not remembered as ending (the launch below is its observable effect)
    l.autoDurable = true;
    expect(of(l.flush(), "spawn").map((x) => x.uuid)).toEqual(["c2"]);
  });

  it("R-C3: script frames for a finished command change nothing and are not even answered", () => {
    const body = new Uint8Array(20).fill(3);
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body.subarray(0, 10)));
    r.frame(signal("s1", 2n, SignalKind.CANCEL));
    // The commit first (before the last chunk), then the chunk, then the commit again.
    const early = r.frame(commit("s1", 20, sha(body)));
    const a = r.frame(chunk("s1", 10, body.subarray(10)));
    const b = r.frame(commit("s1", 20, sha(body)));
    expect(sends(early)).toEqual([]);
    expect(sends(a)).toEqual([]);
    expect(sends(b)).toEqual([]);
    expect([...early, ...a, ...b].some((e) => e.type === "persist")).toBe(false);
    expect(r.cmd("s1").script).toMatchObject({ received: 10, committed: false }); // internal: a finished command answers no script frame
    expect(of(r.log, "write_script")).toEqual([]);
  });

  it("R-C4: a commit with the wrong size is rejected even when every byte has arrived", () => {
    const body = new Uint8Array(20).fill(3);
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.dispatch("s1", { program: { case: "script", value: { sizeBytes: 20n, sha256: sha(body), interpreter: "/bin/sh" } } });
    r.frame(chunk("s1", 0, body));
    const out = r.frame(commit("s1", 21, sha(body)));
    expect(lifecycles(out, "s1")).toEqual([expect.objectContaining({ state: L.REJECTED, reason: "script commit size 21 != declared 20" })]);
    expect(of(out, "write_script")).toEqual([]);
    expect(r.cmd("s1").script!.committed).toBe(false); // internal: as the rejection left it
  });

  it("R-D10: retiring an argv command touches no script chunk rows", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    const out = r.ackAll("c1");
    expect(
      [
        ...new Set(
          of(out, "persist")
            .flatMap((p) => p.records)
            .map((x) => x.table),
        ),
      ].sort(),
    ).toEqual(["command", "event", "outbox", "tombstone"]);
  });
});
