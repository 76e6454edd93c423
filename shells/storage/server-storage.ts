/**
 * Server storage: the kv mapping of kv-store.ts for everything except output,
 * and output in segment files with a fixed-size index beside each.
 *
 * Output events (table "event", value.kind === "output") carry the validated
 * zstd frame. Neither the bytes nor a per-event row go into sql.js (which
 * keeps its whole database in memory): the frame is appended to
 * `<dir>/segments/<name>.seg` and a 64-byte entry to `<name>.idx`
 *
 *     0 f64 seq         8 f64 revision     16 f64 time      24 f64 digest
 *    32 f64 stream offset                   40 u32 offset in .seg
 *    44 u32 length      48 u32 original size 52 u8 stream (1 out, 2 err)
 *    53..59 zero        60 u32 CRC32 of bytes 0..59
 *
 * and one row per file, `segment(file, uuid, first_seq, last_seq, bytes,
 * entries)`, counts how many index entries are committed. So the server's
 * memory grows with the number of segment files (one per 4 MiB of compressed
 * output), not with the number of chunks or bytes retained.
 *
 * Write pipeline (group commit). Persist effects queue up; one loop takes
 * everything queued as a group, reduces it to its net effect per row (the
 * group is applied as one atomic db batch, so intermediate states are never
 * visible: the command record rewritten with every event is written once),
 * and
 *   1. appends the group's output frames and index entries to their files
 *      (one write per file) and fsyncs them (and the directory for new files);
 *   2. applies the batch: the kv rows and the segment rows with their new
 *      entry counts, so the db never counts an entry that is not on stable
 *      storage;
 *   3. waits for the db's commit and reports `durable through` the group's
 *      highest id.
 * Persists that arrive meanwhile form the next group.
 *
 * Segment files: one open pair per command at a time, rolled once the .seg
 * holds `segmentBytes` (the core's rule for its retention segments). Files get
 * a fresh name per daemon start; nothing is appended to an older file.
 *
 * Retention (R-O5): the core emits `drop_output {uuid, throughSeq}` once the
 * persist that records the OutputTruncation marker (table "retention") is
 * durable, and the drop goes into the next group at once: output of that
 * group through `throughSeq` is never written, segment rows wholly covered
 * are deleted, and their files are unlinked once that is durable. A file only partly covered stays until a
 * later drop covers it; readers skip what the marker covers.
 *
 * Pruning: once the core's batch that forgets a command is durable,
 * `prune_output` deletes all of its segments in a group of their own.
 *
 * Recovery: index entries beyond a segment row's count (a group that crashed
 * before its db batch) are truncated away; files no row names are deleted, and
 * so are rows (and files) of a command that no longer exists (pruned just
 * before a crash). A
 * committed file that is short, or a recent entry (read at start for the
 * core's resend digests) that fails its CRC, is corruption: the server
 * refuses to start unless told to repair. Older entries are checked when
 * read; a bad one is reported to that reader as data loss.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { type AuditRow, type CommandRow, eventKey, eventPrefix, rowsOf, type OutputEventRow } from "../../core/server/store.js";
import { openDurableDb, type DurableDb, type Stmt } from "../store/index.js";
import { crc32 } from "../store/crc32.js";
import { PRIVATE_DIR_MODE, fsyncDir, writeAllParts } from "../store/fs-util.js";
import { KV_SCHEMA, loadTables, queryPrefix, recordStmt, type PersistSink, type Tables } from "./kv-store.js";
import { GroupCommittedStore, isOutputRecord, netOfGroup, type StoreOp } from "./store-group.js";
import type {
  AuditPage,
  AuditQuery,
  CommandQuery,
  FrameLocation,
  FrameReader,
  FrameRun,
  ServerStore,
  StoredEventRow,
  StoredOutputRow,
} from "./server-store.js";
import { inAuditQuery, inlineRun, pageOf } from "./server-store.js";
import { decodeValue } from "./value-codec.js";

export const SEGMENT_DIR = "segments";
export const INDEX_ENTRY_BYTES = 64;
/** Recent event digests the core keeps per command for resend checks (core SERVER_RECENT_DIGESTS). */
const RECENT_DIGESTS = 1024;

const SCHEMA = [
  ...KV_SCHEMA,
  "CREATE TABLE IF NOT EXISTS segment (file TEXT PRIMARY KEY, uuid TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, bytes INTEGER NOT NULL, entries INTEGER NOT NULL)",
  "CREATE INDEX IF NOT EXISTS segment_uuid ON segment (uuid, last_seq)",
];

