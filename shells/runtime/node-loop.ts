/**
 * The single worker loop that runs a pure core reducer (agent or server) for
 * real (R-W1). Everything that reaches the reducer goes through here:
 *
 *   - internal inputs (timers, durability reports, process events, control
 *     requests, connection open/close) in one FIFO;
 *   - per-connection events in one staging queue per connection, so they
 *     reach the reducer in the order they happened: the open, then inbound
 *     WebSocket frames (the socket 'message' handler only appends to this
 *     bounded queue: bytes and count), then the close.
 *     When a queue cannot admit a frame the connection is marked overflowed,
 *     its later frames are dropped, and `ingress_full` is fed at once (R-W5,
 *     R-W7): the core closes the session without acknowledging anything.
 *
 * The loop runs in slices on setImmediate, so socket reads, process pipes
 * and fsync completions interleave with reducer steps. Each round takes the
 * coalesced durability report first, then one internal input, then one
 * frame from each connection with staged frames, round-robin (a verbose
 * connection cannot starve the others, R-W8). A slice ends after
 * `sliceMs` of work.
 *
 * Time: two clocks (see `DaemonClock`). `now()` is the deadline clock every
 * timer, timeout and stored deadline uses: the wall clock read once at start
 * plus monotonic time elapsed since, so a wall clock stepped by NTP or a VM
 * resume moves no deadline. `wall()` is the wall clock itself, only for
 * timestamps. Each step gets both. Timer: the cores emit one `wake` effect
 * per step; `setWake` keeps exactly one timer armed for the latest.
 */

export type Staged = { kind: "open" } | { kind: "frame"; data: Uint8Array; binary: boolean } | { kind: "closed"; reason: string };

export interface StagingLimits {
  /** Bytes of staged frames, each counted with FRAME_OVERHEAD_BYTES on top. */
  maxBytes: number;
  maxCount: number;
}

/** What one staged frame costs beyond its bytes (object, array slot), for the byte bound. */
export const FRAME_OVERHEAD_BYTES = 64;

interface StagingQueue {
  items: Staged[];
  head: number;
  /** Frames and their bytes waiting (open/close items are not counted). */
  frames: number;
  bytes: number;
  overflowed: boolean;
}

export interface NodeLoopHooks<I> {
  /**
   * Run one reducer step and execute its effects. Must not throw for expected
   * conditions. `now`: deadline clock; `wall`: wall clock (timestamps only).
   */
  step(input: I, now: number, wall: number): void;
  /** The input for a staged frame or close of `conn`; null to skip it. */
  staged(conn: number, item: Staged): I | null;
  ingressFull(conn: number): I;
  durable(through: number): I;
  tick(): I;
  onError(err: unknown, input: I): void;
}

/** Where a daemon's time comes from; tests inject a fake one. */
export interface TimeSource {
  /** Wall clock, ms since the Unix epoch; may jump either way. */
  wallMs(): number;
  /** Monotonic clock, ms from an arbitrary origin; never jumps. */
  monoMs(): number;
}

export const systemTime: TimeSource = { wallMs: () => Date.now(), monoMs: () => performance.now() };

/**
 * The daemons' two clocks.
 *
 * `now()` (the deadline clock) is the wall clock read once, when the clock is
 * made (at process start), plus the monotonic time elapsed since; the wall
 * clock is never read again for it. So within one process every duration
 * (heartbeats, backoff, redelivery, queue expiry, authorization lifetime,
 * history age) is real time whatever the wall clock does, and because the
 * clock is anchored to the epoch, deadlines the cores persist (queue expiry,
 * authorization expiry, end times for history age, capacity retry) still
 * mean the same instant after a restart: the next process anchors to the
 * wall clock again. The error a restart can bring is the wall-clock steps
 * that happened during the previous run (the anchors differ by them), never
 * a clock that restarts at 0. Whole milliseconds, never decreasing.
 *
 * `wall()` is the wall clock as it is now: for protobuf timestamps (event
 * times, server_time, issue/claim/incident times shown to operators).
 */
export class DaemonClock {
  private readonly anchorWall: number;
  private readonly anchorMono: number;
  private last = 0;
  constructor(private readonly source: TimeSource = systemTime) {
    this.anchorWall = Math.floor(source.wallMs());
    this.anchorMono = source.monoMs();
  }

  now(): number {
    const t = this.anchorWall + Math.floor(this.source.monoMs() - this.anchorMono);
    if (t > this.last) this.last = t;
    return this.last;
  }

  wall(): number {
    return Math.floor(this.source.wallMs());
  }

  /**
   * A deadline-clock instant as wall time, at the current offset (for display).
   * Each clock rounds down to whole ms on its own tick, so the offset read now
   * and a moment later can differ by 1 ms: the last offset is kept until the
   * two clocks have really moved apart (a wall step, NTP's slew), so one
   * deadline shows as one instant from call to call (`rvbox ls --json`).
   */
  toWall(t: number): number {
    const o = this.wall() - this.now();
    if (this.offset === null || Math.abs(o - this.offset) > 1) this.offset = o;
    return t + this.offset;
  }
  private offset: number | null = null;
}

