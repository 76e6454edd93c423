import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { PersistRecord } from "../../../core/index.js";
import { foldRecord, prefixEnd, recordStmt } from "../../../shells/storage/kv-store.js";
import { SEGMENT_DIR, ServerStorage } from "../../../shells/storage/server-storage.js";
import type { StoredEventRow, StoredOutputRow } from "../../../shells/storage/server-store.js";
import { cleanupTemp, tempDir } from "../e2e/helpers.js";
import { framesOf, outputEvent } from "./store-contract.js";

/** The stored frame of one output row, read through the store's FrameReader (as FollowOutput reads runs). */
async function readFrame(s: ServerStorage, row: StoredEventRow): Promise<Uint8Array | null> {
  return (await framesOf(s, [row])).get(row.seq) ?? null;
}

async function segFiles(dir: string): Promise<string[]> {
  return (await fsp.readdir(path.join(dir, SEGMENT_DIR))).filter((f) => f.endsWith(".seg")).sort();
}

describe("server storage: kv rows + output segment files", () => {
  afterAll(cleanupTemp);

  it("R-O4 R-O3: output bytes go to segment files (not the db), durability is reported in id order with group commit, restore sees the rows", async () => {
    const dir = await tempDir("rvbox-ss-");
    const s = await ServerStorage.open({ dir, segmentBytes: 1000 });
    const durable: number[] = [];
    s.onDurable = (n) => durable.push(n);
    for (let i = 1; i <= 10; i++) s.persist(outputEvent(i, "cmd-a", i, 300));
    await s.whenIdle();
    expect(durable.at(-1)).toBe(10);
    expect([...durable]).toEqual([...durable].sort((a, b) => a - b));
    expect(durable.length).toBeLessThan(10); // grouped
    const files = await segFiles(dir);
    expect(files.length).toBe(3); // 300-byte frames, rolled once a file holds >= 1000 bytes: 4+4+2
    expect(s.db.query("SELECT * FROM kv WHERE t = 'event'").length).toBe(0); // no per-chunk rows in sql.js
    const rows = (await s.readEvents("cmd-a", 1, 100, 100)) as StoredOutputRow[];
    expect(rows.length).toBe(10);
    expect(rows[0]!.zstd).toBeUndefined();
    expect(rows[4]!.where).toBeDefined();
    const bytes = await readFrame(s, rows[4]!);
    expect(bytes).toEqual(new Uint8Array(300).fill(5));
    const dbBytes = s.db.query<{ n: number }>("SELECT SUM(LENGTH(v)) AS n FROM kv")[0]!.n;
    expect(dbBytes).toBeLessThan(3000);
    await s.close();
    const s2 = await ServerStorage.open({ dir, segmentBytes: 1000 });
    expect(s2.tables.get("event")!.size).toBe(10);
    expect(await readFrame(s2, (await s2.readEvents("cmd-a", 10, 10, 1))[0]!)).toEqual(new Uint8Array(300).fill(10));
    await s2.close();
  });

  it("R-O5: drop_output (which the core emits once the marker's persist is durable) deletes the output rows and the files wholly covered with no later persist; orphans are collected at open", async () => {
    const dir = await tempDir("rvbox-ss-drop-");
    const s = await ServerStorage.open({ dir, segmentBytes: 1000 });
    for (let i = 1; i <= 10; i++) s.persist(outputEvent(i, "cmd-b", i, 300));
    await s.whenIdle();
    expect((await segFiles(dir)).length).toBe(3);
    // The core's order: the marker's persist, durable, then drop_output.
    s.persist({ type: "persist", id: 11, records: [{ table: "retention", key: "cmd-b", value: { uuid: "cmd-b", firstSeq: 1, lastSeq: 4 } }] });
    await s.whenIdle();
    s.dropOutput("cmd-b", 4);
    // Nothing else is persisted (a command that has gone quiet): the drop still lands.
    await s.whenIdle();
    expect((await s.readEvents("cmd-b", 1, 100, 100)).map((r) => r.seq)).toEqual([5, 6, 7, 8, 9, 10]);
    expect((await segFiles(dir)).length).toBe(2);
    // A partly covered file stays until a later drop covers it (readers skip
    // what the retention marker covers).
    s.dropOutput("cmd-b", 6);
    await s.whenIdle();
    expect((await s.readEvents("cmd-b", 1, 100, 100)).map((r) => r.seq)).toEqual([5, 6, 7, 8, 9, 10]);
    expect((await segFiles(dir)).length).toBe(2);
    s.dropOutput("cmd-b", 8);
    await s.whenIdle();
    expect((await s.readEvents("cmd-b", 1, 100, 100)).map((r) => r.seq)).toEqual([9, 10]);
    expect((await segFiles(dir)).length).toBe(1);
    await s.close();
    await fsp.writeFile(path.join(dir, SEGMENT_DIR, "orphan.seg"), "x");
    // An uncommitted tail (a crash between the file write and the db batch) is cut off.
    const [kept] = await segFiles(dir);
    await fsp.appendFile(path.join(dir, SEGMENT_DIR, kept!), Buffer.alloc(123));
    const s2 = await ServerStorage.open({ dir, segmentBytes: 1000 });
    expect(await segFiles(dir)).not.toContain("orphan.seg");
    expect((await fsp.stat(path.join(dir, SEGMENT_DIR, kept!))).size).toBe(600);
    expect((await s2.readEvents("cmd-b", 1, 100, 100)).map((r) => r.seq)).toEqual([9, 10]);
    await s2.close();
    // A committed file that lost bytes is corruption: refused unless repaired.
    await fsp.truncate(path.join(dir, SEGMENT_DIR, kept!), 10);
    await expect(ServerStorage.open({ dir, segmentBytes: 1000 })).rejects.toThrow(/damaged/);
    const s3 = await ServerStorage.open({ dir, segmentBytes: 1000, repair: true });
    expect(await s3.readEvents("cmd-b", 1, 100, 100)).toEqual([]);
    await s3.close();
  });

  it("R-O5 R-O3: a drop in the same group as new output never deletes a file that group appended past the drop (rolled or still open)", async () => {
    const dir = await tempDir("rvbox-ss-drop-group-");
    const s = await ServerStorage.open({ dir, segmentBytes: 1000 });
    for (let i = 1; i <= 3; i++) s.persist(outputEvent(i, "cmd-g", i, 300));
    await s.whenIdle();
    s.persist({ type: "persist", id: 4, records: [{ table: "retention", key: "cmd-g", value: { uuid: "cmd-g", firstSeq: 1, lastSeq: 3 } }] });
    await s.whenIdle();
    // One group: event 4 is appended to the first file (its row still says
    // last_seq 3), event 5 rolls it and opens a second file, and the drop
    // through 3 arrives with them. The first file now holds event 4: it stays.
    s.persist(outputEvent(5, "cmd-g", 4, 300));
    s.persist(outputEvent(6, "cmd-g", 5, 300));
    s.dropOutput("cmd-g", 3);
    await s.whenIdle();
    // (It is only partly covered, so its entries 1..3 stay too; readers skip what the marker covers.)
    const rows = await s.readEvents("cmd-g", 1, 100, 100);
    expect(rows.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(await readFrame(s, rows[3]!)).toEqual(new Uint8Array(300).fill(4));
    expect((await segFiles(dir)).length).toBe(2);
    // A later drop through 4 covers the first file wholly: now it goes.
    s.dropOutput("cmd-g", 4);
    await s.whenIdle();
    expect((await segFiles(dir)).length).toBe(1);
    expect((await s.readEvents("cmd-g", 1, 100, 100)).map((r) => r.seq)).toEqual([5]);
    await s.close();
  });

  it("pruning: one prefix record deletes a command's event rows (not another's), pruneOutput deletes all its segments at once, and rows left by a crash are collected at open", async () => {
    const dir = await tempDir("rvbox-ss-prune-");
    const s = await ServerStorage.open({ dir, segmentBytes: 1000 });
    const row = (uuid: string, seq: number) => ({ table: "event", key: `${uuid}/${String(seq).padStart(12, "0")}`, value: { seq, kind: "lifecycle" } });
    for (let i = 1; i <= 6; i++) s.persist(outputEvent(i, "ab", i, 300));
    s.persist({ type: "persist", id: 7, records: [row("ab", 7), row("abc", 1), row("ab", 8)] });
    s.persist({
      type: "persist",
      id: 8,
      records: [outputEvent(8, "keep", 1, 300).records[0]!, { table: "command", key: "keep", value: { uuid: "keep", storedThrough: 1 } }],
    });
    await s.whenIdle();
    expect((await segFiles(dir)).length).toBe(3); // two of "ab", one of "keep"
    const rowKeys = () => s.db.query<{ k: string }>("SELECT k FROM kv WHERE t = 'event' ORDER BY k").map((r) => r.k);
    expect(rowKeys()).toEqual(["ab/000000000007", "ab/000000000008", "abc/000000000001"]);
    // The core's pruning batch: command gone, its events by prefix, a row written after the prefix survives.
    s.persist({
      type: "persist",
      id: 9,
      records: [
        { table: "command", key: "ab", value: null },
        { table: "event", key: "ab/", value: null, prefix: true },
        row("ab", 9),
        { table: "pruned", key: "ab", value: { uuid: "ab" } },
      ],
    });
    await s.whenIdle();
    expect(rowKeys()).toEqual(["ab/000000000009", "abc/000000000001"]);
    s.pruneOutput("ab"); // no persist follows: it still goes now
    await s.whenIdle();
    expect((await segFiles(dir)).length).toBe(1);
    expect((await s.readEvents("ab", 1, 100, 100)).filter((r) => r.kind === "output")).toEqual([]);
    expect((await s.readEvents("keep", 1, 100, 100)).map((r) => r.seq)).toEqual([1]);
    // A crash between the pruning batch and pruneOutput: rows of a command that is gone.
    s.persist({ type: "persist", id: 10, records: [{ table: "command", key: "keep", value: null }] });
    await s.close();
    const s2 = await ServerStorage.open({ dir, segmentBytes: 1000 });
    expect(await segFiles(dir)).toEqual([]);
    expect(s2.db.query("SELECT file FROM segment")).toEqual([]);
    await s2.close();
  });
});

describe("foldRecord: a group's net effect per row", () => {
  it("a prefix delete drops earlier writes it covers and keeps its place; later writes survive", () => {
    const net = new Map<string, PersistRecord>();
    const w = (key: string, value: unknown = 1): PersistRecord => ({ table: "event", key, value });
    for (const r of [
      w("a/1"),
      w("ab/1"),
      { table: "other", key: "a/1", value: 1 },
      { table: "event", key: "a/", value: null, prefix: true } as const,
      w("a/2"),
      w("a/1", 2),
    ])
      foldRecord(net, r);
    expect([...net.values()].map((r) => [r.table, r.key, r.value, r.prefix ?? false])).toEqual([
      ["event", "ab/1", 1, false],
      ["other", "a/1", 1, false],
      ["event", "a/", null, true],
      ["event", "a/2", 1, false],
      ["event", "a/1", 2, false],
    ]);
    expect(recordStmt({ table: "event", key: "a/", value: null, prefix: true })).toEqual({
      sql: "DELETE FROM kv WHERE t = ? AND k >= ? AND k < ?",
      params: ["event", "a/", "a0"],
    });
    expect(() => prefixEnd("")).toThrow(/non-empty ASCII/);
    expect(() => prefixEnd("é")).toThrow(/non-empty ASCII/);
  });
});
