/**
 * On-disk formats of the durable store (journal and snapshot).
 *
 * A store directory contains:
 *
 *   snapshot.bin   last checkpoint: SQLite database image + header (optional; absent
 *                  until the first checkpoint, which means "empty db, epoch 0, seq 0")
 *   journal.bin    append-only log of statement batches applied after that snapshot
 *   LOCK           pid of the process that has the store open (advisory)
 *   *.tmp          partially written replacement files; deleted on open
 *   journal.incident-<ms>.bin   copy of a journal kept by acknowledgeIncident()
 *
 * All integers are little-endian. "u64" values are stored as 64-bit unsigned
 * integers but must be <= 2^53-1 (they are read into JS numbers). CRC32 is the
 * IEEE/zlib CRC-32 (poly 0xEDB88320, init and final xor 0xFFFFFFFF).
 *
 * Journal file (journal.bin)
 * --------------------------
 * Header, 40 bytes:
 *   off  size  field
 *     0     8  magic, ASCII "RVBXJRNL"
 *     8     4  u32 format version = 1
 *    12     4  u32 header size = 40
 *    16     8  u64 epoch: the generation of the snapshot this journal continues.
 *               Replayed only if it equals the snapshot's epoch (0 if no snapshot).
 *    24     8  u64 baseSeq: seq of the last batch contained in that snapshot
 *    32     4  u32 reserved = 0
 *    36     4  u32 CRC32 of bytes 0..35
 * A journal is always created whole (header written to journal.bin.tmp, fsync,
 * rename, fsync dir), so a missing/short/invalid header is corruption, never a
 * torn write.
 *
 * Then zero or more records, back to back, each:
 *     0     4  u32 payload length N (13 <= N <= 256 MiB)
 *     4     4  u32 CRC32 of the N payload bytes
 *     8     N  payload
 *
 * Payload (one statement batch, applied atomically in one SQLite transaction):
 *     u8   payload version = 1
 *     u64  seq: batch sequence number; the first record has baseSeq+1 and each
 *          following record exactly +1
 *     u32  statement count S
 *     S times:
 *       u32  SQL text byte length L, then L bytes of UTF-8 SQL text
 *       u32  parameter count P, or 0xFFFFFFFF meaning "no parameter array"
 *            (the statement was run as `db.run(sql)`, which executes every
 *            statement in the text; with an array only the first is run)
 *       P times: u8 tag then value
 *            0 null       (no bytes)
 *            1 number     8 bytes IEEE-754 float64 (exact, incl. NaN/-0/Infinity)
 *            2 bigint     8 bytes signed int64
 *            3 string     u32 byte length + UTF-8 bytes
 *            4 Uint8Array u32 byte length + raw bytes (bound as a BLOB)
 *
 * Reading a journal (recovery), record by record from offset 40:
 *   - a record that is complete, has a matching CRC, decodes, and has the
 *     expected seq is replayed;
 *   - otherwise the record at that offset is "bad" (reason: short header, bad
 *     length, short payload, CRC mismatch). If a well-formed record (plausible
 *     length, payload version byte 1, matching CRC) starts anywhere after the bad
 *     offset, the journal is CORRUPT at that offset: nothing is guessed, the store
 *     opens read-only in the incident state. If not, it is a TORN TAIL (a write
 *     whose fsync never completed, so it was never acknowledged): it is reported
 *     and truncated away.
 *   - a record with a valid CRC that fails to decode, has the wrong seq, or fails
 *     to re-execute is CORRUPT wherever it is (its bytes are what was written).
 *
 * Snapshot file (snapshot.bin)
 * ----------------------------
 *     0     8  magic, ASCII "RVBXSNAP"
 *     8     4  u32 format version = 1
 *    12     4  u32 header size = 48
 *    16     8  u64 epoch (>= 1; incremented by every checkpoint)
 *    24     8  u64 lastSeq: seq of the last batch included in the image
 *    32     8  u64 image length M
 *    40     4  u32 CRC32 of the M image bytes
 *    44     4  u32 CRC32 of bytes 0..43
 *    48     M  SQLite database file image (sql.js `db.export()`); strip the first
 *              48 bytes to open it with the sqlite3 CLI
 * Written via snapshot.bin.tmp + fsync + rename + fsync dir, so it is always
 * whole; any mismatch is corruption (unrepairable by this code: restore a backup).
 */
