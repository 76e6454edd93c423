/**
 * Streaming a command's output to the CLI's stdout/stderr (`logs`,
 * `run --follow`). Output bytes go to the matching stream untouched; every
 * truncation and incomplete marker is printed on stderr as its own line, so a
 * shortened stream is never silent. A dropped connection is resumed from the
 * next event sequence (FollowOutput from_event_seq), so nothing is printed
 * twice and nothing is skipped: which items to print, and where to resume, is
 * the core's follow cursor (core/reader/follow-cursor.ts); this shell fetches
 * the batches and writes the bytes. Where this Node has native zstd the
 * server is asked for its stored zstd frames (accept_zstd) and they are
 * decoded here (follow-zstd.ts), before the cursor sees them.
 */
import { writevSync } from "node:fs";
import zlib from "node:zlib";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { CommandLifecycle } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { Command, FollowOutputResponse } from "../../protos/gen/rvbox/v1/control_pb.js";
import { cursorErrorText, newCursor, step } from "../../core/reader/follow-cursor.js";
import { describeError, isTransient, OperatorError, type ControlClient } from "../../client/control-client.js";
import { EXIT } from "../../client/exit-codes.js";
import { eventText } from "../../client/markers.js";
import { FOLLOW_MAX_BATCH_BYTES, followEvents, outputItem, type OutputItem, type StreamName } from "../../client/model.js";
import type { FrameDecoder } from "./follow-zstd.js";

export interface FollowIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  /** The command line's environment (RVBOX_FOLLOW_ZSTD, RVBOX_ZSTD); unset: this process's. */
  env?: Record<string, string | undefined>;
}

export interface FollowOptions {
  uuid: string;
  follow: boolean;
  from?: number;
  /** Only this stream's bytes (markers that concern only the other stream are left out). */
  stream?: StreamName;
  /** Also print lifecycle, stdin and signal events on stderr. */
  events?: boolean;
  signal?: AbortSignal;
  /** Give up after the server has been unreachable this long (ms). */
  reconnectForMs?: number;
  server?: string;
  /** Called for every item (tests, `--json`). */
  onItem?: (it: OutputItem) => void;
  /**
   * While the command has not started, say on stderr why it waits (the
   * server's Command.waiting_reason), once and again whenever it changes;
   * polled every this many ms (0: never). Default 2 s when following.
   */
  waitingPollMs?: number;
  /**
   * The command as the caller already has it (SubmitCommand's reply): its
   * waiting reason is said at once and the first poll waits a full
   * interval, so a command that starts at once costs no GetCommand.
   */
  known?: { state: CommandLifecycle; waitingReason: string };
  /** Line-oriented view (`logs --tail/--since/--timestamps`); absent: bytes untouched. */
  lines?: LineOptions;
  /** Write the one stream asked for (`--stream stderr`) to stdout. */
  onlyStreamToStdout?: boolean;
  /** false: never ask for stored zstd frames (the decompressed form only). Default: where native zstd decodes them. */
  acceptZstd?: boolean;
  /**
   * Reuse decode buffers once a batch is written (its bytes must not be kept past the write's
   * callback). Default: when stdout and stderr are file descriptors and neither `lines` nor `onItem` is set.
   */
  reuseBuffers?: boolean;
}

export interface LineOptions {
  /** Only the last N lines of what is stored (then live lines, with --follow). */
  tail?: number;
  /** Only output stored at or after this time (ms since the epoch). */
  since?: number;
  /** Prefix each line with its time (RFC 3339, UTC, milliseconds). */
  timestamps?: boolean;
}

/** Shaped lines (--tail, --since, --timestamps) are written in pieces of at most this many bytes. */
const LINE_WRITE_BYTES = 256 * 1024;

/** A partial line longer than this is written out as a line of its own. */
const MAX_LINE_BYTES = 64 * 1024;

type Sink = "stdout" | "stderr";

/**
 * Output as lines: a timestamp on each line where it starts, a ring of the
 * last N lines (markers take a line too) until the stored part has been read.
 * Lines are kept in the order they end; at the end of a read, a stream's
 * unterminated last line takes its place by its last byte (so `--tail` of a
 * long stdout after an early `printf 'x' >&2` ends with stdout's lines).
 * Memory: at most `tail` lines of at most MAX_LINE_BYTES, plus one partial
 * line per stream.
 */