export interface IndexEntry {
  seq: number;
  revision: number;
  time: number;
  digest: number;
  offset: number;
  segOffset: number;
  length: number;
  originalSize: number;
  stream: "stdout" | "stderr";
}

export function encodeIndexEntry(e: IndexEntry): Uint8Array {
  const b = new Uint8Array(INDEX_ENTRY_BYTES);
  const v = new DataView(b.buffer);
  v.setFloat64(0, e.seq, true);
  v.setFloat64(8, e.revision, true);
  v.setFloat64(16, e.time, true);
  v.setFloat64(24, e.digest, true);
  v.setFloat64(32, e.offset, true);
  v.setUint32(40, e.segOffset, true);
  v.setUint32(44, e.length, true);
  v.setUint32(48, e.originalSize, true);
  b[52] = e.stream === "stdout" ? 1 : 2;
  v.setUint32(60, crc32(b.subarray(0, 60)), true);
  return b;
}

export function decodeIndexEntry(b: Uint8Array): IndexEntry | null {
  if (b.length !== INDEX_ENTRY_BYTES) return null;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (v.getUint32(60, true) !== crc32(b.subarray(0, 60))) return null;
  if (b[52] !== 1 && b[52] !== 2) return null;
  return {
    seq: v.getFloat64(0, true),
    revision: v.getFloat64(8, true),
    time: v.getFloat64(16, true),
    digest: v.getFloat64(24, true),
    offset: v.getFloat64(32, true),
    segOffset: v.getUint32(40, true),
    length: v.getUint32(44, true),
    originalSize: v.getUint32(48, true),
    stream: b[52] === 1 ? "stdout" : "stderr",
  };
}

export interface ServerStorageOptions {
  dir: string;
  segmentBytes: number;
  checkpointEveryBytes?: number;
  /** Acknowledge a corrupt journal / damaged segments (dropped) instead of refusing to start. */
  repair?: boolean;
}

interface OpenSegment {
  uuid: string;
  file: string;
  seg: fsp.FileHandle;
  idx: fsp.FileHandle;
  /** Bytes reserved in .seg, entries reserved in .idx. */
  size: number;
  entries: number;
  firstSeq: number;
  lastSeq: number;
  isNew: boolean;
}

interface SegmentRow {
  file: string;
  uuid: string;
  first_seq: number;
  last_seq: number;
  bytes: number;
  entries: number;
}

export class ServerStorage extends GroupCommittedStore implements PersistSink, ServerStore {
  /** What restoreServer reads; cleared by the daemon after the restore. */
  readonly tables: Tables;
  private readonly segDir: string;
  private readonly open = new Map<string, OpenSegment>();
  private fileSeq = 0;
  private readonly prefix = Date.now().toString(36);
  /** Bytes of segment files written, for stats. */
  segmentBytesWritten = 0;

  private constructor(
    readonly db: DurableDb,
    private readonly opts: ServerStorageOptions,
  ) {
    super();
    this.segDir = path.join(opts.dir, SEGMENT_DIR);
    this.tables = loadTables(db);
  }

  static async open(opts: ServerStorageOptions): Promise<ServerStorage> {
    const db = await openDurableDb({ dir: path.join(opts.dir, "db"), schema: SCHEMA, checkpointEveryBytes: opts.checkpointEveryBytes });
    if (db.readOnlyIncident) {
      const info = db.incidentInfo;
      if (!opts.repair) {
        await db.close().catch(() => {});
        throw new Error(
          `server store is corrupt (${info?.reason}); start with --repair-store to truncate the journal at the corruption (acknowledged data after it is lost)`,
        );
      }
      await db.acknowledgeIncident();
    }
    await fsp.mkdir(path.join(opts.dir, SEGMENT_DIR), { recursive: true, mode: PRIVATE_DIR_MODE });
    const s = new ServerStorage(db, opts);
    try {
      await s.recoverSegments();
    } catch (err) {
      await db.close().catch(() => {});
      throw err;
    }
    return s;
  }

  get recovery() {
    return this.db.recovery;
  }

  get opened() {
    const r = this.db.recovery;
    return {
      store: "embedded",
      dir: this.opts.dir,
      snapshot: r.snapshotLoaded,
      replayed: r.recordsReplayed,
      tornTail: r.tornTail ? r.tornTail.reason : "none",
    };
  }

