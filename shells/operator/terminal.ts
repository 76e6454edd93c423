// `rvbox run -t`: this CLI's terminal connected to a pseudo-terminal on the
// agent (protocol 1.1).
//
// The operator's terminal goes into raw mode, so every key is a byte for the
// remote terminal: Ctrl-C, Ctrl-Z and Ctrl-D are 0x03, 0x1a and 0x04 there,
// where the remote line discipline turns them into SIGINT, SIGTSTP or EOF for
// the foreground job, exactly as a local terminal would. The window size is
// sent with the submit and again on every SIGWINCH (a `resize` event of the
// output stream), in order with the keystrokes: both travel as WriteStdin
// calls, one at a time, each chained to the one before (after_request_id),
// keystrokes that arrive while one is in flight batched into the next, a
// resize carried by the write whose data follows it.
//
// Restoring the terminal: at the end (the command's exit, a detach, an error)
// raw mode is left in a `finally`, and on process exit as a last resort. After
// `kill -9` of this CLI nothing of it runs: the terminal is restored by the
// process that survives it, the operator's shell, which puts back the tty
// modes it saved when a foreground job dies of a signal (bash, zsh; tested
// in test/shells/e2e/terminal.test.ts). The command itself keeps running on
// the agent, as after any detach: `rvbox logs -f ID`, `rvbox cancel ID`.

import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { ConnectError } from "@connectrpc/connect";
import { isTransient } from "../../client/control-client.js";
import { Code as RvCode, ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { CONTROL_STDIN_WRITE_BYTES } from "../../core/limits.js";

export interface WindowSize {
  rows: number;
  cols: number;
}

/** The size when no terminal says (stdout and stderr both redirected). */
export const DEFAULT_WINDOW: WindowSize = { rows: 24, cols: 80 };
/** Pause before resending a write refused for connection trouble or CAPACITY: doubles from the first to the most (ms). */
export const TERMINAL_BACKOFF_FIRST_MS = 20;
export const TERMINAL_BACKOFF_MAX_MS = 1_000;
/** Bytes queued here (a paste, a pipe, a server away) above which the caller stops reading its input; it reads again below half. */
export const TERMINAL_QUEUE_MAX = 4 * CONTROL_STDIN_WRITE_BYTES;

/** What a terminal write calls: WriteStdin with the command's uuid bound in. */
export type TerminalWrite = (data: Uint8Array, resize: WindowSize | undefined, requestId: string, after: string | undefined) => Promise<unknown>;

type Item = { data: Uint8Array } | { resize: WindowSize };

const controlCode = (e: unknown): RvCode | undefined => ConnectError.from(e).findDetails(ControlErrorSchema)[0]?.code;

/**
 * Keystrokes and resizes, in order, to the command's terminal. `stopped`
 * says why it stopped taking input (the command ended, a write failed for good).
 */
export class TerminalInput {
  private readonly queue: Item[] = [];
  private running = false;
  private last: string | undefined;
  stopped: string | null = null;
  writes = 0;
  /** Data bytes queued and not yet written. */
  queuedBytes = 0;

  /** `onBacklog(true)`: past TERMINAL_QUEUE_MAX, stop reading; `(false)`: below half of it again. */
  constructor(
    private readonly write: TerminalWrite,
    private readonly signal: AbortSignal,
    private readonly onBacklog: (full: boolean) => void = () => {},
  ) {}

  data(b: Uint8Array): void {
    // One write takes at most CONTROL_STDIN_WRITE_BYTES: a larger read is queued in pieces.
    for (let o = 0; o < b.length; o += CONTROL_STDIN_WRITE_BYTES) this.push({ data: b.subarray(o, Math.min(b.length, o + CONTROL_STDIN_WRITE_BYTES)) });
    if (this.queuedBytes > TERMINAL_QUEUE_MAX) this.onBacklog(true);
  }

  resize(size: WindowSize): void {
    this.push({ resize: size });
  }

  /** Resolves once everything queued so far was written (or the input stopped). */
  async drained(): Promise<void> {
    while ((this.running || this.queue.length > 0) && this.stopped === null && !this.signal.aborted) await new Promise((r) => setTimeout(r, 5));
  }

  private push(item: Item): void {
    if (this.stopped !== null) return;
    this.queue.push(item);
    if ("data" in item) this.queuedBytes += item.data.length;
    if (!this.running) void this.pump();
  }

  /** The next write: the last of the resizes at the head, then the data up to the next resize. */
  private take(): { data: Uint8Array; resize: WindowSize | undefined } {
    let resize: WindowSize | undefined;
    while (this.queue.length > 0 && "resize" in this.queue[0]!) resize = (this.queue.shift() as { resize: WindowSize }).resize;
    const parts: Uint8Array[] = [];
    let n = 0;
    while (this.queue.length > 0 && "data" in this.queue[0]! && n + this.queue[0].data.length <= CONTROL_STDIN_WRITE_BYTES) {
      const d = (this.queue.shift() as { data: Uint8Array }).data;
      parts.push(d);
      n += d.length;
    }
    const before = this.queuedBytes;
    this.queuedBytes -= n;
    if (before > TERMINAL_QUEUE_MAX / 2 && this.queuedBytes <= TERMINAL_QUEUE_MAX / 2) this.onBacklog(false);
    return { data: Buffer.concat(parts, n), resize };
  }

  private async pump(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0 && this.stopped === null && !this.signal.aborted) {
        const { data, resize } = this.take();
        await this.send(data, resize);
      }
    } finally {
      this.running = false;
    }
  }

  private async send(data: Uint8Array, resize: WindowSize | undefined): Promise<void> {
    const requestId = randomUUID();
    let pause = TERMINAL_BACKOFF_FIRST_MS;
    while (!this.signal.aborted) {
      try {
        await this.write(data, resize, requestId, this.last);
        this.last = requestId;
        this.writes++;
        return;
      } catch (e) {
        const code = controlCode(e);
        // Another writer (rvbox stdin ID) took a write after ours: keys still go, in the order typed.
        if (code === RvCode.SEQUENCE_VIOLATION) this.last = undefined;
        // The remote program reads slower than keys come (CAPACITY), or the server is away for a
        // while (a restart): the same request again, idempotent, until it is taken or the session ends.
        else if (code !== RvCode.CAPACITY && !isTransient(e)) {
          // The command ended (its stdin is gone) or the server refused for good: the rest has nowhere to go.
          this.stopped = e instanceof Error ? e.message : String(e);
          return;
        }
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(TERMINAL_BACKOFF_MAX_MS, pause * 2);
      }
    }
  }
}