class LineShaper {
  private partial: Record<StreamName, { parts: Uint8Array[]; bytes: number; time: number; cut: boolean; lastAt: number }>;
  private ring: Ring<{ to: Sink; data: Uint8Array; cut: boolean }> | null;
  /** Lines pushed into the ring so far. */
  private completed = 0;
  /**
   * A windowed read's verdict (`followOutput`, --tail): whether the lines it kept are exactly
   * the last `tail` lines a read from event 1 would keep. Only then does it print them.
   */
  verdict: boolean | null = null;
  /** Output lines seen that began inside the read (how far back the next window should look). */
  whole = 0;
  /**
   * @param windowed the read starts after event 1: each stream's first line may have begun in an
   *   earlier event, so it is marked cut until that stream's first newline (or a first output at
   *   offset 0, which starts the stream); end() prints the tail only when no cut line is in it
   */
  constructor(
    private readonly o: LineOptions,
    private readonly out: (to: Sink, data: Uint8Array) => Promise<void>,
    private readonly windowed = false,
  ) {
    this.ring = o.tail !== undefined ? new Ring(o.tail) : null;
    this.partial = {
      stdout: { parts: [], bytes: 0, time: 0, cut: windowed, lastAt: 0 },
      stderr: { parts: [], bytes: 0, time: 0, cut: windowed, lastAt: 0 },
    };
  }

  private async line(to: Sink, data: Uint8Array, cut = false): Promise<void> {
    if (this.ring) {
      this.ring.push({ to, data, cut });
      this.completed++;
    } else await this.emit(to, data);
  }

  /** Lines for one sink gathered into writes of up to LINE_WRITE_BYTES (one write per line made `--timestamps` of 64 MiB take seconds). */
  private group: { to: Sink; parts: Uint8Array[]; bytes: number } = { to: "stdout", parts: [], bytes: 0 };

  private async emit(to: Sink, data: Uint8Array): Promise<void> {
    const g = this.group;
    if (g.parts.length > 0 && (g.to !== to || g.bytes + data.length > LINE_WRITE_BYTES)) await this.flushOut();
    this.group.to = to;
    this.group.parts.push(data);
    this.group.bytes += data.length;
  }

  /** Write what is gathered (at the end of every batch, so live lines are not held back). */
  async flushOut(): Promise<void> {
    const g = this.group;
    if (g.parts.length === 0) return;
    const data = g.parts.length === 1 ? g.parts[0]! : Buffer.concat(g.parts, g.bytes);
    this.group = { to: g.to, parts: [], bytes: 0 };
    await this.out(g.to, data);
  }

  private stampCache = { time: Number.NaN, bytes: Buffer.alloc(0) };

  /** The `--timestamps` prefix (one per event time, not one per line: an event holds hundreds of lines). */
  private stamp(time: number): Buffer {
    if (time !== this.stampCache.time) this.stampCache = { time, bytes: Buffer.from(`${time > 0 ? new Date(time).toISOString() : "-"} `) };
    return this.stampCache.bytes;
  }

  async output(stream: StreamName, to: Sink, data: Uint8Array, time: number, offset: number): Promise<void> {
    const p = this.partial[stream];
    if (p.cut && p.bytes === 0 && offset === 0) p.cut = false;
    let start = 0;
    for (;;) {
      if (p.bytes === 0) p.time = time;
      const nl = data.indexOf(10, start);
      const end = nl < 0 ? data.length : nl + 1;
      const piece = data.subarray(start, end);
      if (piece.length > 0) {
        p.parts.push(piece);
        p.bytes += piece.length;
        p.lastAt = this.completed;
      }
      if (nl >= 0 || p.bytes >= MAX_LINE_BYTES) await this.flushPartial(stream, to);
      if (nl >= 0) p.cut = false; // the next line of this stream starts inside the read
      if (nl < 0) return;
      start = end;
      if (start >= data.length) return;
    }
  }

