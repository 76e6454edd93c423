/**
 * Per-connection WebSocket writer with a priority lane (R-W4, R-H3).
 *
 * Two queues: `priority` (hello/welcome, pings, protocol errors, fencing:
 * whatever the core sends on lane "priority") and `data`. Priority frames go
 * to the socket at once; data frames are handed to `ws` only while fewer than
 * `maxInFlight` bytes are written-but-not-yet-flushed, so a priority frame
 * never waits behind more than that much data. WebSocket Ping/Pong never
 * queue at all (ws.ping; ws answers pings itself).
 *
 * Bounds: more than `maxQueuedBytes` waiting in our own queues, or
 * `ws.bufferedAmount` above `deadlineBytes` for longer than `writeDeadlineMs`
 * (checked by `checkDeadline`, called from a shared interval), terminates the
 * socket: a peer that does not read is dead. The core learns it through the
 * normal close path.
 *
 * `close(reason)` flushes the priority lane, drops queued data (the durable
 * sender resends after reconnecting) and closes with code 4000.
 */
import type { WebSocket } from "ws";
import type { CloseEffect, PingEffect, SendEffect, WakeEffect } from "../../core/index.js";
import type { Logger } from "./log.js";

export interface WriterLimits {
  maxInFlight: number;
  maxQueuedBytes: number;
  deadlineBytes: number;
  writeDeadlineMs: number;
}

export const DEFAULT_WRITER_LIMITS: WriterLimits = {
  maxInFlight: 1024 * 1024,
  maxQueuedBytes: 64 * 1024 * 1024,
  deadlineBytes: 256 * 1024,
  writeDeadlineMs: 30_000,
};

export const CLOSE_CODE_PROTOCOL = 4000;

export class ConnWriter {
  private readonly data: Uint8Array[] = [];
  private dataHead = 0;
  private queuedBytes = 0;
  private inFlight = 0;
  private closed = false;
  private backlogSince = 0;
  framesSent = 0;
  bytesSent = 0;

  constructor(
    private readonly ws: WebSocket,
    private readonly limits: WriterLimits = DEFAULT_WRITER_LIMITS,
    private readonly onFatal: (why: string) => void = () => {},
  ) {}

  get isClosed(): boolean {
    return this.closed;
  }

  send(bytes: Uint8Array, lane: "priority" | "data"): void {
    if (this.closed) return;
    if (lane === "priority") {
      this.write(bytes);
      return;
    }
    this.data.push(bytes);
    this.queuedBytes += bytes.length;
    if (this.queuedBytes > this.limits.maxQueuedBytes) {
      this.fatal(`writer queue above ${this.limits.maxQueuedBytes} bytes`);
      return;
    }
    this.flush();
  }

  ping(): void {
    if (this.closed || this.ws.readyState !== this.ws.OPEN) return;
    try {
      this.ws.ping();
    } catch {
      // the close path reports it
    }
  }

  close(reason: string, code = CLOSE_CODE_PROTOCOL): void {
    if (this.closed) return;
    this.closed = true;
    this.data.length = 0;
    this.dataHead = 0;
    this.queuedBytes = 0;
    try {
      this.ws.close(code, truncateReason(reason));
    } catch {
      this.ws.terminate();
    }
  }

  terminate(): void {
    this.closed = true;
    this.ws.terminate();
  }

  /** Called periodically: enforce the write deadline. */
  checkDeadline(now: number): void {
    if (this.closed) return;
    if (this.ws.bufferedAmount > this.limits.deadlineBytes) {
      if (this.backlogSince === 0) this.backlogSince = now;
      else if (now - this.backlogSince > this.limits.writeDeadlineMs)
        this.fatal(`write deadline: ${this.ws.bufferedAmount} bytes unsent for ${now - this.backlogSince} ms`);
    } else {
      this.backlogSince = 0;
    }
  }

  private fatal(why: string): void {
    if (this.closed) return;
    this.closed = true;
    this.onFatal(why);
    this.ws.terminate();
  }

  private write(bytes: Uint8Array): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    this.inFlight += bytes.length;
    this.framesSent++;
    this.bytesSent += bytes.length;
    this.ws.send(bytes, { binary: true }, () => {
      this.inFlight -= bytes.length;
      if (this.dataHead < this.data.length) this.flush();
    });
  }

  private flush(): void {
    while (!this.closed && this.dataHead < this.data.length && this.inFlight < this.limits.maxInFlight) {
      const b = this.data[this.dataHead]!;
      (this.data as Array<Uint8Array | undefined>)[this.dataHead] = undefined;
      this.dataHead++;
      this.queuedBytes -= b.length;
      this.write(b);
    }
    if (this.dataHead >= this.data.length) {
      this.data.length = 0;
      this.dataHead = 0;
    } else if (this.dataHead > 1024) {
      this.data.splice(0, this.dataHead);
      this.dataHead = 0;
    }
  }
}

function truncateReason(r: string): string {
  const b = Buffer.from(r, "utf8");
  if (b.length <= 120) return r;
  return b
    .subarray(0, 120)
    .toString("utf8")
    .replace(/\uFFFD$/, "");
}

/** The transport effects both daemons execute alike. */
export type TransportEffect = SendEffect | PingEffect | CloseEffect | WakeEffect;

/**
 * Executes one transport effect: a frame, a WebSocket ping or a close on the
 * connection's writer (a connection already gone is a no-op: the core learns
 * of it through its own close input), or re-arming the loop's one timer.
 * Returns whether a frame was handed to a writer (for the daemons' counters).
 */
export function execTransportEffect(
  e: TransportEffect,
  writerOf: (conn: number) => ConnWriter | undefined,
  setWake: (at: number) => void,
  log: Logger,
  closing: string,
): boolean {
  switch (e.type) {
    case "send": {
      const w = writerOf(e.conn);
      w?.send(e.data, e.lane);
      return w !== undefined;
    }
    case "ping":
      writerOf(e.conn)?.ping();
      return false;
    case "close": {
      const w = writerOf(e.conn);
      if (w) {
        log.info(closing, { conn: e.conn, reason: e.reason });
        w.close(e.reason);
      }
      return false;
    }
    case "wake":
      setWake(e.at);
      return false;
  }
}
