/**
 * Byte accounting of one reader's view of a command's output, so that what
 * it shows is never silently short (R-O5, R-O7):
 *
 *   - every stdout/stderr byte offset the reader moves past is either printed
 *     output or covered by a marker;
 *   - a marker's byte ranges are trimmed to what this reader has not already
 *     printed (a live follower that saw bytes before retention removed them
 *     is told only about what it missed; a marker about nothing is dropped);
 *   - if output jumps ahead with no marker for the skipped bytes, a `gap`
 *     item is made for them, so even a server that forgot a marker cannot
 *     make the stream look complete.
 */
import type { ByteSpan, OutputItem, StreamName } from "./model.js";

type Tracked = Record<StreamName, number | null>;

export class StreamLedger {
  private readonly next: Tracked;

  /** fromStart: the reader began at the first event, so both streams start at offset 0. */
  constructor(fromStart: boolean) {
    this.next = fromStart ? { stdout: 0, stderr: 0 } : { stdout: null, stderr: null };
  }

  /** Bytes accounted for so far, per stream (null: not known yet). */
  get offsets(): Readonly<Tracked> {
    return this.next;
  }

  /** What to present for `it`: itself, a trimmed version, a gap marker before it, or nothing. */
  admit(it: OutputItem, nextSeq: number): OutputItem[] {
    switch (it.kind) {
      case "output": {
        if (it.stream === "unknown") return [it];
        const s = it.stream;
        const out: OutputItem[] = [];
        let { offset, data } = it;
        const exp = this.next[s];
        if (exp !== null && offset > exp) out.push({ kind: "gap", seq: it.seq, stream: s, offset: exp, length: offset - exp });
        if (exp !== null && offset < exp) {
          const skip = Math.min(data.length, exp - offset);
          data = data.subarray(skip);
          offset += skip;
        }
        this.next[s] = Math.max(exp ?? 0, offset + data.length);
        if (data.length > 0) out.push(data === it.data ? it : { ...it, offset, data });
        return out;
      }
      case "truncation": {
        if (it.ranges.length === 0) return [it];
        const out: OutputItem[] = [];
        const ranges: ByteSpan[] = [];
        for (const r of it.ranges) {
          if (r.stream === "unknown") {
            ranges.push(r);
            continue;
          }
          const exp = this.next[r.stream];
          const end = r.offset + r.length;
          if (exp !== null && r.offset > exp) out.push({ kind: "gap", seq: it.seq, stream: r.stream, offset: exp, length: r.offset - exp });
          const start = exp === null ? r.offset : Math.max(r.offset, exp);
          if (end > start) ranges.push({ stream: r.stream, offset: start, length: end - start });
          this.next[r.stream] = Math.max(exp ?? 0, end);
        }
        if (ranges.length === 0) return out;
        const events = it.events ? { first: Math.max(it.events.first, Math.min(nextSeq, it.events.last)), last: it.events.last } : null;
        out.push({ ...it, ranges, events });
        return out;
      }
      default:
        return [it];
    }
  }
}
