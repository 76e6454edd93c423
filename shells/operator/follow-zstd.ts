/**
 * The reader's half of FollowOutput's `accept_zstd` (protos/rvbox/v1/
 * control.proto): the server sends output events' stored zstd frames as it
 * stored them, and the CLI decodes them here, with libzstd through
 * `node:zlib`, so the decoding runs in the operator's process instead of the
 * server's and the bytes on the wire are the compressed ones.
 *
 * Requested only where this Node decodes zstd natively (follow.ts
 * `zstdFramesWanted`: the portable decoder, fzstd, is slower than the
 * server's native one, so there the CLI keeps the decompressed form), and
 * loaded only once a frame arrives. A server that predates the field sends
 * `data` anyway, and so does any server for an empty chunk: both are taken
 * as they are.
 *
 * Every frame is checked as the server checks one at ingest (R-T3, the same
 * `decompressRun` checks): exactly one frame per event, its
 * Frame_Content_Size equal to the event's original_size (at most
 * MAX_CHUNK_BYTES), a bounded window, then decoded into a buffer of the
 * declared total + 1 bytes, so a frame that lies about its size is refused
 * without anything allocated beyond it. A frame that does not match is a
 * FrameError naming the event, never a crash and never bytes written for it.
 *
 * A batch decodes into one buffer. Where the caller says the decoded bytes
 * die with the batch (`pooled`: plain fd-backed stdout/stderr, no line
 * shaping, nobody keeping items), buffers are reused once their batch is
 * written: allocating one per batch made the CLI's garbage collector (V8
 * counts external memory) a quarter of its time on a 64 MiB read-back.
 */
import { MAX_CHUNK_BYTES } from "../../core/limits.js";
import type { FollowOutputResponse, OutputData } from "../../protos/gen/rvbox/v1/control_pb.js";
import { decompressRunInto, decompressValidated } from "../zstd/decompress.js";

/** A stored frame from the server that does not decode to its declared size. */
export class FrameError extends Error {
  constructor(
    readonly seq: number,
    message: string,
  ) {
    super(message);
  }
}

type Compressed = { m: FollowOutputResponse; o: OutputData };

function compressedOf(m: FollowOutputResponse): Compressed | null {
  return m.item.case === "output" && m.item.value.zstd.length > 0 ? { m, o: m.item.value } : null;
}

/** Free buffers kept for reuse at most (a reader holds two batches: one being written, one decoded ahead). */
const POOL_MAX = 3;

export class FrameDecoder {
  private readonly free: Uint8Array[] = [];
  /**
   * `pooled`: decoded bytes are not referenced once the batch's release()
   * has been called, so its buffer may be reused. `bufferBytes`: a pooled
   * buffer's size (a batch's decoded output, + 1 for the overflow check).
   */
  constructor(
    private readonly pooled: boolean,
    private readonly bufferBytes: number,
  ) {}

  /**
   * Decodes, in place, every output event of `events` that carries a zstd
   * frame: its `data` becomes the decoded bytes (a view of the batch's
   * buffer) and its `zstd` empty. Each run of consecutive such events is one
   * native call sequence with a reused context (libzstd decodes frames back
   * to back; each is checked against its own declared size first). Returns
   * the release of the batch's buffer, to call once its output is written.
   * Throws FrameError.
   */
  decode(events: readonly FollowOutputResponse[]): () => void {
    const runs: Compressed[][] = [];
    let total = 0;
    for (let i = 0; i < events.length; ) {
      const first = compressedOf(events[i]!);
      if (!first) {
        i++;
        continue;
      }
      const run: Compressed[] = [first];
      total += first.o.originalSize;
      for (i++; i < events.length; i++) {
        const c = compressedOf(events[i]!);
        if (!c) break;
        run.push(c);
        total += c.o.originalSize;
      }
      runs.push(run);
    }
    if (runs.length === 0) return NOTHING;
    // Before anything is allocated: every declared size within the chunk limit (so the buffer is at
    // most MAX_CHUNK_BYTES per frame the server actually sent).
    for (const run of runs)
      for (const c of run)
        if (c.o.originalSize > MAX_CHUNK_BYTES)
          throw new FrameError(Number(c.m.eventSeq), `declared original size ${c.o.originalSize} exceeds the limit of ${MAX_CHUNK_BYTES} bytes`);
    const buf = this.take(total + 1);
    let at = 0;
    try {
      for (const run of runs) at += decodeRun(run, buf.subarray(at));
    } catch (e) {
      this.give(buf);
      throw e;
    }
    return () => this.give(buf);
  }

  private take(n: number): Uint8Array {
    if (!this.pooled || n > this.bufferBytes) return new Uint8Array(n);
    return this.free.pop() ?? new Uint8Array(this.bufferBytes);
  }

  private give(buf: Uint8Array): void {
    if (this.pooled && buf.length === this.bufferBytes && this.free.length < POOL_MAX) this.free.push(buf);
  }
}

const NOTHING = (): void => {};

/** Decodes one run into `out` (room for its total + 1), sets each event's data; returns the bytes used. */
function decodeRun(run: Compressed[], out: Uint8Array): number {
  const span = run.length === 1 ? run[0]!.o.zstd : Buffer.concat(run.map((c) => c.o.zstd));
  let total = 0;
  for (const c of run) total += c.o.originalSize;
  const r = decompressRunInto(
    span,
    run.map((c) => ({ length: c.o.zstd.length, originalSize: c.o.originalSize })),
    out.subarray(0, total + 1),
    MAX_CHUNK_BYTES,
  );
  if (!r.ok) {
    // Name the first event at fault (a run's message gives only a byte offset).
    for (const c of run) {
      const one = decompressValidated(c.o.zstd, c.o.originalSize, MAX_CHUNK_BYTES);
      if (!one.ok) throw new FrameError(Number(c.m.eventSeq), one.message);
    }
    throw new FrameError(Number(run[0]!.m.eventSeq), r.message);
  }
  let at = 0;
  for (const c of run) {
    const n = c.o.originalSize;
    c.o.data = r.data.subarray(at, at + n);
    c.o.zstd = EMPTY;
    c.o.originalSize = 0;
    at += n;
  }
  return total;
}

const EMPTY = new Uint8Array(0);
