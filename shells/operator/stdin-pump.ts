// `rvbox run -i`: this CLI's stdin streamed into a command's stdin.
//
// Each read becomes a write at once (an interactive `sh` answers each line);
// reads that arrive while writes are in flight are batched, up to
// STDIN_PIECE_LARGE (1 MiB) per write, which the server stores as 64 KiB
// write_seqs: one durable round trip moves a MiB. Up to STDIN_WRITES_PIPELINED
// writes are in flight, each chained to the one before (after_request_id), so
// a request that reaches the server ahead of its predecessor is refused and
// resent after it instead of reordering the stream. A server that does not
// check the chain (it predates the field) gets one 64 KiB write at a time.
//
// Backpressure: a command that reads slower than this CLI writes fills the
// server's stdin queue (CAPACITY); the write is retried, with growing pauses,
// for as long as it takes, and this CLI stops reading its own stdin once
// STDIN_BUFFER_MAX bytes wait here. A command that ends before reading all of
// its input ends the pump quietly, as `ssh host head -1 < file` does.

import { randomUUID } from "node:crypto";
import { ConnectError } from "@connectrpc/connect";
import { Code as RvCode, ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTransient } from "../../client/control-client.js";
import { CONTROL_STDIN_WRITE_BYTES, MAX_CHUNK_BYTES } from "../../core/limits.js";

/**
 * Bytes per stdin write to a server that predates numbered writes (it takes at
 * most 64 KiB per write); `rvbox stdin --file` writes these too.
 */
export const STDIN_PIECE = MAX_CHUNK_BYTES;
/** Bytes per write once the server has shown it checks chains (it splits them into 64 KiB write_seqs). */
export const STDIN_PIECE_LARGE = CONTROL_STDIN_WRITE_BYTES;
/** Bytes of this CLI's stdin read but not yet written before it stops reading. */
export const STDIN_BUFFER_MAX = 4 * CONTROL_STDIN_WRITE_BYTES;
/** Chained stdin writes in flight at once. */
export const STDIN_WRITES_PIPELINED = 2;
/** Attempts of one write that fail for connection trouble before the pump gives up. */
export const STDIN_TRANSIENT_TRIES = 4;
/** Pause before resending a write that arrived ahead of the one before it: doubles from the first to the most (ms). */
export const STDIN_REORDER_DELAY_FIRST_MS = 1;
export const STDIN_REORDER_DELAY_MAX_MS = 32;
/** Pause after a CAPACITY refusal: it doubles from the first to the most (ms). */
export const STDIN_BACKOFF_FIRST_MS = 10;
export const STDIN_BACKOFF_MAX_MS = 50;

export interface StdinWriteResult {
  writeSeq: bigint;
  afterChecked: boolean;
}

/** The calls the pump makes (the control client's, with the command's uuid and a deadline bound in). */
export interface StdinSink {
  /** `after`: the request id of the write before this one, which the server must have taken last. */
  write(data: Uint8Array, requestId: string, after: string | undefined): Promise<StdinWriteResult>;
  close(requestId: string): Promise<unknown>;
  /** Whether the command has ended (asked only after a write was refused as invalid). */
  ended(): Promise<boolean>;
}

export interface PumpStats {
  writes: number;
  bytes: number;
  /** Writes refused because they arrived ahead of an earlier one, then resent. */
  reordered: number;
  /** CAPACITY refusals waited out. */
  backpressured: number;
  /** True when the command ended before all of the input was written. */
  endedEarly: boolean;
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });

const noop = (): void => {};

function controlCode(e: unknown): RvCode | undefined {
  return ConnectError.from(e).findDetails(ControlErrorSchema)[0]?.code;
}

/** Raised inside the pump when the command ended: the rest of the input has nowhere to go. */
class CommandEnded extends Error {}

/**
 * Copy `source` into the command's stdin, then close it (EOF). Resolves with
 * what happened; rejects with the first write that failed for good (the
 * caller describes it). `signal` stops it (Ctrl-C, the follow ended).
 */
