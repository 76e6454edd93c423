// Server command history: the reserved metadata tier (architecture.md "Tiered
// unified command-storage budget"), pruning settled terminal commands into a
// compact ledger, and every protocol answer that must stay the same for a
// pruned command (reconcile, late frames, repeated submits, operator calls).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandLifecycle as L, ExecutionSpecSchema, OutputStream, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { ARCHIVED_TABLE, isTerminal, ledgerRowOf, metaCharge, restoreServer, serverInvariants, type PrunedCommand } from "../../../core/index.js";
import { ledgerEntry } from "../../../core/server/history.js";
import { type CommandRow, restoreCommand } from "../../../core/server/store.js";
import { Code, InvariantViolation } from "../../../core/errors.js";
import { SERVER_ACTIVE_METADATA_SHARE, SERVER_PRUNES_PER_STEP } from "../../../core/limits.js";
import { argv, enc, lifecycle, of, output, sha, ServerRig, T0 } from "../../support/server-rig.js";
import { plainIncident } from "../../support/pair.js";
import { testPorts } from "../../support/ports.js";

/** Run `uuid` to SUCCEEDED on `conn` (accepted, running, exit 0). */
function finish(r: ServerRig, conn: number, uuid: string, out?: string): void {
  r.running(conn, uuid);
  let seq = 2;
  if (out !== undefined) r.event(conn, uuid, seq++, output(OutputStream.STDOUT, 0, enc(out)));
  r.event(conn, uuid, seq, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
  // GetCommand: succeeded, or (history pruned at once) NOT_FOUND saying it ended succeeded.
  if (r.findCommand(uuid)) expect(r.command(uuid).state).toBe("succeeded");
  else expect(r.notFound(uuid)).toBe(`command ${uuid} ended succeeded and was pruned from history`);
}

/** The charge of one finished `true` command, measured on a throwaway server. */
function finishedCharge(): number {
  const r = new ServerRig();
  finish(r, r.connect(), "x");
  return r.cmd("x").charged; // internal: the tier's charge sizes the budgets below (no peer observes it)
}

const specOf = (s: ReturnType<typeof argv>) => create(ExecutionSpecSchema, s);
const durable = (r: ServerRig, table: string) => [...(r.disk.durable.get(table)?.keys() ?? [])];
/** The commands GetCommand answers NOT_FOUND "… was pruned from history" for, of `uuids`. */
const prunedOf = (r: ServerRig, uuids: string[]) => uuids.filter((u) => /^command \S+ ended .* and was pruned from history$/.test(r.notFound(u) ?? ""));
/** The request hash the server's CommandDispatch of `uuid` carried (what the agent holds it under). */
const dispatchedHash = (r: ServerRig, uuid: string) =>
  (
    r.sent(r.log, undefined, "commandDispatch").find((s) => (s.env.payload.value as { issueUuid: string }).issueUuid === uuid)!.env.payload.value as {
      immutableRequestSha256: Uint8Array;
    }
  ).immutableRequestSha256;

describe("metadata tier", () => {
  it("charges each command record and keeps the tier's sum in step", () => {
    // internal throughout: the metadata tier's charges and sum are accounting no peer observes
    // (their effect, pruning and CODE_CAPACITY, is observed by the tests below)
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "q1", argv("sleep", "1"));
    const q = r.cmd("q1");
    expect(q.charged).toBe(metaCharge(q));
    expect(q.charged).toBeGreaterThan(1024 + q.specBytes - 1);
    finish(r, c, "done", "hello");
    const d = r.cmd("done");
    // Two row events (running, exit), one output event, one segment.
    expect(d.ingest.rowEvents).toBe(2);
    expect(d.charged).toBe(1024 + d.specBytes + 2 * 256 + 3 * 32 + 1 * 128);
    expect(r.st.metaBytes).toBe(q.charged + d.charged);
  });

  it("prunes settled terminal history oldest first once the tier is over budget, never an active command", () => {
    const each = finishedCharge();
    const r = new ServerRig({ metadataBudget: each * 3 + 10 });
    const c = r.connect();
    for (const u of ["h1", "h2", "h3"]) finish(r, c, u);
    expect(prunedOf(r, ["h1", "h2", "h3"])).toEqual([]);
    expect(
      r
        .listCommands()
        .map((x) => x.uuid)
        .sort(),
    ).toEqual(["h1", "h2", "h3"]);
    r.running(c, "live");
    expect(
      of(r.log, "trace")
        .filter((t) => t.event === "pruned")
        .map((t) => t.detail),
    ).toEqual([{ uuid: "h1", client: "a", state: "SUCCEEDED" }]);
    // Over budget now: the oldest history goes, the running command stays.
    expect(prunedOf(r, ["h1", "h2", "h3", "live"])).toEqual(["h1"]);
    expect(r.notFound("h1")).toBe("command h1 ended succeeded and was pruned from history");
    expect(r.st.metaBytes).toBeLessThanOrEqual(each * 3 + 10); // internal: the tier's sum (accounting no peer observes)
    finish(r, c, "h4");
    expect(prunedOf(r, ["h1", "h2", "h3", "h4", "live"])).toEqual(["h1", "h2"]);
    expect(
      r
        .listCommands()
        .map((x) => x.uuid)
        .sort(),
    ).toEqual(["h3", "h4", "live"]);
    expect(r.command("live").state).toBe("running");
    // Durably: records and events of the pruned ones gone, the compact records written.
    expect(durable(r, "command").sort()).toEqual(["h3", "h4", "live"]);
    expect(durable(r, "event").filter((k) => k.startsWith("h1/") || k.startsWith("h2/"))).toEqual([]);
    expect(durable(r, "event").filter((k) => k.startsWith("h4/"))).toHaveLength(2);
    expect(r.disk.durable.get("pruned")!.get("h2")).toEqual({
      uuid: "h2",
      clientId: "a",
      hash: expect.stringMatching(/^[0-9a-f]{64}$/),
      state: L.SUCCEEDED,
      terminalSource: "agent",
      storedThrough: 2,
      exitCode: 0,
      endedAt: T0,
      at: T0,
    } satisfies PrunedCommand);
  });

  it("a tier filled exactly to its budget is not over it", () => {
    const each = finishedCharge();
    const r = new ServerRig({ metadataBudget: each * 3 });
    const c = r.connect();
    for (const u of ["h1", "h2", "h3"]) finish(r, c, u);
    expect(r.st.metaBytes).toBe(each * 3); // internal: the tier's sum (accounting no peer observes)
    expect(prunedOf(r, ["h1", "h2", "h3"])).toEqual([]);
    r.submit("a", "one-more");
    expect(prunedOf(r, ["h1", "h2", "h3", "one-more"])).toEqual(["h1"]);
  });

  it("a pruning batch deletes exactly the command, its events and (if any) its retention marker, and writes the compact record", () => {
    const plain = new ServerRig({ historyMs: 1 });
    finish(plain, plain.connect(), "p");
    plain.now += 10;
    const fx = plain.step({ type: "tick" });
    expect(of(fx, "persist")[0]!.records.map((r) => [r.table, r.key, r.value === null ? null : "row", r.prefix ?? false])).toEqual([
      ["command", "p", null, false],
      ["event", "p/", null, true],
      ["pruned", "p", "row", false],
    ]);
    expect(of(fx, "prune_output")).toEqual([]); // nothing stored, nothing to delete
    // With output dropped by retention: the marker row goes too, and the files.
    const z = testPorts.compress(enc("x".repeat(64))).length;
    const r = new ServerRig({ historyMs: 1, segmentBytes: z, outputPerCommand: z });
    const c = r.connect();
    r.running(c, "o");
    for (let i = 0; i < 3; i++) r.event(c, "o", 2 + i, output(OutputStream.STDOUT, i * 64, enc("x".repeat(64))));
    r.event(c, "o", 5, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    const o = r.cmd("o");
    // internal: the charge counts segments and retention markers (accounting no peer observes)
    expect([o.output.segments.length, o.output.retention.length]).toEqual([1, 1]);
    expect(
      r
        .outputOf("o")
        .items.filter((i) => i.kind === "truncation")
        .map((i) => i.kind === "truncation" && i.cause),
    ).toEqual(["server-retention"]);
    expect(o.charged).toBe(1024 + o.specBytes + 2 * 256 + 5 * 32 + 2 * 128);
    r.now += 10;
    const fx2 = r.step({ type: "tick" });
    expect(of(fx2, "persist")[0]!.records.map((x) => [x.table, x.key])).toEqual([
      ["command", "o"],
      ["event", "o/"],
      ["retention", "o"],
      ["pruned", "o"],
    ]);
    expect(of(fx2, "prune_output")).toEqual([{ type: "prune_output", uuid: "o" }]);
    expect(r.client("a")?.retainedOutputBytes).toBe(0n);
    expect(r.st.clientOutput.get("a")).toEqual({ bytes: 0, uuids: new Set() }); // internal: the retention index's uuid set (ListClients shows only the bytes)
  });

  it("refuses a submit with CODE_CAPACITY while active commands would take more than their share of the tier", () => {
    const r = new ServerRig();
    r.submit("a", "probe");
    const each = r.cmd("probe").charged; // internal: sizes the budget (no peer observes the charge)
    const budget = Math.ceil((each * 2) / SERVER_ACTIVE_METADATA_SHARE);
    const s = new ServerRig({ metadataBudget: budget });
    expect(s.submit("a", "q1")).toEqual({ ok: true, uuid: "q1", revision: 1 });
    expect(s.submit("a", "q2")).toEqual({ ok: true, uuid: "q2", revision: 1 });
    const refused = s.submit("a", "q3");
    expect(refused).toMatchObject({ ok: false, error: { code: Code.CAPACITY, message: expect.stringMatching(/metadata budget/) } });
    expect(s.findCommand("q3")).toBeUndefined();
    expect(s.notFound("q3")).toBe("no command q3");
    // Ending one makes room again (terminal history does not count against active work).
    s.control({ op: "signal", requestId: "cancel-q1", uuid: "q1", signal: SignalKind.CANCEL });
    expect(s.submit("a", "q3")).toEqual({ ok: true, uuid: "q3", revision: 1 });
  });
});

describe("pruning by age", () => {
  it("prunes a terminal command historyMs after it ended, waking for that moment", () => {
    const r = new ServerRig({ historyMs: 5_000 }); // sooner than the heartbeat's 10 s wake
    const c = r.connect();
    const fx = (() => {
      r.running(c, "old");
      return r.event(c, "old", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    })();
    expect(of(fx, "wake").at(-1)?.at).toBe(T0 + 5_000);
    r.now = T0 + 4_999;
    r.step({ type: "tick" });
    expect(r.findCommand("old")).toBeDefined();
    r.now = T0 + 5_000;
    r.step({ type: "tick" });
    expect(r.findCommand("old")).toBeUndefined();
    expect(r.notFound("old")).toBe("command old ended succeeded and was pruned from history");
    expect(r.disk.durable.get("pruned")?.get("old")).toMatchObject({ state: L.SUCCEEDED, endedAt: T0, at: T0 + 5_000 });
  });

  it("historyMs 0 keeps history by age forever (the tier still bounds it)", () => {
    const r = new ServerRig({ historyMs: 0 });
    finish(r, r.connect(), "old");
    r.now = T0 + 10 * 365 * 86_400_000;
    r.step({ type: "tick" });
    expect(r.findCommand("old")).toBeDefined();
  });

  it("waits until the terminal state and every event are durable, then prunes on that durable report", () => {
    const r = new ServerRig({ historyMs: 10 });
    const c = r.connect();
    r.running(c, "u");
    r.autoDurable = false;
    r.event(c, "u", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.now += 10; // due exactly now
    const fx = r.step({ type: "tick" });
    expect(r.findCommand("u")).toBeDefined(); // terminal in memory only
    // Due but unsettled: no wake for now (that spun the simulator, seeds 7 and
    // 130); the durable report that settles it runs the next step.
    expect(of(fx, "wake").every((w) => w.at > r.now)).toBe(true);
    r.flush();
    expect(r.findCommand("u")).toBeUndefined();
    expect(r.notFound("u")).toMatch(/ and was pruned from history$/);
  });

  it("a command the server ended itself waits for that state to be durable too", () => {
    const r = new ServerRig({ historyMs: 1 });
    r.submit("a", "q"); // no agent: stays queued
    r.autoDurable = false;
    r.control({ op: "signal", requestId: "c", uuid: "q", signal: SignalKind.CANCEL });
    expect(r.command("q").state, "not durable yet: the operator still sees it queued").toBe("queued");
    r.now += 10;
    r.step({ type: "tick" });
    expect(r.findCommand("q")).toBeDefined();
    r.flush();
    expect(r.notFound("q")).toBe("command q ended cancelled and was pruned from history");
    r.flush(); // the pruning batch itself
    expect(r.disk.durable.get("pruned")?.get("q")).toMatchObject({ state: L.CANCELLED, terminalSource: "server", storedThrough: 0 });
  });

  it("deletes a pruned command's output files only once the batch that forgets it is durable", () => {
    const r = new ServerRig({ historyMs: 1 });
    const c = r.connect();
    finish(r, c, "u", "some output");
    r.autoDurable = false;
    r.now += 10;
    const fx = r.step({ type: "tick" });
    expect(r.notFound("u")).toMatch(/ and was pruned from history$/);
    expect(of(fx, "prune_output")).toEqual([]);
    expect(of(r.flush(), "prune_output")).toEqual([{ type: "prune_output", uuid: "u" }]);
  });

  it(`prunes at most ${SERVER_PRUNES_PER_STEP} commands a step and wakes at once for the rest`, () => {
    const r = new ServerRig({ historyMs: 1, maxActivePerClient: 100_000 });
    r.store = false;
    const c = r.connect();
    const n = SERVER_PRUNES_PER_STEP + 3;
    for (let i = 0; i < n; i++) finish(r, c, `u${i}`);
    // They ended at T0 with historyMs 1: all due a millisecond later.
    r.now += 1;
    r.autoDurable = false; // one step at a time
    const all = Array.from({ length: n }, (_, i) => `u${i}`);
    const fx = r.step({ type: "tick" });
    expect(prunedOf(r, all)).toHaveLength(SERVER_PRUNES_PER_STEP);
    expect(of(fx, "wake").at(-1)?.at).toBe(r.now);
    const rest = r.step({ type: "tick" });
    expect(prunedOf(r, all)).toHaveLength(n);
    expect(of(rest, "wake").at(-1)?.at).toBeGreaterThan(r.now);
  });
});

describe("a pruned command keeps its protocol answers", () => {
  function pruned(over: Parameters<typeof finish>[3] = undefined): { r: ServerRig; c: number } {
    const r = new ServerRig({ historyMs: 1 });
    const c = r.connect();
    finish(r, c, "gone", over);
    r.now += 10;
    r.step({ type: "tick" });
    expect(r.notFound("gone")).toMatch(/ and was pruned from history$/);
    return { r, c };
  }
  const hash = (r: ServerRig) => dispatchedHash(r, "gone");

  it("R-D12: a snapshot naming it as finished gets it discarded, with no incident", () => {
    const { r } = pruned();
    const c2 = r.open();
    r.hello(c2, "a", "inst-a");
    const fx = r.snapshot(c2, [{ issueUuid: "gone", lifecycle: L.SUCCEEDED, immutableRequestSha256: hash(r), lastClientEventSeq: 2n, commandRevision: 1n }]);
    const res = r.sent(fx, c2, "reconcileResult")[0]!.env.payload.value as { discardLocalTerminalIssueUuids: string[]; terminateLocalIssueUuids: string[] };
    expect(res.discardLocalTerminalIssueUuids).toEqual(["gone"]);
    expect(res.terminateLocalIssueUuids).toEqual([]);
    expect(r.incidents().length).toBe(0);
  });

  it("R-D11: a snapshot that still runs it, or holds another request under its uuid, gets it terminated with an incident", () => {
    const { r } = pruned();
    const c2 = r.open();
    r.hello(c2, "a", "inst-a");
    const fx = r.snapshot(c2, [{ issueUuid: "gone", lifecycle: L.RUNNING, immutableRequestSha256: hash(r), lastClientEventSeq: 1n, commandRevision: 1n }]);
    const res = r.sent(fx, c2, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[] };
    expect(res.terminateLocalIssueUuids).toEqual(["gone"]);
    expect(
      r
        .incidents()
        .map(plainIncident)
        .map((i) => [i.uuid, i.kind, i.detail]),
    ).toEqual([["gone", "reconcile_terminate_local", "agent still runs a command that is terminal at the server"]]);
    const c3 = r.open();
    r.hello(c3, "a", "inst-a");
    const fx3 = r.snapshot(c3, [
      { issueUuid: "gone", lifecycle: L.SUCCEEDED, immutableRequestSha256: sha("other"), lastClientEventSeq: 2n, commandRevision: 1n },
    ]);
    expect((r.sent(fx3, c3, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[] }).terminateLocalIssueUuids).toEqual(["gone"]);
    expect(r.incidents().at(-1)!.detail).toBe("agent holds a different request under this issue_uuid");
  });

  it("a snapshot from another client naming it is a command the server lacks (R-D11)", () => {
    const { r } = pruned();
    const b = r.open();
    r.hello(b, "b", "inst-b");
    const fx = r.snapshot(b, [{ issueUuid: "gone", lifecycle: L.SUCCEEDED, immutableRequestSha256: hash(r), lastClientEventSeq: 2n, commandRevision: 1n }]);
    expect((r.sent(fx, b, "reconcileResult")[0]!.env.payload.value as { terminateLocalIssueUuids: string[] }).terminateLocalIssueUuids).toEqual(["gone"]);
    expect(r.incidents().at(-1)!.detail).toBe("agent holds a command the server does not know");
  });

  it("a late event or CommandAccepted for it is ignored: no error, no ack, the session stays open", () => {
    const { r, c } = pruned("out");
    for (const fx of [r.event(c, "gone", 3, lifecycle(L.SUCCEEDED, { exitCode: 0 })), r.event(c, "gone", 1, lifecycle(L.RUNNING)), r.accept(c, "gone")]) {
      expect(r.sent(fx, c)).toEqual([]);
      expect(of(fx, "close")).toEqual([]);
    }
    expect(r.session(c)?.phase).toBe("ready");
    // From another client it is still an unknown command.
    const b = r.connect("b");
    expect(r.errors(r.event(b, "gone", 3, lifecycle(L.SUCCEEDED)), b).map((e) => e.error?.code)).toEqual([Code.NOT_FOUND]);
  });

  it("R-D1: submitting it again never runs it again: the same request is CODE_ALREADY_EXECUTED, another CODE_CONFLICT", () => {
    const { r } = pruned();
    const same = r.control({ op: "submit", requestId: "again", uuid: "gone", clientId: "a", spec: specOf(argv()) });
    expect(same).toMatchObject({ ok: false, error: { code: Code.ALREADY_EXECUTED, message: "command gone ended succeeded and was pruned from history" } });
    const other = r.submit("a", "gone", argv("false"));
    expect(other).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    expect(r.findCommand("gone")).toBeUndefined();
  });

  it("operator requests on it say it was pruned", () => {
    const { r } = pruned();
    for (const req of [
      { op: "signal", requestId: "s", uuid: "gone", signal: SignalKind.CANCEL },
      { op: "stdin", requestId: "w", uuid: "gone", data: enc("x"), appendNewline: false },
      { op: "close_stdin", requestId: "cl", uuid: "gone" },
    ] as const) {
      expect(r.control(req)).toMatchObject({ ok: false, error: { code: Code.NOT_FOUND, message: "command gone ended succeeded and was pruned from history" } });
    }
    expect(r.control({ op: "signal", requestId: "s2", uuid: "never", signal: SignalKind.CANCEL })).toMatchObject({
      ok: false,
      error: { message: "no command never" },
    });
  });

  it("the message names a failed command's exit code", () => {
    const r = new ServerRig({ historyMs: 1 });
    const c = r.connect();
    r.running(c, "bad");
    r.event(c, "bad", 2, lifecycle(L.FAILED, { exitCode: 3 }));
    r.now += 10;
    r.step({ type: "tick" });
    expect(r.notFound("bad")).toBe("command bad ended failed (exit 3) and was pruned from history");
    expect(r.control({ op: "signal", requestId: "s", uuid: "bad", signal: SignalKind.CANCEL })).toMatchObject({
      ok: false,
      error: { message: "command bad ended failed (exit 3) and was pruned from history" },
    });
  });
});

describe("the pruned ledger", () => {
  it("keeps at most prunedMax records, forgetting the oldest durably", () => {
    const r = new ServerRig({ historyMs: 1, prunedMax: 2 });
    const c = r.connect();
    for (const u of ["p1", "p2", "p3", "p4"]) {
      finish(r, c, u);
      r.now += 10;
      r.step({ type: "tick" });
    }
    expect(prunedOf(r, ["p1", "p2", "p3", "p4"])).toEqual(["p3", "p4"]);
    expect(durable(r, "pruned").sort()).toEqual(["p3", "p4"]);
    // Forgotten: now just a uuid the server never knew.
    expect(r.control({ op: "signal", requestId: "s", uuid: "p1", signal: SignalKind.CANCEL })).toMatchObject({
      ok: false,
      error: { message: "no command p1" },
    });
  });

  it("survives a restart with the history order, the tier's charges and the ledger", () => {
    const each = finishedCharge();
    const r = new ServerRig({ metadataBudget: each * 3 + 10 });
    const c = r.connect();
    for (const u of ["a1", "a2", "a3", "a4", "a5", "a6"]) {
      finish(r, c, u, u === "a3" ? "out" : undefined);
      r.now += 1000;
    }
    r.submit("a", "waiting", argv("sleep", "9"));
    // Storage may return rows in any order: the restore sorts by end and prune time.
    const t = r.disk.tables();
    const reversed = { get: (name: string) => (t.get(name) ? new Map([...t.get(name)!].reverse()) : undefined) };
    const back = restoreServer(r.cfg, reversed, 2);
    serverInvariants(back);
    // What the operator sees is the same after the restart: the list, each answer, each NOT_FOUND.
    const all = ["a1", "a2", "a3", "a4", "a5", "a6", "waiting"];
    const backRig = new ServerRig();
    backRig.st = back;
    expect(backRig.listCommands()).toEqual(r.listCommands());
    expect(all.map((u) => backRig.notFound(u))).toEqual(all.map((u) => r.notFound(u)));
    expect(prunedOf(r, all).length).toBeGreaterThanOrEqual(2);
    // internal: the pruning order, the history index and the tier's charges restored alike (what prunes next; no peer observes them)
    expect([...back.pruned.keys()]).toEqual([...r.st.pruned.keys()]);
    expect([...back.pruned.values()]).toEqual([...r.st.pruned.values()]);
    expect([...back.history.entries()]).toEqual([...r.st.history.entries()]);
    expect(back.history.size).toBeGreaterThanOrEqual(2);
    expect(back.pruned.size).toBeGreaterThanOrEqual(2);
    expect(back.metaBytes).toBe(r.st.metaBytes);
    for (const [u, c2] of back.commands) expect(c2.charged, u).toBe(r.cmd(u).charged);
  });

  it("a uuid both held and in the ledger restores as held (the live record wins)", () => {
    const r = new ServerRig();
    finish(r, r.connect(), "x");
    r.disk.durable.set(
      "pruned",
      new Map([["x", { uuid: "x", clientId: "a", hash: "00", state: L.FAILED, terminalSource: "agent", storedThrough: 9, exitCode: 1, endedAt: 0, at: 0 }]]),
    );
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    serverInvariants(back);
    const backRig = new ServerRig();
    backRig.st = back;
    expect(backRig.command("x").state).toBe("succeeded");
    // internal: the ledger entry is dropped, not just shadowed (no peer asks the ledger about a held uuid)
    expect(back.pruned.size).toBe(0);
  });

  it("restores records written before history pruning existed (no endedAt, specBytes or rowEvents)", () => {
    const r = new ServerRig();
    const c = r.connect();
    finish(r, c, "legacy");
    const t = r.disk.durable.get("command")!;
    const { endedAt, specBytes, rowEvents, ...old } = t.get("legacy") as Record<string, unknown>;
    expect([endedAt, typeof specBytes, rowEvents]).toEqual([T0, "number", 2]);
    t.set("legacy", old);
    const back = restoreServer(r.cfg, r.disk.tables(), 2);
    serverInvariants(back);
    const l = back.commands.get("legacy")!;
    // internal: the defaults a legacy record restores with (they feed the tier's charge and the history age)
    expect([l.endedAt, l.specBytes, l.ingest.rowEvents]).toEqual([l.createdAt, r.cmd("legacy").specBytes, 0]);
    expect(back.history.get("legacy")).toBe(l.createdAt);
  });
});

describe("history invariants catch their corruptions", () => {
  function healthy(): ServerRig {
    const r = new ServerRig({ historyMs: 1 });
    const c = r.connect();
    finish(r, c, "kept");
    r.now += 10;
    r.step({ type: "tick" });
    finish(r, c, "kept2");
    r.running(c, "live");
    serverInvariants(r.st);
    return r;
  }
  // setup: each case corrupts the state on purpose (an invariant test)
  const cases: Array<[string, (r: ServerRig) => void, RegExp]> = [
    ["a charge out of step with its record", (r) => void (r.cmd("live").ingest.rowEvents += 1), /live: metadata charge/],
    ["the tier's sum drifting", (r) => void (r.st.metaBytes += 1), /metadata tier accounting/],
    ["a terminal command missing from the history index", (r) => void r.st.history.delete("kept2"), /kept2: terminal but not in the history index/],
    ["an active command in the history index", (r) => void r.st.history.set("live", T0), /history index out of step/],
    ["a command both held and pruned", (r) => void r.st.pruned.set("live", { ...r.st.pruned.get("kept")!, uuid: "live" }), /live: both held and pruned/],
    [
      "the ledger over its bound",
      (r) => void (r.st.config = { ...r.st.config, limits: { ...r.st.config.limits, prunedMax: 0 } }),
      /pruned ledger over its bound/,
    ],
  ];
  for (const [name, corrupt, message] of cases) {
    it(`refuses: ${name}`, () => {
      const r = healthy();
      corrupt(r);
      expect(() => serverInvariants(r.st)).toThrow(InvariantViolation);
      expect(() => serverInvariants(r.st)).toThrow(message);
    });
  }
});

describe("history in the store (issue 39: memory holds what is live)", () => {
  const inStore = (over: Partial<ServerRig["cfg"]["limits"]> = {}) => new ServerRig({ historyInStore: true, historyHeld: 2, ...over });

  it("holds at most historyHeld ended commands, tested at n and n+1; the rest stay in the store, read back by GetCommand", () => {
    const r = inStore();
    const c = r.connect();
    finish(r, c, "h1", "one");
    finish(r, c, "h2");
    // n = historyHeld: both held.
    expect([...r.st.history.keys()]).toEqual(["h1", "h2"]); // internal: what memory holds is the point of the bound
    r.now += 10;
    finish(r, c, "h3");
    // n + 1: the oldest leaves memory; nothing is deleted and no output is dropped.
    expect([...r.st.history.keys()]).toEqual(["h2", "h3"]);
    expect(r.log.some((e) => e.type === "prune_output")).toBe(false);
    expect(durable(r, "command").sort()).toEqual(["h1", "h2", "h3"]);
    expect(durable(r, "pruned")).toEqual([]);
    // The operator still sees it whole, from its durable rows.
    expect(r.command("h1")).toMatchObject({ state: "succeeded", exitCode: 0 });
    expect(r.outputOf("h1").stdout).toBe("one");
    expect(
      r
        .listCommands()
        .map((x) => x.uuid)
        .sort(),
    ).toEqual(["h1", "h2", "h3"]);
    // And the protocol answers as for any pruned command: a repeated submit never runs it again.
    expect(r.submit("a", "h1", argv("true"))).toMatchObject({ ok: false, error: { code: Code.ALREADY_EXECUTED } });
    expect(r.submit("a", "h1", argv("false"))).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
  });

  it("a repeated submit of a command the ledger forgot is answered from the store's record (stored): never run twice", () => {
    const r = inStore({ historyHeld: 1, prunedMax: 1 });
    const c = r.connect();
    for (const u of ["f1", "f2", "f3"]) finish(r, c, u);
    // internal: f1 is neither held nor in the ledger; only its durable row knows it
    expect([r.st.commands.has("f1"), r.st.pruned.has("f1")]).toEqual([false, false]);
    const row = r.disk.durable.get("command")!.get("f1") as CommandRow;
    const back = restoreCommand(row, undefined);
    const stored = ledgerEntry(back, back.endedAt);
    expect(r.submit("a", "f1", argv("true"), { stored })).toMatchObject({
      ok: false,
      error: { code: Code.ALREADY_EXECUTED, message: "command f1 ended succeeded and was pruned from history" },
    });
    expect(r.submit("a", "f1", argv("false"), { stored })).toMatchObject({ ok: false, error: { code: Code.CONFLICT } });
    // Dispatched once, when it first ran; never again.
    expect(r.sent(r.log, c, "commandDispatch").filter((x) => (x.env.payload.value as { issueUuid: string }).issueUuid === "f1")).toHaveLength(1);
  });

  it("the audit log is the store's: entries are persisted, none held, and a restart goes on numbering after the newest", () => {
    const r = inStore();
    const call = { operator: "ann", role: "admin", rpc: "SubmitCommand", summary: "x" };
    r.step({ type: "control", request: { op: "submit", requestId: "q1", uuid: "a1", clientId: "a", spec: specOf(argv("true")) }, audit: call });
    r.step({ type: "control", request: { op: "submit", requestId: "q2", uuid: "a2", clientId: "a", spec: specOf(argv("true")) }, audit: call });
    expect(r.listAudit().entries.map((e) => Number(e.seq))).toEqual([1, 2]);
    expect(r.st.audit.size).toBe(0); // internal: memory holds none of the log
    // A store hands a restore only the newest row: the sequence goes on from it.
    const newest = new Map([...r.disk.durable.get("audit")!].slice(-1));
    const t = r.disk.tables();
    const back = new ServerRig({ historyInStore: true });
    back.disk = r.disk;
    back.st = restoreServer(back.cfg, { get: (n) => (n === "audit" ? newest : t.get(n)) }, 2);
    back.step({ type: "control", request: { op: "submit", requestId: "q3", uuid: "a3", clientId: "a", spec: specOf(argv("true")) }, audit: call });
    expect(back.listAudit().entries.map((e) => Number(e.seq))).toEqual([1, 2, 3]);
  });

  it("a restart holds no ended command: each becomes a ledger entry (newest prunedMax) and answers as before", () => {
    const r = inStore({ historyHeld: 10, prunedMax: 2 });
    const c = r.connect();
    for (const u of ["e1", "e2", "e3"]) {
      finish(r, c, u);
      r.now += 10;
    }
    r.submit("a", "live", argv("sleep", "9"));
    const back = new ServerRig({ historyInStore: true, historyHeld: 10, prunedMax: 2 });
    back.disk = r.disk;
    back.st = restoreServer(back.cfg, r.disk.tables(), 2);
    serverInvariants(back.st);
    // internal: memory after the restart is the live command and the ledger, nothing of the history
    expect([...back.st.commands.keys()]).toEqual(["live"]);
    expect([...back.st.pruned.keys()]).toEqual(["e2", "e3"]);
    // What the operator sees is the same: every command, read from the store.
    expect(back.listCommands()).toEqual(r.listCommands());
    expect(back.command("e1")).toEqual(r.command("e1"));
    expect(back.submit("a", "e3", argv("true"))).toMatchObject({ ok: false, error: { code: Code.ALREADY_EXECUTED } });
  });

  it("a store may hand ended commands over already reduced to ledger rows (ARCHIVED_TABLE): the restore is the same", () => {
    const r = inStore({ historyHeld: 10, prunedMax: 2 });
    const c = r.connect();
    for (const u of ["e1", "e2", "e3"]) {
      finish(r, c, u, u === "e2" ? "out" : undefined);
      r.now += 10;
    }
    r.submit("a", "live", argv("sleep", "9"));
    const cfg = new ServerRig({ historyInStore: true, historyHeld: 10, prunedMax: 2 }).cfg;
    const rows = r.disk.tables();
    // What a store that reads many ended commands gives: live command rows, and the ended ones as their ledger rows.
    const commands = rows.get("command") as ReadonlyMap<string, CommandRow>;
    const live = new Map([...commands].filter(([, x]) => !isTerminal(x.state)));
    const archived = new Map([...commands].filter(([, x]) => isTerminal(x.state)).map(([k, x]) => [k, ledgerRowOf(x)]));
    expect([...archived.keys()].sort()).toEqual(["e1", "e2", "e3"]);
    const reduced = { get: (t: string) => (t === "command" ? live : t === ARCHIVED_TABLE ? archived : rows.get(t)) };
    const whole = restoreServer(cfg, rows, 2);
    const st = restoreServer(cfg, reduced, 2);
    serverInvariants(st);
    expect([...st.commands.keys()]).toEqual(["live"]);
    expect([...st.pruned]).toEqual([...whole.pruned]);
    expect([...st.pruned.keys()]).toEqual(["e2", "e3"]);
    expect(st.commands.get("live")).toEqual(whole.commands.get("live"));
  });
});
