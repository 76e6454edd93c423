// Dispatch admission at the agent: bounds at n and n + 1, dedup, the
// durable order of acceptance, and the validation of the execution spec.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import type { ReconcileSnapshot } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, ExecutionSpecSchema, ShellType, SignalKind, type ExecutionSpec } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { agentInvariants, defaultAgentConfig, toHex } from "../../../core/index.js";
import { validateSpec } from "../../../core/agent/admission.js";
import { Code } from "../../../core/errors.js";
import {
  AGENT_SNAPSHOT_SLACK_BYTES,
  MAX_ARGV_ITEMS,
  MAX_ENV_ITEMS,
  MAX_ENVELOPE_BYTES,
  MAX_SCRIPT_BYTES,
  MAX_SPEC_STRING_BYTES,
  STDIN_WRITES_IN_FLIGHT,
} from "../../../core/limits.js";
import { T0, sha, type SpecInit, argv, sends, accepts, of, AgentRig, expectClosed, expectRefused, stdinWrite, closeStdin } from "./rig.js";

describe("dispatch admission", () => {
  it("R-D2 R-W10: an unusable issue_uuid is refused with VALIDATION without closing; 128 characters are fine", () => {
    for (const uuid of ["", "u".repeat(129)]) {
      const r = new AgentRig();
      r.establish();
      const out = r.dispatch(uuid);
      expectRefused(r, out, Code.VALIDATION, "dispatch without a usable issue_uuid");
      expect(accepts(out)).toEqual([]);
      expect(r.retained()).toEqual([]);
    }
    const r = new AgentRig();
    r.establish();
    expect(accepts(r.dispatch("u".repeat(128)))).toEqual([expect.objectContaining({ accepted: true, issueUuid: "u".repeat(128) })]);
  });

  it("R-D2: a request hash that is not 32 bytes is rejected with VALIDATION", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("c1", argv("true"), { hash: new Uint8Array(31), rev: 3n });
    expect(accepts(out)).toEqual([
      expect.objectContaining({
        issueUuid: "c1",
        commandRevision: 3n,
        accepted: false,
        rejection: expect.objectContaining({ code: Code.VALIDATION, issueUuid: "c1", message: "immutable_request_sha256 must be 32 bytes" }),
      }),
    ]);
    expect(r.retained()).toEqual([]);
    expect(r.linkUp()).toBe(true);
    expect(accepts(r.dispatch("c1"))[0]!.accepted, "the session still takes dispatches").toBe(true);
  });

  it("R-W10: a command revision beyond 2^53 is SEQUENCE_VIOLATION and closes", () => {
    const r = new AgentRig();
    r.establish();
    expectClosed(r, r.dispatch("c1", argv("true"), { rev: 2n ** 53n }), Code.SEQUENCE_VIOLATION, "command_revision out of range");
    expect(r.retained()).toEqual([]);
  });

  it("R-F7: a dispatch targeting another generation is rejected STALE_GENERATION and not retained", () => {
    const r = new AgentRig();
    r.establish(4);
    for (const gen of [3n, 5n, 0n]) {
      const out = r.dispatch("c1", argv("true"), { gen });
      expect(accepts(out).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([
        [false, Code.STALE_GENERATION, `dispatch targets generation ${gen}`],
      ]);
    }
    expect(r.retained()).toEqual([]);
    expect(accepts(r.dispatch("c1", argv("true"), { gen: 4n }))[0]!.accepted).toBe(true);
  });

  it("R-D2: a redelivered dispatch of a live command is answered accepted again with the command's current revision", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.frame({ case: "signalCommand", value: { $typeName: "rvbox.v1.SignalCommand", issueUuid: "c1", commandRevision: 2n, signal: SignalKind.USER1 } });
    const again = r.dispatch("c1");
    expect(accepts(again)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 2n, accepted: true })]);
    expect(of(again, "spawn")).toEqual([]);
    expect(r.spawned()).toEqual(["c1"]);
    expect(r.retained()).toEqual(["c1"]);
    const other = r.dispatch("c1", argv("true"), { hash: sha("different request") });
    expect(accepts(other).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([
      [false, Code.CONFLICT, "issue_uuid already holds a different request"],
    ]);
    expect(
      r.snapshot().map((c) => [c.issueUuid, Buffer.from(c.immutableRequestSha256).toString("hex")]),
      "the record keeps its own request",
    ).toEqual([["c1", Buffer.from(sha("c1")).toString("hex")]]);
  });

  it("R-D2 R-D5: a tombstoned UUID is ALREADY_EXECUTED with the same hash and CONFLICT with another", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    r.exit("c1", 0);
    r.ackAll("c1");
    expect(r.tombstoned("c1")).toBe(true);
    expect(r.tombstoned("c1", sha("other")), "the ledger keeps the request's hash").toBe(false);
    expect(accepts(r.dispatch("c1")).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([
      [false, Code.ALREADY_EXECUTED, "already executed (tombstone ledger)"],
    ]);
    expect(accepts(r.dispatch("c1", argv("true"), { hash: sha("other") })).map((a) => [a.accepted, a.rejection?.code, a.rejection?.message])).toEqual([
      [false, Code.CONFLICT, "issue_uuid was used by a different request"],
    ]);
    expect(r.retained()).toEqual([]);
    expect(r.spawned()).toEqual(["c1"]);
  });

  it("R-D13: while a store incident is open every new dispatch is rejected STORE_INCIDENT", () => {
    const r = new AgentRig();
    r.establish();
    r.step({ type: "store_incident", detail: "disk gone" });
    const out = r.dispatch("c1");
    expect(accepts(out)).toEqual([
      expect.objectContaining({
        accepted: false,
        rejection: expect.objectContaining({ code: Code.STORE_INCIDENT, message: "agent store incident: disk gone" }),
      }),
    ]);
    expect(r.retained()).toEqual([]);
    expect(r.spawned()).toEqual([]);
  });

  it("R-D3: the queue bound: maxRunning + maxQueued commands are accepted, the next one is CAPACITY", () => {
    const r = new AgentRig({ maxRunning: 1, maxQueued: 1 });
    r.establish();
    expect(accepts(r.dispatch("c1"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(r.spawned(), "c2 waits for a run slot").toEqual(["c1"]);
    expect(r.retained()).toEqual(["c1", "c2"]);
    const out = r.dispatch("c3");
    expect(accepts(out)).toEqual([
      expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "queue full (1 running, 1 queued)" }) }),
    ]);
    expect(r.retained()).toEqual(["c1", "c2"]);
  });

  it("R-W2: the retained-command bound is maxRetained (done but unacknowledged commands count)", () => {
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...defaultAgentConfig("x").limits, maxRetained: 2 } });
    r.establish();
    r.run("c1");
    r.exit("c1", 0); // done, events not acknowledged: still retained
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c3"))).toEqual([
      expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "retained-command limit reached" }) }),
    ]);
    expect(r.retained()).toEqual(["c1", "c2"]);
    r.ackAll("c1");
    expect(r.retained()).toEqual(["c2"]);
    expect(r.tombstoned("c1")).toBe(true);
    expect(accepts(r.dispatch("c3"))[0]!.accepted).toBe(true);
  });

  it("R-W2: the metadata budget admits exactly budget / per-command commands", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...base, metadataBudget: 2 * base.metadataPerCommand } });
    r.establish();
    expect(accepts(r.dispatch("c1"))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("c2"))[0]!.accepted).toBe(true);
    expect(r.retained()).toEqual(["c1", "c2"]);
    expect(accepts(r.dispatch("c3"))).toEqual([
      expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "metadata budget full" }) }),
    ]);
  });

  it("R-W2 R-C2: the script storage budget admits scripts up to exactly scriptTotal bytes", () => {
    const base = defaultAgentConfig("x").limits;
    const r = new AgentRig({ maxRunning: 8, maxQueued: 8, limits: { ...base, scriptTotal: 100 } });
    r.establish();
    const script = (n: number): SpecInit => ({
      program: { case: "script", value: { sizeBytes: BigInt(n), sha256: new Uint8Array(32), interpreter: "/bin/sh" } },
    });
    expect(accepts(r.dispatch("s1", script(60)))[0]!.accepted).toBe(true);
    expect(accepts(r.dispatch("s2", script(40)))[0]!.accepted).toBe(true);
    expect(r.retained()).toEqual(["s1", "s2"]);
    expect(accepts(r.dispatch("s3", script(1)))).toEqual([
      expect.objectContaining({ accepted: false, rejection: expect.objectContaining({ code: Code.CAPACITY, message: "script storage budget full" }) }),
    ]);
    // argv commands do not use the script budget
    expect(accepts(r.dispatch("a1"))[0]!.accepted).toBe(true);
  });

  it("R-D1: the accepted command is durable before CommandAccepted leaves, with its expiry, revision and time", () => {
    const r = new AgentRig({ maxRunning: 0 });
    r.establish();
    r.autoDurable = false;
    const out = r.dispatch("c1", argv("sleep", "1"), { rev: 1n, expiry: T0 + 60_000 });
    expect(accepts(out)).toEqual([]);
    // internal: the working record before its acceptance is durable (no peer sees it yet: no CommandAccepted, no snapshot)
    expect(r.cmd("c1")).toMatchObject({
      uuid: "c1",
      revision: 1,
      queueExpiry: T0 + 60_000,
      acceptedAt: T0,
      phase: "queued",
      lifecycle: L.ACCEPTED,
      pid: 0,
      script: null,
      lastSignalRevision: 0,
      cancelRevision: 0,
    });
    // internal: the same working record's stdin state (nothing written yet, no peer observes it)
    expect(r.cmd("c1").stdin).toEqual({ next: 1, pending: [], pendingBytes: 0, inFlight: false, closed: false });
    const rec = r.disk.pending.flatMap((p) => p.records).find((x) => x.table === "command" && x.key === "c1");
    expect(rec?.value).toMatchObject({ uuid: "c1", phase: "queued", queueExpiry: T0 + 60_000 });
    expect(r.disk.pending.flatMap((p) => p.records).some((x) => x.table === "outbox" && x.key === "c1")).toBe(true);
    const done = r.flush();
    expect(accepts(done)).toEqual([expect.objectContaining({ issueUuid: "c1", commandRevision: 1n, accepted: true })]);
  });

  it("R-H6: an acceptance whose persist becomes durable only after a reconnect is not sent on the new session", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    r.drop();
    r.register();
    r.welcome(2, "s2");
    r.reconcile([]);
    const out = r.flush();
    expect(sends(out, "reconcileSnapshot")).toHaveLength(1);
    expect(accepts(out)).toEqual([]);
  });

  it("R-D11: a command terminated by the reconcile result before its acceptance is durable is never reported accepted nor spawned", () => {
    const r = new AgentRig();
    r.establish();
    r.autoDurable = false;
    r.dispatch("c1");
    // internal: the launch waits on the acceptance's persist (a working state ahead of anything sent)
    expect(r.cmd("c1").phase).toBe("launching");
    r.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] },
    });
    const out = r.flush();
    expect(accepts(out)).toEqual([]);
    expect(of(out, "spawn")).toEqual([]);
    expect(r.tombstoned("c1")).toBe(true);
    expect(r.retained()).toEqual([]);
  });
});