/** The window size of the first of `streams` that is a terminal. */
export function windowSize(streams: readonly NodeJS.WritableStream[]): WindowSize {
  for (const s of streams) {
    const t = s as NodeJS.WriteStream;
    if (t.isTTY && t.columns > 0 && t.rows > 0) return { rows: t.rows, cols: t.columns };
  }
  return DEFAULT_WINDOW;
}

/** Subscribe to SIGWINCH through the first terminal of `streams` (its `resize` event); returns an unsubscribe. */
export function onWindowChange(streams: readonly NodeJS.WritableStream[], cb: (size: WindowSize) => void): () => void {
  const t = streams.find((s) => (s as NodeJS.WriteStream).isTTY) as NodeJS.WriteStream | undefined;
  if (!t) return () => {};
  const f = (): void => cb(windowSize([t]));
  t.on("resize", f);
  return () => t.off("resize", f);
}

/**
 * Raw mode on `stdin` when it is a terminal; the returned function leaves it
 * (idempotent), and so does this process's exit if nothing else did.
 */
export function enterRawMode(stdin: NodeJS.ReadableStream): () => void {
  const tty = stdin as NodeJS.ReadStream;
  if (!tty.isTTY || typeof tty.setRawMode !== "function") return () => {};
  tty.setRawMode(true);
  let restored = false;
  const restore = (): void => {
    if (restored) return;
    restored = true;
    try {
      tty.setRawMode(false);
    } catch {
      // the terminal is gone (hung up): nothing to restore
    }
  };
  process.once("exit", restore);
  return () => {
    process.off("exit", restore);
    restore();
  };
}

/** Text for a terminal in raw mode, where a newline does not return the carriage. */
export const rawLines = (s: string): string => s.replace(/\r?\n/g, "\r\n");

/**
 * `to`, with each newline written as CR LF while `raw()`: the CLI's own
 * messages (waiting reasons, markers) on a terminal in raw mode. The
 * command's output needs none of it: its terminal already did that.
 */
export function rawTextStream(to: NodeJS.WritableStream, raw: () => boolean): NodeJS.WritableStream {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      to.write(raw() ? rawLines(chunk.toString()) : chunk, (e?: Error | null) => cb(e ?? null));
    },
  });
}