import { crc32 } from "./crc32.js";

export type Param = string | number | Uint8Array | null | bigint;
export interface Stmt {
  sql: string;
  params?: Param[];
}
export interface DecodedBatch {
  seq: number;
  stmts: Stmt[];
}

export const JOURNAL_MAGIC = "RVBXJRNL";
export const SNAPSHOT_MAGIC = "RVBXSNAP";
export const FORMAT_VERSION = 1;
export const JOURNAL_HEADER_SIZE = 40;
export const SNAPSHOT_HEADER_SIZE = 48;
export const RECORD_HEADER_SIZE = 8;
export const PAYLOAD_VERSION = 1;
/** Smallest possible payload: version + seq + statement count. */
export const MIN_PAYLOAD = 1 + 8 + 4;
export const MAX_PAYLOAD = 256 * 1024 * 1024;
const NO_PARAMS = 0xffffffff;

const TAG_NULL = 0;
const TAG_NUMBER = 1;
const TAG_BIGINT = 2;
const TAG_STRING = 3;
const TAG_BLOB = 4;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function checkText(s: unknown, what: string): string {
  if (typeof s !== "string") throw new TypeError(`${what} must be a string`);
  // UTF-8 cannot represent lone surrogates faithfully; sql.js and Buffer would
  // encode them differently, so replay could diverge from the live db.
  if (LONE_SURROGATE.test(s)) throw new TypeError(`${what} contains a lone UTF-16 surrogate`);
  return s;
}

function writeU64(buf: Buffer, value: number, off: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`u64 out of range: ${value}`);
  buf.writeBigUInt64LE(BigInt(value), off);
}

function readU64(buf: Buffer, off: number): number {
  const v = buf.readBigUInt64LE(off);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`u64 too large: ${v}`);
  return Number(v);
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

// ---------------------------------------------------------------- headers

export interface JournalHeader {
  epoch: number;
  baseSeq: number;
}

export function encodeJournalHeader(h: JournalHeader): Buffer {
  const b = Buffer.alloc(JOURNAL_HEADER_SIZE);
  b.write(JOURNAL_MAGIC, 0, "latin1");
  b.writeUInt32LE(FORMAT_VERSION, 8);
  b.writeUInt32LE(JOURNAL_HEADER_SIZE, 12);
  writeU64(b, h.epoch, 16);
  writeU64(b, h.baseSeq, 24);
  b.writeUInt32LE(crc32(b.subarray(0, 36)), 36);
  return b;
}

/** Parses a journal header; returns a reason string if it is invalid. */
export function decodeJournalHeader(data: Uint8Array): JournalHeader | string {
  const b = asBuffer(data);
  if (b.length < JOURNAL_HEADER_SIZE) return `journal header too short (${b.length} of ${JOURNAL_HEADER_SIZE} bytes)`;
  if (b.toString("latin1", 0, 8) !== JOURNAL_MAGIC) return "bad journal magic";
  if (b.readUInt32LE(36) !== crc32(b.subarray(0, 36))) return "journal header CRC mismatch";
  const version = b.readUInt32LE(8);
  if (version !== FORMAT_VERSION) return `unsupported journal format version ${version}`;
  if (b.readUInt32LE(12) !== JOURNAL_HEADER_SIZE) return "unexpected journal header size";
  try {
    return { epoch: readU64(b, 16), baseSeq: readU64(b, 24) };
  } catch (err) {
    return `bad journal header field: ${(err as Error).message}`;
  }
}

export interface SnapshotHeader {
  epoch: number;
  lastSeq: number;
}

