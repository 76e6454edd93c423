/**
 * DurableDb: a crash-safe embedded SQL store on sql.js (SQLite compiled to
 * WebAssembly; no native addons).
 *
 * API
 * ---
 *   const db = await openDurableDb({ dir, schema: ['CREATE TABLE IF NOT EXISTS ...'],
 *                                    checkpointEveryBytes?: 8 MiB });
 *   db.recovery            what open found: { snapshotLoaded, epoch, recordsReplayed,
 *                          tornTail, corrupt, staleJournal }
 *   db.readOnlyIncident    true => writes refused (code 'STORE_INCIDENT'); db.incidentInfo
 *   await db.apply([{ sql, params? }, ...])   atomic batch; resolves once durable
 *   db.query<T>(sql, params?, { useBigInt? }) read-only, from memory, synchronous
 *   await db.checkpoint()  snapshot + fresh journal (normally automatic)
 *   await db.acknowledgeIncident()            operator repair, see below
 *   db.stats()             { commits, fsyncs, journalBytes, checkpoints }
 *   await db.close()       flushes pending batches, releases the LOCK
 * Error codes: STORE_INCIDENT, STORE_CLOSED, STORE_LOCKED, STORE_UNREPAIRABLE,
 * SQLite's (e.g. SQLITE_CONSTRAINT_PRIMARYKEY), or the OS's (e.g. ENOSPC).
 *
 * Theory of operation
 * -------------------
 * sql.js keeps the whole database in memory. Durability comes from two files in
 * `dir` (formats in journal.ts):
 *
 *   snapshot.bin  a full database image taken at the last checkpoint, tagged with
 *                 an epoch E and the seq of the last batch it contains;
 *   journal.bin   an append-only log of every statement batch applied since that
 *                 snapshot, whose header names the same epoch E.
 *
 * Write path: `apply(batch)` synchronously runs the batch in one SQLite
 * transaction on the in-memory db (so reads see it at once; an SQL error rejects
 * the call and nothing is logged), encodes it as a journal record (length + CRC32
 * + payload) and queues it. A single writer loop takes *everything* queued,
 * writes it with one positional write at the journal's end and calls
 * `datasync()` once; then it resolves those batches' promises in apply order.
 * Batches applied while an fsync is in flight form the next group ("group
 * commit"), so N concurrent applies cost far fewer than N fsyncs. A commit costs
 * O(size of the batch): the database is never exported on the commit path.
 * A resolved `apply()` promise therefore means the batch is on stable storage
 * and will survive kill -9 or power loss (given honest fsync from the disk).
 *
 * Checkpoint (on demand, or automatically once the journal holds
 * max(`checkpointEveryBytes`, `checkpointImageFactor` x the last snapshot's
 * image) bytes, so its O(db size) cost is amortized): inside the writer
 * loop, with no journal write in flight, the db is exported synchronously (the
 * image contains exactly the batches applied so far, including any queued but
 * not yet written ones), then written to snapshot.bin.tmp, fsynced, renamed over
 * snapshot.bin, directory fsynced: the new epoch E+1 is now durable and the
 * queued batches it covers are acknowledged. Then a fresh journal with epoch
 * E+1 is created the same way (temp + fsync + rename + dir fsync). Batches
 * applied during the checkpoint wait in the queue and go to the new journal.
 * A crash between the two renames leaves snapshot E+1 with journal E: that
 * journal is *stale* (its content is in the snapshot) and is never replayed.
 *
 * Why the threshold grows with the image: a checkpoint exports and writes the
 * whole database, holds a second copy of it in memory while it does, and
 * commits wait behind it. With a fixed 8 MiB a 72 MiB database wrote 72 MiB
 * of snapshot per 8 MiB of journal. Once the journal must also reach the
 * image's size, snapshot bytes never exceed journal bytes (at most 2x write
 * amplification). The price: an open replays up to one image's worth of
 * records (45 MiB of journal add about 0.85 s: `bench-store.ts
 * --checkpoint=70`), and the disk holds up to two images and a journal of
 * one image during a checkpoint.
 *
 * Recovery (openDurableDb): load snapshot.bin (or an empty db, epoch 0), run the
 * `schema` statements (must be idempotent: CREATE ... IF NOT EXISTS), then
 * replay journal records in order if the journal epoch equals the snapshot
 * epoch. A bad record with nothing well-formed after it is a torn tail (never
 * acknowledged): reported in `recovery.tornTail` and truncated away. A bad
 * record followed by a well-formed one, a bad header, a journal newer than the
 * snapshot, a sequence gap, a snapshot CRC mismatch, or a record that fails to
 * re-execute is corruption: reported in `recovery.corrupt`; the store still
 * opens, with the state replayed up to that point, but in the *incident* state.
 *
 * Incident state (`readOnlyIncident === true`): reads work; `apply()` and
 * `checkpoint()` reject with an Error whose `code` is 'STORE_INCIDENT'. Entered
 * on corruption at open, or when a journal/snapshot write or fsync fails (then
 * every pending promise rejects with that original error, code preserved, e.g.
 * 'ENOSPC', and the in-memory db may contain batches that are not durable).
 * `acknowledgeIncident()` is the operator's repair: it keeps a copy of the
 * journal (journal.incident-<ms>.bin), truncates the journal at the corrupt
 * offset (or to the last fsynced size after an I/O failure; a bad header is
 * replaced by an empty journal), reloads the in-memory db from disk and allows
 * writes again. Acknowledged data after the corrupt offset is lost by that
 * decision. A corrupt snapshot cannot be repaired here (restore a backup).
 *
 * Rules for callers: statements must be deterministic (replay must reproduce
 * them: pass times/random values as params, not `datetime('now')`/`random()`),
 * must not contain transaction control (BEGIN/COMMIT/ROLLBACK/SAVEPOINT/...),
 * and `query()` is read-only (enforced with PRAGMA query_only). One process per
 * directory (advisory LOCK file with the owner pid).
 */
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import {
  JOURNAL_HEADER_SIZE,
  decodeJournalHeader,
  decodeSnapshot,
  encodeJournalHeader,
  encodeRecord,
  encodeSnapshot,
  scanJournal,
  type Param,
  type Stmt,
} from "./journal.js";
import { PRIVATE_DIR_MODE, StoreError, acquireDirLock, errnoCode, fsyncDir, readIfExists, replaceFileDurably, unlinkIfExists, writeFully } from "./fs-util.js";
import { loadSqlJs, type SqlJsDatabase, type SqlJsStatement, type SqlJsStatic, type SqlValue } from "./sql-js.js";

