// The control fuzzer's hostile side as a process of its own (started by
// scripts/fuzz-control.ts with `node --import tsx`), so that encoding a 15 MB
// id or 50,000 environment variables never stalls the well-behaved
// operator's event loop and its latency is the server's alone. Its settings
// come as JSON in RVBOX_FUZZ_HOSTILE; it runs its workers until the deadline or
// the call budget, closes its streams and prints one line
// `FUZZ-HOSTILE {json}` (calls by kind, answers by code, anomalies, the
// admin's accepted race submits).
import { setMaxListeners } from "node:events";
import { createControlClient } from "../../client/control-client.js";
import type { Who } from "./fuzz-fleet.js";
import { type HostileKind, hostileWorker } from "./fuzz-hostile.js";
import { type HostileCtx, StreamPool } from "./fuzz-streams.js";
import { Rng, sortedEntries, Tally } from "./fuzz-tally.js";

export interface HostileSettings {
  controlUrl: string;
  tokens: Record<Who, string>;
  web: string;
  other: string;
  seed: number;
  seconds: number;
  workers: number;
  maxCalls: number;
  callTimeoutMs: number;
  only: HostileKind[];
}

export interface HostileResult {
  sent: Record<string, number>;
  total: number;
  codes: Record<string, number>;
  anomalies: Record<string, number>;
  anomalyNotes: string[];
  adminAccepted: string[];
}

export const RESULT_PREFIX = "FUZZ-HOSTILE ";

export async function runHostile(s: HostileSettings): Promise<HostileResult> {
  const end = new AbortController();
  setMaxListeners(0, end.signal);
  const tally = new Tally(s.maxCalls, Date.now() + s.seconds * 1000, end.signal, s.callTimeoutMs);
  const clients = Object.fromEntries(
    (Object.keys(s.tokens) as Who[]).map((w) => [w, createControlClient({ baseUrl: s.controlUrl, token: s.tokens[w] })]),
  ) as HostileCtx["clients"];
  const streams = new StreamPool();
  const shared = { recent: [] as string[], refreshed: 0 };
  const adminAccepted: string[] = [];
  let n = 0;
  const ctx = (i: number): HostileCtx => ({
    controlUrl: s.controlUrl,
    tokens: s.tokens,
    tally,
    rng: new Rng(s.seed * 1009 + i + 1),
    clients,
    web: s.web,
    other: s.other,
    streams,
    shared,
    adminAccepted,
    seed: s.seed,
    next: () => ++n,
  });
  const timer = setTimeout(() => end.abort(), s.seconds * 1000);
  await Promise.all(Array.from({ length: s.workers }, (_, i) => hostileWorker(ctx(i), s.only)));
  clearTimeout(timer);
  end.abort();
  await streams.closeAll();
  return {
    sent: Object.fromEntries(sortedEntries(tally.sent)),
    total: tally.total,
    codes: Object.fromEntries(sortedEntries(tally.errors)),
    anomalies: Object.fromEntries(sortedEntries(tally.anomalies)),
    anomalyNotes: tally.anomalyNotes,
    adminAccepted,
  };
}

async function main(): Promise<void> {
  const s = JSON.parse(process.env.RVBOX_FUZZ_HOSTILE ?? "") as HostileSettings;
  const r = await runHostile(s);
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(r)}\n`);
  process.exit(0);
}

if (process.env.RVBOX_FUZZ_HOSTILE) void main();
