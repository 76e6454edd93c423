// Capacity accounting: how many commands hold a run slot (preparing,
// launching, running) and how many wait queued, and the ClientCapacity
// report the agent sends whenever those figures change on a reconciled
// session.

import { create } from "@bufbuild/protobuf";
import { ClientCapacitySchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import type { AgentState } from "./agent-types.js";
import { send, type AgentCtx } from "./io.js";

export function countCapacity(st: AgentState): { running: number; queued: number } {
  let running = 0;
  let queued = 0;
  for (const c of st.commands.values()) {
    if (c.phase === "launching" || c.phase === "running" || c.phase === "preparing") running++;
    else if (c.phase === "queued") queued++;
  }
  return { running, queued };
}

/** Report changed figures on a reconciled session (once per change). */
export function sendCapacity(st: AgentState, ctx: AgentCtx): void {
  if (st.session.phase !== "established" || !st.reconciled) return;
  const { running, queued } = countCapacity(st);
  const key = `${running}/${queued}`;
  if (key === st.lastCapacity) return;
  st.lastCapacity = key;
  send(st, ctx, {
    case: "clientCapacity",
    value: create(ClientCapacitySchema, {
      runningCommands: running,
      queuedCommands: queued,
      maxRunningCommands: st.config.maxRunning,
      maxQueuedCommands: st.config.maxQueued,
    }),
  });
}
