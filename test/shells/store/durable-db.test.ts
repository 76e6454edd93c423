import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { openDurableDb, type DurableDb } from "../../../shells/store/index.js";
import { JOURNAL_HEADER_SIZE } from "../../../shells/store/journal.js";
import { SCHEMA, cleanupTempDirs, putKv, tempDir } from "./helpers.js";

const open: DurableDb[] = [];
async function openDb(dir: string, checkpointEveryBytes?: number, checkpointImageFactor?: number): Promise<DurableDb> {
  const db = await openDurableDb({
    dir,
    schema: SCHEMA,
    ...(checkpointEveryBytes ? { checkpointEveryBytes } : {}),
    ...(checkpointImageFactor !== undefined ? { checkpointImageFactor } : {}),
  });
  open.push(db);
  return db;
}
async function closeDb(db: DurableDb): Promise<void> {
  open.splice(open.indexOf(db), 1);
  await db.close();
}

afterEach(async () => {
  vi.restoreAllMocks();
  for (const db of open.splice(0)) await db.close().catch(() => {});
  await cleanupTempDirs();
});

function seqs(db: DurableDb): number[] {
  return db.query<{ n: number }>("SELECT n FROM seqs ORDER BY n").map((r) => r.n);
}
const insertN = (n: number) => [{ sql: "INSERT INTO seqs (n) VALUES (?)", params: [n] }];
const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);

describe("DurableDb basics", () => {
  it("round-trips every value type across close/reopen", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    expect(db.recovery).toMatchObject({ snapshotLoaded: false, recordsReplayed: 0, tornTail: null, corrupt: null });
    await db.apply(putKv("text", "héllo 🌍"));
    await db.apply(putKv("float", 1.25));
    await db.apply(putKv("big", 2n ** 62n + 1n));
    await db.apply(putKv("blob", new Uint8Array([0, 1, 254, 255])));
    await db.apply([...putKv("null", null), ...putKv("text2", "two in one batch")]);
    await db.apply([{ sql: "INSERT INTO kv VALUES ('noparams', 'x'); INSERT INTO kv VALUES ('noparams2', 'y')" }]);
    expect(db.query("SELECT v FROM kv WHERE k = ?", ["text"])).toEqual([{ v: "héllo 🌍" }]);
    const before = db.query("SELECT k, v FROM kv ORDER BY k");
    await closeDb(db);

    const db2 = await openDb(dir);
    expect(db2.recovery).toMatchObject({ snapshotLoaded: false, recordsReplayed: 6, tornTail: null, corrupt: null });
    expect(db2.query("SELECT k, v FROM kv ORDER BY k")).toEqual(before);
    expect(db2.query("SELECT v = 4611686018427387905 AS ok FROM kv WHERE k = 'big'")).toEqual([{ ok: 1 }]);
    expect(db2.query("SELECT v FROM kv WHERE k = 'big'", undefined, { useBigInt: true })).toEqual([{ v: 2n ** 62n + 1n }]);
    expect(db2.query("SELECT v FROM kv WHERE k = 'blob'")).toEqual([{ v: new Uint8Array([0, 1, 254, 255]) }]);
  });

  it("applies a batch atomically and logs nothing when it fails", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply(insertN(1));
    await expect(db.apply([...insertN(2), ...insertN(1)])).rejects.toMatchObject({ code: "SQLITE_CONSTRAINT_PRIMARYKEY" });
    expect(seqs(db)).toEqual([1]);
    await db.apply(insertN(3));
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(seqs(db2)).toEqual([1, 3]);
    expect(db2.recovery.recordsReplayed).toBe(2);
  });

  it("refuses writes through query() and transaction control in apply()", async () => {
    const db = await openDb(await tempDir());
    expect(() => db.query("INSERT INTO seqs VALUES (1)")).toThrow(/readonly/);
    await expect(db.apply([{ sql: "BEGIN" }])).rejects.toThrow(TypeError);
    await expect(db.apply([{ sql: " /* x */ commit" }])).rejects.toThrow(TypeError);
    await expect(db.apply([{ sql: "INSERT INTO seqs VALUES (?)", params: [{} as unknown as number] }])).rejects.toThrow(TypeError);
    expect(seqs(db)).toEqual([]);
  });

  it("refuses a second open of the same directory", async () => {
    const dir = await tempDir();
    await openDb(dir);
    await expect(openDurableDb({ dir, schema: SCHEMA })).rejects.toMatchObject({ code: "STORE_LOCKED" });
  });
});

