/**
 * A command's output as display lines, built incrementally as events arrive
 * and bounded in memory. Output bytes are decoded per stream (a UTF-8
 * sequence split across chunks stays whole), control characters and terminal
 * escapes are neutralised, and every non-output event becomes its own line:
 * truncation and incomplete markers (R-O5, R-O7, R-O8) as `marker` lines,
 * lifecycle/stdin/signal/script events as `event` lines.
 *
 * Memory is bounded by what the pane keeps, whatever the output's size
 * (PANE_MAX_LINES lines and PANE_MAX_TEXT characters of text, no line longer
 * than PANE_MAX_LINE_CHARS; output items' bytes are not kept). A buffer is a
 * *window* over the command's events: it may start at a later event (the TUI
 * opens a command at its end), and when it is over its bound it lets the
 * oldest lines go, as far as `trimAllowance` lets it, and counts them. The
 * snapshot then starts with a `viewer` line that says so, so the pane never
 * looks like the complete output when it is not; a window that stopped
 * before the end (a paused reader) ends with one too. Which items are shown
 * (each event once, byte gaps made visible) is the core's follow cursor.
 */
import { admit, newCursor, type FollowCursor } from "../core/reader/follow-cursor.js";
import { eventText, viewerElisionText } from "../client/markers.js";
import type { CommandInfo, OutputItem } from "../client/model.js";
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
  /** Lines kept. */
  maxLines: number;
  /** Non-output items (markers, lifecycle/stdin/signal events) kept, for the marker count and tests. */
  maxItems: number;
  /** Characters of line text kept, all lines together (default PANE_MAX_TEXT). */
  maxText?: number;
}

/** Lines an output pane keeps. */
export const PANE_MAX_LINES = 20_000;
/** Characters of text an output pane keeps (all lines; a JS string costs 1-2 bytes a character). */
export const PANE_MAX_TEXT = 4 * 1024 * 1024;
/** A longer line is cut here (with "…"): the pane shows one terminal row of it, markers wrap. */
export const PANE_MAX_LINE_CHARS = 4096;

export const DEFAULT_OUTPUT_LIMITS: OutputBufferLimits = { maxLines: PANE_MAX_LINES, maxItems: 5_000, maxText: PANE_MAX_TEXT };

export interface OutputBufferOptions {
  /** First event of this window (1: the whole output). */
  startSeq?: number;
  /** The source can load what the window lacks (`g` / Home, scrolling): the markers say how. */
  reloadable?: boolean;
}

export class OutputBuffer {
  private readonly lines: Line[] = [];
  private readonly items: OutputItem[] = [];
  private readonly decoders = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
  private elidedBytes = 0;
  private elidedEvents = 0;
  private lastElidedSeq = -1;
  /** Characters of text in `lines`. */
  private text = 0;
  /** Lines let go from the front since the window began (the absolute number of lines[0]). */
  private dropped = 0;
  private markerCount = 0;
  private cached: OutputSnapshot | null = null;
  finished = false;
  command: CommandInfo | null = null;
  error: string | null = null;
  /** First event of the window. */
  readonly startSeq: number;
  /**
   * Lines the buffer may still let go from the front to stay in its bound
   * (Infinity: always, as when following the tail). At 0 a full buffer stays
   * over nothing more: its reader must stop pulling (`full`).
   */
  trimAllowance = Number.POSITIVE_INFINITY;
  /** The reader stopped pulling before the end (shown as a marker line at the bottom). */
  paused = false;
  private cursor: FollowCursor;
  private readonly limits: Required<OutputBufferLimits>;
  private readonly reloadable: boolean;

  constructor(
    readonly uuid: string,
    limits: OutputBufferLimits = DEFAULT_OUTPUT_LIMITS,
    opts: OutputBufferOptions = {},
  ) {
    this.limits = { maxText: PANE_MAX_TEXT, ...limits };
    this.startSeq = Math.max(1, opts.startSeq ?? 1);
    this.reloadable = opts.reloadable ?? false;
    this.cursor = newCursor(this.startSeq);
  }

  /** Next event sequence to ask for when the stream is resumed. */
  get next(): number {
    return this.cursor.next;
  }

  add(item: OutputItem): void {
    const r = admit(this.cursor, item);
    if (r.cursor === this.cursor) return; // a resumed stream may repeat what we have
    this.cursor = r.cursor;
    for (const it of r.shown) this.show(it);
    this.trim();
    this.cached = null;
  }

  /** At its bound with nothing more it may let go: a reader must wait. */
  get full(): boolean {
    return this.trimAllowance <= 0 && (this.lines.length >= this.limits.maxLines || this.text >= this.limits.maxText);
  }

  /** Lines and characters of text held (the bound's two measures). */
  get held(): { lines: number; text: number } {
    return { lines: this.lines.length, text: this.text };
  }

  /** First event with a line in the window (events before it are not held). */
  get firstSeq(): number {
    return this.dropped > 0 && this.lines.length > 0 ? this.lines[0]!.seq : this.startSeq;
  }

  /** Something changed outside add() (paused, command, error): the next snapshot is rebuilt. */
  touch(): void {
    this.cached = null;
  }

