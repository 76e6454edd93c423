/**
 * One group of a server store's writes (group-commit.ts), reduced to what it
 * must write: both server stores (server-storage.ts, pg-store.ts) queue the
 * core's persists and retention or pruning drops as StoreOps and commit each
 * group's net effect.
 */
import type { PersistEffect, PersistRecord } from "../../core/index.js";
import { eventPrefix, type OutputEventRow } from "../../core/server/store.js";
import { GroupCommitter } from "./group-commit.js";
import { foldRecord } from "./kv-store.js";

export type StoreOp = { kind: "persist"; effect: PersistEffect } | { kind: "drop"; uuid: string; throughSeq: number };

/** An output event carrying its validated zstd frame (stored apart from the other rows). */
export function isOutputRecord(r: PersistRecord): boolean {
  const v = r.value as { kind?: unknown; zstd?: unknown } | null;
  return r.table === "event" && v !== null && typeof v === "object" && v.kind === "output" && v.zstd instanceof Uint8Array;
}

export interface GroupNet {
  /** The group's net record per row (foldRecord), output a drop covers left out: it is never written. */
  net: Map<string, PersistRecord>;
  drops: Array<{ uuid: string; throughSeq: number }>;
  /** The highest persist id of the group (0: none): durable through it once the group is. */
  maxId: number;
}

export function netOfGroup(group: readonly StoreOp[]): GroupNet {
  const net = new Map<string, PersistRecord>();
  const drops: GroupNet["drops"] = [];
  let maxId = 0;
  for (const op of group) {
    if (op.kind === "drop") {
      drops.push(op);
      for (const [k, r] of net) {
        if (isOutputRecord(r) && r.key.startsWith(eventPrefix(op.uuid)) && (r.value as OutputEventRow).seq <= op.throughSeq) net.delete(k);
      }
      continue;
    }
    for (const r of op.effect.records) foldRecord(net, r);
    if (op.effect.id > maxId) maxId = op.effect.id;
  }
  return { net, drops, maxId };
}

/**
 * The write side's bounds while its database (or disk) is not taking writes:
 * shell bounds, beside the writer that keeps them.
 */
export interface StoreWriteLimits {
  /**
   * Persists queued and not yet committed, in estimated bytes (storeOpBytes):
   * up to this many the store only waits; one byte more and it is
   * backlogged (`onBacklog(true)`: the daemon closes its agents' sessions
   * and refuses new ones until the database is back).
   */
  backlogMaxBytes: number;
  /** A commit may be in flight this long and the store is still healthy; one ms more and it is reported unavailable (database slow, a lock held). */
  slowCommitMs: number;
  /** The PostgreSQL writer's wait before its first reconnect after a failure; it doubles with every failed attempt. */
  retryMinMs: number;
  /** The most that wait grows to. */
  retryMaxMs: number;
  /** A connection attempt to the database that has not completed within this is a failed attempt. */
  connectTimeoutMs: number;
}

export const DEFAULT_STORE_WRITE_LIMITS: StoreWriteLimits = {
  backlogMaxBytes: 64 * 1024 * 1024,
  slowCommitMs: 5_000,
  retryMinMs: 100,
  retryMaxMs: 5_000,
  connectTimeoutMs: 5_000,
};

/** Bytes a queued record is counted for besides its byte fields (key, row encoding, the effect around it). */
export const STORE_RECORD_OVERHEAD = 128;

/** The memory a queued op holds, estimated: each record's top-level byte fields (output frames, script chunks, stdin) plus STORE_RECORD_OVERHEAD. */
export function storeOpBytes(op: StoreOp): number {
  if (op.kind === "drop") return STORE_RECORD_OVERHEAD;
  let n = 0;
  for (const r of op.effect.records) {
    n += STORE_RECORD_OVERHEAD + r.key.length;
    const v = r.value;
    if (v === null || typeof v !== "object") continue;
    for (const f of Object.values(v as Record<string, unknown>)) if (f instanceof Uint8Array) n += f.byteLength;
  }
  return n;
}

/** Whether the store takes writes: not while a write fails and is being retried, or a commit has waited past slowCommitMs. */
export type StoreHealth = { ok: true } | { ok: false; reason: string; since: number };