/** Returns [header, image] chunks to be written back to back. */
export function encodeSnapshot(h: SnapshotHeader, image: Uint8Array): [Buffer, Uint8Array] {
  const b = Buffer.alloc(SNAPSHOT_HEADER_SIZE);
  b.write(SNAPSHOT_MAGIC, 0, "latin1");
  b.writeUInt32LE(FORMAT_VERSION, 8);
  b.writeUInt32LE(SNAPSHOT_HEADER_SIZE, 12);
  writeU64(b, h.epoch, 16);
  writeU64(b, h.lastSeq, 24);
  writeU64(b, image.length, 32);
  b.writeUInt32LE(crc32(image), 40);
  b.writeUInt32LE(crc32(b.subarray(0, 44)), 44);
  return [b, image];
}

/** Parses a snapshot file; returns a reason string if it is invalid. */
export function decodeSnapshot(data: Uint8Array): (SnapshotHeader & { image: Uint8Array }) | string {
  const b = asBuffer(data);
  if (b.length < SNAPSHOT_HEADER_SIZE) return `snapshot too short (${b.length} bytes)`;
  if (b.toString("latin1", 0, 8) !== SNAPSHOT_MAGIC) return "bad snapshot magic";
  if (b.readUInt32LE(44) !== crc32(b.subarray(0, 44))) return "snapshot header CRC mismatch";
  const version = b.readUInt32LE(8);
  if (version !== FORMAT_VERSION) return `unsupported snapshot format version ${version}`;
  if (b.readUInt32LE(12) !== SNAPSHOT_HEADER_SIZE) return "unexpected snapshot header size";
  let epoch: number, lastSeq: number, len: number;
  try {
    epoch = readU64(b, 16);
    lastSeq = readU64(b, 24);
    len = readU64(b, 32);
  } catch (err) {
    return `bad snapshot header field: ${(err as Error).message}`;
  }
  if (b.length !== SNAPSHOT_HEADER_SIZE + len) {
    return `snapshot length mismatch (header says ${len} image bytes, file has ${b.length - SNAPSHOT_HEADER_SIZE})`;
  }
  const image = b.subarray(SNAPSHOT_HEADER_SIZE);
  if (crc32(image) !== b.readUInt32LE(40)) return "snapshot image CRC mismatch";
  return { epoch, lastSeq, image };
}

// ---------------------------------------------------------------- records

/**
 * Encodes one batch as a complete journal record (length + CRC + payload).
 * Validates the statements: throws TypeError/RangeError for values that cannot
 * be journaled faithfully.
 */
