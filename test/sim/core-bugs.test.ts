// Minimal reproductions of core bugs the simulator found. Each test drives a
// real core by hand through the shortest path the simulator's timeline
// showed; each FAILS until the core is fixed. See the seeds in each comment
// (`npx tsx sim/cli.ts replay --seed S`) for the full story.

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { agentStep, defaultAgentConfig, newAgent } from "../../core/agent/agent-node.js";
import type { AgentInput, AgentState } from "../../core/agent/agent-types.js";
import { defaultServerConfig, newServer, restoreServer, serverStep } from "../../core/server/server-node.js";
import type { ControlRequest, ServerInput, ServerState } from "../../core/server/server-types.js";
import {
  CommandAcceptedSchema,
  CommandDispatchSchema,
  ReconcileCommandStateSchema,
  ReconcileRequestSchema,
  ReconcileSnapshotSchema,
  ReconcileTargetSchema,
  ServerWelcomeSchema,
} from "../../protos/gen/rvbox/v1/agent_pb.js";
import {
  CommandEventSchema,
  CommandLifecycle,
  ExecutionSpecSchema,
  LifecycleTransitionSchema,
  ProtocolVersionSchema,
  ScriptDescriptorSchema,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import { argvSpec, closes, Driver, fenceOf, frame, hello, sent } from "./core-harness.js";

describe("core bugs found by the simulator", () => {
  // Seeds 8, 12, 19, 24, 60, 78, 111, 132, 135 (R-D1 oracle): the operator's
  // CLI retries a submit whose reply is slow (slow fsync); the duplicate is
  // answered ok at once; the server crashes before the first persist is
  // durable; the acknowledged command is gone.
  it("R-D1: a duplicate submit is not acknowledged before the command is durable", () => {
    const s = new Driver<ServerState, ServerInput>(newServer(defaultServerConfig(), 1), serverStep);
    const submit = (requestId: string): ControlRequest => ({ op: "submit", requestId, uuid: "u-1", clientId: "agent-0", spec: argvSpec("true") });
    const first = s.step({ type: "control", request: submit("req-1") }, false);
    expect(first.some((e) => e.type === "persist")).toBe(true);
    expect(first.some((e) => e.type === "reply")).toBe(false); // correct: waits for durability
    // The CLI retries (same uuid, same request) before the fsync completes.
    const retry = s.step({ type: "control", request: submit("req-2") }, false);
    const earlyOk = retry.filter((e) => e.type === "reply" && (e["result"] as { ok: boolean }).ok);
    // A crash now loses the command: the durable tables are still empty.
    const afterCrash = restoreServer(defaultServerConfig(), { get: () => undefined }, 2);
    expect(afterCrash.commands.has("u-1")).toBe(false);
    expect(earlyOk, "the retry was acknowledged ok although nothing is durable yet (server-commands.ts submit(): `existing.hash === hash` -> ctx.emit reply)").toHaveLength(0);
  });

  // Seeds 16, 26, 134 (liveness oracle, with a clone of the agent): the clone
  // ran a command the original still holds as queued; the server stored the
  // clone's events. Every later ReconcileRequest tells the original
  // "stored through N" while it assigned fewer; it answers SEQUENCE_VIOLATION
  // and closes, forever: the whole client never reconciles again.
  it("R-D11: a ReconcileRequest claiming more stored events than the agent assigned does not end the session", () => {
    const a = new Driver<AgentState, AgentInput>(newAgent(defaultAgentConfig("agent-0"), 1), agentStep);
    a.step({ type: "start" });
    a.step({ type: "transport_open", conn: 1 });
    const f1 = { sessionId: "s-1", generation: 1 };
    const welcome = (f: { sessionId: string; generation: number }): Uint8Array =>
      frame(f, { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }), serverTime: timestampFromMs(a.now) }) });
    a.step({ type: "frame", conn: 1, data: welcome(f1) });
    a.step({ type: "frame", conn: 1, data: frame(f1, { case: "reconcileRequest", value: create(ReconcileRequestSchema, {}) }) });
    // A script command whose upload has not begun: it stays queued and has no events.
    const sha = new Uint8Array(32).fill(7);
    const spec = create(ExecutionSpecSchema, { program: { case: "script", value: create(ScriptDescriptorSchema, { sizeBytes: 10n, sha256: new Uint8Array(32).fill(1) }) } });
    const accepted = a.step({
      type: "frame",
      conn: 1,
      data: frame(f1, { case: "commandDispatch", value: create(CommandDispatchSchema, { issueUuid: "u-1", commandRevision: 1n, targetSessionGeneration: 1n, spec, immutableRequestSha256: sha }) }),
    });
    expect(sent(accepted, "commandAccepted")).toHaveLength(1);
    // Reconnect; the server (which stored 3 events of u-1 from another copy of this instance) asks.
    a.step({ type: "transport_closed", conn: 1, reason: "reset" });
    a.advance(120_000);
    a.step({ type: "tick" });
    a.step({ type: "transport_open", conn: 2 });
    const f2 = { sessionId: "s-2", generation: 2 };
    a.step({ type: "frame", conn: 2, data: welcome(f2) });
    const req = create(ReconcileRequestSchema, { targets: [create(ReconcileTargetSchema, { issueUuid: "u-1", lastServerEventSeq: 3n, commandRevision: 1n, immutableRequestSha256: sha })] });
    const out = a.step({ type: "frame", conn: 2, data: frame(f2, { case: "reconcileRequest", value: req }) });
    expect(
      closes(out, 2),
      "agent-reconcile.ts handleReconcileRequest: acknowledge() beyond the last assigned seq -> fail(SEQUENCE_VIOLATION, close=true); the server repeats the same request on every reconnect",
    ).toHaveLength(0);
    expect(sent(out, "reconcileSnapshot")).toHaveLength(1);
  });

  // Seeds 72, 96, 156, 167 (impostor only, no clone), 4, 56, 76, 91, 108 (liveness):
  // while instance A was offline, instance B took the client id (R-F6) and
  // ran the command the server still had as dispatched; its events made it
  // terminal. A comes back: its snapshot lists the command (terminal, same
  // request hash) -> the server decides "discard"; but A's retransmission of
  // its own event 1 arrives before the ReconcileResult leaves, its digest
  // differs from the stored event 1 -> SEQUENCE_VIOLATION and close. The result
  // that would end A's copy never arrives; A loops forever.
  it("R-D12: a resent event of a command the server already holds as terminal does not close the session before the ReconcileResult", () => {
    const s = new Driver<ServerState, ServerInput>(newServer(defaultServerConfig(), 1), serverStep);
    // Instance A registers, reconciles, gets u-1 and finishes it (failed, exit 3).
    s.step({ type: "conn_open", conn: 1 });
    const w1 = sent(s.step({ type: "frame", conn: 1, data: hello("agent-0", "instance-A") }), "serverWelcome");
    const fA = fenceOf(w1[0]!.env);
    s.step({ type: "frame", conn: 1, data: frame(fA, { case: "reconcileSnapshot", value: create(ReconcileSnapshotSchema, {}) }) });
    const d = sent(s.step({ type: "control", request: { op: "submit", requestId: "r1", uuid: "u-1", clientId: "agent-0", spec: argvSpec("false") } }), "commandDispatch");
    expect(d).toHaveLength(1);
    const hash = (d[0]!.env.payload.value as { immutableRequestSha256: Uint8Array }).immutableRequestSha256;
    s.step({ type: "frame", conn: 1, data: frame(fA, { case: "commandAccepted", value: create(CommandAcceptedSchema, { issueUuid: "u-1", commandRevision: 1n, accepted: true }) }) });
    const ev = (seq: number, state: CommandLifecycle, t: number, exitCode?: number) =>
      create(CommandEventSchema, {
        issueUuid: "u-1",
        eventSeq: BigInt(seq),
        commandRevision: 1n,
        time: timestampFromMs(t),
        event: { case: "lifecycle", value: create(LifecycleTransitionSchema, exitCode === undefined ? { state } : { state, exitCode }) },
      });
    s.step({ type: "frame", conn: 1, data: frame(fA, { case: "commandEvent", value: ev(1, CommandLifecycle.RUNNING, 1000) }) });
    s.step({ type: "frame", conn: 1, data: frame(fA, { case: "commandEvent", value: ev(2, CommandLifecycle.FAILED, 2000, 3) }) });
    expect(s.st.commands.get("u-1")!.state).toBe(CommandLifecycle.FAILED);
    s.step({ type: "conn_closed", conn: 1, reason: "A gone" });
    // Instance B (no live session: accepted normally, R-F6) comes with its own copy of u-1.
    s.step({ type: "conn_open", conn: 2 });
    const w2 = sent(s.step({ type: "frame", conn: 2, data: hello("agent-0", "instance-B") }), "serverWelcome");
    const fB = fenceOf(w2[0]!.env);
    const snap = create(ReconcileSnapshotSchema, {
      retainedCommands: [create(ReconcileCommandStateSchema, { issueUuid: "u-1", lifecycle: CommandLifecycle.INTERRUPTED, lastClientEventSeq: 1n, commandRevision: 1n, immutableRequestSha256: hash })],
    });
    // The snapshot's reconcile record is being fsynced when B's retransmission arrives.
    s.step({ type: "frame", conn: 2, data: frame(fB, { case: "reconcileSnapshot", value: snap }) }, false);
    const resend = s.step({ type: "frame", conn: 2, data: frame(fB, { case: "commandEvent", value: ev(1, CommandLifecycle.INTERRUPTED, 5000) }) }, false);
    expect(
      closes(resend, 2),
      "server-commands.ts handleCommandEvent: digest mismatch on `seq <= receivedThrough` closes the session even for a command that is terminal (source agent) and that this session's reconciliation just decided to discard",
    ).toHaveLength(0);
    const lastPersist = [...s.log].reverse().find((e) => e.type === "persist")!;
    const done = s.step({ type: "durable", through: lastPersist["id"] as number });
    const result = sent(done, "reconcileResult");
    expect(result).toHaveLength(1);
    expect((result[0]!.env.payload.value as { discardLocalTerminalIssueUuids: string[] }).discardLocalTerminalIssueUuids).toContain("u-1");
  });
});