  /**
   * Check every committed index, truncate uncommitted tails, delete unknown
   * files, and give the core the digests of each command's recent output
   * events (as rows of table "event").
   */
  private async recoverSegments(): Promise<void> {
    const rows = this.db.query<SegmentRow>("SELECT file, uuid, first_seq, last_seq, bytes, entries FROM segment ORDER BY uuid, first_seq");
    const known = new Set<string>();
    const stored = new Map<string, number>();
    for (const [uuid, v] of rowsOf(this.tables, "command")) stored.set(uuid, v.storedThrough ?? 0);
    const damaged: string[] = [];
    const pruned: string[] = [];
    let events = this.tables.get("event");
    if (!events) this.tables.set("event", (events = new Map()));
    for (const r of rows) {
      if (!stored.has(r.uuid)) {
        // Its command was pruned and the crash came before its files went.
        pruned.push(r.file);
        continue;
      }
      known.add(`${r.file}.seg`);
      known.add(`${r.file}.idx`);
      const segPath = path.join(this.segDir, `${r.file}.seg`);
      const idxPath = path.join(this.segDir, `${r.file}.idx`);
      const ok = await truncateTo(segPath, r.bytes)
        .then(() => truncateTo(idxPath, r.entries * INDEX_ENTRY_BYTES))
        .then(
          () => true,
          () => false,
        );
      if (!ok) {
        damaged.push(r.file);
        continue;
      }
      // Only the recent entries are read now (their digests); older ones are
      // checked (CRC) when a reader asks for them. Startup stays O(files).
      const recentFrom = (stored.get(r.uuid) ?? 0) - RECENT_DIGESTS;
      if (r.last_seq > recentFrom) {
        const entries = readIndex(idxPath, r.entries, recentFrom + 1);
        if (!entries) {
          damaged.push(r.file);
          continue;
        }
        for (const e of entries) events.set(eventKey(r.uuid, e.seq), { seq: e.seq, digest: e.digest });
      }
    }
    if (damaged.length > 0) {
      if (!this.opts.repair)
        throw new Error(
          `server output segments are damaged (${damaged.slice(0, 3).join(", ")}${damaged.length > 3 ? ", ..." : ""}); start with --repair-store to drop them`,
        );
      await this.db.apply(damaged.map((f) => ({ sql: "DELETE FROM segment WHERE file = ?", params: [f] })));
    }
    if (pruned.length > 0) await this.db.apply(pruned.map((f) => ({ sql: "DELETE FROM segment WHERE file = ?", params: [f] })));
    for (const name of await fsp.readdir(this.segDir)) {
      if (!known.has(name) || damaged.some((f) => name.startsWith(`${f}.`))) await fsp.unlink(path.join(this.segDir, name)).catch(() => {});
    }
  }

  /** One group: output to segment files, then one db batch; a prune drop deletes all of a command's segments (a crash before it leaves rows naming a command that is gone: recoverSegments deletes them at open). */
  protected async commitGroup(group: StoreOp[]): Promise<void> {
    const { net, drops, maxId } = netOfGroup(group);
    // 1. Output frames and index entries, one write per file, then fsync.
    const stmts: Stmt[] = [];
    const writes = new Map<OpenSegment, { at: number; entriesAt: number; parts: Uint8Array[]; index: Uint8Array[] }>();
    const toClose: OpenSegment[] = [];
    let newFiles = false;
    for (const r of net.values()) {
      if (!isOutputRecord(r)) {
        stmts.push(recordStmt(r));
        continue;
      }
      const v = r.value as OutputEventRow;
      const uuid = r.key.slice(0, r.key.lastIndexOf("/"));
      const zstd = v.zstd;
      const seq = v.seq;
      const seg = await this.segmentFor(uuid, seq, toClose);
      if (seg.isNew) newFiles = true;
      let w = writes.get(seg);
      if (!w) writes.set(seg, (w = { at: seg.size, entriesAt: seg.entries, parts: [], index: [] }));
      w.parts.push(zstd);
      w.index.push(
        encodeIndexEntry({
          seq,
          revision: v.revision ?? 0,
          time: v.time ?? 0,
          digest: v.digest ?? 0,
          offset: v.offset,
          segOffset: seg.size,
          length: zstd.length,
          originalSize: v.originalSize,
          stream: v.stream === "stderr" ? "stderr" : "stdout",
        }),
      );
      seg.size += zstd.length;
      seg.entries++;
      seg.lastSeq = seq;
    }
    for (const seg of writes.keys()) {
      stmts.push({
        sql: "INSERT OR REPLACE INTO segment (file, uuid, first_seq, last_seq, bytes, entries) VALUES (?, ?, ?, ?, ?, ?)",
        params: [seg.file, seg.uuid, seg.firstSeq, seg.lastSeq, seg.size, seg.entries],
      });
    }
    if (writes.size > 0) {
      await Promise.all(
        [...writes].map(async ([seg, w]) => {
          const [n] = await Promise.all([writeAllParts(seg.seg, w.parts, w.at), writeAll(seg.idx, Buffer.concat(w.index), w.entriesAt * INDEX_ENTRY_BYTES)]);
          await Promise.all([seg.seg.datasync(), seg.idx.datasync()]);
          this.segmentBytesWritten += n;
          seg.isNew = false;
        }),
      );
      if (newFiles) await fsyncDir(this.segDir);
    }
    for (const seg of toClose) await closeSegment(seg);
    // 2. Retention: whole files the drops cover.
    const unlink: string[] = [];
    for (const d of drops) {
      for (const f of this.coveredFiles(d.uuid, d.throughSeq, writes.keys())) {
        stmts.push({ sql: "DELETE FROM segment WHERE file = ?", params: [f] });
        unlink.push(f);
      }
    }
    // 3. One atomic batch, one durability report.
    if (stmts.length > 0) await this.db.apply(stmts);
    if (maxId > 0) this.onDurable(maxId);
    for (const f of unlink) {
      await fsp.unlink(path.join(this.segDir, `${f}.seg`)).catch(() => {});
      await fsp.unlink(path.join(this.segDir, `${f}.idx`)).catch(() => {});
    }
  }