export function encodeRecord(seq: number, stmts: readonly Stmt[]): Buffer {
  if (!Array.isArray(stmts)) throw new TypeError("statements must be an array");
  let size = MIN_PAYLOAD;
  for (const s of stmts) {
    if (typeof s !== "object" || s === null) throw new TypeError("statement must be an object");
    size += 4 + Buffer.byteLength(checkText(s.sql, "sql"), "utf8") + 4;
    if (s.params === undefined) continue;
    if (!Array.isArray(s.params)) throw new TypeError("params must be an array");
    if (s.params.length >= NO_PARAMS) throw new RangeError("too many params");
    for (const p of s.params) {
      size += 1;
      if (p === null) continue;
      switch (typeof p) {
        case "number":
          size += 8;
          break;
        case "bigint":
          if (p < INT64_MIN || p > INT64_MAX) throw new RangeError(`bigint param out of int64 range: ${p}`);
          size += 8;
          break;
        case "string":
          size += 4 + Buffer.byteLength(checkText(p, "string param"), "utf8");
          break;
        default:
          if (p instanceof Uint8Array) size += 4 + p.byteLength;
          else throw new TypeError(`unsupported param type: ${typeof p}`);
      }
    }
  }
  if (size > MAX_PAYLOAD) throw new RangeError(`batch too large for one journal record (${size} bytes)`);

  const buf = Buffer.allocUnsafe(RECORD_HEADER_SIZE + size);
  let o = RECORD_HEADER_SIZE;
  buf.writeUInt8(PAYLOAD_VERSION, o);
  writeU64(buf, seq, o + 1);
  buf.writeUInt32LE(stmts.length, o + 9);
  o += MIN_PAYLOAD;
  for (const s of stmts) {
    const n = buf.write(s.sql, o + 4, "utf8");
    buf.writeUInt32LE(n, o);
    o += 4 + n;
    if (s.params === undefined) {
      buf.writeUInt32LE(NO_PARAMS, o);
      o += 4;
      continue;
    }
    buf.writeUInt32LE(s.params.length, o);
    o += 4;
    for (const p of s.params) {
      if (p === null) {
        buf.writeUInt8(TAG_NULL, o++);
      } else if (typeof p === "number") {
        buf.writeUInt8(TAG_NUMBER, o++);
        buf.writeDoubleLE(p, o);
        o += 8;
      } else if (typeof p === "bigint") {
        buf.writeUInt8(TAG_BIGINT, o++);
        buf.writeBigInt64LE(p, o);
        o += 8;
      } else if (typeof p === "string") {
        buf.writeUInt8(TAG_STRING, o++);
        const m = buf.write(p, o + 4, "utf8");
        buf.writeUInt32LE(m, o);
        o += 4 + m;
      } else {
        buf.writeUInt8(TAG_BLOB, o++);
        buf.writeUInt32LE(p.byteLength, o);
        buf.set(p, o + 4);
        o += 4 + p.byteLength;
      }
    }
  }
  if (o !== buf.length) throw new Error(`internal: record size mismatch (${o} != ${buf.length})`);
  buf.writeUInt32LE(size, 0);
  buf.writeUInt32LE(crc32(buf.subarray(RECORD_HEADER_SIZE)), 4);
  return buf;
}

/** Decodes a payload (without the 8-byte record header). Throws on malformed input. */
export function decodePayload(data: Uint8Array): DecodedBatch {
  const b = asBuffer(data);
  const need = (o: number, n: number): void => {
    if (o + n > b.length) throw new RangeError(`payload truncated at ${o}`);
  };
  need(0, MIN_PAYLOAD);
  if (b.readUInt8(0) !== PAYLOAD_VERSION) throw new RangeError(`unsupported payload version ${b.readUInt8(0)}`);
  const seq = readU64(b, 1);
  const count = b.readUInt32LE(9);
  let o = MIN_PAYLOAD;
  const stmts: Stmt[] = [];
  for (let i = 0; i < count; i++) {
    need(o, 4);
    const sqlLen = b.readUInt32LE(o);
    need(o + 4, sqlLen + 4);
    const sql = b.toString("utf8", o + 4, o + 4 + sqlLen);
    o += 4 + sqlLen;
    const np = b.readUInt32LE(o);
    o += 4;
    if (np === NO_PARAMS) {
      stmts.push({ sql });
      continue;
    }
    const params: Param[] = [];
    for (let j = 0; j < np; j++) {
      need(o, 1);
      const tag = b.readUInt8(o++);
      switch (tag) {
        case TAG_NULL:
          params.push(null);
          break;
        case TAG_NUMBER:
          need(o, 8);
          params.push(b.readDoubleLE(o));
          o += 8;
          break;
        case TAG_BIGINT:
          need(o, 8);
          params.push(b.readBigInt64LE(o));
          o += 8;
          break;
        case TAG_STRING:
        case TAG_BLOB: {
          need(o, 4);
          const len = b.readUInt32LE(o);
          need(o + 4, len);
          params.push(tag === TAG_STRING ? b.toString("utf8", o + 4, o + 4 + len) : new Uint8Array(b.subarray(o + 4, o + 4 + len)));
          o += 4 + len;
          break;
        }
        default:
          throw new RangeError(`unknown param tag ${tag}`);
      }
    }
    stmts.push({ sql, params });
  }
  if (o !== b.length) throw new RangeError(`trailing bytes in payload (${b.length - o})`);
  return { seq, stmts };
}

// ---------------------------------------------------------------- scanning

