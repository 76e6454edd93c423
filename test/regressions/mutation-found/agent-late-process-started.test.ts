// A real bug found while writing the mutation-survivor tests for the agent
// reducer. The test states the behaviour the spec asks for and FAILED against
// the core before the fix (a late process_started of a removed command is now
// answered with kill_orphan); kept as the regression test.
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommandDispatchSchema, ReconcileRequestSchema, ServerWelcomeSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle, ExecutionSpecSchema, ProtocolVersionSchema, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { agentSnapshotOf } from "../../support/pair.js";
import { agentInvariants, agentStep, defaultAgentConfig, newAgent, type AgentEffect, type AgentInput, type AgentState } from "../../../core/index.js";
import { encodeEnvelope, type Payload } from "../../../core/codec/frame-codec.js";
import { testPorts } from "../../support/ports.js";

const T0 = 1_700_000_000_000;
const sha = (s: string): Uint8Array => new Uint8Array(createHash("sha256").update(s).digest());

function agent(): { st: AgentState; step: (i: AgentInput) => AgentEffect[]; frame: (p: Payload) => AgentEffect[] } {
  const st = newAgent(defaultAgentConfig("a"), 7);
  const step = (input: AgentInput): AgentEffect[] => {
    const r = agentStep(st, input, T0, { ports: testPorts });
    agentInvariants(st);
    const out = [...r.effects];
    const p = r.effects.filter((e) => e.type === "persist").at(-1) as { id: number } | undefined;
    if (p) out.push(...step({ type: "durable", through: p.id })); // the disk is instant
    return out;
  };
  const frame = (payload: Payload): AgentEffect[] => step({ type: "frame", conn: st.session.conn, data: encodeEnvelope(st.session.fence, payload) });
  step({ type: "start" });
  step({ type: "transport_open", conn: st.session.conn });
  step({
    type: "frame",
    conn: st.session.conn,
    data: encodeEnvelope(
      { sessionId: "s", generation: 1 },
      { case: "serverWelcome", value: create(ServerWelcomeSchema, { selectedProtocol: create(ProtocolVersionSchema, { major: 1, minor: 0 }) }) },
    ),
  });
  frame({ case: "reconcileRequest", value: create(ReconcileRequestSchema, {}) });
  return { st, step, frame };
}

describe("found bugs (red until fixed): agent reconcile result", () => {
  it("R-D11: a command the reconcile result terminates after its spawn was issued, but before the process reported its start, is still killed", () => {
    const a = agent();
    const launched = a.frame({
      case: "commandDispatch",
      value: create(CommandDispatchSchema, {
        issueUuid: "c1",
        commandRevision: 1n,
        targetSessionGeneration: 1n,
        spec: create(ExecutionSpecSchema, { program: { case: "argv", value: { argv: ["sleep", "1000"] } } }),
        immutableRequestSha256: sha("c1"),
      }),
    });
    // The launch authorization is durable and the spawn has been handed to the executor.
    expect(launched.filter((e) => e.type === "spawn").map((e) => (e as { uuid: string }).uuid)).toEqual(["c1"]);
    expect(
      agentSnapshotOf(a.st).map((x) => [x.issueUuid, x.lifecycle]),
      "launching: its start not reported",
    ).toEqual([["c1", CommandLifecycle.ACCEPTED]]);

    // The server's ReconcileResult says to terminate c1 (e.g. the server lost it),
    // and it is processed before the executor's process_started report.
    const terminated = a.frame({
      case: "reconcileResult",
      value: { $typeName: "rvbox.v1.ReconcileResult", terminateLocalIssueUuids: ["c1"], discardLocalTerminalIssueUuids: [] },
    });
    const started = a.step({ type: "process_started", uuid: "c1", pid: 4321 });

    // Whatever the order, the process that was spawned must be killed: either a KILL
    // signal, or kill_orphan (pid 0 lets the shell use its spawn-time record).
    const kills = [...terminated, ...started].filter(
      (e) => (e.type === "signal" && e.uuid === "c1" && e.signal === SignalKind.KILL) || (e.type === "kill_orphan" && e.uuid === "c1"),
    );
    // Today: the command is tombstoned with no kill (pid is still 0), and the later
    // process_started is ignored because the command is gone: the process runs on,
    // unsupervised, its output and exit dropped.
    expect(kills.length).toBeGreaterThan(0);
  });
});
