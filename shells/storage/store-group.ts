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
 * The write side both server stores share: the core's persists and drops
 * queue up as StoreOps and each group goes to `commitGroup`, which makes it
 * durable and reports `onDurable`. A failure is reported once (`fail`) and
 * stops the writer for good (fail-stop: nothing after it is acknowledged).
 */
export abstract class GroupCommittedStore {
  onDurable: (through: number) => void = () => {};
  onError: (err: unknown) => void = () => {};
  protected readonly writer = new GroupCommitter<StoreOp>(
    (group) => this.commitGroup(group),
    (err) => this.fail(err),
  );
  private failed = false;

  protected abstract commitGroup(group: StoreOp[]): Promise<void>;

  protected fail(err: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.onError(err);
  }

  persist(effect: PersistEffect): void {
    this.writer.push({ kind: "persist", effect });
  }

  /**
   * The core dropped `uuid`'s output through `throughSeq` and the retention
   * marker that records it is already durable (the core emits `drop_output`
   * only after that persist: `afterDurable`), so what it covers goes in the
   * next group, with no later persist needed (a command gone quiet makes
   * none).
   */
  dropOutput(uuid: string, throughSeq: number): void {
    this.writer.push({ kind: "drop", uuid, throughSeq });
  }

  /**
   * The core pruned `uuid` from history and that is durable: all of its
   * output goes now, in a group of its own.
   */
  pruneOutput(uuid: string): void {
    this.writer.push({ kind: "drop", uuid, throughSeq: Number.MAX_SAFE_INTEGER });
  }

  /** Resolves once everything queued so far is durable (or failed). */
  whenIdle(): Promise<void> {
    return this.writer.whenIdle();
  }
}
