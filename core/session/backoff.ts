// Reconnect backoff (R-H4): full jitter, delay = uniform(0, min(cap, initial * 2^attempt)).
// The attempt counter resets once a session has been stable for 60 s.

import { BACKOFF_CAP_MS, BACKOFF_INITIAL_MS } from "../limits.js";
import { nextFloat, type RngState } from "../rng.js";

/** Upper bound of the jitter interval for this attempt (0-based). */
export function backoffCeiling(attempt: number): number {
  const exp = Math.min(attempt, 30);
  return Math.min(BACKOFF_CAP_MS, BACKOFF_INITIAL_MS * 2 ** exp);
}

export function backoffDelay(rng: RngState, attempt: number): number {
  return Math.floor(nextFloat(rng) * backoffCeiling(attempt));
}