export async function pumpStdin(source: AsyncIterable<Buffer | string>, sink: StdinSink, signal: AbortSignal): Promise<PumpStats> {
  const stats: PumpStats = { writes: 0, bytes: 0, reordered: 0, backpressured: 0, endedEarly: false };
  const waiting: Buffer[] = [];
  let waitingBytes = 0;
  let eof = false;
  let readErr: unknown = null;
  let wakeWriter: (() => void) | null = null;
  let wakeReader: (() => void) | null = null;
  const poke = (which: "writer" | "reader"): void => {
    const f = which === "writer" ? wakeWriter : wakeReader;
    if (which === "writer") wakeWriter = null;
    else wakeReader = null;
    f?.();
  };
  const reader = (async () => {
    try {
      for await (const chunk of source) {
        if (signal.aborted) return;
        const b = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
        if (b.length === 0) continue;
        waiting.push(b);
        waitingBytes += b.length;
        poke("writer");
        while (waitingBytes >= STDIN_BUFFER_MAX && !signal.aborted) await new Promise<void>((r) => (wakeReader = r));
      }
    } catch (e) {
      readErr = e;
    } finally {
      eof = true;
      poke("writer");
    }
  })();

  /** Up to `max` bytes from the front of what waits (one copy only when the piece spans reads). */
  const takePiece = (max: number): Buffer => {
    const parts: Buffer[] = [];
    let n = 0;
    while (waiting.length > 0 && n < max) {
      const b = waiting[0]!;
      const room = max - n;
      if (b.length <= room) {
        parts.push(b);
        waiting.shift();
        n += b.length;
      } else {
        parts.push(b.subarray(0, room));
        waiting[0] = b.subarray(room);
        n += room;
      }
    }
    waitingBytes -= n;
    poke("reader");
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
  };

  const inFlight: Array<Promise<StdinWriteResult>> = [];
  /** Writes whose reply (or failure) is in. */
  const settled = new WeakSet<Promise<unknown>>();
  let checked = false; // the server checks chains: more than one write may be in flight
  let unchained = false; // another writer came in between: one write at a time, unchained
  let lastRequestId: string | undefined; // of the write sent last

  // One write, retried until it is taken: soon (or when the write before it is in) when it came
  // too early, after a pause when the command's queue is full, a few times on connection trouble.
  const writeOne = async (data: Buffer, requestId: string, chainedTo: string | undefined, before: Promise<unknown> | undefined): Promise<StdinWriteResult> => {
    let after = chainedTo;
    let transient = 0;
    let backoff = STDIN_BACKOFF_FIRST_MS;
    let reorderDelay = STDIN_REORDER_DELAY_FIRST_MS;
    let retriedAfterBefore = false;
    for (;;) {
      try {
        return await sink.write(data, requestId, after);
      } catch (e) {
        if (signal.aborted) throw e;
        const code = controlCode(e);
        if (code === RvCode.SEQUENCE_VIOLATION && after !== undefined) {
          if (before && !settled.has(before)) {
            // Arrived ahead of the write before it (requests travel on several connections):
            // resend soon, or at once when that one's reply is in. Waiting for the reply alone
            // would cost a durable commit per write, and keep every later write waiting too.
            stats.reordered++;
            await Promise.race([before.then(noop, noop), sleep(reorderDelay, signal)]);
            reorderDelay = Math.min(STDIN_REORDER_DELAY_MAX_MS, reorderDelay * 2);
            continue;
          }
          if (before && !retriedAfterBefore) {
            retriedAfterBefore = true;
            await before; // rejected: this write fails with it
            continue;
          }
          // The write before it is taken, yet it is not the last one taken: another writer
          // (`rvbox stdin ID …`) came in between. This write goes unchained (it is next in
          // this CLI's order); from here on the pump writes one at a time, unchained.
          unchained = true;
          after = undefined;
          continue;
        }
        if (code === RvCode.CAPACITY) {
          stats.backpressured++;
          await sleep(backoff, signal);
          backoff = Math.min(STDIN_BACKOFF_MAX_MS, backoff * 2);
          continue;
        }
        if (code === RvCode.VALIDATION && (await sink.ended().catch(() => false))) throw new CommandEnded();
        if (code === undefined && isTransient(e) && ++transient < STDIN_TRANSIENT_TRIES) {
          await sleep(250 * 2 ** transient, signal);
          continue;
        }
        throw e;
      }
    }
  };

  try {
    for (;;) {
      if (signal.aborted) return stats;
      const window = checked && !unchained ? STDIN_WRITES_PIPELINED : 1;
      if (inFlight.length >= window || (waitingBytes === 0 && eof && inFlight.length > 0)) {
        const r = await inFlight.shift()!;
        checked ||= r.afterChecked;
        continue;
      }
      if (waitingBytes === 0) {
        if (eof) break;
        await new Promise<void>((r) => (wakeWriter = r));
        continue;
      }
      const piece = takePiece(checked && !unchained ? STDIN_PIECE_LARGE : STDIN_PIECE);
      const requestId = randomUUID();
      const p = writeOne(piece, requestId, unchained ? undefined : lastRequestId, inFlight[inFlight.length - 1]);
      lastRequestId = requestId;
      p.then(
        () => settled.add(p),
        () => settled.add(p), // observed when it is awaited in order; a later one may fail first
      );
      inFlight.push(p);
      stats.writes++;
      stats.bytes += piece.length;
    }
  } catch (e) {
    if (e instanceof CommandEnded) {
      stats.endedEarly = true;
      return stats;
    }
    throw e;
  } finally {
    eof = true;
    poke("reader"); // a reader held back by a full buffer goes on (and ends at EOF)
  }
  if (readErr) throw readErr;
  await reader;
  try {
    await sink.close(randomUUID());
  } catch (e) {
    if (controlCode(e) === RvCode.VALIDATION && (await sink.ended().catch(() => false))) stats.endedEarly = true;
    else throw e;
  }
  return stats;
}