export type { Param, Stmt } from "./journal.js";
export type { SqlValue } from "./sql-js.js";
export { StoreError } from "./fs-util.js";

export const SNAPSHOT_FILE = "snapshot.bin";
export const JOURNAL_FILE = "journal.bin";
export const DEFAULT_CHECKPOINT_EVERY_BYTES = 8 * 1024 * 1024;
/** An automatic checkpoint waits for this many journal bytes per byte of the last snapshot's image. */
export const DEFAULT_CHECKPOINT_IMAGE_FACTOR = 1;

export interface DurableDbOptions {
  /** Directory holding the store's files; created if missing. */
  dir: string;
  /** Idempotent DDL run on every open, before journal replay (e.g. CREATE TABLE IF NOT EXISTS ...). */
  schema: string[];
  /** Journal size (bytes) that triggers an automatic checkpoint, at least. Default 8 MiB. */
  checkpointEveryBytes?: number;
  /**
   * The journal must also hold this many bytes of records per byte of the last
   * snapshot's database image before an automatic checkpoint (default 1; 0 = the
   * fixed `checkpointEveryBytes` alone).
   */
  checkpointImageFactor?: number;
}

export interface RecoveryReport {
  /** True if snapshot.bin existed and was loaded. */
  snapshotLoaded: boolean;
  /** Epoch of the loaded snapshot (0 = no snapshot). */
  epoch: number;
  /** Journal records (batches) re-executed. */
  recordsReplayed: number;
  /** Unacknowledged partial tail that was truncated away. */
  tornTail: null | { offset: number; reason: string; bytesDiscarded: number };
  /** Corruption found; the store is then in the incident state. */
  corrupt: null | { file: "journal" | "snapshot"; offset: number; reason: string };
  /** A journal from an older epoch (crash mid-checkpoint) that was ignored and replaced. */
  staleJournal: null | { journalEpoch: number; snapshotEpoch: number };
}