  private takePartial(stream: StreamName): { data: Uint8Array; cut: boolean } | null {
    const p = this.partial[stream];
    if (p.bytes === 0) return null;
    // Decoded output is never reused when lines are shaped (`pooled` is off): a one-part line is kept as it is.
    const body = p.parts.length === 1 ? p.parts[0]! : Buffer.concat(p.parts, p.bytes);
    p.parts = [];
    p.bytes = 0;
    if (!p.cut) this.whole++;
    return { data: this.o.timestamps ? Buffer.concat([this.stamp(p.time), body]) : body, cut: p.cut };
  }

  private async flushPartial(stream: StreamName, to: Sink): Promise<void> {
    const l = this.takePartial(stream);
    if (l) await this.line(to, l.data, l.cut);
  }

  async marker(text: string, cut = false): Promise<void> {
    await this.line("stderr", Buffer.from(text), cut);
  }

  /** The stored part is read (--follow): print the tail, then lines as they end. */
  async live(): Promise<void> {
    const r = this.ring;
    if (!r) return;
    this.ring = null;
    for (const l of r.items()) await this.emit(l.to, l.data);
    await this.flushOut();
  }

  async end(sinkOf: (s: StreamName) => Sink): Promise<void> {
    const r = this.ring;
    if (!r) {
      for (const s of ["stdout", "stderr"] as const) await this.flushPartial(s, sinkOf(s));
      await this.flushOut();
      return;
    }
    this.ring = null;
    // The kept lines, each at its place among all lines ended (k), and each stream's
    // unterminated last line just before the line that ended after its last byte.
    const kept = r.items();
    const base = this.completed - kept.length;
    const all: Array<{ to: Sink; data: Uint8Array; cut: boolean; key: number }> = kept.map((l, i) => ({ ...l, key: base + i }));
    for (const s of ["stdout", "stderr"] as const) {
      const at = this.partial[s].lastAt;
      const l = this.takePartial(s);
      if (l) all.push({ to: sinkOf(s), ...l, key: at - 0.5 });
    }
    all.sort((a, b) => a.key - b.key); // stable: stdout's before stderr's at one place
    const tail = this.o.tail!;
    const lines = tail === 0 ? [] : all.slice(-tail);
    if (this.windowed) {
      // Exact when no printed line may have begun before the window, and there are `tail` of
      // them (a line hidden before the window then has `tail` later lines after it).
      this.verdict = !lines.some((l) => l.cut) && lines.length >= tail;
      if (!this.verdict) return;
    }
    for (const l of lines) await this.emit(l.to, l.data);
    await this.flushOut();
  }
}

/** The last `size` items pushed, oldest first (a circular buffer: `--tail 100000` of a million lines stays linear). */
class Ring<T> {
  private readonly buf: T[] = [];
  private head = 0; // index of the oldest once the buffer is full
  constructor(private readonly size: number) {}
  push(x: T): void {
    if (this.size === 0) return;
    if (this.buf.length < this.size) this.buf.push(x);
    else {
      this.buf[this.head] = x;
      this.head = (this.head + 1) % this.size;
    }
  }
  items(): T[] {
    return [...this.buf.slice(this.head), ...this.buf.slice(0, this.head)];
  }
}

/** Output bytes for one sink, gathered across a batch's events and written at once (one writev). */
class PendingWrite {
  private to: Sink = "stdout";
  private parts: Uint8Array[] = [];
  constructor(private readonly out: (to: Sink, data: Uint8Array[]) => Promise<void>) {}

  async add(to: Sink, data: Uint8Array): Promise<void> {
    if (this.parts.length > 0 && to !== this.to) await this.flush();
    this.parts.push(data);
    this.to = to;
  }

  async flush(): Promise<void> {
    if (this.parts.length === 0) return;
    const parts = this.parts;
    this.parts = [];
    await this.out(this.to, parts);
  }
}

const NOT_STARTED = new Set<number>([CommandLifecycle.QUEUED, CommandLifecycle.DISPATCHED, CommandLifecycle.ACCEPTED]);

