/**
 * A command's output as display lines, built incrementally as events arrive
 * and bounded in memory. Output bytes are decoded per stream (a UTF-8
 * sequence split across chunks stays whole), control characters and terminal
 * escapes are neutralised, and every non-output event becomes its own line:
 * truncation and incomplete markers (R-O5, R-O7, R-O8) as `marker` lines,
 * lifecycle/stdin/signal/script events as `event` lines.
 *
 * When the buffer is over its bound it lets the oldest lines go and counts
 * them; the snapshot then starts with a `viewer` line that says so, so the
 * pane never looks like the complete output when it is not.
 */
import { StreamLedger } from "../shells/operator/ledger.js";
import { eventText, viewerElisionText } from "../shells/operator/markers.js";
import type { CommandInfo, OutputItem } from "../shells/operator/model.js";
import type { OutputLine, OutputSnapshot } from "./source.js";

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;

export function sanitize(text: string): string {
  let t = text.replace(ANSI, "");
  // A carriage return (progress bars) shows what the terminal would: the last rewrite.
  if (t.includes("\r")) t = t.slice(t.lastIndexOf("\r") + 1) || t.replace(/\r/g, "");
  return t.replace(/\t/g, "    ").replace(CONTROL, "·");
}

interface Line extends OutputLine {
  seq: number;
  bytes: number;
  /** Output line still waiting for its newline. */
  open: boolean;
}

export interface OutputBufferLimits {
  maxLines: number;
  maxItems: number;
}

export const DEFAULT_OUTPUT_LIMITS: OutputBufferLimits = { maxLines: 20_000, maxItems: 5_000 };

export class OutputBuffer {
  private readonly lines: Line[] = [];
  private readonly items: OutputItem[] = [];
  private readonly decoders = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
  private elidedBytes = 0;
  private elidedEvents = 0;
  private lastElidedSeq = -1;
  finished = false;
  command: CommandInfo | null = null;
  error: string | null = null;
  /** Next event sequence to ask for when the stream is resumed. */
  next = 1;
  private readonly ledger = new StreamLedger(true);

  constructor(
    readonly uuid: string,
    private readonly limits: OutputBufferLimits = DEFAULT_OUTPUT_LIMITS,
  ) {}

  add(item: OutputItem): void {
    const last = item.kind === "truncation" && item.events ? Math.max(item.seq, item.events.last) : item.seq;
    if (last < this.next) return; // a resumed stream may repeat what we have
    const shown = this.ledger.admit(item, this.next);
    this.next = last + 1;
    for (const it of shown) this.show(it);
    this.trim();
  }

  private show(it: OutputItem): void {
    this.items.push(it);
    if (this.items.length > this.limits.maxItems + 500) this.items.splice(0, 500);
    if (it.kind === "output") {
      const stream = it.stream === "stderr" ? "stderr" : "stdout";
      const text = this.decoders[stream].decode(it.data, { stream: true });
      this.addText(stream, text, it.seq, it.data.length);
    } else {
      const text = eventText(it) ?? "";
      this.push({ kind: it.kind === "truncation" || it.kind === "incomplete" || it.kind === "gap" ? "marker" : "event", text, seq: it.seq, bytes: 0, open: false });
    }
  }

  private addText(stream: "stdout" | "stderr", text: string, seq: number, bytes: number): void {
    const parts = text.split("\n");
    let per = Math.floor(bytes / Math.max(1, parts.length));
    const tail = this.lines[this.lines.length - 1];
    let first = 0;
    if (tail && tail.open && tail.kind === stream) {
      tail.text += sanitize(parts[0]!);
      tail.bytes += per;
      tail.open = parts.length === 1;
      first = 1;
    }
    for (let i = first; i < parts.length; i++) {
      const p = parts[i]!;
      const isLast = i === parts.length - 1;
      if (isLast && p === "") break; // text ended with a newline
      this.push({ kind: stream, text: sanitize(p), seq, bytes: per, open: isLast });
      per = Math.floor(bytes / Math.max(1, parts.length));
    }
  }

  private push(l: Line): void {
    const tail = this.lines[this.lines.length - 1];
    if (tail) tail.open = tail.open && (l.kind === tail.kind);
    this.lines.push(l);
  }

  private trim(): void {
    const over = this.lines.length - this.limits.maxLines;
    if (over <= 0) return;
    const drop = Math.max(over, Math.min(1000, Math.floor(this.limits.maxLines / 10)));
    for (const l of this.lines.slice(0, drop)) {
      this.elidedBytes += l.bytes;
      if (l.seq !== this.lastElidedSeq) {
        this.elidedEvents++;
        this.lastElidedSeq = l.seq;
      }
    }
    this.lines.splice(0, drop);
  }

  /** The next byte offset of a stream this buffer expects. */
  streamOffset(stream: "stdout" | "stderr"): number {
    return this.ledger.offsets[stream] ?? 0;
  }

  snapshot(): OutputSnapshot {
    const lines: OutputLine[] =
      this.elidedEvents > 0 ? [{ kind: "viewer", text: viewerElisionText(this.elidedBytes, this.elidedEvents, this.uuid) }, ...this.lines] : this.lines;
    return {
      uuid: this.uuid,
      lines,
      items: this.items,
      finished: this.finished,
      command: this.command,
      error: this.error,
      elided: { bytes: this.elidedBytes, events: this.elidedEvents },
    };
  }
}
