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
 * stored zstd frames of its output events; `readCommand` and `listCommands`
 * for command rows (the committed view of each: with the history in the
 * store, memory holds only what is live).
 */
import type { PersistEffect } from "../../core/index.js";
import type { AuditRow, CommandRow, EventRow, OutputEventRow } from "../../core/server/store.js";
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

/**
 * A page of ListCommands: newest first (created_at descending, then uuid
 * ascending), the rows strictly after `after` in that order.
 */
export interface CommandQuery {
  /** Only these clients (null: every client). */
  clientIds: readonly string[] | null;
  /** Only these lifecycle states (empty: every state). */
  states: readonly number[];
  /** Created at or after / before (wall clock ms; 0: no bound). */
  createdFrom: number;
  createdBefore: number;
  after: ListPosition | null;
  limit: number;
}

/** Where a page of ListCommands ended: its last row's creation time and uuid. */
export interface ListPosition {
  createdAt: number;
  uuid: string;
}

/** Whether a command row belongs in a query's listing (the stores that filter in JavaScript use it). */
export function inQuery(r: Pick<CommandRow, "clientId" | "state" | "createdAt">, q: CommandQuery): boolean {
  return (
    (q.clientIds === null || q.clientIds.includes(r.clientId)) &&
    (q.states.length === 0 || q.states.includes(r.state)) &&
    (q.createdFrom === 0 || r.createdAt >= q.createdFrom) &&
    (q.createdBefore === 0 || r.createdAt < q.createdBefore)
  );
}

/** The listing's order: newest first, then by uuid. */
export function listOrder(a: ListPosition, b: ListPosition): number {
  return b.createdAt - a.createdAt || (a.uuid < b.uuid ? -1 : a.uuid > b.uuid ? 1 : 0);
}

/** One page of `rows` (any order) for `q`, in listing order. */
export function pageOf<T extends Pick<CommandRow, "clientId" | "state" | "createdAt" | "uuid">>(rows: Iterable<T>, q: CommandQuery): T[] {
  const out: T[] = [];
  for (const r of rows) if (inQuery(r, q) && (q.after === null || listOrder(q.after, r) < 0)) out.push(r);
  out.sort(listOrder);
  return out.length > q.limit ? out.slice(0, q.limit) : out;
}

/** ListAudit's filter: entries at or after `since` (wall ms), of one operator, naming one client ("": any); the newest `limit`. */
export interface AuditQuery {
  since: number;
  operator: string;
  clientId: string;
  limit: number;
}

/** A page of the stored audit log: the newest `limit` matching entries, oldest first; how many matched; how many the store's retention deleted. */
export interface AuditPage {
  entries: AuditRow[];
  matched: number;
  swept: number;
}

/** Whether an audit entry is one a query asks for. */
export function inAuditQuery(e: AuditRow, q: AuditQuery): boolean {
  return e.at >= q.since && (q.operator === "" || e.operator === q.operator) && (q.clientId === "" || e.clients.includes(q.clientId));
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
  /** The stored row of command `uuid` (undefined: none). */
  readCommand(uuid: string): Promise<CommandRow | undefined>;
  /** Which of `uuids` name a stored command row. */
  storedUuids(uuids: readonly string[]): Promise<string[]>;
  /** One page of stored command rows (CommandQuery). */
  listCommands(q: CommandQuery): Promise<CommandRow[]>;
  /**
   * Whether pruning leaves a command's rows in the store (the core's
   * limits.historyInStore): the store keeps the history and deletes it by
   * age itself (`sweepHistory`).
   */
  readonly keepsHistory: boolean;
  /**
   * Delete ended commands (with their events, output and markers) that ended
   * before `endedBefore` (deadline clock ms), at most `limit`; returns how
   * many. Only a store that keepsHistory does anything.
   */
  sweepHistory(endedBefore: number, limit: number): Promise<number>;
  /** The audit log as stored (a store that keepsHistory keeps it; the core holds none of it then). */
  listAudit(q: AuditQuery): Promise<AuditPage>;
  /** Delete the oldest audit entries past the newest `keep`, at most `limit`; returns how many (counted in `swept`). */
  sweepAudit(keep: number, limit: number): Promise<number>;
  close(): Promise<void>;
}

/** A row that carries its frame inline, as a run of one. */
export function inlineRun(row: StoredOutputRow): FrameRun {
  const z = row.zstd;
  return { rows: [row], bytes: z ?? null, lengths: [z?.length ?? 0] };
}