/** One GetCommand per poll, only until the command starts: cheap, and silent when nothing holds it back. */
async function noteWaiting(
  client: ControlClient,
  io: FollowIO,
  uuid: string,
  everyMs: number,
  signal: AbortSignal,
  known?: FollowOptions["known"],
): Promise<void> {
  let last = "";
  if (known) {
    if (!NOT_STARTED.has(known.state)) return;
    if (known.waitingReason !== "") await write(io.stderr, `rvbox: waiting: ${known.waitingReason}\n`);
    last = known.waitingReason;
    await pause(everyMs, signal);
  }
  while (!signal.aborted) {
    try {
      const cmd = (await client.getCommand({ issueUuid: uuid }, { signal })).command;
      if (!cmd || !NOT_STARTED.has(cmd.state)) return;
      const why = cmd.waitingReason;
      if (why !== last && why !== "") await write(io.stderr, `rvbox: waiting: ${why}\n`);
      last = why;
    } catch (e) {
      if (e instanceof OutputClosedError || signal.aborted) return;
      // The output stream reports an unreachable server; this note is best effort.
    }
    await pause(everyMs, signal);
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((r) => {
    if (signal.aborted) return r();
    const t = setTimeout(r, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        r();
      },
      { once: true },
    );
  });
}

export interface FollowResult {
  finished: Command | null;
  /** Output bytes written, per stream. */
  bytes: { stdout: number; stderr: number };
  markers: number;
  aborted: boolean;
  /** `--tail` read from a window (internal): whether it held the whole tail (and printed it). */
  tailExact?: boolean;
  /** The same read's count of the output lines that began inside its window. */
  wholeLines?: number;
}

/**
 * The reader of the CLI's stdout (or stderr) went away: `rvbox logs ID | head`.
 * Not a server problem, so never retried; the CLI ends at once, quietly, with
 * the exit status of a process killed by SIGPIPE (as `kubectl logs | head`).
 */
export class OutputClosedError extends Error {
  constructor(cause: unknown) {
    super("the output was closed by its reader", { cause });
  }
}

const closedStreams = new WeakMap<NodeJS.WritableStream, { error: unknown; waiters: Set<(e: unknown) => void> }>();

/** One 'error' listener per stream, whatever the number of writes or reconnects. */
function watch(s: NodeJS.WritableStream) {
  let w = closedStreams.get(s);
  if (!w) {
    const entry = { error: null as unknown, waiters: new Set<(e: unknown) => void>() };
    s.on("error", (e: unknown) => {
      entry.error ??= e;
      for (const f of entry.waiters) f(e);
      entry.waiters.clear();
    });
    closedStreams.set(s, entry);
    w = entry;
  }
  return w;
}

/** True for the errors a write gets once its pipe has no reader. */
export function isClosedOutput(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED" || code === "ERR_STREAM_WRITE_AFTER_END";
}

/**
 * One write, resolved once the stream has taken it (its callback ran: a
 * pipe's bytes are in the kernel), not merely once it is buffered under the
 * high-water mark. A write that returns true can still be queued in this
 * process when the pipe is full; the CLI exits right after its last write,
 * and process.exit drops what is queued, so `run --follow` to a reader that
 * was behind lost the tail of the output with no marker.
 */
async function write(s: NodeJS.WritableStream, data: Uint8Array | string): Promise<void> {
  const w = watch(s);
  if (w.error !== null) throw outputFailure(w.error);
  await new Promise<void>((resolve, reject) => {
    const onError = (e: unknown) => reject(outputFailure(e));
    w.waiters.add(onError);
    try {
      s.write(data, (e?: Error | null) => {
        w.waiters.delete(onError);
        if (e) reject(outputFailure(e));
        else resolve();
      });
    } catch (e) {
      // A file's stream (SyncWriteStream) throws its write(2) error here: `> /dev/full`.
      w.waiters.delete(onError);
      reject(outputFailure(e));
    }
  });
  if (w.error !== null) throw outputFailure(w.error);
}

/**
 * What a failed write of the operator's output ends the CLI with: its reader
 * gone (EPIPE) is the quiet OutputClosedError; anything else (ENOSPC of a full
 * disk, EIO, EFBIG) is an error that says so. Neither is the server's
 * problem, so neither is retried: a retry would go on past output that was
 * never written.
 */