describe("execution spec validation (agent side)", () => {
  // Built inside each test (never at collection time), so a broken core fails a test, not the file.
  const check = (spec: SpecInit | undefined) =>
    validateSpec(new AgentRig().st, spec === undefined ? undefined : (create(ExecutionSpecSchema, spec) as ExecutionSpec));
  const long = "x".repeat(MAX_SPEC_STRING_BYTES);
  const script = (over: Record<string, unknown> = {}): SpecInit => ({
    program: { case: "script", value: { sizeBytes: 10n, sha256: new Uint8Array(32), interpreter: "/bin/sh", ...over } },
  });

  it("R-D4: each malformed spec gets VALIDATION (or UNSUPPORTED_PLATFORM) with its reason; the bounds are inclusive", () => {
    const cases: Array<[string, SpecInit | undefined, Code | null, string?]> = [
      ["no spec", undefined, Code.VALIDATION, "no execution spec"],
      ["no program", {}, Code.VALIDATION, "the execution spec names no program (argv, shell or script)"],
      ["empty argv", argv(), Code.VALIDATION, "argv is empty"],
      ["empty argv[0]", argv("", "x"), Code.VALIDATION, "argv is empty"],
      ["max argv items", argv(...Array.from({ length: MAX_ARGV_ITEMS }, () => "a")), null],
      [
        "too many argv items",
        argv(...Array.from({ length: MAX_ARGV_ITEMS + 1 }, () => "a")),
        Code.VALIDATION,
        `argv has ${MAX_ARGV_ITEMS + 1} items; the limit is ${MAX_ARGV_ITEMS}`,
      ],
      ["longest argv item", argv("a", long), null],
      ["argv item too long", argv("a", `${long}x`), Code.VALIDATION, `argv[1] is ${MAX_SPEC_STRING_BYTES + 1} bytes; the limit is ${MAX_SPEC_STRING_BYTES}`],
      ["argv NUL", argv("a", "b\0c"), Code.VALIDATION, "argv[1] contains a NUL character"],
      [
        "unsupported shell",
        { program: { case: "shell", value: { shell: ShellType.POWERSHELL, commandLine: "dir" } } },
        Code.UNSUPPORTED_PLATFORM,
        `shell ${ShellType.POWERSHELL} is not supported on this agent`,
      ],
      ["shell ok", { program: { case: "shell", value: { shell: ShellType.BASH, commandLine: "echo hi" } } }, null],
      ["empty command line", { program: { case: "shell", value: { shell: ShellType.SH, commandLine: "" } } }, Code.VALIDATION, "the command line is empty"],
      [
        "command line NUL",
        { program: { case: "shell", value: { shell: ShellType.SH, commandLine: "a\0" } } },
        Code.VALIDATION,
        "the command line contains a NUL character",
      ],
      ["command line too long", { program: { case: "shell", value: { shell: ShellType.SH, commandLine: `${long}x` } } }, Code.VALIDATION],
      ["script ok", script(), null],
      ["script size 0", script({ sizeBytes: 0n }), Code.VALIDATION, "the script is empty"],
      ["script size max", script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES) }), null],
      [
        "script size max+1",
        script({ sizeBytes: BigInt(MAX_SCRIPT_BYTES + 1) }),
        Code.VALIDATION,
        `the script is ${MAX_SCRIPT_BYTES + 1} bytes; the limit is ${MAX_SCRIPT_BYTES}`,
      ],
      ["script size unsafe", script({ sizeBytes: 2n ** 60n }), Code.VALIDATION],
      ["script sha 31", script({ sha256: new Uint8Array(31) }), Code.VALIDATION, "the script's sha256 is 31 bytes; it must be 32"],
      ["script sha 33", script({ sha256: new Uint8Array(33) }), Code.VALIDATION, "the script's sha256 is 33 bytes; it must be 32"],
      ["interpreter NUL", script({ interpreter: "/bin/\0sh" }), Code.VALIDATION, "the script interpreter contains a NUL character"],
      ["script arg NUL", script({ args: ["ok", "b\0"] }), Code.VALIDATION, "script args[1] contains a NUL character"],
      ["cwd NUL", { ...argv("a"), cwd: "/tmp\0" }, Code.VALIDATION, "cwd contains a NUL character"],
      ["cwd longest", { ...argv("a"), cwd: long }, null],
      ["cwd too long", { ...argv("a"), cwd: `${long}x` }, Code.VALIDATION, `cwd is ${MAX_SPEC_STRING_BYTES + 1} bytes; the limit is ${MAX_SPEC_STRING_BYTES}`],
      ["max env", { ...argv("a"), environment: Array.from({ length: MAX_ENV_ITEMS }, (_, i) => ({ name: `V${i}`, value: "" })) }, null],
      [
        "too many env",
        { ...argv("a"), environment: Array.from({ length: MAX_ENV_ITEMS + 1 }, (_, i) => ({ name: `V${i}`, value: "" })) },
        Code.VALIDATION,
        `the environment has ${MAX_ENV_ITEMS + 1} variables; the limit is ${MAX_ENV_ITEMS}`,
      ],
      ["env empty name", { ...argv("a"), environment: [{ name: "", value: "x" }] }, Code.VALIDATION, "an environment variable has an empty name"],
      ["env name with =", { ...argv("a"), environment: [{ name: "A=B", value: "x" }] }, Code.VALIDATION, 'environment variable name "A=B" contains "="'],
      ["env name NUL", { ...argv("a"), environment: [{ name: "A\0", value: "x" }] }, Code.VALIDATION],
      [
        "env value NUL",
        { ...argv("a"), environment: [{ name: "A", value: "x\0" }] },
        Code.VALIDATION,
        'the value of environment variable "A" contains a NUL character',
      ],
      ["env value too long", { ...argv("a"), environment: [{ name: "A", value: `${long}x` }] }, Code.VALIDATION],
      [
        "env long name cut in the message",
        { ...argv("a"), environment: [{ name: `${"N".repeat(100)}=`, value: "" }] },
        Code.VALIDATION,
        `environment variable name "${"N".repeat(64)}" contains "="`,
      ],
    ];
    for (const [name, spec, code, message] of cases) {
      const got = check(spec);
      if (code === null) expect(got, name).toBeNull();
      else {
        expect(got?.code, name).toBe(code);
        if (message !== undefined) expect(got?.message, name).toBe(message);
      }
    }
  });

  it("R-D4: an invalid spec in a dispatch is a rejection CommandAccepted, never a retained command", () => {
    const r = new AgentRig();
    r.establish();
    const out = r.dispatch("bad", argv(""));
    expect(accepts(out)).toEqual([
      expect.objectContaining({ issueUuid: "bad", accepted: false, rejection: expect.objectContaining({ code: Code.VALIDATION, message: "argv is empty" }) }),
    ]);
    const none = r.dispatch("nospec", null);
    expect(accepts(none)[0]!.rejection?.message).toBe("no execution spec");
    expect(r.retained()).toEqual([]);
    expect(r.linkUp()).toBe(true);
    expect(r.spawned()).toEqual([]);
  });
});

