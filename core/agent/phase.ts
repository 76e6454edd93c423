// The agent command phase table and its one writer. No module assigns
// `c.phase` itself: `setPhase` checks every move against the table, so a
// transition that is not listed here is a broken invariant, not a silent
// state. (The diagram and what each phase means: launch.ts.)

import { assert } from "../errors.js";
import type { AgentCommand, AgentPhase } from "./agent-types.js";

/** From each phase, the phases a command may move to. */
export const COMMAND_PHASES = {
  /** waiting for a run slot (and, for a script, its commit) */
  queued: ["preparing", "launching", "done"],
  /** a script's file is being written (holds a run slot) */
  preparing: ["queued", "done"],
  /** the durable launch authorization: the spawn waits for it */
  launching: ["running", "done"],
  running: ["done"],
  done: [],
} as const satisfies Record<AgentPhase, readonly AgentPhase[]>;

export function setPhase(c: AgentCommand, to: AgentPhase): void {
  assert((COMMAND_PHASES[c.phase] as readonly AgentPhase[]).includes(to), `${c.uuid}: phase ${c.phase} -> ${to} is not in the phase table`);
  c.phase = to;
}
