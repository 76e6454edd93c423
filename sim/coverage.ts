// The coverage oracle (R-O1, R-O4, R-O7, R-O8): rebuild each stream of a
// command from the events the server durably stored and compare it with the
// bytes its process wrote. Every byte must be delivered in order or covered
// by a truncation marker; nothing may follow the terminal lifecycle event.

import { isTerminal } from "../core/dispatch/lifecycle.js";
import { bytesEqual } from "../core/bytes.js";
import { decodeRawZstdFrame } from "./zstd-raw.js";

/** A server "event" record as it became durable (fields the oracle reads). */
export interface StoredEvent {
  seq: number;
  kind: string;
  stream?: "stdout" | "stderr";
  offset?: number;
  originalSize?: number;
  zstd?: Uint8Array;
  ranges?: Array<{ stream: "stdout" | "stderr"; offset: number; length: number }>;
  state?: number;
}

/**
 * null when consistent. `full`: the command ended by its process exiting, so
 * every byte it wrote must be accounted for; otherwise (interrupted etc.)
 * what was stored must only agree with what was written.
 */
export function coverageOf(
  events: Map<number, StoredEvent>,
  through: number,
  seen: { stdout: Uint8Array; stderr: Uint8Array },
  full: boolean,
  stats: { bytesVerified: number },
): string | null {
  const next = { stdout: 0, stderr: 0 };
  let lifecycle = false;
  for (let seq = 1; seq <= through; seq++) {
    const e = events.get(seq)!;
    if (lifecycle && full) return `event ${seq} (${e.kind}) after the terminal lifecycle`;
    if (e.kind === "output") {
      const s = e.stream!;
      if (e.offset !== next[s]) return `${s} chunk at ${e.offset}, expected ${next[s]} (event ${seq})`;
      const raw = decodeRawZstdFrame(e.zstd!);
      if (!raw || raw.length !== e.originalSize) return `event ${seq}: stored frame does not decode to ${e.originalSize} bytes`;
      const want = seen[s].subarray(e.offset!, e.offset! + raw.length);
      if (want.length !== raw.length || !bytesEqual(want, raw))
        return `${s} bytes ${e.offset}..${e.offset! + raw.length} differ from what the process wrote (event ${seq})`;
      next[s] += raw.length;
      stats.bytesVerified += raw.length;
    } else if (e.kind === "truncation") {
      for (const r of e.ranges ?? []) {
        if (r.offset !== next[r.stream]) return `truncation of ${r.stream} at ${r.offset}, expected ${next[r.stream]} (event ${seq})`;
        next[r.stream] += r.length;
      }
    } else if (e.kind === "lifecycle" && isTerminal(e.state ?? 0)) {
      lifecycle = true;
    }
  }
  if (full) {
    for (const s of ["stdout", "stderr"] as const) {
      if (next[s] !== seen[s].length) return `${s}: process wrote ${seen[s].length} bytes, server holds or marks ${next[s]}`;
    }
    if (!lifecycle) return "no terminal lifecycle event stored";
  } else {
    for (const s of ["stdout", "stderr"] as const) if (next[s] > seen[s].length) return `${s}: server holds ${next[s]} bytes, process wrote ${seen[s].length}`;
  }
  return null;
}
