// Issue 38 items 1 and 10 at the server core: a spec any agent would refuse
// is refused at submit (and in a job), a dispatch that still cannot reach an
// agent ends `rejected` with an incident instead of closing the session on
// every registration, and an admin can end any command and forget any client
// (at most once: nothing force-ended is dispatched again).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import type { CommandDispatch } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { ExecutionSpecSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { ServerEffect } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { MAX_SPEC_STRING_BYTES, MiB } from "../../../core/limits.js";
import { argv, of, ServerRig } from "../../support/server-rig.js";

const TWO_MIB = "x".repeat(2 * MiB);
const dispatched = (r: ServerRig, effects: ServerEffect[], conn?: number): string[] =>
  r.sent(effects, conn, "commandDispatch").map((s) => (s.env.payload.value as CommandDispatch).issueUuid);
const closes = (effects: ServerEffect[], conn: number) => of(effects, "close").filter((e) => e.conn === conn);
const force = (r: ServerRig, uuid: string, signal = SignalKind.CANCEL) => r.control({ op: "signal", requestId: `force-${uuid}`, uuid, signal, force: true });

describe("admission: what an agent would refuse is refused at submit (issue 38 item 1)", () => {
  it("R-D4 R-T2: a 2 MiB argv item is refused at SubmitCommand naming the limit and the figure; nothing is stored or dispatched", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    const mark = r.log.length;
    expect(r.submit("a", "big", argv("echo", TWO_MIB))).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: `argv[1] is ${2 * MiB} bytes; the limit is ${MAX_SPEC_STRING_BYTES}` },
    });
    expect(r.findCommand("big")).toBeUndefined();
    expect(of(r.log.slice(mark), "persist")).toEqual([]);
    // The session is untouched and takes the next command.
    r.submit("a", "next", argv("true"));
    expect(dispatched(r, r.log.slice(mark), a)).toEqual(["next"]);
    expect(r.session(a)?.phase).toBe("ready");
  });

  it("R-D4 R-T2: SubmitJob refuses the same spec before any child exists", () => {
    const r = new ServerRig();
    r.connect("a");
    const res = r.control({ op: "submit_job", requestId: "j1", jobId: "j", clients: ["a"], spec: create(ExecutionSpecSchema, argv("echo", TWO_MIB)) });
    expect(res).toEqual({ ok: false, error: { code: Code.VALIDATION, message: `argv[1] is ${2 * MiB} bytes; the limit is ${MAX_SPEC_STRING_BYTES}` } });
    expect(r.getJob("j")).toBeUndefined();
    expect(r.listCommands()).toEqual([]);
  });
});

describe("a dispatch no agent can take ends rejected with an incident, never a loop (issue 38 item 1)", () => {
  /** A queued command whose spec is over one envelope: a record admitted before the limit was checked at submit. */
  function oversizedQueued(r: ServerRig, uuid: string): void {
    r.submit("a", uuid, argv("true"), { allowUnknownClient: true });
    r.cmd(uuid).spec = create(ExecutionSpecSchema, argv("echo", TWO_MIB)); // internal: a record from before the check
  }

  it("R-T2 R-D11: the dispatch is never sent; the command ends rejected with a dispatch_undeliverable incident; the session stays and runs the next command", () => {
    const r = new ServerRig();
    oversizedQueued(r, "big");
    r.submit("a", "next", argv("true"), { allowUnknownClient: true });
    const mark = r.log.length;
    const a = r.connect("a");
    const after = r.log.slice(mark);
    expect(dispatched(r, after, a)).toEqual(["next"]);
    expect(of(after, "send").every((s) => s.data.length <= 1 * MiB)).toBe(true);
    expect(closes(after, a)).toEqual([]);
    expect(r.session(a)?.phase).toBe("ready");
    const big = r.command("big");
    expect(big.state).toBe("rejected");
    expect(big.reason).toMatch(/^its dispatch is \d+ bytes; the limit is 1048576, one envelope \(R-T2\): no agent can receive it$/);
    expect(
      r
        .incidents()
        .filter((i) => i.issueUuid === "big")
        .map((i) => i.kind),
    ).toEqual(["dispatch_undeliverable"]);
    // A new session does not bring it back.
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    const again = r.log.length;
    const a2 = r.connect("a");
    expect(dispatched(r, r.log.slice(again), a2)).not.toContain("big");
  });

  it("R-D4: an agent that refuses a spec the server admitted (another version's limits) ends it rejected with a dispatch_refused incident", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.submit("a", "c1");
    r.accept(a, "c1", false, Code.VALIDATION, "argv[0] is too long here");
    expect(r.command("c1")).toMatchObject({ state: "rejected", reason: "VALIDATION: argv[0] is too long here" });
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["c1", "dispatch_refused"]]);
    // A platform refusal is the agent's to make: no incident.
    r.submit("a", "c2");
    r.accept(a, "c2", false, Code.UNSUPPORTED_PLATFORM, "no zsh");
    expect(r.incidents().map((i) => i.issueUuid)).toEqual(["c1"]);
  });
});