function outputFailure(e: unknown): Error {
  if (e instanceof OutputClosedError || e instanceof OperatorError) return e;
  if (isClosedOutput(e)) return new OutputClosedError(e);
  return new OperatorError(`cannot write the output: ${e instanceof Error ? e.message : String(e)}`, EXIT.ERROR);
}

/**
 * Resolves once everything written to `s` so far has been taken (the callback
 * of an empty write queued behind it), or at once if nothing is queued or `s`
 * is gone. The CLI waits for this on stdout and stderr before it returns its
 * exit code (the entry points call process.exit).
 */
export function flushed(s: NodeJS.WritableStream): Promise<void> {
  const w = s as NodeJS.WritableStream & { writableLength?: number; destroyed?: boolean; writableEnded?: boolean };
  if (w.destroyed === true || w.writableEnded === true || !w.writableLength) return Promise.resolve();
  return new Promise<void>((resolve) => {
    s.write(EMPTY, () => resolve());
  });
}
const EMPTY = new Uint8Array(0);

/**
 * Several buffers to one stream as one write (corked: a pipe gets one writev),
 * then the same wait (the last part's callback runs after the others') and
 * the same errors as `write`.
 */
async function writeMany(s: NodeJS.WritableStream, parts: Uint8Array[]): Promise<void> {
  const w = s as NodeJS.WritableStream & { cork?: () => void; uncork?: () => void; _writev?: unknown };
  if (parts.length === 1) return write(s, parts[0]!);
  // stdout redirected to a file or device is Node's SyncWriteStream (a writeSync per write, no
  // writev): the parts go in one writev(2) instead of being concatenated first (64 MiB of
  // `logs ID > file` spent 55-67 ms in Buffer.concat).
  const fd = syncFileFd(s);
  if (fd !== null) {
    if (watch(s).error !== null) throw outputFailure(watch(s).error);
    try {
      writeAllSync(fd, parts);
    } catch (e) {
      throw outputFailure(e);
    }
    return;
  }
  // Without a writev, corked writes would still reach the stream one by one (and go on after
  // an EPIPE): one concatenated write instead.
  if (typeof w.cork !== "function" || typeof w.uncork !== "function" || typeof w._writev !== "function") return write(s, Buffer.concat(parts));
  if (watch(s).error !== null) throw outputFailure(watch(s).error);
  w.cork();
  let last: Promise<void>;
  try {
    for (let i = 0; i < parts.length - 1; i++) s.write(parts[i]!);
    last = write(s, parts[parts.length - 1]!);
  } finally {
    w.uncork();
  }
  await last;
}

/** The fd of a stream Node made for a file or character device (its writes are synchronous), else null. */
function syncFileFd(s: NodeJS.WritableStream): number | null {
  const f = s as { fd?: unknown; _type?: unknown; _writev?: unknown };
  return f._type === "fs" && typeof f.fd === "number" && typeof f._writev !== "function" ? f.fd : null;
}

/** Every byte of `parts` to `fd`, in order: writev(2) in groups of at most IOV_MAX, partial writes continued. */
function writeAllSync(fd: number, parts: Uint8Array[]): void {
  let i = 0;
  let off = 0; // bytes of parts[i] already written
  while (i < parts.length) {
    const group: Uint8Array[] = [];
    for (let j = i; j < parts.length && group.length < IOV_MAX; j++) group.push(j === i ? parts[j]!.subarray(off) : parts[j]!);
    let n = writevSync(fd, group);
    if (n === 0 && group.some((g) => g.length > 0)) throw new Error(`writev to fd ${fd} wrote nothing`);
    while (i < parts.length && n >= parts[i]!.length - off) {
      n -= parts[i]!.length - off;
      off = 0;
      i++;
    }
    off += n;
  }
}
const IOV_MAX = 1024;

function concerns(it: OutputItem, stream: StreamName | undefined): boolean {
  if (!stream) return true;
  if (it.kind === "output") return it.stream === stream;
  if (it.kind === "truncation") return it.ranges.length === 0 || it.ranges.some((r) => r.stream === stream);
  if (it.kind === "incomplete") return it.streams.length === 0 || it.streams.includes(stream);
  if (it.kind === "gap") return it.stream === stream;
  return true;
}