describe("prepared statements", () => {
  it("more distinct statements than the cache holds, reused around a checkpoint (which frees them), give the same rows live and after replay", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    const want: number[] = [];
    // 150 distinct SQL texts (the cache holds 64), each used twice, a checkpoint in the middle.
    for (let round = 0; round < 2; round++) {
      for (let k = 0; k < 150; k++) {
        const n = round * 1000 + k;
        await db.apply([{ sql: `INSERT INTO seqs (n) VALUES (? + ${k})`, params: [n - k] }]);
        want.push(n);
        if (round === 0 && k === 100) await db.checkpoint();
      }
    }
    await expect(db.apply([{ sql: "INSERT INTO seqs (n) VALUES (? + 5)", params: [0] }])).rejects.toMatchObject({ code: "SQLITE_CONSTRAINT_PRIMARYKEY" });
    await db.apply([{ sql: "INSERT INTO seqs (n) VALUES (? + 5)", params: [9000] }]);
    want.push(9005);
    expect(seqs(db)).toEqual(want);
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(seqs(db2)).toEqual(want);
  });
});

describe("group commit", () => {
  it("200 concurrent applies share few fsyncs and resolve in apply order", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    const order: number[] = [];
    const all: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) {
      all.push(db.apply(insertN(i)).then(() => void order.push(i)));
      // spread a few across ticks so several groups form
      if (i % 50 === 49) await new Promise((r) => setImmediate(r));
    }
    await Promise.all(all);
    const s = db.stats();
    expect(s.commits).toBe(200);
    expect(s.fsyncs).toBeGreaterThan(0);
    expect(s.fsyncs).toBeLessThan(s.commits / 4);
    expect(order).toEqual(range(0, 200));
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(seqs(db2)).toEqual(range(0, 200));
  });

  it("apply([]) is a durability barrier", async () => {
    const db = await openDb(await tempDir());
    let firstDone = false;
    const p = db.apply(insertN(1)).then(() => (firstDone = true));
    await db.apply([]);
    expect(firstDone).toBe(true);
    await p;
    expect(db.stats().commits).toBe(1);
  });
});