export interface JournalRecord {
  /** Offset of the record's length field in the file. */
  offset: number;
  /** Offset just past the record. */
  end: number;
  batch: DecodedBatch;
}

export interface ScanProblem {
  offset: number;
  reason: string;
}

export interface ScanResult {
  /** null when the header is invalid (then `corrupt` is set with offset 0). */
  header: JournalHeader | null;
  records: JournalRecord[];
  /** Offset just past the last good record (header size if none). */
  validEnd: number;
  tornTail: ScanProblem | null;
  corrupt: ScanProblem | null;
}

/** Checks the framing of the record at `off`; returns a reason or null when it is well-formed. */
function frameProblem(b: Buffer, off: number): string | null {
  const avail = b.length - off;
  if (avail < RECORD_HEADER_SIZE) return `short record header (${avail} of ${RECORD_HEADER_SIZE} bytes)`;
  const len = b.readUInt32LE(off);
  if (len < MIN_PAYLOAD || len > MAX_PAYLOAD) return `invalid payload length ${len}`;
  if (avail - RECORD_HEADER_SIZE < len) return `short payload (${avail - RECORD_HEADER_SIZE} of ${len} bytes)`;
  const payload = b.subarray(off + RECORD_HEADER_SIZE, off + RECORD_HEADER_SIZE + len);
  if (crc32(payload) !== b.readUInt32LE(off + 4)) return "CRC mismatch";
  return null;
}

/**
 * Looks for any well-formed record (plausible length, payload version byte,
 * matching CRC) starting at or after `from`. Returns its offset or -1.
 * Only used when a bad record was found, to tell corruption from a torn tail.
 */
export function findWellFormedRecord(data: Uint8Array, from: number): number {
  const b = asBuffer(data);
  for (let p = from; p + RECORD_HEADER_SIZE + MIN_PAYLOAD <= b.length; p++) {
    const len = b.readUInt32LE(p);
    if (len < MIN_PAYLOAD || len > MAX_PAYLOAD || p + RECORD_HEADER_SIZE + len > b.length) continue;
    if (b[p + RECORD_HEADER_SIZE] !== PAYLOAD_VERSION) continue;
    if (frameProblem(b, p) === null) return p;
  }
  return -1;
}

/** Parses a whole journal file image. Pure: does not touch the filesystem. */
export function scanJournal(data: Uint8Array): ScanResult {
  const b = asBuffer(data);
  const header = decodeJournalHeader(b);
  if (typeof header === "string") {
    return { header: null, records: [], validEnd: 0, tornTail: null, corrupt: { offset: 0, reason: header } };
  }
  const records: JournalRecord[] = [];
  let expectSeq = header.baseSeq + 1;
  let off = JOURNAL_HEADER_SIZE;
  while (off < b.length) {
    const problem = frameProblem(b, off);
    if (problem !== null) {
      const later = findWellFormedRecord(b, off + 1);
      if (later >= 0) {
        return {
          header,
          records,
          validEnd: off,
          tornTail: null,
          corrupt: { offset: off, reason: `${problem}; a well-formed record follows at offset ${later}` },
        };
      }
      return { header, records, validEnd: off, tornTail: { offset: off, reason: problem }, corrupt: null };
    }
    const end = off + RECORD_HEADER_SIZE + b.readUInt32LE(off);
    let batch: DecodedBatch;
    try {
      batch = decodePayload(b.subarray(off + RECORD_HEADER_SIZE, end));
    } catch (err) {
      return {
        header,
        records,
        validEnd: off,
        tornTail: null,
        corrupt: { offset: off, reason: `undecodable payload with valid CRC: ${(err as Error).message}` },
      };
    }
    if (batch.seq !== expectSeq) {
      return {
        header,
        records,
        validEnd: off,
        tornTail: null,
        corrupt: { offset: off, reason: `sequence gap: expected seq ${expectSeq}, found ${batch.seq}` },
      };
    }
    records.push({ offset: off, end, batch });
    expectSeq++;
    off = end;
  }
  return { header, records, validEnd: off, tornTail: null, corrupt: null };
}