  private async segmentFor(uuid: string, seq: number, toClose: OpenSegment[]): Promise<OpenSegment> {
    let seg = this.open.get(uuid);
    if (seg && seg.size >= this.opts.segmentBytes) {
      // Rolled: closed once this group's writes are done.
      toClose.push(seg);
      this.open.delete(uuid);
      seg = undefined;
    }
    if (!seg) {
      if (this.open.size >= 256) {
        // Bound open descriptors: close the least recently opened after the writes.
        const [oldUuid, old] = this.open.entries().next().value as [string, OpenSegment];
        this.open.delete(oldUuid);
        toClose.push(old);
      }
      const file = `${this.prefix}-${(++this.fileSeq).toString(36).padStart(6, "0")}`;
      const segFh = await fsp.open(path.join(this.segDir, `${file}.seg`), "w", 0o600);
      const idxFh = await fsp.open(path.join(this.segDir, `${file}.idx`), "w", 0o600);
      seg = { uuid, file, seg: segFh, idx: idxFh, size: 0, entries: 0, firstSeq: seq, lastSeq: seq, isNew: true };
      this.open.set(uuid, seg);
    }
    return seg;
  }

  /**
   * The files of `uuid` whose every event is at or below `throughSeq`, judged
   * by the database's rows and, for the files this group writes (`pending`),
   * by their in-memory last event: their rows are in the same batch, not yet
   * in the database, so a file created, filled and rolled within one group
   * would otherwise outlive the drop covering it, and a file this group
   * appended to would be judged by its old last event and deleted with the
   * acknowledged events it now holds past the drop (the storage test "a drop
   * in the same group as new output…" loses event 4 with the one-query form).
   */
  private coveredFiles(uuid: string, throughSeq: number, pending: Iterable<OpenSegment>): string[] {
    const cur = this.open.get(uuid);
    // A row's last_seq is as of the last group; this group's writes may have moved it on.
    const last = new Map(
      this.db.query<{ file: string; last_seq: number }>("SELECT file, last_seq FROM segment WHERE uuid = ?", [uuid]).map((r) => [r.file, r.last_seq]),
    );
    for (const seg of pending) if (seg.uuid === uuid) last.set(seg.file, seg.lastSeq);
    const files = [...last].filter(([, l]) => l <= throughSeq).map(([f]) => f);
    const out: string[] = [];
    for (const f of files) {
      if (cur && cur.file === f) {
        if (cur.lastSeq > throughSeq) continue;
        this.open.delete(uuid);
        void closeSegment(cur);
      }
      out.push(f);
    }
    return out;
  }

  // ------------------------------------------------------------------ reads

  /** The embedded store holds what memory holds: pruning deletes a command's rows (history.ts). */
  readonly keepsHistory = false;

