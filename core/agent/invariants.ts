// The agent's invariants: every bound and accounting identity of the state,
// asserted after every step in tests and periodically in the simulator.

import { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert } from "../errors.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { STDIN_WRITES_IN_FLIGHT } from "../limits.js";
import { agentSessionInvariants } from "../session/agent-session.js";
import { outboxInvariants } from "../window/outbox.js";
import type { AgentState } from "./agent-types.js";

export function agentInvariants(st: AgentState): void {
  agentSessionInvariants(st.session);
  outboxInvariants(st.outbox);
  agentCommandInvariants(st);
  assert(st.gate.durableThrough <= st.gate.lastId, "durable beyond last persist");
  assert(!st.reconciled || st.session.phase === "established", "reconciled without a session");
  assert(st.tombstones.size <= st.config.limits.maxTombstones, "tombstone ledger over its bound");
  assert(st.commands.size <= st.config.limits.maxRetained, "retained commands over bound");
  assert(st.pendingSnapshotTombstones.length <= st.config.limits.maxTombstones, "snapshot tombstone hits over the ledger's bound");
  for (const uuid of st.commands.keys()) assert(!st.tombstones.has(uuid), `${uuid} both live and tombstoned`);
  for (const c of st.commands.values()) {
    if (c.phase === "done") assert(isTerminal(c.lifecycle), `${c.uuid} done but ${c.lifecycle}`);
  }
}

export function agentCommandInvariants(st: AgentState): void {
  const L = st.config.limits;
  let scriptBytes = 0;
  let running = 0;
  for (const [uuid, c] of st.commands) {
    assert(c.uuid === uuid, "command key mismatch");
    assert(st.outbox.commands.has(uuid), `${uuid} has no outbox`);
    if (c.phase === "queued" || c.phase === "preparing" || c.phase === "launching")
      assert(c.lifecycle === CommandLifecycle.ACCEPTED, `${uuid} ${c.phase} with lifecycle ${c.lifecycle}`);
    if (c.phase === "running") assert(c.lifecycle === CommandLifecycle.RUNNING, `${uuid} running with lifecycle ${c.lifecycle}`);
    if (c.phase === "launching" || c.phase === "running" || c.phase === "preparing") running++;
    let pb = 0;
    let prev = 0;
    for (const p of c.stdin.pending) {
      assert(p.seq > prev && p.seq < c.stdin.next, `${uuid} stdin pending order`);
      prev = p.seq;
      pb += p.data.length;
    }
    assert(pb === c.stdin.pendingBytes, `${uuid} stdin bytes drift`);
    assert(c.stdin.pendingBytes <= L.stdinPendingPerCommand, `${uuid} stdin over budget`);
    // A close may follow a full buffer of writes.
    assert(c.stdin.pending.length <= STDIN_WRITES_IN_FLIGHT + 1, `${uuid} stdin writes over their bound`);
    if (c.script) {
      scriptBytes += c.script.size;
      assert(c.script.received <= c.script.size, `${uuid} script over size`);
      if (c.phase !== "done" && c.script.path === "") {
        let n = 0;
        for (const ch of c.script.chunks) n += ch.length;
        assert(n === c.script.received, `${uuid} script chunks drift`);
      }
    }
  }
  for (const uuid of st.outbox.commands.keys()) assert(st.commands.has(uuid), `outbox ${uuid} without command`);
  assert(running <= st.config.maxRunning, `running ${running} over max ${st.config.maxRunning}`);
  assert(st.metadataUsed === st.commands.size * L.metadataPerCommand, "metadata budget drift");
  assert(st.metadataUsed <= L.metadataBudget, "metadata budget exceeded");
  assert(scriptBytes === st.scriptBytes && st.scriptBytes <= L.scriptTotal, "script budget drift/exceeded");
}
