// Swarm testing: each seed draws which fault kinds are on and how hard, and
// which configuration the nodes run with. A fault that is off is off for the
// whole run, so every seed explores a different corner instead of every seed
// averaging over all faults.

import type { BehaviourMix } from "./behaviour.js";
import type { NetConfig } from "./network.js";
import { Rng } from "./rng.js";

export const FAULT_KINDS = [
  "link_break",
  "half_open",
  "partition",
  "storm",
  "server_crash",
  "agent_crash",
  "disk_slow",
  "disk_corrupt",
  "disk_full",
  "clock_skew",
  "clone",
  "impostor",
  "garbage",
  "stale_inject",
  "ingress_full",
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Swarm {
  agents: number;
  /** Length of the fault phase (virtual ms). */
  faultPhaseMs: number;
  /** Bounded virtual time after the heal for everything to settle. */
  livenessMs: number;
  submits: number;
  /** Expected occurrences of each enabled fault during the fault phase. */
  faults: Partial<Record<FaultKind, number>>;
  net: NetConfig;
  fsyncMinMs: number;
  fsyncMaxMs: number;
  /** Crash downtime range, ms. */
  downMinMs: number;
  downMaxMs: number;
  clockSkewMs: number;
  smallLimits: boolean;
  /**
   * The server's store keeps the history (PostgreSQL's way, limits.historyInStore):
   * pruning only leaves memory, a restore holds ended commands as ledger entries.
   */
  historyInStore: boolean;
  maxRunning: number;
  maxQueued: number;
  mix: BehaviourMix;
  pScriptFail: number;
  orphansSurvive: boolean;
  /** Operator traffic: stdin writes, signals, duplicate submits, per command. */
  pStdin: number;
  pSignal: number;
  pDuplicate: number;
  pScript: number;
  pShell: number;
  pInvalid: number;
  pShortExpiry: number;
  /** Agents that speak only protocol 1.0 (the spec's first version): a terminal never runs on them (R-T4/R-T5). */
  agents10: number[];
  /** Chance that a submit asks for a terminal (`run -t`, protocol 1.1), with resizes on its stdin. */
  pTerminal: number;
}

export interface SwarmOptions {
  /** Force these faults on (with this intensity) / off. */
  force?: Partial<Record<FaultKind, number>>;
  only?: FaultKind[];
  /** Never enable these. */
  exclude?: FaultKind[];
  maxAgents?: number;
  /** Scale the fault phase and workload (1 = default). */
  scale?: number;
  noFaults?: boolean;
}

export function drawSwarm(seed: number, opts: SwarmOptions = {}): Swarm {
  const r = new Rng(seed).fork("swarm");
  const scale = opts.scale ?? 1;
  const agents = r.range(1, Math.min(8, opts.maxAgents ?? 8));
  const faults: Partial<Record<FaultKind, number>> = {};
  if (!opts.noFaults) {
    for (const k of FAULT_KINDS) {
      if (opts.only && !opts.only.includes(k)) continue;
      if (opts.exclude?.includes(k)) continue;
      if (!r.chance(0.45) && !opts.only) continue;
      const hard = r.chance(0.3);
      faults[k] = hard ? r.range(4, 12) : r.range(1, 4);
    }
  }
  for (const [k, v] of Object.entries(opts.force ?? {})) {
    if (v > 0) faults[k as FaultKind] = v;
    else delete faults[k as FaultKind];
  }
  const small = r.chance(0.35);
  const slowNet = r.chance(0.25);
  return {
    agents,
    faultPhaseMs: Math.round(r.range(60_000, 8 * 60_000) * scale),
    livenessMs: 60 * 60_000,
    submits: Math.max(1, Math.round(r.range(3, 30) * scale)),
    faults,
    net: {
      latencyMin: slowNet ? 20 : 0,
      latencyMax: slowNet ? r.range(100, 2000) : r.range(1, 40),
      bandwidthMin: slowNet ? 50 : 1000,
      bandwidthMax: slowNet ? 2000 : 100_000,
      connectTimeout: r.range(3_000, 20_000),
    },
    fsyncMinMs: 0,
    fsyncMaxMs: faults.disk_slow ? r.range(50, 3000) : r.range(0, 20),
    downMinMs: 100,
    downMaxMs: r.range(1_000, 120_000),
    clockSkewMs: faults.clock_skew ? r.range(1_000, 10 * 60_000) : 0,
    smallLimits: small,
    // Drawn from a stream of its own, so every other draw of a seed is what it was.
    historyInStore: new Rng(seed).fork("history-in-store").chance(0.5),
    maxRunning: r.range(1, 4),
    maxQueued: r.range(1, 16),
    mix: {
      maxOutput: small ? 3 * 1024 * 1024 : r.pick([64 * 1024, 1024 * 1024, 6 * 1024 * 1024]),
      pHang: r.pick([0, 0.05, 0.2]),
      pEcho: r.pick([0, 0.2, 0.5]),
      pFail: r.pick([0, 0.2, 0.5]),
      pSignalDeath: r.pick([0, 0.05, 0.2]),
      pIgnoreTerm: r.pick([0, 0.2]),
      pIncomplete: r.pick([0, 0.1]),
      pNoStart: r.pick([0, 0.05]),
    },
    pScriptFail: r.pick([0, 0.05, 0.3]),
    orphansSurvive: r.chance(0.3),
    pStdin: r.pick([0, 0.3, 0.7]),
    pSignal: r.pick([0, 0.2, 0.5]),
    pDuplicate: r.pick([0, 0.1, 0.3]),
    pScript: r.pick([0, 0.2, 0.5]),
    pShell: r.pick([0, 0.3]),
    pInvalid: r.pick([0, 0.05, 0.15]),
    pShortExpiry: r.pick([0, 0.1]),
    // From a stream of their own, so every other draw of a seed is as before.
    ...drawTerminals(seed, agents),
  };
}

/** Protocol minors and terminals (1.1): about a third of the seeds have one 1.0 agent, and about half ask for terminals. */
function drawTerminals(seed: number, agents: number): Pick<Swarm, "agents10" | "pTerminal"> {
  const t = new Rng(seed).fork("terminals");
  const agents10 = t.chance(0.35) ? [t.int(agents)] : [];
  return { agents10, pTerminal: t.chance(0.5) ? t.pick([0.1, 0.3]) : 0 };
}

export function enabledFaults(s: Swarm): FaultKind[] {
  return FAULT_KINDS.filter((k) => (s.faults[k] ?? 0) > 0);
}
