// What the control fuzzer (scripts/fuzz-control.ts) counts: calls sent by
// kind, answers by code, anomalies; its seeded random choices; and a bounded
// call budget that every hostile loop draws from, so each ends by itself.
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";

/** A small seeded PRNG (mulberry32): the same seed picks the same hostile mix. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 1;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** Log-uniform in [lo, hi]: as many 1 KB ids as 1 MB ones. */
  logSize(lo: number, hi: number): number {
    return Math.round(Math.exp(Math.log(lo) + this.next() * (Math.log(hi) - Math.log(lo))));
  }
  bytes(n: number): Uint8Array {
    const b = new Uint8Array(n);
    for (let i = 0; i < n; i++) b[i] = Math.floor(this.next() * 256);
    return b;
  }
}

const inc = (m: Map<string, number>, k: string, by = 1): void => void m.set(k, (m.get(k) ?? 0) + by);

/** The code name of a failed call: Connect's code (`InvalidArgument`; `DeadlineExceeded` past the call's time limit, raw POSTs included), `http 415` for a raw POST, `aborted at end` for a call cut by the run's end. */
export function codeOf(err: unknown, endedByRun: boolean): string {
  if (endedByRun) return "aborted at end";
  if ((err as Error)?.name === "TimeoutError") return "DeadlineExceeded";
  const ce = ConnectError.from(err);
  return ConnectCode[ce.code] ?? `code ${ce.code}`;
}

export class Tally {
  readonly sent = new Map<string, number>();
  readonly errors = new Map<string, number>();
  readonly anomalies = new Map<string, number>();
  readonly anomalyNotes: string[] = [];
  private calls = 0;

  /** `maxCalls` bounds the hostile calls of a whole run; `deadline` (epoch ms) ends every hostile loop; one call gives up after `callTimeoutMs`. */
  constructor(
    readonly maxCalls: number,
    readonly deadline: number,
    readonly end: AbortSignal,
    readonly callTimeoutMs: number,
  ) {}

  /** The signal of one raw hostile POST: the run's end or the call's own time limit, whichever comes first. */
  signal(): AbortSignal {
    return AbortSignal.any([this.end, AbortSignal.timeout(this.callTimeoutMs)]);
  }

  /** The call options of one hostile RPC: cut at the run's end, DeadlineExceeded after its own time limit. */
  opts(): { signal: AbortSignal; timeoutMs: number } {
    return { signal: this.end, timeoutMs: this.callTimeoutMs };
  }

  /** Whether another hostile call may start (and counts it under `kind`). */
  take(kind: string, n = 1): boolean {
    if (this.over()) return false;
    this.calls += n;
    inc(this.sent, kind, n);
    return true;
  }

  over(): boolean {
    return this.end.aborted || this.calls >= this.maxCalls || Date.now() >= this.deadline;
  }

  ok(): void {
    inc(this.errors, "OK");
  }

  error(err: unknown): void {
    const code = codeOf(err, this.end.aborted);
    inc(this.errors, code);
    if (code === "Internal" || code === "Unknown") this.anomaly("internal error answered", ConnectError.from(err).rawMessage.slice(0, 160));
  }

  /** A raw POST's HTTP status (a 5xx is an anomaly: hostile input is the caller's fault, never the server's). */
  http(status: number, body = ""): void {
    inc(this.errors, status === 200 ? "OK" : `http ${status}`);
    if (status >= 500) this.anomaly("internal error answered", `HTTP ${status} ${body.slice(0, 160)}`);
  }

  anomaly(kind: string, note: string): void {
    inc(this.anomalies, kind);
    if (this.anomalyNotes.length < 20) this.anomalyNotes.push(`${kind}: ${note}`);
  }

  get total(): number {
    return this.calls;
  }

  /** Runs one hostile call, counting its answer; never throws. */
  async call(p: () => Promise<unknown>): Promise<unknown> {
    try {
      const r = await p();
      this.ok();
      return r;
    } catch (err) {
      this.error(err);
      return undefined;
    }
  }
}

export const sortedEntries = (m: Map<string, number>): Array<[string, number]> => [...m].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