describe("an admin ends any command and forgets any client (issue 38 item 1)", () => {
  it("R-D1 R-D11: a forced cancel ends a dispatched, unanswered command at once: cancelled by the server, an incident, its session closed; never dispatched again", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.submit("a", "stuck");
    expect(r.command("stuck").state).toBe("dispatched");
    // A plain cancel waits for the agent's answer.
    r.control({ op: "signal", requestId: "plain", uuid: "stuck", signal: SignalKind.CANCEL });
    expect(r.command("stuck").state).toBe("dispatched");
    const mark = r.log.length;
    expect(force(r, "stuck")).toEqual({ ok: true, uuid: "stuck", revision: 3 });
    expect(r.command("stuck")).toMatchObject({ state: "cancelled", terminalSource: "server" });
    expect(r.command("stuck").reason).toBe(
      "force-cancelled (cancel) by an admin while dispatched; the server stopped waiting for the agent, whose outcome is unknown",
    );
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["stuck", "force_cancelled"]]);
    // The session that may hold it is closed: its reconciliation stops any copy (R-D11).
    expect(closes(r.log.slice(mark), a)).toHaveLength(1);
    const again = r.log.length;
    const a2 = r.connect("a");
    expect(dispatched(r, r.log.slice(again), a2)).toEqual([]);
    // A late answer from the old session changes nothing.
    expect(r.command("stuck").state).toBe("cancelled");
  });

  it("R-D11: a forced cancel ends a command running on an agent that is gone; a retry gets the same revision", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.running(a, "run");
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    expect(force(r, "run", SignalKind.KILL)).toEqual({ ok: true, uuid: "run", revision: 2 });
    expect(r.command("run")).toMatchObject({ state: "cancelled", terminalSource: "server" });
    expect(force(r, "run", SignalKind.KILL)).toEqual({ ok: true, uuid: "run", revision: 2 });
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([["run", "force_cancelled"]]);
  });

  it("a forced signal must be an ending one", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.running(a, "run");
    expect(force(r, "run", SignalKind.USER1)).toEqual({
      ok: false,
      error: { code: Code.VALIDATION, message: "only an ending signal (cancel, terminate, kill) can be forced", issueUuid: "run" },
    });
    expect(r.command("run").state).toBe("running");
  });

  it("R-F6 R-D11: forgetting a client ends its queued, dispatched and running commands (an incident for each that may have launched), then forgets it; none is dispatched again", () => {
    const r = new ServerRig({ maxInflightDispatches: 1 });
    const a = r.connect("a");
    r.running(a, "run");
    r.submit("a", "sent");
    r.submit("a", "waiting");
    expect([r.command("sent").state, r.command("waiting").state]).toEqual(["dispatched", "queued"]);
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    expect(r.control({ op: "forget_client", requestId: "f", clientId: "a" })).toEqual({ ok: true, ended: 3 });
    expect(r.client("a")).toBeUndefined();
    expect(["run", "sent", "waiting"].map((u) => [r.command(u).state, r.command(u).terminalSource])).toEqual([
      ["cancelled", "server"],
      ["cancelled", "server"],
      ["cancelled", "server"],
    ]);
    expect(r.command("waiting").reason).toBe("client a was forgotten before it was dispatched");
    expect(r.incidents().map((i) => [i.issueUuid, i.kind])).toEqual([
      ["run", "force_cancelled"],
      ["sent", "force_cancelled"],
    ]);
    // The id registers again: nothing of it is dispatched (at most once).
    const mark = r.log.length;
    const b = r.connect("a");
    expect(dispatched(r, r.log.slice(mark), b)).toEqual([]);
    expect(r.command("run").state).toBe("cancelled");
  });

  it("R-F6: forgetting is still refused while the client has a live session", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.submit("a", "c1");
    expect(r.control({ op: "forget_client", requestId: "f", clientId: "a" })).toEqual({
      ok: false,
      error: { code: Code.CONFLICT, message: `client a has a live session (connection ${a}); stop its agent first` },
    });
    expect(r.command("c1").state).toBe("dispatched");
  });
});