/**
 * `logs ID --tail N` (without -f or --since) reads back from the end: the stored events are
 * read in windows that end at the last one, each longer than the one before (the first is
 * TAIL_FIRST_WINDOW events, the next as long as the lines seen so far say the tail needs, at
 * most TAIL_WINDOW_GROWTH_MAX times longer), and the first window whose last N lines all began
 * inside it prints them (`LineShaper`'s verdict); a window that reaches event 1 is the whole
 * read. So the tail of a long command costs about the bytes of its last lines, and prints what
 * a read from event 1 prints (test/cli/follow-tail.test.ts compares the two). With -f the tail
 * is read from event 1 as before: a line still open at the end of the stored part may have
 * begun anywhere.
 */
const TAIL_FIRST_WINDOW = 4;
const TAIL_WINDOW_GROWTH_MAX = 64;

export async function followOutput(client: ControlClient, io: FollowIO, o: FollowOptions): Promise<FollowResult> {
  const tail = o.lines?.tail;
  if (tail === undefined || o.follow || o.lines!.since !== undefined || (o.from ?? 1) > 1) return followFrom(client, io, o);
  let stored: number;
  try {
    const c = (await client.getCommand({ issueUuid: o.uuid }, { signal: o.signal })).command;
    stored = c ? Number(c.storedThroughEventSeq) : 0;
  } catch (err) {
    throw describeError(err, { server: o.server, what: `command ${o.uuid}` });
  }
  for (let events = TAIL_FIRST_WINDOW; ; ) {
    const from = stored - events + 1;
    if (from <= 1) return followFrom(client, io, o);
    const r = await followFrom(client, io, { ...o, from });
    if (r.aborted || r.tailExact) return r;
    // Longer by what the lines seen so far suggest (a quarter to spare), at least doubled:
    // lines of one event each and 600 to an event both take a few windows.
    const guess = Math.ceil((events * Math.max(tail, 1) * 1.25) / Math.max(1, r.wholeLines ?? 0));
    events = Math.min(events * TAIL_WINDOW_GROWTH_MAX, Math.max(events * 2, guess));
  }
}