/**
 * The write side both server stores share: the core's persists and drops
 * queue up as StoreOps and each group goes to `commitGroup`, which makes it
 * durable and reports `onDurable`. A failure `commitGroup` throws is
 * reported once (`fail`) and stops the writer for good (fail-stop: nothing
 * after it is acknowledged); failures it can wait out (the PostgreSQL
 * writer's retries) it reports through `markDown` instead, and the store's
 * health says so until a group commits again.
 */
export abstract class GroupCommittedStore {
  onDurable: (through: number) => void = () => {};
  onError: (err: unknown) => void = () => {};
  /** Told at each change of health, once per change (`was`: the state it leaves). */
  onHealth: (now: StoreHealth, was: StoreHealth) => void = () => {};
  /** Told when the backlog passes writeLimits.backlogMaxBytes (true), and when it is within it again (false). */
  onBacklog: (over: boolean) => void = () => {};
  writeLimits: StoreWriteLimits = DEFAULT_STORE_WRITE_LIMITS;
  protected readonly writer = new GroupCommitter<StoreOp>(
    (group) => this.commitTracked(group),
    (err) => this.fail(err),
  );
  private failed = false;
  private state: StoreHealth = { ok: true };
  private queuedBytes = 0;
  private backlogged = false;

  protected abstract commitGroup(group: StoreOp[]): Promise<void>;

  protected fail(err: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.onError(err);
  }

  get health(): StoreHealth {
    return this.state;
  }

  /** Estimated bytes of the ops queued or in flight (storeOpBytes). */
  get backlogBytes(): number {
    return this.queuedBytes;
  }

  /** Writes are not being accepted, for `reason` (a later reason replaces an earlier one without a new transition). */
  protected markDown(reason: string): void {
    if (!this.state.ok) {
      this.state.reason = reason;
      return;
    }
    const was = this.state;
    this.state = { ok: false, reason, since: Date.now() };
    this.onHealth(this.state, was);
  }

  /** Whether the writer can take the next group now (a group committed, but its connection may have been lost right after). */
  protected takingWrites(): boolean {
    return true;
  }

  /** Writes are accepted again. */
  protected markUp(): void {
    if (this.state.ok) return;
    const was = this.state;
    this.state = { ok: true };
    this.onHealth(this.state, was);
  }

  private async commitTracked(group: StoreOp[]): Promise<void> {
    const ms = this.writeLimits.slowCommitMs;
    const slow = setTimeout(() => {
      if (this.state.ok) this.markDown(`a commit has waited more than ${ms} ms (database slow, or a lock held)`);
    }, ms + 1);
    try {
      await this.commitGroup(group);
    } finally {
      clearTimeout(slow);
    }
    if (this.takingWrites()) this.markUp();
    this.count(-group.reduce((n, op) => n + storeOpBytes(op), 0));
  }

  private push(op: StoreOp): void {
    if (this.writer.push(op)) this.count(storeOpBytes(op));
  }

  private count(delta: number): void {
    this.queuedBytes += delta;
    const over = this.queuedBytes > this.writeLimits.backlogMaxBytes;
    if (over === this.backlogged) return;
    this.backlogged = over;
    this.onBacklog(over);
  }

  persist(effect: PersistEffect): void {
    this.push({ kind: "persist", effect });
  }

  /**
   * The core dropped `uuid`'s output through `throughSeq` and the retention
   * marker that records it is already durable (the core emits `drop_output`
   * only after that persist: `afterDurable`), so what it covers goes in the
   * next group, with no later persist needed (a command gone quiet makes
   * none).
   */
  dropOutput(uuid: string, throughSeq: number): void {
    this.push({ kind: "drop", uuid, throughSeq });
  }

  /**
   * The core pruned `uuid` from history and that is durable: all of its
   * output goes now, in a group of its own.
   */
  pruneOutput(uuid: string): void {
    this.push({ kind: "drop", uuid, throughSeq: Number.MAX_SAFE_INTEGER });
  }

  /** Resolves once everything queued so far is durable (or failed). */
  whenIdle(): Promise<void> {
    return this.writer.whenIdle();
  }
}
