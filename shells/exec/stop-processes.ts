// Stopping every command of an agent that is shutting down (`systemctl stop`):
// SIGTERM to each command's process group, a grace to exit, SIGKILL to what
// is left. A command still being launched when the stop begins has no pid
// yet, so it cannot be signalled; it is signalled as soon as its spawn is
// reported, on the next poll, instead of being skipped until the SIGKILL.

import type { ProcessHandle } from "./process-runner.js";

export interface StopOutcome {
  /** Handles that got SIGTERM. */
  terminated: number;
  /** Handles still alive when the grace ended, sent SIGKILL. */
  killed: number;
  /** Handles still launching when the grace ended: no pid, so nothing could be signalled. */
  unsignalled: number;
}

const isLive = (h: ProcessHandle): boolean => h.state === "starting" || h.state === "running";

/**
 * `handles()` is read afresh on every poll (a spawn reported meanwhile turns a
 * "starting" handle into a "running" one). Resolves when none is live, or when
 * `graceMs` has passed and the survivors were sent SIGKILL.
 */
export async function stopProcesses(
  handles: () => Iterable<ProcessHandle>,
  graceMs: number,
  pollMs: number,
  now: () => number = Date.now,
): Promise<StopOutcome> {
  const termed = new Set<ProcessHandle>();
  const live = (): ProcessHandle[] => [...handles()].filter(isLive);
  const termNew = (left: ProcessHandle[]): void => {
    for (const h of left) if (!termed.has(h) && h.signal("SIGTERM")) termed.add(h);
  };
  let left = live();
  termNew(left);
  const deadline = now() + graceMs;
  while (left.length > 0 && now() < deadline) {
    await new Promise((r) => setTimeout(r, pollMs));
    left = live();
    termNew(left);
  }
  let killed = 0;
  let unsignalled = 0;
  for (const h of left) {
    if (h.signal("SIGKILL")) killed++;
    else unsignalled++;
  }
  return { terminated: termed.size, killed, unsignalled };
}
