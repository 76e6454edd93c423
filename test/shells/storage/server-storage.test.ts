import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { PersistEffect } from "../../../core/index.js";
import { SEGMENT_DIR, ServerStorage } from "../../../shells/storage/server-storage.js";
import { cleanupTemp, tempDir } from "../e2e/helpers.js";

function outputEvent(id: number, uuid: string, seq: number, bytes: number): PersistEffect {
  return {
    type: "persist",
    id,
    records: [
      { table: "event", key: `${uuid}/${String(seq).padStart(12, "0")}`, value: { seq, revision: 1, time: 1, digest: seq, kind: "output", stream: "stdout", offset: (seq - 1) * bytes, originalSize: bytes, zstd: new Uint8Array(bytes).fill(seq & 0xff) } },
      { table: "command", key: uuid, value: { uuid, storedThrough: seq } },
    ],
  };
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
    const rows = s.readEvents("cmd-a", 1, 100, 100);
    expect(rows.length).toBe(10);
    expect(rows[0]!["zstd"]).toBeUndefined();
    const bytes = await s.readSegment(rows[4]!["seg"] as never);
    expect(bytes).toEqual(new Uint8Array(300).fill(5));
    const dbBytes = s.db.query<{ n: number }>("SELECT SUM(LENGTH(v)) AS n FROM kv")[0]!.n;
    expect(dbBytes).toBeLessThan(3000);
    await s.close();
    const s2 = await ServerStorage.open({ dir, segmentBytes: 1000 });
    expect(s2.tables.get("event")!.size).toBe(10);
    expect((await s2.readSegment(s2.readEvents("cmd-a", 10, 10, 1)[0]!["seg"] as never))!).toEqual(new Uint8Array(300).fill(10));
    await s2.close();
  });

  it("R-O5: drop_output deletes the output rows and the files wholly covered, only after the persist that carries the marker; orphans are collected at open", async () => {
    const dir = await tempDir("rvbox-ss-drop-");
    const s = await ServerStorage.open({ dir, segmentBytes: 1000 });
    for (let i = 1; i <= 10; i++) s.persist(outputEvent(i, "cmd-b", i, 300));
    await s.whenIdle();
    expect((await segFiles(dir)).length).toBe(3);
    s.dropOutput("cmd-b", 4);
    expect(s.readEvents("cmd-b", 1, 100, 100).length).toBe(10); // waits for the next persist
    s.persist({ type: "persist", id: 11, records: [{ table: "retention", key: "cmd-b", value: { uuid: "cmd-b", firstSeq: 1, lastSeq: 4 } }] });
    await s.whenIdle();
    expect(s.readEvents("cmd-b", 1, 100, 100).map((r) => r["seq"])).toEqual([5, 6, 7, 8, 9, 10]);
    expect((await segFiles(dir)).length).toBe(2);
    // A partly covered file stays until a later drop covers it (readers skip
    // what the retention marker covers).
    s.dropOutput("cmd-b", 6);
    s.persist({ type: "persist", id: 12, records: [] });
    await s.whenIdle();
    expect(s.readEvents("cmd-b", 1, 100, 100).map((r) => r["seq"])).toEqual([5, 6, 7, 8, 9, 10]);
    expect((await segFiles(dir)).length).toBe(2);
    s.dropOutput("cmd-b", 8);
    s.persist({ type: "persist", id: 13, records: [] });
    await s.whenIdle();
    expect(s.readEvents("cmd-b", 1, 100, 100).map((r) => r["seq"])).toEqual([9, 10]);
    expect((await segFiles(dir)).length).toBe(1);
    await s.close();
    await fsp.writeFile(path.join(dir, SEGMENT_DIR, "orphan.seg"), "x");
    // An uncommitted tail (a crash between the file write and the db batch) is cut off.
    const [kept] = await segFiles(dir);
    await fsp.appendFile(path.join(dir, SEGMENT_DIR, kept!), Buffer.alloc(123));
    const s2 = await ServerStorage.open({ dir, segmentBytes: 1000 });
    expect(await segFiles(dir)).not.toContain("orphan.seg");
    expect((await fsp.stat(path.join(dir, SEGMENT_DIR, kept!))).size).toBe(600);
    expect(s2.readEvents("cmd-b", 1, 100, 100).map((r) => r["seq"])).toEqual([9, 10]);
    await s2.close();
    // A committed file that lost bytes is corruption: refused unless repaired.
    await fsp.truncate(path.join(dir, SEGMENT_DIR, kept!), 10);
    await expect(ServerStorage.open({ dir, segmentBytes: 1000 })).rejects.toThrow(/damaged/);
    const s3 = await ServerStorage.open({ dir, segmentBytes: 1000, repair: true });
    expect(s3.readEvents("cmd-b", 1, 100, 100)).toEqual([]);
    await s3.close();
  });
});
