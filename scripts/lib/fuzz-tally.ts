// What the control fuzzer (scripts/fuzz-control.ts) counts: calls sent by
// kind, answers by code, anomalies (its seeded random choices: rng.ts); and a bounded
// call budget that every hostile loop draws from, so each ends by itself.
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";

export { Rng } from "./rng.js";

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
