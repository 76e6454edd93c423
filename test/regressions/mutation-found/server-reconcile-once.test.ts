// R-D7, R-D8: one ReconcileSnapshot per session. A second one is a protocol error
// also while the first one's ReconcileResult still waits for its persist to
// become durable (found by reading the mutation survivors: the check used to
// look only at the session phase, which stays `reconciling` until then, so a
// second snapshot was classified again and its incidents opened twice).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { defaultServerConfig, newServer, serverStep } from "../../../core/index.js";
import type { ServerInput, ServerState } from "../../../core/server/server-types.js";
import { ReconcileCommandStateSchema, ReconcileSnapshotSchema } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { Code } from "../../../core/errors.js";
import { closes, Driver, fenceOf, frame, hello, sent } from "../../sim/core-harness.js";
import { incidentsOf } from "../../support/pair.js";

describe("reconcile snapshot, once per session", () => {
  it("R-D7 R-D8: a second ReconcileSnapshot before the first result is durable closes the session; one result, one set of incidents", () => {
    const s = new Driver<ServerState, ServerInput>(newServer(defaultServerConfig(), 1), serverStep);
    let lastPersist = 0;
    const run = (input: ServerInput) => {
      const out = s.step(input, false);
      for (const e of out) if (e.type === "persist") lastPersist = e.id as number;
      return out;
    };
    const durable = () => run({ type: "durable", through: lastPersist });
    run({ type: "conn_open", conn: 1 });
    run({ type: "frame", conn: 1, data: hello("agent-0", "instance-A") });
    const welcome = sent(durable(), "serverWelcome");
    expect(welcome).toHaveLength(1);
    const f = fenceOf(welcome[0]!.env);
    // The agent reports a command the server never heard of: the server opens an incident and tells it to terminate.
    const snapshot = create(ReconcileSnapshotSchema, {
      retainedCommands: [create(ReconcileCommandStateSchema, { issueUuid: "unknown-1", commandRevision: 1n, lifecycle: CommandLifecycle.RUNNING })],
    });
    const first = run({ type: "frame", conn: 1, data: frame(f, { case: "reconcileSnapshot", value: snapshot }) });
    expect(sent(first, "reconcileResult")).toHaveLength(0); // waits for its persist
    expect(closes(first)).toHaveLength(0);
    const incidentsAfterFirst = incidentsOf(s.st).length; // ListIncidents
    expect(incidentsAfterFirst).toBeGreaterThan(0);
    // The same snapshot again, before anything is durable.
    const second = run({ type: "frame", conn: 1, data: frame(f, { case: "reconcileSnapshot", value: snapshot }) });
    expect(closes(second, 1)).toHaveLength(1);
    const err = sent(second, "error");
    expect(err.map((e) => (e.env.payload.value as { error?: { code: number } }).error?.code)).toEqual([Code.PROTOCOL_ERROR]);
    expect(incidentsOf(s.st).length).toBe(incidentsAfterFirst);
    const later = durable();
    expect(sent(later, "reconcileResult")).toHaveLength(0); // the session is gone
  });
});