  async sweepHistory(): Promise<number> {
    return 0;
  }

  /** Every audit row decoded and filtered (the core bounds the embedded log by limits.auditMax and counts its drops). */
  async listAudit(q: AuditQuery): Promise<AuditPage> {
    const all = this.db
      .query<{ v: Uint8Array }>("SELECT v FROM kv WHERE t = 'audit' ORDER BY k")
      .map((r) => decodeValue(r.v) as AuditRow)
      .filter((e) => inAuditQuery(e, q));
    return { entries: all.slice(Math.max(0, all.length - q.limit)), matched: all.length, swept: 0 };
  }

  async sweepAudit(): Promise<number> {
    return 0;
  }

  async storedUuids(uuids: readonly string[]): Promise<string[]> {
    return uuids.filter((k) => this.db.query("SELECT 1 FROM kv WHERE t = 'command' AND k = ?", [k]).length > 0);
  }

  async readCommand(uuid: string): Promise<CommandRow | undefined> {
    const r = this.db.query<{ v: Uint8Array }>("SELECT v FROM kv WHERE t = 'command' AND k = ?", [uuid]);
    return r[0] ? (decodeValue(r[0].v) as CommandRow) : undefined;
  }

  /** Every command row decoded and filtered: the embedded store holds at most the metadata tier's worth. */
  async listCommands(q: CommandQuery): Promise<CommandRow[]> {
    const rows = this.db.query<{ v: Uint8Array }>("SELECT v FROM kv WHERE t = 'command'").map((r) => decodeValue(r.v) as CommandRow);
    return pageOf(rows, q);
  }

  /**
   * Stored events of `uuid` with fromSeq <= seq <= toSeq, in order, at most
   * `limit`: non-output rows from the db merged with output index entries
   * (as `{ kind: "output", ..., seg: pointer }`).
   */
  async readEvents(uuid: string, fromSeq: number, toSeq: number, limit: number): Promise<StoredEventRow[]> {
    if (toSeq < fromSeq) return [];
    const prefix = eventPrefix(uuid);
    const from = eventKey(uuid, Math.max(0, fromSeq));
    const out: StoredEventRow[] = [];
    for (const r of queryPrefix(this.db, "event", prefix, from, limit)) {
      const v = r.v as StoredEventRow;
      if (v.seq > toSeq) break;
      out.push(v);
    }
    // Output: from the index files of the segments overlapping the range,
    // up to where `limit` rows would end anyway.
    const upTo = out.length === limit ? out[out.length - 1]!.seq : toSeq;
    const segs = this.db.query<SegmentRow>(
      "SELECT file, uuid, first_seq, last_seq, bytes, entries FROM segment WHERE uuid = ? AND last_seq >= ? AND first_seq <= ? ORDER BY first_seq",
      [uuid, fromSeq, upTo],
    );
    let taken = 0;
    for (const s of segs) {
      if (taken >= limit) break;
      const entries = readIndex(path.join(this.segDir, `${s.file}.idx`), s.entries, fromSeq, limit - taken);
      if (!entries) continue; // removed by retention meanwhile: the marker covers it
      for (const e of entries) {
        if (e.seq > upTo) break;
        out.push({
          seq: e.seq,
          revision: e.revision,
          time: e.time,
          digest: e.digest,
          kind: "output",
          stream: e.stream,
          offset: e.offset,
          originalSize: e.originalSize,
          where: { f: s.file, o: e.segOffset, n: e.length } satisfies FrameLocation,
        });
        if (++taken >= limit) break;
      }
    }
    out.sort((a, b) => a.seq - b.seq);
    return out.length > limit ? out.slice(0, limit) : out;
  }

  frameReader(): FrameReader {
    return new SegmentFrameReader((file) => this.openSegment(file));
  }

  /** A segment file opened for reading (FollowOutput reads runs of frames from it); null if it is gone. */
  async openSegment(file: string): Promise<fsp.FileHandle | null> {
    try {
      return await fsp.open(path.join(this.segDir, `${file}.seg`), "r");
    } catch {
      return null;
    }
  }

  async segmentStats(): Promise<{ files: number; bytes: number }> {
    const r = this.db.query<{ n: number; b: number | null }>("SELECT COUNT(*) AS n, SUM(bytes) AS b FROM segment");
    return { files: r[0]?.n ?? 0, bytes: r[0]?.b ?? 0 };
  }

  async close(): Promise<void> {
    await this.writer.close();
    for (const seg of this.open.values()) await closeSegment(seg);
    this.open.clear();
    await this.db.close();
  }
}