async function followFrom(client: ControlClient, io: FollowIO, o: FollowOptions): Promise<FollowResult> {
  const res: FollowResult = { finished: null, bytes: { stdout: 0, stderr: 0 }, markers: 0, aborted: false };
  const sinkOf = (s: StreamName | "unknown"): Sink => (s === "stderr" && !o.onlyStreamToStdout ? "stderr" : "stdout");
  const shaper = o.lines ? new LineShaper(o.lines, (to, data) => write(to === "stderr" ? io.stderr : io.stdout, data), (o.from ?? 1) > 1) : null;
  // With --tail and --follow: the tail is what is stored now; lines after it are live.
  let storedAtStart = Number.POSITIVE_INFINITY;
  if (shaper && o.lines!.tail !== undefined && o.follow) {
    try {
      const c = (await client.getCommand({ issueUuid: o.uuid }, { signal: o.signal })).command;
      storedAtStart = c ? Number(c.storedThroughEventSeq) : 0;
    } catch (err) {
      throw describeError(err, { server: o.server, what: `command ${o.uuid}` });
    }
  }
  const acceptZstd = o.acceptZstd ?? zstdFramesWanted(io.env);
  // Decoded bytes die with their batch when they go straight to file descriptors (a write's
  // callback: the kernel has them) and nothing keeps items or partial lines: buffers are reused.
  const pooled = o.reuseBuffers ?? (!shaper && !o.onItem && isFdStream(io.stdout) && isFdStream(io.stderr));
  // The decoder is loaded when the first frame arrives (`run --follow -- true` never loads it).
  let zstd: typeof import("./follow-zstd.js") | null = null;
  let decoder: Promise<FrameDecoder> | null = null;
  const loadDecoder = (): Promise<FrameDecoder> =>
    (decoder ??= import("./follow-zstd.js").then((m) => {
      zstd = m;
      return new m.FrameDecoder(pooled, FOLLOW_MAX_BATCH_BYTES + 1);
    }));
  const pending = new PendingWrite((to, parts) => writeMany(to === "stderr" ? io.stderr : io.stdout, parts));
  const marker = async (text: string, cut = false): Promise<void> => (shaper ? shaper.marker(`rvbox: ${text}\n`, cut) : write(io.stderr, `rvbox: ${text}\n`));
  // A read that starts midway shows a marker whose event range began before it clipped to that
  // range: the same marker read from event 1 says more, so it may not be kept as it is.
  const clipped = (x: OutputItem): boolean => (o.from ?? 1) > 1 && x.kind === "truncation" && x.events !== null && x.events.first <= o.from!;
  let cursor = newCursor(o.from ?? 1);
  let outageSince: number | null = null;
  let delay = 200;
  let warned = false;
  const budget = o.reconnectForMs ?? 5 * 60_000;
  const waitPoll = o.waitingPollMs ?? (o.follow ? 2000 : 0);
  const stopNotes = new AbortController();
  const stopOnAbort = () => stopNotes.abort();
  o.signal?.addEventListener("abort", stopOnAbort, { once: true });
  const notes = waitPoll > 0 ? noteWaiting(client, io, o.uuid, waitPoll, stopNotes.signal, o.known).catch(() => undefined) : Promise.resolve();
  try {
    return await followLoop();
  } finally {
    stopNotes.abort();
    o.signal?.removeEventListener("abort", stopOnAbort);
    await notes;
  }
  /**
   * A batch's stored frames decoded as soon as it arrives (while the one before is written);
   * `ready` gives the release of its buffer (call it once the output is written) or rejects with
   * the FrameError to report when the stream reaches this batch.
   */
  function decoded(batch: FollowOutputResponse): { batch: FollowOutputResponse; ready: Promise<() => void> } {
    const events = followEvents(batch);
    if (!events.some((m) => m.item.case === "output" && m.item.value.zstd.length > 0)) return { batch, ready: NO_FRAMES };
    const ready = loadDecoder().then((d) => d.decode(events));
    ready.catch(() => {}); // seen when awaited; a batch dropped by a reconnect is never awaited
    return { batch, ready };
  }
  async function followLoop(): Promise<FollowResult> {
    for (;;) {
      // One per attempt: ends the stream (and the batch read ahead) when this attempt ends.
      const attempt = new AbortController();
      const stop = () => attempt.abort();
      o.signal?.addEventListener("abort", stop, { once: true });
      try {
        const stream = client.followOutput(
          { issueUuid: o.uuid, fromEventSeq: BigInt(cursor.next), follow: o.follow, maxBatchBytes: FOLLOW_MAX_BATCH_BYTES, acceptZstd },
          { signal: attempt.signal },
        );
        for await (const { batch, ready } of readAhead(stream, decoded)) {
          outageSince = null;
          delay = 200;
          if (warned) {
            warned = false;
            await write(io.stderr, `rvbox: reconnected; resuming at event ${cursor.next}\n`);
          }
          // Consecutive output for one sink goes out as one write (a batch holds up to
          // FOLLOW_MAX_BATCH_BYTES); anything else flushes it first, so order is kept.
          const items: OutputItem[] = [];
          const timesOf: number[] = [];
          const events = followEvents(batch);
          let release: () => void;
          try {
            release = await ready;
          } catch (e) {
            const z = zstd as typeof import("./follow-zstd.js") | null;
            if (z && e instanceof z.FrameError)
              throw new OperatorError(
                `command ${o.uuid}: the server sent output event ${e.seq} as a zstd frame that does not decode to its declared size (${e.message}); output before event ${cursor.next} was written, nothing after it`,
                EXIT.ERROR,
              );
            throw e;
          }
          for (const m of events) {
            if (m.item.case === "finished") {
              res.finished = m.item.value;
              continue;
            }
            const it = outputItem(m);
            if (!it) continue;
            items.push(it);
            timesOf.push(m.time ? timestampMs(m.time) : 0);
          }
          const r = step(cursor, items);
          if (!r.ok) throw new OperatorError(`command ${o.uuid}: ${cursorErrorText(r.error)}`, EXIT.ERROR);
          cursor = r.cursor;
          for (let i = 0; i < r.admitted.length; i++) {
            const { shown, next } = r.admitted[i]!;
            const time = timesOf[i]!;
            const old = o.lines?.since !== undefined && time > 0 && time < o.lines.since;
            for (const x of shown) {
              o.onItem?.(x);
              if (!concerns(x, o.stream) || old) continue;
              if (x.kind === "output") {
                const s = x.stream === "stderr" ? "stderr" : "stdout";
                res.bytes[s] += x.data.length;
                if (shaper) await shaper.output(s, sinkOf(s), x.data, time, x.offset);
                else await pending.add(sinkOf(s), x.data);
              } else if (x.kind === "truncation" || x.kind === "incomplete" || x.kind === "gap") {
                await pending.flush();
                res.markers++;
                await marker(eventText(x) ?? x.kind, clipped(x));
              } else if (o.events) {
                await pending.flush();
                await marker(eventText(x) ?? x.kind);
              }
            }
            if (shaper && next > storedAtStart) await shaper.live();
          }
          await pending.flush();
          await shaper?.flushOut();
          release();
        }
        await shaper?.end(sinkOf);
        if (shaper?.verdict != null) {
          res.tailExact = shaper.verdict;
          res.wholeLines = shaper.whole;
        }
        return res;
      } catch (err) {
        if (o.signal?.aborted) {
          res.aborted = true;
          return res;
        }
        if (err instanceof OutputClosedError || err instanceof OperatorError) throw err;
        if (!isTransient(err)) throw describeError(err, { server: o.server, what: `command ${o.uuid}` });
        const now = Date.now();
        outageSince ??= now;
        if (now - outageSince > budget) throw describeError(err, { server: o.server });
        if (!warned) {
          warned = true;
          await write(io.stderr, `rvbox: lost the output stream (${describeError(err, { server: o.server }).message}); retrying from event ${cursor.next}\n`);
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      } finally {
        o.signal?.removeEventListener("abort", stop);
        attempt.abort();
      }
    }
  }
}

const NOTHING = (): void => {};
const NO_FRAMES: Promise<() => void> = Promise.resolve(NOTHING);

/**
 * Ask the server for stored zstd frames (accept_zstd) where node:zlib decodes zstd natively;
 * RVBOX_FOLLOW_ZSTD=0 (or RVBOX_ZSTD=portable) keeps the decompressed form. Where node:zlib has
 * no zstd the portable decoder would be slower than the server's native one, so it is not asked.
 */
export function zstdFramesWanted(env: Record<string, string | undefined> = process.env): boolean {
  return typeof (zlib as { zstdDecompressSync?: unknown }).zstdDecompressSync === "function" && env.RVBOX_FOLLOW_ZSTD !== "0" && env.RVBOX_ZSTD !== "portable";
}

/** A stream whose write callback means the kernel has the bytes (process.stdout, a file), not a JS stream that may keep them. */
function isFdStream(s: NodeJS.WritableStream): boolean {
  return typeof (s as { fd?: unknown }).fd === "number";
}

/**
 * The messages of `source`, each passed through `start` as soon as it has
 * arrived, one message ahead of the consumer: while the consumer handles
 * one (waits for its output to be written), the next is received and
 * `start` decodes it. So at most two batches are held
 * beside what the transport buffers, and a consumer that stops taking stops
 * the reads (backpressure reaches the server through TCP as before).
 */
async function* readAhead<T, U>(source: AsyncIterable<T>, start: (t: T) => U): AsyncGenerator<U> {
  const it = source[Symbol.asyncIterator]();
  const pull = (): Promise<IteratorResult<U, undefined>> =>
    it.next().then((r) => (r.done ? { done: true, value: undefined } : { done: false, value: start(r.value) }));
  let next = pull();
  try {
    for (;;) {
      const r = await next;
      if (r.done) return;
      next = pull();
      next.catch(() => {}); // seen when awaited (a reconnect), or dropped with the attempt
      yield r.value;
    }
  } finally {
    // Ends the source once its pending read settles (the attempt's abort settles it).
    void next.then(
      () => it.return?.(),
      () => {},
    );
  }
}
