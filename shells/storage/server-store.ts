/**
 * The server daemon's store: the one interface through which the daemon and
 * its control service reach durable state. The embedded store
 * (server-storage.ts: sql.js + journal, output in segment files) implements
 * it, a PostgreSQL store is to implement it too, and
 * test/shells/storage/store-contract.ts is the suite every implementation
 * passes. Nothing outside shells/storage names an implementation except the
 * code that opens one.
 *
 * Writes are the core's effects, in order: `persist` (group-committed; the
 * store reports `onDurable(through)` once every persist up to that id is on
 * stable storage, never before), `dropOutput` (retention, after the marker
 * that records it is durable) and `pruneOutput` (history, after the batch
 * that forgets the command is durable). Reads are of committed rows only:
 * `readEvents` for a command's stored events and a `FrameReader` for the
 * stored zstd frames of its output events.
 */
import type { PersistEffect } from "../../core/index.js";
import type { EventRow, OutputEventRow } from "../../core/server/store.js";
import type { Tables } from "./kv-store.js";
import type { StoreHealth, StoreWriteLimits } from "./store-group.js";

/**
 * An output event as a store reads it back, without its frame: the frame is
 * read on demand through a FrameReader (`where` tells the store's reader where
 * it is; nothing else looks inside), or carried inline (`zstd`).
 */
export type StoredOutputRow = Omit<OutputEventRow, "zstd"> & { zstd?: Uint8Array; where?: FrameLocation };
/** A stored server event (core/server/store.ts EventRow) as readEvents returns it. */
export type StoredEventRow = Exclude<EventRow, OutputEventRow> | StoredOutputRow;

/** Where a store keeps one frame: for the embedded store, a segment file, offset and length. */
export interface FrameLocation {
  f: string;
  o: number;
  n: number;
}

/** Output rows whose frames a store read in one go: their frames back to back, `lengths[i]` bytes each; null if they are gone (retention meanwhile). */
export interface FrameRun {
  rows: StoredOutputRow[];
  bytes: Uint8Array | null;
  lengths: number[];
}

/** Reads the frames of one reader's output rows; may keep a file or cursor open between calls until closed. */
export interface FrameReader {
  /** The frames of `rows` (output rows of one command, in seq order), as runs in the same order. */
  read(rows: readonly StoredOutputRow[]): Promise<FrameRun[]>;
  close(): Promise<void>;
}

export interface ServerStore {
  /** The rows restoreServer reads at start; the daemon clears them once restored. */
  readonly tables: Tables;
  /** What opening the store found, for the daemon's "store opened" log line. */
  readonly opened: Readonly<Record<string, string | number | boolean>>;
  onDurable: (through: number) => void;
  onError: (err: unknown) => void;
  /** Whether writes are being accepted (store-group.ts); told once per change. */
  readonly health: StoreHealth;
  onHealth: (now: StoreHealth, was: StoreHealth) => void;
  /** Estimated bytes of writes queued and not yet committed, and the change past writeLimits.backlogMaxBytes. */
  readonly backlogBytes: number;
  onBacklog: (over: boolean) => void;
  writeLimits: StoreWriteLimits;
  persist(effect: PersistEffect): void;
  dropOutput(uuid: string, throughSeq: number): void;
  pruneOutput(uuid: string): void;
  /** Resolves once everything queued so far is durable (or failed). */
  whenIdle(): Promise<void>;
  /** Stored events of `uuid` with fromSeq <= seq <= toSeq, in seq order, at most `limit`. */
  readEvents(uuid: string, fromSeq: number, toSeq: number, limit: number): Promise<StoredEventRow[]>;
  frameReader(): FrameReader;
  close(): Promise<void>;
}

/** A row that carries its frame inline, as a run of one. */
export function inlineRun(row: StoredOutputRow): FrameRun {
  const z = row.zstd;
  return { rows: [row], bytes: z ?? null, lengths: [z?.length ?? 0] };
}