export interface IncidentInfo {
  kind: "corrupt" | "io";
  reason: string;
  /** For 'corrupt': which file and where. */
  file?: "journal" | "snapshot";
  offset?: number;
  /** For 'io': the original error. */
  cause?: unknown;
}

export interface DurableDbStats {
  /** Non-empty batches acknowledged as durable. */
  commits: number;
  /** Journal fsyncs done by group commits (checkpoint fsyncs not included). */
  fsyncs: number;
  /** Current journal size in bytes, header included. */
  journalBytes: number;
  /** Completed checkpoints. */
  checkpoints: number;
  /** Size of the database image in the current snapshot (0 before the first). */
  snapshotImageBytes: number;
  /** Journal size (header included) at which the next automatic checkpoint runs. */
  checkpointAtBytes: number;
}

interface Pending {
  /** Encoded journal record; null for an empty batch (a durability barrier). */
  record: Buffer | null;
  resolve: () => void;
  reject: (err: unknown) => void;
}

interface OpenJournal {
  fh: fsp.FileHandle;
  epoch: number;
}

interface LoadedState {
  db: SqlJsDatabase;
  report: RecoveryReport;
  snapEpoch: number;
  snapLastSeq: number;
  lastSeq: number;
  /** null when the store is corrupt (nothing may be written). */
  journal: OpenJournal | null;
  journalSize: number;
  /** Bytes of the loaded snapshot's database image (0 without one). */
  imageBytes: number;
}

const TXN_CONTROL = /^(?:\s|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|ATTACH|DETACH|VACUUM)\b/i;

/**
 * Prepared statements per database, by SQL text: sql.js's `db.run(sql)`
 * parses and plans the statement on every call, which was most of the cost
 * of a small batch (every output chunk's rows). The cache is bounded (a store
 * uses a handful of statement texts) and is dropped whenever sql.js frees the
 * statements itself (`export()`, `close()`).
 */
const statementCache = new WeakMap<SqlJsDatabase, Map<string, SqlJsStatement>>();
const STATEMENT_CACHE_MAX = 64;

function cachedStatement(db: SqlJsDatabase, sql: string): SqlJsStatement {
  let cache = statementCache.get(db);
  let st = cache?.get(sql);
  if (st) return st;
  if (cache && cache.size >= STATEMENT_CACHE_MAX) {
    forgetStatements(db);
    cache = undefined;
  }
  if (!cache) statementCache.set(db, (cache = new Map()));
  st = db.prepare(sql);
  cache.set(sql, st);
  return st;
}

/** Free the cached statements of `db` (before export/close, which would free them anyway). */
function forgetStatements(db: SqlJsDatabase): void {
  const cache = statementCache.get(db);
  if (!cache) return;
  statementCache.delete(db);
  for (const st of cache.values()) {
    try {
      st.free();
    } catch {
      // already freed by sql.js
    }
  }
}

/** Run one statement (no result rows wanted) through the cache. */
function runCached(db: SqlJsDatabase, sql: string, params?: readonly Param[]): void {
  const st = cachedStatement(db, sql);
  try {
    if (params !== undefined && params.length > 0) st.bind(params as SqlValue[]);
    while (st.step()) {
      // statements run for their effect; a row (e.g. from a PRAGMA) is skipped
    }
  } finally {
    st.reset();
  }
}