/**
 * Reads output rows' frames from segment files for one reader: rows that sit
 * back to back in one file (the usual case: a command's file is appended in
 * seq order) are one run and one read; the file stays open while the reader
 * moves through it.
 */
class SegmentFrameReader implements FrameReader {
  private file = "";
  private fh: fsp.FileHandle | null = null;
  constructor(private readonly openSegment: (file: string) => Promise<fsp.FileHandle | null>) {}

  async read(rows: readonly StoredOutputRow[]): Promise<FrameRun[]> {
    const out: FrameRun[] = [];
    for (let i = 0; i < rows.length; ) {
      const ptr = rows[i]!.where;
      if (!ptr) {
        out.push(inlineRun(rows[i]!));
        i++;
        continue;
      }
      let j = i + 1;
      let end = ptr.o + ptr.n;
      for (; j < rows.length; j++) {
        const p = rows[j]!.where;
        if (!p || p.f !== ptr.f || p.o !== end) break;
        end = p.o + p.n;
      }
      const run = rows.slice(i, j);
      i = j;
      out.push({ rows: run, bytes: await this.span(ptr.f, ptr.o, end - ptr.o), lengths: run.map((r) => r.where!.n) });
    }
    return out;
  }

  private async span(file: string, at: number, n: number): Promise<Uint8Array | null> {
    if (this.file !== file || !this.fh) {
      await this.close();
      const fh = await this.openSegment(file);
      if (!fh) return null;
      this.fh = fh;
      this.file = file;
    }
    const buf = Buffer.allocUnsafe(n);
    for (let off = 0; off < n; ) {
      const { bytesRead } = await this.fh.read(buf, off, n - off, at + off);
      if (bytesRead === 0) return null;
      off += bytesRead;
    }
    return buf;
  }

  async close(): Promise<void> {
    const fh = this.fh;
    this.fh = null;
    this.file = "";
    if (fh) await fh.close().catch(() => {});
  }
}

async function writeAll(fh: fsp.FileHandle, data: Uint8Array, at: number): Promise<void> {
  let off = 0;
  while (off < data.length) {
    const { bytesWritten } = await fh.write(data, off, data.length - off, at + off);
    off += bytesWritten;
  }
}

async function closeSegment(s: OpenSegment): Promise<void> {
  await s.seg.close().catch(() => {});
  await s.idx.close().catch(() => {});
}

async function truncateTo(file: string, size: number): Promise<void> {
  const st = await fsp.stat(file);
  if (st.size < size) throw new Error(`${file} is shorter (${st.size}) than committed (${size})`);
  if (st.size > size) await fsp.truncate(file, size);
}

/**
 * Committed entries of an index file with seq >= fromSeq, at most `max` of
 * them (all of them with the defaults). Entries are in seq order, so the
 * first one is found by binary search with 64-byte reads. Null if the file
 * is missing, short or an entry fails its CRC.
 */
function readIndex(file: string, count: number, fromSeq = 0, max = Number.MAX_SAFE_INTEGER): IndexEntry[] | null {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch {
    return null;
  }
  try {
    if (fstatSync(fd).size < count * INDEX_ENTRY_BYTES) return null;
    const one = new Uint8Array(INDEX_ENTRY_BYTES);
    const at = (i: number): IndexEntry | null => {
      if (readSync(fd, one, 0, INDEX_ENTRY_BYTES, i * INDEX_ENTRY_BYTES) !== INDEX_ENTRY_BYTES) return null;
      return decodeIndexEntry(one);
    };
    let lo = 0;
    let hi = count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const e = at(mid);
      if (!e) return null;
      if (e.seq < fromSeq) lo = mid + 1;
      else hi = mid;
    }
    const n = Math.min(max, count - lo);
    const want = n * INDEX_ENTRY_BYTES;
    const buf = new Uint8Array(want);
    let got = 0;
    while (got < want) {
      const r = readSync(fd, buf, got, want - got, lo * INDEX_ENTRY_BYTES + got);
      if (r === 0) return null;
      got += r;
    }
    const out: IndexEntry[] = [];
    for (let i = 0; i < n; i++) {
      const e = decodeIndexEntry(buf.subarray(i * INDEX_ENTRY_BYTES, (i + 1) * INDEX_ENTRY_BYTES));
      if (!e) return null;
      out.push(e);
    }
    return out;
  } finally {
    closeSync(fd);
  }
}
