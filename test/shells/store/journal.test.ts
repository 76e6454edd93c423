import { describe, expect, it } from "vitest";
import { crc32, crc32Table } from "../../../shells/store/crc32.js";
import {
  JOURNAL_HEADER_SIZE,
  decodeJournalHeader,
  decodePayload,
  decodeSnapshot,
  encodeJournalHeader,
  encodeRecord,
  encodeSnapshot,
  scanJournal,
  type Stmt,
} from "../../../shells/store/journal.js";

function journalOf(records: Buffer[], baseSeq = 0, epoch = 0): Buffer {
  return Buffer.concat([encodeJournalHeader({ epoch, baseSeq }), ...records]);
}

describe("crc32", () => {
  it("matches the standard check value and the table fallback", () => {
    expect(crc32(Buffer.from("123456789"))).toBe(0xcbf43926);
    expect(crc32Table(Buffer.from("123456789"))).toBe(0xcbf43926);
    const data = Buffer.alloc(10_000);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7919) & 0xff;
    expect(crc32Table(data)).toBe(crc32(data));
    expect(crc32(new Uint8Array(0))).toBe(0);
  });
});

describe("journal records", () => {
  it("round-trips every param type faithfully", () => {
    const stmts: Stmt[] = [
      { sql: "SELECT 1; SELECT 2" },
      {
        sql: "INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?)",
        params: [null, 1.5, -0, Number.NaN, -Infinity, 2n ** 63n - 1n, -(2n ** 63n), "héllo 🌍", new Uint8Array([0, 255, 1])],
      },
      { sql: "DELETE FROM t", params: [] },
    ];
    const rec = encodeRecord(42, stmts);
    expect(rec.readUInt32LE(0)).toBe(rec.length - 8);
    const back = decodePayload(rec.subarray(8));
    expect(back.seq).toBe(42);
    expect(back.stmts[0]).toEqual({ sql: "SELECT 1; SELECT 2" });
    expect(back.stmts[0]).not.toHaveProperty("params");
    const p = back.stmts[1]!.params!;
    expect(p[0]).toBeNull();
    expect(p[1]).toBe(1.5);
    expect(Object.is(p[2], -0)).toBe(true);
    expect(Number.isNaN(p[3])).toBe(true);
    expect(p[4]).toBe(-Infinity);
    expect(p[5]).toBe(2n ** 63n - 1n);
    expect(p[6]).toBe(-(2n ** 63n));
    expect(p[7]).toBe("héllo 🌍");
    expect(p[8]).toEqual(new Uint8Array([0, 255, 1]));
    expect(back.stmts[2]).toEqual({ sql: "DELETE FROM t", params: [] });
  });

  it("rejects values that cannot be journaled faithfully", () => {
    expect(() => encodeRecord(1, [{ sql: "x", params: [true as unknown as number] }])).toThrow(TypeError);
    expect(() => encodeRecord(1, [{ sql: "x", params: [2n ** 64n] }])).toThrow(RangeError);
    expect(() => encodeRecord(1, [{ sql: "x", params: ["\ud800"] }])).toThrow(TypeError);
    expect(() => encodeRecord(1, [{ sql: 1 as unknown as string }])).toThrow(TypeError);
  });

  it("headers detect any damage", () => {
    const h = encodeJournalHeader({ epoch: 7, baseSeq: 99 });
    expect(h.length).toBe(JOURNAL_HEADER_SIZE);
    expect(decodeJournalHeader(h)).toEqual({ epoch: 7, baseSeq: 99 });
    for (let i = 0; i < h.length; i++) {
      const bad = Buffer.from(h);
      bad[i]! ^= 0x10;
      expect(typeof decodeJournalHeader(bad)).toBe("string");
    }
    const [sh, img] = encodeSnapshot({ epoch: 3, lastSeq: 10 }, new Uint8Array([1, 2, 3]));
    const snap = Buffer.concat([sh, img]);
    expect(decodeSnapshot(snap)).toMatchObject({ epoch: 3, lastSeq: 10 });
    const bad = Buffer.from(snap);
    bad[bad.length - 1]! ^= 1;
    expect(decodeSnapshot(bad)).toBe("snapshot image CRC mismatch");
    expect(typeof decodeSnapshot(snap.subarray(0, snap.length - 1))).toBe("string");
  });
});

describe("scanJournal", () => {
  const recs = [1, 2, 3].map((seq) => encodeRecord(seq, [{ sql: "INSERT INTO t VALUES (?)", params: [seq] }]));

  it("reads a clean journal", () => {
    const s = scanJournal(journalOf(recs));
    expect(s.records.map((r) => r.batch.seq)).toEqual([1, 2, 3]);
    expect(s.tornTail).toBeNull();
    expect(s.corrupt).toBeNull();
  });

  it("treats a zero-filled tail as torn", () => {
    const s = scanJournal(Buffer.concat([journalOf(recs), Buffer.alloc(4096)]));
    expect(s.records).toHaveLength(3);
    expect(s.tornTail?.offset).toBe(journalOf(recs).length);
    expect(s.corrupt).toBeNull();
  });

  it("treats a damaged length in a middle record as corruption, not a torn tail", () => {
    const j = journalOf(recs);
    const off = JOURNAL_HEADER_SIZE + recs[0]!.length;
    j.writeUInt32LE(0x7fffffff, off);
    const s = scanJournal(j);
    expect(s.corrupt?.offset).toBe(off);
    expect(s.records).toHaveLength(1);
  });

  it("detects a sequence gap even with valid CRCs", () => {
    const s = scanJournal(journalOf([recs[0]!, recs[2]!]));
    expect(s.corrupt?.reason).toMatch(/sequence gap/);
    expect(s.records).toHaveLength(1);
  });
});
