// What a simulated process does, as data carried inside the command itself
// (argv[1], the shell command line, or the script's first line). The
// executor reads it back at spawn time, so a process's behaviour depends
// only on the command, never on when or where it runs: shrinking a failing
// schedule keeps every surviving command's behaviour unchanged.

import type { Rng } from "./rng.js";

export interface Behaviour {
  /** Seed of the output bytes. */
  s: number;
  /** stdout / stderr bytes written in total. */
  out: number;
  err: number;
  /** Largest single write. */
  chunk: number;
  /** Bytes per ms. */
  rate: number;
  /** Exit code when it ends on its own. */
  code: number;
  /** Ends on its own by this signal instead (e.g. "SIGSEGV"). */
  sig?: string;
  /** Never ends on its own. */
  hang?: boolean;
  /** Echo stdin to stdout; ends at EOF (after its own output). */
  echo?: boolean;
  /** Ignores TERM/INT/HUP/QUIT (KILL still works). */
  ignTerm?: boolean;
  /** Leaves these pipes not drained to EOF (a descendant holds them). */
  inc?: Array<"stdout" | "stderr">;
  /** The executable cannot be started. */
  nostart?: boolean;
  /** Start-up delay, ms. */
  delay: number;
  /**
   * Jobs only: the exit code on these client ids (agent-N) instead of
   * `code`, so one job's children can fail on some clients and not others.
   */
  codeOn?: Record<string, number>;
}

export const PROGRAM = "sim-proc";

export function encodeBehaviour(b: Behaviour): string {
  return JSON.stringify(b);
}

export function parseBehaviour(text: string): Behaviour | null {
  try {
    const b = JSON.parse(text) as Behaviour;
    if (typeof b !== "object" || b === null || typeof b.s !== "number" || typeof b.out !== "number") return null;
    return b;
  } catch {
    return null;
  }
}

export interface BehaviourMix {
  /** Largest output of one stream. */
  maxOutput: number;
  pHang: number;
  pEcho: number;
  pFail: number;
  pSignalDeath: number;
  pIgnoreTerm: number;
  pIncomplete: number;
  pNoStart: number;
}

export function drawBehaviour(rng: Rng, mix: BehaviourMix): Behaviour {
  const big = rng.chance(0.15);
  const out = rng.chance(0.2) ? 0 : rng.logUniform(1, big ? mix.maxOutput : Math.min(mix.maxOutput, 16 * 1024));
  const err = rng.chance(0.6) ? 0 : rng.logUniform(1, Math.min(mix.maxOutput, 64 * 1024));
  const b: Behaviour = {
    s: rng.u32(),
    out,
    err,
    chunk: rng.pick([1, 100, 4096, 65536, 200_000]),
    rate: rng.pick([10, 1000, 50_000, 1_000_000]),
    code: rng.chance(mix.pFail) ? rng.range(1, 255) : 0,
    delay: rng.range(0, 50),
  };
  if (rng.chance(mix.pSignalDeath)) b.sig = rng.pick(["SIGSEGV", "SIGABRT", "SIGPIPE"]);
  if (rng.chance(mix.pHang)) b.hang = true;
  if (rng.chance(mix.pEcho)) b.echo = true;
  if (rng.chance(mix.pIgnoreTerm)) b.ignTerm = true;
  if (rng.chance(mix.pIncomplete)) b.inc = rng.chance(0.5) ? ["stdout"] : ["stdout", "stderr"];
  if (rng.chance(mix.pNoStart)) b.nostart = true;
  return b;
}

/** Deterministic output bytes of one write: a function of (behaviour seed, stream, offset). */
export function outputBytes(b: Behaviour, stream: "stdout" | "stderr", offset: number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = (b.s ^ (stream === "stdout" ? 0x9e3779b9 : 0x7f4a7c15) ^ Math.imul(offset + 1, 0x85ebca6b)) >>> 0 || 1;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    // four printable bytes per draw, so timelines stay readable
    out[i] = (x & 0x3f) + 0x20;
    out[i + 1] = ((x >>> 8) & 0x3f) + 0x20;
    out[i + 2] = ((x >>> 16) & 0x3f) + 0x20;
    out[i + 3] = ((x >>> 24) & 0x3f) + 0x20;
  }
  for (; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = (x & 0x3f) + 0x20;
  }
  return out;
}