describe("checkpoints", () => {
  it("checkpoint then reopen restores from the snapshot plus the new journal", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    for (let i = 0; i < 20; i++) await db.apply(insertN(i));
    await db.checkpoint();
    expect(db.stats()).toMatchObject({ checkpoints: 1, journalBytes: JOURNAL_HEADER_SIZE });
    for (let i = 20; i < 25; i++) await db.apply(insertN(i));
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(db2.recovery).toMatchObject({ snapshotLoaded: true, epoch: 1, recordsReplayed: 5, staleJournal: null });
    expect(seqs(db2)).toEqual(range(0, 25));
  });

  it("does not lose batches applied before, during and after a checkpoint", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    const all: Promise<void>[] = [];
    for (let i = 0; i < 50; i++) all.push(db.apply(insertN(i)));
    const cp = db.checkpoint();
    for (let i = 50; i < 100; i++) all.push(db.apply(insertN(i)));
    // and while the checkpoint's file I/O is in flight
    let n = 100;
    const during = (async () => {
      for (let k = 0; k < 20; k++) {
        await new Promise((r) => setImmediate(r));
        all.push(db.apply(insertN(n++)));
      }
    })();
    await cp;
    await during;
    await Promise.all(all);
    expect(db.stats().checkpoints).toBe(1);
    expect(db.stats().commits).toBe(120);
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(seqs(db2)).toEqual(range(0, 120));
  });

  it("checkpoints automatically when the journal exceeds checkpointEveryBytes (image factor 0: the fixed threshold alone)", async () => {
    const dir = await tempDir();
    const db = await openDb(dir, 4096, 0);
    const pad = "x".repeat(200);
    for (let i = 0; i < 100; i++) await db.apply([{ sql: "INSERT INTO kv VALUES (?, ?)", params: [`k${i}`, pad] }]);
    const s = db.stats();
    expect(s.checkpoints).toBeGreaterThanOrEqual(3);
    expect(s.journalBytes).toBeLessThan(4096 + 400);
    await closeDb(db);
    const db2 = await openDb(dir, 4096, 0);
    expect(db2.recovery.snapshotLoaded).toBe(true);
    expect(db2.query("SELECT count(*) AS c FROM kv")).toEqual([{ c: 100 }]);
  });

  it("waits for a journal as large as the last snapshot's image before an automatic checkpoint (at most 2x write amplification)", async () => {
    const dir = await tempDir();
    const floor = 4096;
    const db = await openDb(dir, floor);
    // A database of about 200 KiB, then one checkpoint: the image is now far larger than the floor.
    const big = "b".repeat(2000);
    for (let i = 0; i < 100; i++) await db.apply([{ sql: "INSERT INTO kv VALUES (?, ?)", params: [`big${i}`, big] }]);
    await db.checkpoint();
    const image = db.stats().snapshotImageBytes;
    expect(image).toBeGreaterThan(50 * floor);
    expect(db.stats().checkpointAtBytes).toBeGreaterThanOrEqual(image);
    const before = db.stats().checkpoints;
    // Small updates: the journal grows, the image hardly does.
    let journalled = 0;
    const pad = "u".repeat(200);
    let i = 0;
    for (; journalled < image / 2; i++) {
      await db.apply([{ sql: "INSERT OR REPLACE INTO kv VALUES (?, ?)", params: [`u${i % 20}`, pad] }]);
      journalled = db.stats().journalBytes;
    }
    // Half an image of journal, many times the floor: no checkpoint yet.
    expect(journalled).toBeGreaterThan(10 * floor);
    expect(db.stats().checkpoints).toBe(before);
    // Past the image's size: one checkpoint, and the journal starts again.
    for (; db.stats().checkpoints === before && i < 100_000; i++)
      await db.apply([{ sql: "INSERT OR REPLACE INTO kv VALUES (?, ?)", params: [`u${i % 20}`, pad] }]);
    expect(db.stats().checkpoints).toBe(before + 1);
    expect(db.stats().journalBytes).toBeLessThan(floor);
    await closeDb(db);
    // A reopened store takes the threshold from the snapshot it loaded.
    const db2 = await openDb(dir, floor);
    expect(db2.stats().snapshotImageBytes).toBeGreaterThan(50 * floor);
    expect(db2.stats().checkpointAtBytes).toBeGreaterThanOrEqual(db2.stats().snapshotImageBytes);
    expect(db2.query("SELECT count(*) AS c FROM kv")).toEqual([{ c: 120 }]);
  });

  it("rejects a negative or non-finite checkpointImageFactor", async () => {
    for (const f of [-1, Number.NaN, Number.POSITIVE_INFINITY])
      await expect(openDurableDb({ dir: await tempDir(), schema: SCHEMA, checkpointImageFactor: f })).rejects.toThrow(/checkpointImageFactor/);
  });

  it("never replays a stale journal from an older snapshot epoch", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply([{ sql: "INSERT INTO kv VALUES ('counter', 0)" }]);
    const bump = [{ sql: "UPDATE kv SET v = v + 1 WHERE k = 'counter'" }];
    for (let i = 0; i < 3; i++) await db.apply(bump);
    const staleJournal = await fsp.readFile(path.join(dir, "journal.bin")); // epoch 0
    await db.checkpoint(); // snapshot epoch 1 with counter = 3
    await closeDb(db);
    // Crash between "rename snapshot" and "rename new journal": old journal remains.
    await fsp.writeFile(path.join(dir, "journal.bin"), staleJournal);
    const db2 = await openDb(dir);
    expect(db2.recovery).toMatchObject({ epoch: 1, recordsReplayed: 0, staleJournal: { journalEpoch: 0, snapshotEpoch: 1 } });
    expect(db2.query("SELECT v FROM kv WHERE k = 'counter'")).toEqual([{ v: 3 }]);
    await db2.apply(bump);
    await closeDb(db2);
    const db3 = await openDb(dir);
    expect(db3.recovery).toMatchObject({ recordsReplayed: 1, staleJournal: null });
    expect(db3.query("SELECT v FROM kv WHERE k = 'counter'")).toEqual([{ v: 4 }]);
  });

  it("reports a journal newer than the snapshot (snapshot lost) as corruption", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply(insertN(1));
    await db.checkpoint();
    await db.apply(insertN(2));
    await closeDb(db);
    await fsp.unlink(path.join(dir, "snapshot.bin"));
    const db2 = await openDb(dir);
    expect(db2.readOnlyIncident).toBe(true);
    expect(db2.recovery.corrupt?.reason).toMatch(/newer than snapshot/);
  });
});