export class NodeLoop<I> {
  readonly clock: DaemonClock;
  private readonly internal: I[] = [];
  private internalHead = 0;
  private readonly staging = new Map<number, StagingQueue>();
  /** Connections with staged items, in round-robin order. */
  private readonly ready = new Set<number>();
  private durableThrough: number | null = null;
  private scheduled = false;
  private wakeAt: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  steps = 0;

  constructor(
    private readonly hooks: NodeLoopHooks<I>,
    private readonly limits: StagingLimits,
    private readonly sliceMs = 10,
    time: TimeSource = systemTime,
  ) {
    this.clock = new DaemonClock(time);
  }

  /** The deadline clock. */
  now(): number {
    return this.clock.now();
  }

  /** The wall clock (timestamps only). */
  wall(): number {
    return this.clock.wall();
  }

  feed(input: I): void {
    if (this.stopped) return;
    this.internal.push(input);
    this.schedule();
  }

  /** Coalesced durability report: one `durable` input for the highest id. */
  feedDurable(through: number): void {
    if (this.stopped) return;
    if (this.durableThrough === null || through > this.durableThrough) this.durableThrough = through;
    this.schedule();
  }

  /** A connection opened: its `open` item is the first of its queue. */
  openStaging(conn: number): void {
    this.staging.set(conn, { items: [{ kind: "open" }], head: 0, frames: 0, bytes: 0, overflowed: false });
    this.ready.add(conn);
    this.schedule();
  }

  /**
   * Called from a socket 'message' handler: enqueue only. Returns false when
   * the queue is (or just became) overflowed.
   */
  stage(conn: number, data: Uint8Array, binary: boolean): boolean {
    const q = this.staging.get(conn);
    if (!q || this.stopped) return false;
    if (q.overflowed) return false;
    const cost = data.length + FRAME_OVERHEAD_BYTES;
    if (q.bytes + cost > this.limits.maxBytes || q.frames + 1 > this.limits.maxCount) {
      q.overflowed = true;
      this.feed(this.hooks.ingressFull(conn));
      return false;
    }
    q.items.push({ kind: "frame", data, binary });
    q.bytes += cost;
    q.frames++;
    this.ready.add(conn);
    this.schedule();
    return true;
  }

  /** The connection ended: processed after the frames staged before it. */
  stageClosed(conn: number, reason: string): void {
    const q = this.staging.get(conn);
    if (!q || this.stopped) return;
    q.items.push({ kind: "closed", reason });
    this.ready.add(conn);
    this.schedule();
  }

  stagedBytes(conn: number): number {
    return this.staging.get(conn)?.bytes ?? 0;
  }

  setWake(at: number): void {
    if (this.stopped) return;
    if (this.wakeAt === at && this.timer) return;
    this.wakeAt = at;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.max(0, Math.min(at - this.now(), 2 ** 31 - 1));
    this.timer = setTimeout(() => {
      this.timer = null;
      this.wakeAt = null;
      // Node's timers count on the event loop's cached millisecond clock, so
      // one can fire a millisecond or so before `at` on the deadline clock:
      // wait out the rest rather than step the core before its deadline.
      if (this.now() < at) return this.setWake(at);
      this.feed(this.hooks.tick());
    }, delay);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private schedule(): void {
    if (this.scheduled || this.stopped) return;
    this.scheduled = true;
    setImmediate(() => this.run());
  }

  private run1(input: I): void {
    this.steps++;
    try {
      this.hooks.step(input, this.now(), this.wall());
    } catch (err) {
      this.hooks.onError(err, input);
    }
  }

  private run(): void {
    this.scheduled = false;
    if (this.stopped) return;
    const end = performance.now() + this.sliceMs;
    for (;;) {
      let did = false;
      if (this.durableThrough !== null) {
        const t = this.durableThrough;
        this.durableThrough = null;
        this.run1(this.hooks.durable(t));
        did = true;
      }
      if (this.internalHead < this.internal.length) {
        const input = this.internal[this.internalHead]!;
        (this.internal as Array<I | undefined>)[this.internalHead] = undefined;
        this.internalHead++;
        if (this.internalHead > 1024 && this.internalHead * 2 > this.internal.length) {
          this.internal.splice(0, this.internalHead);
          this.internalHead = 0;
        }
        this.run1(input);
        did = true;
      }
      // One staged item from each ready connection.
      if (this.ready.size > 0) {
        for (const conn of [...this.ready]) {
          const q = this.staging.get(conn);
          this.ready.delete(conn);
          if (!q || q.head >= q.items.length) continue;
          const item = q.items[q.head]!;
          (q.items as Array<Staged | undefined>)[q.head] = undefined;
          q.head++;
          if (item.kind === "frame") {
            q.bytes -= item.data.length + FRAME_OVERHEAD_BYTES;
            q.frames--;
          }
          if (q.head >= q.items.length) {
            q.items.length = 0;
            q.head = 0;
          } else {
            if (q.head > 256 && q.head * 2 > q.items.length) {
              q.items.splice(0, q.head);
              q.head = 0;
            }
            this.ready.add(conn);
          }
          if (item.kind === "closed") this.staging.delete(conn);
          const input = this.hooks.staged(conn, item);
          if (input !== null) this.run1(input);
          did = true;
          if (this.stopped) return;
        }
      }
      if (!did || this.stopped) return;
      if (performance.now() >= end) {
        this.schedule();
        return;
      }
    }
  }
}
