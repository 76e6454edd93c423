// The agent's named timers and the next wake-up. The agent core keeps two
// kinds: the session's (reconnect after backoff, heartbeat ping/dead, the
// 60 s backoff reset: session/agent-session.ts `sessionWake`) and each
// waiting command's queue expiry. Command timeouts and kill grace periods
// are the executor's (shells/exec, sim/executor.ts); redelivery is the
// server's.
//
// `nextWake` gives the earliest timer and its name. The `wake` effect
// carries only its instant: the name is not put into the effect or a trace,
// because both enter the simulator's hashed trace and the hashes of the
// fixed seed list must stay the same for a behaviour-preserving change.
// Runners and tests that want to say which timer fires call `nextWake`.

import { sessionWake, type SessionTimer } from "../session/agent-session.js";
import type { AgentState } from "./agent-types.js";

export type AgentTimer = SessionTimer | { timer: "queue_expiry"; uuid: string };

export interface Wake {
  at: number;
  timer: AgentTimer;
}

/** The earliest timer of the agent (the session's first on a tie), or null when nothing waits. */
export function nextWake(st: AgentState): Wake | null {
  let w: Wake | null = sessionWake(st.session);
  for (const c of st.commands.values()) {
    if ((c.phase === "queued" || c.phase === "preparing") && c.queueExpiry > 0 && (w === null || c.queueExpiry < w.at)) {
      w = { at: c.queueExpiry, timer: { timer: "queue_expiry", uuid: c.uuid } };
    }
  }
  return w;
}