function executeBatch(db: SqlJsDatabase, stmts: readonly Stmt[]): void {
  runCached(db, "PRAGMA query_only=0");
  runCached(db, "BEGIN");
  try {
    for (const s of stmts) {
      if (s.params === undefined) db.run(s.sql);
      else runCached(db, s.sql, s.params);
    }
    runCached(db, "COMMIT");
  } catch (err) {
    try {
      db.exec("ROLLBACK");
    } catch {
      // some errors already rolled the transaction back
    }
    throw err;
  } finally {
    runCached(db, "PRAGMA query_only=1");
  }
}

function newDb(SQL: SqlJsStatic, image: Uint8Array | null, schema: readonly string[]): SqlJsDatabase {
  const db = new SQL.Database(image);
  try {
    // The db lives in sql.js's in-memory FS; durability is our journal's job.
    db.exec("PRAGMA journal_mode=MEMORY; PRAGMA synchronous=OFF");
    for (const ddl of schema) db.exec(ddl);
    db.exec("PRAGMA query_only=1");
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

async function createJournal(dir: string, epoch: number, baseSeq: number): Promise<OpenJournal> {
  const file = path.join(dir, JOURNAL_FILE);
  await replaceFileDurably(file, [encodeJournalHeader({ epoch, baseSeq })]);
  return { fh: await fsp.open(file, "r+"), epoch };
}

async function truncateDurably(file: string, size: number): Promise<void> {
  const fh = await fsp.open(file, "r+");
  try {
    await fh.truncate(size);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Rebuilds the in-memory db from the files in `dir` (see "Recovery" above). */
async function loadState(SQL: SqlJsStatic, dir: string, schema: readonly string[]): Promise<LoadedState> {
  const report: RecoveryReport = {
    snapshotLoaded: false,
    epoch: 0,
    recordsReplayed: 0,
    tornTail: null,
    corrupt: null,
    staleJournal: null,
  };
  let snapEpoch = 0;
  let snapLastSeq = 0;
  let image: Uint8Array | null = null;
  const snapBuf = await readIfExists(path.join(dir, SNAPSHOT_FILE));
  if (snapBuf) {
    const snap = decodeSnapshot(snapBuf);
    if (typeof snap === "string") {
      report.corrupt = { file: "snapshot", offset: 0, reason: snap };
      const db = newDb(SQL, null, schema);
      return { db, report, snapEpoch: 0, snapLastSeq: 0, lastSeq: 0, journal: null, journalSize: 0, imageBytes: 0 };
    }
    ({ epoch: snapEpoch, lastSeq: snapLastSeq, image } = snap);
    report.snapshotLoaded = true;
    report.epoch = snapEpoch;
  }
  const db = newDb(SQL, image, schema);
  const base = { db, report, snapEpoch, snapLastSeq, imageBytes: image?.length ?? 0 };
  try {
    const journalFile = path.join(dir, JOURNAL_FILE);
    const buf = await readIfExists(journalFile);
    if (!buf) {
      const journal = await createJournal(dir, snapEpoch, snapLastSeq);
      return { ...base, lastSeq: snapLastSeq, journal, journalSize: JOURNAL_HEADER_SIZE };
    }
    const scan = scanJournal(buf);
    let lastSeq = snapLastSeq;
    const corruptAt = (offset: number, reason: string): LoadedState => {
      report.corrupt = { file: "journal", offset, reason };
      return { ...base, lastSeq, journal: null, journalSize: buf.length };
    };
    if (!scan.header) return corruptAt(0, scan.corrupt?.reason ?? "bad journal header");
    if (scan.header.epoch < snapEpoch) {
      report.staleJournal = { journalEpoch: scan.header.epoch, snapshotEpoch: snapEpoch };
      const journal = await createJournal(dir, snapEpoch, snapLastSeq);
      return { ...base, lastSeq, journal, journalSize: JOURNAL_HEADER_SIZE };
    }
    if (scan.header.epoch > snapEpoch) {
      return corruptAt(0, `journal epoch ${scan.header.epoch} is newer than snapshot epoch ${snapEpoch} (snapshot missing or replaced)`);
    }
    if (scan.header.baseSeq !== snapLastSeq) {
      return corruptAt(0, `journal baseSeq ${scan.header.baseSeq} != snapshot lastSeq ${snapLastSeq}`);
    }
    for (const rec of scan.records) {
      try {
        executeBatch(db, rec.batch.stmts);
      } catch (err) {
        return corruptAt(rec.offset, `replay of seq ${rec.batch.seq} failed: ${(err as Error).message ?? String(err)}`);
      }
      lastSeq = rec.batch.seq;
      report.recordsReplayed++;
    }
    if (scan.corrupt) return corruptAt(scan.corrupt.offset, scan.corrupt.reason);
    if (scan.tornTail) {
      report.tornTail = { ...scan.tornTail, bytesDiscarded: buf.length - scan.tornTail.offset };
      await truncateDurably(journalFile, scan.tornTail.offset);
    }
    const fh = await fsp.open(journalFile, "r+");
    return { ...base, lastSeq, journal: { fh, epoch: snapEpoch }, journalSize: scan.validEnd };
  } catch (err) {
    db.close();
    throw err;
  }
}

/** Opens (creating if needed) and recovers the store in `opts.dir`. */
export async function openDurableDb(opts: DurableDbOptions): Promise<DurableDb> {
  const dir = path.resolve(opts.dir);
  const threshold = opts.checkpointEveryBytes ?? DEFAULT_CHECKPOINT_EVERY_BYTES;
  if (!(threshold > 0)) throw new RangeError("checkpointEveryBytes must be > 0");
  const imageFactor = opts.checkpointImageFactor ?? DEFAULT_CHECKPOINT_IMAGE_FACTOR;
  if (!(imageFactor >= 0) || !Number.isFinite(imageFactor)) throw new RangeError("checkpointImageFactor must be a finite number >= 0");
  const created = await fsp.mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  if (created !== undefined) {
    // make the new directory entries durable, from `dir` up to the first one created
    for (let d = dir; ; d = path.dirname(d)) {
      await fsyncDir(d);
      if (d === path.dirname(created) || d === path.dirname(d)) break;
    }
  }
  const release = await acquireDirLock(dir);
  try {
    await unlinkIfExists(path.join(dir, `${SNAPSHOT_FILE}.tmp`));
    await unlinkIfExists(path.join(dir, `${JOURNAL_FILE}.tmp`));
    const SQL = await loadSqlJs();
    const state = await loadState(SQL, dir, opts.schema);
    return new DurableDb(SQL, dir, [...opts.schema], threshold, imageFactor, state, release);
  } catch (err) {
    await release();
    throw err;
  }
}

export class DurableDb {
  readonly dir: string;
  private db: SqlJsDatabase;
  private _recovery: RecoveryReport;
  private incident: IncidentInfo | null = null;
  private journal: OpenJournal | null;
  private writtenOffset: number;
  private durableOffset: number;
  private snapEpoch: number;
  private snapLastSeq: number;
  /** Bytes of the current snapshot's database image (0 before the first). */
  private imageBytes: number;
  /** seq of the last batch applied in memory. */
  private lastSeq: number;
  private pending: Pending[] = [];
  private checkpointWaiters: Array<{ resolve: () => void; reject: (err: unknown) => void }> = [];
  private checkpointDue = false;
  private loopRunning = false;
  private loopPromise: Promise<void> = Promise.resolve();
  private closed = false;
  private repairing: Promise<RecoveryReport> | null = null;
  private readonly counters = { commits: 0, fsyncs: 0, checkpoints: 0 };

  /** @internal use openDurableDb() */
  constructor(
    private readonly SQL: SqlJsStatic,
    dir: string,
    private readonly schema: readonly string[],
    private readonly checkpointEveryBytes: number,
    private readonly imageFactor: number,
    state: LoadedState,
    private readonly releaseLock: () => Promise<void>,
  ) {
    this.dir = dir;
    this.db = state.db;
    this._recovery = state.report;
    this.journal = state.journal;
    this.writtenOffset = this.durableOffset = state.journalSize;
    this.snapEpoch = state.snapEpoch;
    this.snapLastSeq = state.snapLastSeq;
    this.imageBytes = state.imageBytes;
    this.lastSeq = state.lastSeq;
    this.setIncidentFromReport(state.report);
  }

  /** What the last recovery (open, or acknowledgeIncident) found. */
  get recovery(): RecoveryReport {
    return this._recovery;
  }

  /** True while writes are refused (corruption found, or a write/fsync failed). */
  get readOnlyIncident(): boolean {
    return this.incident !== null;
  }

  /** Details of the current incident, or null. */
  get incidentInfo(): IncidentInfo | null {
    return this.incident;
  }

  /**
   * Runs `stmts` atomically on the in-memory db right away and queues them for
   * the journal. Resolves once the batch (and every batch applied before it) is
   * durable; promises resolve in apply order. Rejects at once, with nothing
   * logged, if the SQL fails or a value cannot be journaled; rejects with code
   * STORE_INCIDENT / STORE_CLOSED when writes are refused. `apply([])` is a
   * barrier: it resolves when everything applied before it is durable.
   */
  apply(stmts: ReadonlyArray<{ sql: string; params?: Param[] }>): Promise<void> {
    const refused = this.writeRefusal();
    if (refused) return Promise.reject(refused);
    let record: Buffer | null = null;
    try {
      if (!Array.isArray(stmts)) throw new TypeError("apply() expects an array of statements");
      if (stmts.length > 0) {
        for (const s of stmts) {
          const m = TXN_CONTROL.exec(typeof s?.sql === "string" ? s.sql : "");
          if (m) throw new TypeError(`${m[1]!.toUpperCase()} is not allowed in apply(): batches are already atomic`);
        }
        const seq = this.lastSeq + 1;
        record = encodeRecord(seq, stmts);
        executeBatch(this.db, stmts);
        this.lastSeq = seq;
      }
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ record, resolve, reject });
      this.kick();
    });
  }

  /**
   * Runs one read-only statement on the in-memory db (works in the incident
   * state too); rows as objects keyed by column name. INTEGER columns come back
   * as JS numbers (lossy beyond 2^53) unless `opts.useBigInt` is set, which
   * returns every INTEGER as a bigint. Writes are refused (PRAGMA query_only):
   * they would not be journaled.
   */
  query<T = Record<string, SqlValue>>(sql: string, params?: Param[], opts?: { useBigInt?: boolean }): T[] {
    if (this.closed) throw new StoreError("STORE_CLOSED", "store is closed");
    const st = this.db.prepare(sql);
    try {
      if (params !== undefined) st.bind(params);
      const rows: T[] = [];
      const config = opts?.useBigInt ? { useBigInt: true } : undefined;
      while (st.step()) rows.push(st.getAsObject(null, config) as T);
      return rows;
    } finally {
      st.free();
    }
  }

  /**
   * Writes a snapshot and starts a fresh journal (see theory of operation).
   * Batches applied meanwhile are not lost. Normally automatic.
   */
  checkpoint(): Promise<void> {
    const refused = this.writeRefusal();
    if (refused) return Promise.reject(refused);
    return new Promise<void>((resolve, reject) => {
      this.checkpointWaiters.push({ resolve, reject });
      this.kick();
    });
  }

  /**
   * Operator decision to leave the incident state (see theory of operation).
   * Keeps a copy of the journal, truncates it at the corrupt offset (or to the
   * last fsynced size after an I/O failure), reloads the db from disk and allows
   * writes again. Returns the new recovery report. Throws code
   * STORE_UNREPAIRABLE for a corrupt snapshot. No-op when there is no incident.
   */
  acknowledgeIncident(): Promise<RecoveryReport> {
    if (this.closed) return Promise.reject(new StoreError("STORE_CLOSED", "store is closed"));
    if (!this.repairing) {
      this.repairing = this.repair().finally(() => {
        this.repairing = null;
      });
    }
    return this.repairing;
  }

  private async repair(): Promise<RecoveryReport> {
    await this.drain();
    const inc = this.incident;
    if (!inc) return this._recovery;
    if (inc.kind === "corrupt" && inc.file === "snapshot") {
      throw new StoreError("STORE_UNREPAIRABLE", `snapshot is corrupt (${inc.reason}); restore ${SNAPSHOT_FILE} from a backup`);
    }
    const failedJournalEpoch = this.journal?.epoch;
    await this.closeJournal();
    const journalFile = path.join(this.dir, JOURNAL_FILE);
    const buf = await readIfExists(journalFile);
    if (buf) {
      await fsp.copyFile(journalFile, path.join(this.dir, `journal.incident-${Date.now()}.bin`));
    }
    if (inc.kind === "corrupt") {
      const offset = inc.offset ?? 0;
      if (offset < JOURNAL_HEADER_SIZE) {
        await replaceFileDurably(journalFile, [encodeJournalHeader({ epoch: this.snapEpoch, baseSeq: this.snapLastSeq })]);
      } else {
        await truncateDurably(journalFile, offset);
      }
    } else if (buf && failedJournalEpoch !== undefined) {
      // I/O failure: drop whatever was written after the last successful fsync.
      const header = decodeJournalHeader(buf);
      if (typeof header !== "string" && header.epoch === failedJournalEpoch && buf.length > this.durableOffset) {
        await truncateDurably(journalFile, this.durableOffset);
      }
    }
    await fsyncDir(this.dir);
    const state = await loadState(this.SQL, this.dir, this.schema);
    this.db.close();
    this.db = state.db;
    this._recovery = state.report;
    this.journal = state.journal;
    this.writtenOffset = this.durableOffset = state.journalSize;
    this.snapEpoch = state.snapEpoch;
    this.snapLastSeq = state.snapLastSeq;
    this.imageBytes = state.imageBytes;
    this.lastSeq = state.lastSeq;
    this.checkpointDue = false;
    this.incident = null;
    this.setIncidentFromReport(state.report);
    return state.report;
  }

  stats(): DurableDbStats {
    return { ...this.counters, journalBytes: this.writtenOffset, snapshotImageBytes: this.imageBytes, checkpointAtBytes: this.checkpointAt() };
  }

  /** Waits for queued batches to become durable, then closes files and releases the lock. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.drain();
    try {
      await this.closeJournal();
    } finally {
      this.db.close();
      await this.releaseLock();
    }
  }

  // ------------------------------------------------------------ internals

  private setIncidentFromReport(report: RecoveryReport): void {
    if (report.corrupt) {
      this.incident = { kind: "corrupt", reason: report.corrupt.reason, file: report.corrupt.file, offset: report.corrupt.offset };
    }
  }

  private writeRefusal(): Error | null {
    if (this.closed) return new StoreError("STORE_CLOSED", "store is closed");
    if (this.incident) {
      return new StoreError("STORE_INCIDENT", `store ${this.dir} refuses writes (incident: ${this.incident.reason})`, {
        cause: this.incident.cause,
      });
    }
    return null;
  }

  private async drain(): Promise<void> {
    while (this.loopRunning) await this.loopPromise;
  }

  private async closeJournal(): Promise<void> {
    const j = this.journal;
    this.journal = null;
    if (j) await j.fh.close();
  }

  private kick(): void {
    if (this.loopRunning) return;
    this.loopRunning = true;
    this.loopPromise = this.writerLoop();
  }

  /** The single writer. Never rejects. */
  private async writerLoop(): Promise<void> {
    // Let every apply() issued in the current synchronous run join the first group.
    await Promise.resolve();
    try {
      while (!this.incident) {
        if (this.checkpointWaiters.length > 0 || this.checkpointDue) {
          const waiters = this.checkpointWaiters.splice(0);
          this.checkpointDue = false;
          try {
            await this.runCheckpoint();
          } catch (err) {
            for (const w of waiters) w.reject(err);
            this.enterIoIncident("checkpoint failed", err);
            break;
          }
          for (const w of waiters) w.resolve();
          continue;
        }
        if (this.pending.length === 0) break;
        const group = this.pending.splice(0);
        try {
          await this.flushGroup(group);
        } catch (err) {
          for (const p of group) p.reject(err);
          this.enterIoIncident("journal write/fsync failed", err);
          break;
        }
        for (const p of group) {
          if (p.record) this.counters.commits++;
          p.resolve();
        }
        if (this.writtenOffset >= this.checkpointAt()) this.checkpointDue = true;
      }
    } finally {
      // No await between the last emptiness check and this line: an apply()
      // either joined the loop or will start a new one.
      this.loopRunning = false;
    }
  }

  private async flushGroup(group: Pending[]): Promise<void> {
    const records: Buffer[] = [];
    for (const p of group) if (p.record) records.push(p.record);
    if (records.length === 0) return;
    const j = this.journal;
    if (!j) throw new StoreError("STORE_INCIDENT", "journal is not open");
    const data = records.length === 1 ? records[0]! : Buffer.concat(records);
    await writeFully(j.fh, data, this.writtenOffset);
    this.writtenOffset += data.length;
    await j.fh.datasync();
    this.counters.fsyncs++;
    this.durableOffset = this.writtenOffset;
  }

  private async runCheckpoint(): Promise<void> {
    // Synchronous section: the image holds exactly the batches applied so far,
    // including queued ones not yet in the journal ("covered").
    forgetStatements(this.db);
    const image = this.db.export();
    const covered = this.pending.splice(0);
    const epoch = this.snapEpoch + 1;
    const lastSeq = this.lastSeq;
    try {
      await replaceFileDurably(path.join(this.dir, SNAPSHOT_FILE), encodeSnapshot({ epoch, lastSeq }, image));
    } catch (err) {
      for (const p of covered) p.reject(err);
      throw err;
    }
    this.snapEpoch = epoch;
    this.snapLastSeq = lastSeq;
    this.imageBytes = image.length;
    for (const p of covered) {
      if (p.record) this.counters.commits++;
      p.resolve();
    }
    // The old journal is now stale; until the new one is in place a crash
    // recovers from the snapshot alone.
    await this.closeJournal();
    this.journal = await createJournal(this.dir, epoch, lastSeq);
    this.writtenOffset = this.durableOffset = JOURNAL_HEADER_SIZE;
    this.counters.checkpoints++;
  }

  /**
   * Journal size (header included) that makes an automatic checkpoint due: the
   * fixed floor, or the image's size times the factor once the database is larger.
   */
  private checkpointAt(): number {
    return JOURNAL_HEADER_SIZE + Math.max(this.checkpointEveryBytes, Math.ceil(this.imageFactor * this.imageBytes));
  }

  private enterIoIncident(reason: string, err: unknown): void {
    const code = errnoCode(err);
    this.incident = {
      kind: "io",
      reason: `${reason}: ${code ? `${code} ` : ""}${(err as Error)?.message ?? String(err)}`,
      cause: err,
    };
    for (const p of this.pending.splice(0)) p.reject(err);
    for (const w of this.checkpointWaiters.splice(0)) w.reject(err);
  }
}