describe("corruption and incidents", () => {
  async function threeRecordStore(): Promise<{ dir: string; offsets: number[] }> {
    const dir = await tempDir();
    const db = await openDb(dir);
    const offsets: number[] = [];
    for (let i = 1; i <= 3; i++) {
      offsets.push(db.stats().journalBytes);
      await db.apply(insertN(i));
    }
    offsets.push(db.stats().journalBytes);
    await closeDb(db);
    return { dir, offsets };
  }

  it("a flipped byte in a middle record => incident, writes refused with STORE_INCIDENT, operator repair", async () => {
    const { dir, offsets } = await threeRecordStore();
    const file = path.join(dir, "journal.bin");
    const j = await fsp.readFile(file);
    j[offsets[1]! + 12]! ^= 0x01; // inside record 2's payload
    await fsp.writeFile(file, j);

    const db = await openDb(dir);
    expect(db.readOnlyIncident).toBe(true);
    expect(db.recovery.corrupt).toMatchObject({ file: "journal", offset: offsets[1] });
    expect(db.recovery.corrupt?.reason).toMatch(/CRC mismatch/);
    expect(db.recovery.tornTail).toBeNull();
    expect(seqs(db)).toEqual([1]); // state up to the corrupt record is readable
    await expect(db.apply(insertN(9))).rejects.toMatchObject({ code: "STORE_INCIDENT" });
    await expect(db.checkpoint()).rejects.toMatchObject({ code: "STORE_INCIDENT" });
    expect(await fsp.readFile(file)).toEqual(j); // nothing touched without the operator

    const report = await db.acknowledgeIncident();
    expect(report.corrupt).toBeNull();
    expect(db.readOnlyIncident).toBe(false);
    expect((await fsp.stat(file)).size).toBe(offsets[1]);
    expect((await fsp.readdir(dir)).some((f) => f.startsWith("journal.incident-"))).toBe(true);
    await db.apply(insertN(10));
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(db2.recovery.corrupt).toBeNull();
    expect(seqs(db2)).toEqual([1, 10]);
  });

  it("a CRC mismatch in the last record is a torn tail", async () => {
    const { dir, offsets } = await threeRecordStore();
    const file = path.join(dir, "journal.bin");
    const j = await fsp.readFile(file);
    j[j.length - 1]! ^= 0x80;
    await fsp.writeFile(file, j);
    const db = await openDb(dir);
    expect(db.readOnlyIncident).toBe(false);
    expect(db.recovery.tornTail).toMatchObject({ offset: offsets[2], reason: "CRC mismatch" });
    expect(seqs(db)).toEqual([1, 2]);
    expect((await fsp.stat(file)).size).toBe(offsets[2]);
  });

  it("a bad journal header => incident; repair replaces the journal", async () => {
    const { dir } = await threeRecordStore();
    const file = path.join(dir, "journal.bin");
    const j = await fsp.readFile(file);
    j[3]! ^= 0xff;
    await fsp.writeFile(file, j);
    const db = await openDb(dir);
    expect(db.recovery.corrupt).toMatchObject({ offset: 0, reason: "bad journal magic" });
    await expect(db.apply(insertN(9))).rejects.toMatchObject({ code: "STORE_INCIDENT" });
    await db.acknowledgeIncident();
    await db.apply(insertN(9));
    await closeDb(db);
    expect(seqs(await openDb(dir))).toEqual([9]);
  });

  it("a corrupt snapshot => incident that this code refuses to repair", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply(insertN(1));
    await db.checkpoint();
    await closeDb(db);
    const file = path.join(dir, "snapshot.bin");
    const s = await fsp.readFile(file);
    s[s.length - 10]! ^= 1;
    await fsp.writeFile(file, s);
    const db2 = await openDb(dir);
    expect(db2.recovery.corrupt).toMatchObject({ file: "snapshot", reason: "snapshot image CRC mismatch" });
    await expect(db2.apply(insertN(2))).rejects.toMatchObject({ code: "STORE_INCIDENT" });
    await expect(db2.acknowledgeIncident()).rejects.toMatchObject({ code: "STORE_UNREPAIRABLE" });
  });

  it("an fsync failure (ENOSPC) rejects all pending batches with that code and enters the incident state", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply(insertN(1));
    const probe = await fsp.open(path.join(dir, "journal.bin"), "r");
    const proto = Object.getPrototypeOf(probe) as { datasync: () => Promise<void> };
    await probe.close();
    const enospc = Object.assign(new Error("ENOSPC: no space left on device, fsync"), { code: "ENOSPC" });
    vi.spyOn(proto, "datasync").mockRejectedValueOnce(enospc);

    const results = await Promise.allSettled(range(2, 12).map((n) => db.apply(insertN(n))));
    for (const r of results) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "ENOSPC" });
    }
    expect(db.readOnlyIncident).toBe(true);
    expect(db.incidentInfo).toMatchObject({ kind: "io" });
    const refused = await db.apply(insertN(50)).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: "STORE_INCIDENT" });
    expect((refused as Error).cause).toBe(enospc);

    // Operator repair: drop the unsynced tail and reload from disk.
    await db.acknowledgeIncident();
    expect(db.readOnlyIncident).toBe(false);
    expect(seqs(db)).toEqual([1]);
    await db.apply(insertN(60));
    await closeDb(db);
    expect(seqs(await openDb(dir))).toEqual([1, 60]);
  });

  it("a write failure during a checkpoint is an incident too, and the disk stays recoverable", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    await db.apply(insertN(1));
    const probe = await fsp.open(path.join(dir, "journal.bin"), "r");
    const proto = Object.getPrototypeOf(probe) as { sync: () => Promise<void> };
    await probe.close();
    const eio = Object.assign(new Error("EIO: i/o error, fsync"), { code: "EIO" });
    vi.spyOn(proto, "sync").mockRejectedValueOnce(eio); // the snapshot temp file's fsync
    const covered = db.apply(insertN(2));
    await expect(db.checkpoint()).rejects.toMatchObject({ code: "EIO" });
    await expect(covered).rejects.toMatchObject({ code: "EIO" });
    expect(db.readOnlyIncident).toBe(true);
    await closeDb(db);
    const db2 = await openDb(dir);
    expect(db2.recovery.corrupt).toBeNull();
    expect(seqs(db2)).toEqual([1]);
  });
});