describe("what a server can grow at the agent, at n and n + 1", () => {
  it("R-S1 R-W10: a command holds at most STDIN_WRITES_IN_FLIGHT pending writes, empty ones included; one more is CAPACITY without closing, and a close still fits", () => {
    const r = new AgentRig({ maxRunning: 1 });
    r.establish();
    r.run("busy");
    r.dispatch("c1", { ...argv("cat"), stdinOpen: true }); // queued behind "busy": nothing is written yet
    for (let i = 1; i <= STDIN_WRITES_IN_FLIGHT; i++) r.frame(stdinWrite("c1", BigInt(i), []));
    // internal: flow-control accounting of writes buffered for a process not yet started (no peer observes the buffer)
    expect(r.cmd("c1").stdin.pending).toHaveLength(STDIN_WRITES_IN_FLIGHT);
    expect(r.cmd("c1").stdin.pendingBytes).toBe(0);
    const over = r.frame(stdinWrite("c1", BigInt(STDIN_WRITES_IN_FLIGHT + 1), []));
    expectRefused(r, over, Code.CAPACITY, "stdin buffer for c1 is full; resend later");
    // internal: the refused write did not take a write_seq, and the close fits the buffer (flow-control accounting)
    expect(r.cmd("c1").stdin.next).toBe(STDIN_WRITES_IN_FLIGHT + 1);
    r.frame(closeStdin("c1", BigInt(STDIN_WRITES_IN_FLIGHT + 1)));
    expect(r.cmd("c1").stdin.pending).toHaveLength(STDIN_WRITES_IN_FLIGHT + 1);
    // setup: one write over the bound poked in (an invariant test)
    r.cmd("c1").stdin.pending.push({ seq: STDIN_WRITES_IN_FLIGHT + 2, data: new Uint8Array(0), close: false });
    r.cmd("c1").stdin.next++;
    expect(() => agentInvariants(r.st)).toThrow(/c1 stdin writes over their bound/);
  });

  it("R-D7 R-W10: a request naming one tombstoned UUID twice gets it once in the snapshot", () => {
    const r = new AgentRig();
    r.establish();
    r.run("gone");
    r.exit("gone", 0);
    r.ackAll("gone"); // done and acknowledged: a tombstone
    r.drop();
    r.register();
    r.welcome(2, "sess-2");
    const out = r.reconcile([
      { issueUuid: "gone", immutableRequestSha256: sha("gone") },
      { issueUuid: "gone", immutableRequestSha256: sha("gone") },
    ]);
    const snap = sends(out, "reconcileSnapshot")[0]!.env.payload.value as ReconcileSnapshot;
    expect(snap.retainedCommands.map((c) => [c.issueUuid, c.tombstoned])).toEqual([["gone", true]]);
  });

  it("R-D7 R-W10: tombstone hits that would push the snapshot past the envelope bound are left out; the snapshot still leaves, bounded", () => {
    const r = new AgentRig({ maxRunning: 1, maxQueued: 200 });
    r.establish();
    const long = (p: string, i: number) => `${p}-${String(i).padStart(6, "0")}`.padEnd(128, "x");
    for (let i = 0; i < 150; i++) r.dispatch(long("kept", i));
    expect(r.retained()).toHaveLength(150);
    // As if 6,100 earlier commands had ended and been discarded.
    const gone = Array.from({ length: 6_100 }, (_, i) => long("gone", i));
    // setup: 6,100 ledger rows poked in (driving them through dispatch, exit and ack would take minutes)
    for (const u of gone) r.st.tombstones.set(u, toHex(sha(u)));
    r.drop();
    r.register();
    r.welcome(2, "sess-2");
    const out = r.reconcile(gone.map((u) => ({ issueUuid: u, immutableRequestSha256: sha(u) })));
    const sent = sends(out, "reconcileSnapshot");
    expect(sent).toHaveLength(1);
    const snap = sent[0]!.env.payload.value as ReconcileSnapshot;
    const bytes = of(out, "send").find((s) => s.kind === "reconcileSnapshot")!.data.length;
    expect(bytes).toBeLessThanOrEqual(MAX_ENVELOPE_BYTES - AGENT_SNAPSHOT_SLACK_BYTES + 64);
    const tomb = snap.retainedCommands.filter((c) => c.tombstoned);
    expect(snap.retainedCommands.filter((c) => !c.tombstoned)).toHaveLength(150);
    expect(tomb.length).toBeGreaterThan(5_000);
    expect(tomb.length).toBeLessThan(gone.length);
    expect(tomb.map((c) => c.issueUuid)).toEqual(gone.slice(0, tomb.length)); // in request order, the rest left out
    expect(of(out, "trace").find((t) => t.event === "snapshot_tombstones_left_out")?.detail).toEqual({ left: gone.length - tomb.length });
  });

  it("R-D7: the invariant catches more pending snapshot tombstones than the ledger holds", () => {
    const r = new AgentRig({ limits: { ...defaultAgentConfig("x").limits, maxTombstones: 1 } });
    r.establish();
    // setup: corrupted on purpose (an invariant test)
    r.st.pendingSnapshotTombstones = [
      { uuid: "a", hash: "00" },
      { uuid: "b", hash: "00" },
    ];
    expect(() => agentInvariants(r.st)).toThrow(/snapshot tombstone hits over the ledger's bound/);
  });
});

describe("admission edges (from the former agent edges file)", () => {
  it("R-W2: finished (unacknowledged) commands count neither as running nor as queued", () => {
    const r = new AgentRig();
    r.establish();
    r.run("c1");
    const out = r.exit("c1", 0);
    expect(sends(out, "clientCapacity").map((s) => s.env.payload.value)).toEqual([expect.objectContaining({ runningCommands: 0, queuedCommands: 0 })]);
    expect(r.retained()).toEqual(["c1"]);
  });
});