  private show(it: OutputItem): void {
    // Output items are not kept: their bytes are in the lines (bounded), and
    // the items would otherwise hold every chunk the pane ever read.
    if (it.kind !== "output") {
      this.items.push(it);
      if (this.items.length > this.limits.maxItems + 500) this.items.splice(0, 500);
      if (it.kind === "truncation" || it.kind === "incomplete" || it.kind === "gap") this.markerCount++;
    }
    if (it.kind === "output") {
      const stream = it.stream === "stderr" ? "stderr" : "stdout";
      const text = this.decoders[stream].decode(it.data, { stream: true });
      this.addText(stream, text, it.seq, it.data.length);
    } else {
      const text = eventText(it) ?? "";
      this.push({
        kind: it.kind === "truncation" || it.kind === "incomplete" || it.kind === "gap" ? "marker" : "event",
        text,
        seq: it.seq,
        bytes: 0,
        open: false,
      });
    }
  }

  private addText(stream: "stdout" | "stderr", text: string, seq: number, bytes: number): void {
    const parts = text.split("\n");
    let per = Math.floor(bytes / Math.max(1, parts.length));
    const tail = this.lines[this.lines.length - 1];
    let first = 0;
    if (tail && tail.open && tail.kind === stream) {
      const before = tail.text.length;
      tail.text = cut(tail.text, parts[0]!);
      this.text += tail.text.length - before;
      tail.bytes += per;
      tail.open = parts.length === 1;
      first = 1;
    }
    for (let i = first; i < parts.length; i++) {
      const p = parts[i]!;
      const isLast = i === parts.length - 1;
      if (isLast && p === "") break; // text ended with a newline
      this.push({ kind: stream, text: cut("", p), seq, bytes: per, open: isLast });
      per = Math.floor(bytes / Math.max(1, parts.length));
    }
  }

  private push(l: Line): void {
    const tail = this.lines[this.lines.length - 1];
    if (tail) tail.open = tail.open && l.kind === tail.kind;
    this.lines.push(l);
    this.text += l.text.length;
  }

  private trim(): void {
    const overLines = this.lines.length - this.limits.maxLines;
    let drop = 0;
    if (overLines > 0) drop = Math.max(overLines, Math.min(1000, Math.floor(this.limits.maxLines / 10)));
    if (this.text > this.limits.maxText) {
      // Let go of about a tenth more than needed, so trimming is not per line.
      let t = this.text;
      const goal = this.limits.maxText - Math.floor(this.limits.maxText / 10);
      let n = 0;
      while (n < this.lines.length && t > goal) t -= this.lines[n++]!.text.length;
      drop = Math.max(drop, n);
    }
    drop = Math.min(drop, this.trimAllowance, this.lines.length);
    if (drop <= 0) return;
    if (this.trimAllowance !== Number.POSITIVE_INFINITY) this.trimAllowance -= drop;
    for (let i = 0; i < drop; i++) {
      const l = this.lines[i]!;
      this.elidedBytes += l.bytes;
      this.text -= l.text.length;
      if (l.seq !== this.lastElidedSeq) {
        this.elidedEvents++;
        this.lastElidedSeq = l.seq;
      }
    }
    this.lines.splice(0, drop);
    this.dropped += drop;
  }

  /** The next byte offset of a stream this buffer expects. */
  streamOffset(stream: "stdout" | "stderr"): number {
    return this.cursor.offsets[stream] ?? 0;
  }

  /** The pane's picture; the same object until something changes (a render copies nothing). */
  snapshot(): OutputSnapshot {
    if (this.cached) return this.cached;
    const before = this.firstSeq - 1;
    let top: OutputLine | null = null;
    if (this.reloadable && before > 0) top = { kind: "viewer", text: notLoadedText(before) };
    else if (this.elidedEvents > 0) top = { kind: "viewer", text: viewerElisionText(this.elidedBytes, this.elidedEvents, this.uuid) };
    const bottom: OutputLine | null = this.paused ? { kind: "viewer", text: laterNotLoadedText(this.next, this.command?.storedThrough ?? 0) } : null;
    const lines: OutputLine[] = top || bottom ? [...(top ? [top] : []), ...this.lines, ...(bottom ? [bottom] : [])] : this.lines;
    this.cached = {
      uuid: this.uuid,
      lines,
      offset: this.dropped - (top ? 1 : 0),
      ...(this.reloadable ? { window: { before, paused: this.paused, full: this.full, next: this.next, held: this.held } } : {}),
      items: this.items,
      markers: this.markerCount,
      finished: this.finished,
      command: this.command,
      error: this.error,
      elided: { bytes: this.elidedBytes, events: this.elidedEvents },
    };
    return this.cached;
  }
}

/** Append `raw` to a line, sanitized, cut at PANE_MAX_LINE_CHARS (marked with "…" once). */
function cut(line: string, raw: string): string {
  if (line.length >= PANE_MAX_LINE_CHARS) return line;
  const t = sanitize(raw.length > PANE_MAX_LINE_CHARS * 2 ? raw.slice(0, PANE_MAX_LINE_CHARS * 2) : raw);
  const joined = line + t;
  return joined.length >= PANE_MAX_LINE_CHARS ? `${joined.slice(0, PANE_MAX_LINE_CHARS - 1)}…` : joined;
}

/** The top line of a window that does not start at the first event. */
export function notLoadedText(events: number): string {
  return `[… ${events} earlier event${events === 1 ? "" : "s"} not loaded (press g / Home to load from the start; ↑ at the top loads earlier ones) …]`;
}

/** The bottom line of a window whose reader stopped before the end. */
export function laterNotLoadedText(next: number, storedThrough: number): string {
  const which = storedThrough >= next ? `events ${next}–${storedThrough}` : `events from ${next} on`;
  return `[… ${which} not loaded yet (↓ at the bottom loads more; G / End jumps to the end) …]`;
}
