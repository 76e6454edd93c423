import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { PersistEffect } from "../../../core/index.js";
import { SPILL_DIR, SpillStore } from "../../../shells/storage/spill-store.js";
import { cleanupTemp, tempDir } from "../e2e/helpers.js";

const blob = (n: number, fill: number) => new Uint8Array(n).fill(fill);
const put = (id: number, table: string, key: string, value: unknown): PersistEffect => ({ type: "persist", id, records: [{ table, key, value }] });
const del = (id: number, table: string, key: string): PersistEffect => ({ type: "persist", id, records: [{ table, key, value: null }] });

describe("agent storage: kv rows with large fields spilled to blob files", () => {
  afterAll(cleanupTemp);

  it("R-O1 R-O6: large fields live in spill files, small ones in the db; a reopen restores the exact bytes; durability is reported in order", async () => {
    const dir = await tempDir("rvbox-spill-");
    const s = await SpillStore.open({ dir, threshold: 1000, fileBytes: 10_000 });
    const durable: number[] = [];
    s.onDurable = (n) => durable.push(n);
    for (let i = 1; i <= 8; i++) s.persist(put(i, "entry", `u/${i}`, { idx: i, kind: "output", data: blob(3000, i), small: blob(10, i) }));
    s.persist(put(9, "meta", "instance_id", "abc"));
    await s.whenIdle();
    expect(durable.at(-1)).toBe(9);
    expect(s.bytesSpilled).toBe(8 * 3000);
    const inDb = s.db.query<{ n: number }>("SELECT SUM(LENGTH(v)) AS n FROM kv")[0]!.n;
    expect(inDb).toBeLessThan(2000);
    expect((await fsp.readdir(path.join(dir, SPILL_DIR))).length).toBe(2); // rolled once a file holds >= 10 000 bytes: 4 + 4
    await s.close();
    const s2 = await SpillStore.open({ dir, threshold: 1000, fileBytes: 10_000 });
    const e5 = s2.tables.get("entry")!.get("u/5") as { data: Uint8Array; small: Uint8Array };
    expect(e5.data).toEqual(blob(3000, 5));
    expect(e5.small).toEqual(blob(10, 5));
    expect(s2.tables.get("meta")!.get("instance_id")).toBe("abc");
    expect(s2.damage).toEqual([]);
    await s2.close();
  });

  it("a row written and deleted within one group costs no disk; files nobody references are deleted", async () => {
    const dir = await tempDir("rvbox-spill-gc-");
    const s = await SpillStore.open({ dir, threshold: 1000, fileBytes: 5000 });
    // Same synchronous run: one group; the entry never reaches a file.
    s.persist(put(1, "entry", "u/1", { data: blob(4000, 1) }));
    s.persist({
      type: "persist",
      id: 2,
      records: [
        { table: "entry", key: "u/1", value: null },
        { table: "event", key: "u/1", value: { seq: 1, bytes: blob(2000, 9) } },
      ],
    });
    await s.whenIdle();
    expect(s.bytesSpilled).toBe(2000);
    for (let i = 2; i <= 6; i++) s.persist(put(10 + i, "event", `u/${i}`, { seq: i, bytes: blob(2000, i) }));
    await s.whenIdle();
    const before = (await fsp.readdir(path.join(dir, SPILL_DIR))).length;
    expect(before).toBeGreaterThanOrEqual(2);
    for (let i = 1; i <= 6; i++) s.persist(del(20 + i, "event", `u/${i}`));
    await s.whenIdle();
    const after = await fsp.readdir(path.join(dir, SPILL_DIR));
    expect(after.length).toBeLessThanOrEqual(1); // only the current file may remain
    await s.close();
  });

  it("a prefix delete releases the spilled blobs of every row it covers, and only those", async () => {
    const dir = await tempDir("rvbox-spill-prefix-");
    const s = await SpillStore.open({ dir, threshold: 1000, fileBytes: 5000 });
    for (let i = 1; i <= 6; i++) s.persist(put(i, "event", `u/${i}`, { seq: i, bytes: blob(2000, i) }));
    s.persist(put(7, "event", "uv/1", { seq: 1, bytes: blob(2000, 7) }));
    await s.whenIdle();
    expect((await fsp.readdir(path.join(dir, SPILL_DIR))).length).toBeGreaterThanOrEqual(3);
    s.persist({ type: "persist", id: 8, records: [{ table: "event", key: "u/", value: null, prefix: true }] });
    await s.whenIdle();
    expect(s.db.query<{ k: string }>("SELECT k FROM kv WHERE t = 'event'").map((r) => r.k)).toEqual(["uv/1"]);
    await s.close();
    const s2 = await SpillStore.open({ dir, threshold: 1000, fileBytes: 5000 });
    expect((s2.tables.get("event")!.get("uv/1") as { bytes: Uint8Array }).bytes).toEqual(blob(2000, 7));
    // Only the files "uv/1" still needs (and at most the current one) remain.
    expect((await fsp.readdir(path.join(dir, SPILL_DIR))).length).toBeLessThanOrEqual(2);
    expect(s2.damage).toEqual([]);
    await s2.close();
  });

  it("R-D13: a missing spill file is reported as damage, never silently guessed", async () => {
    const dir = await tempDir("rvbox-spill-dmg-");
    const s = await SpillStore.open({ dir, threshold: 100 });
    s.persist(put(1, "event", "u/1", { seq: 1, bytes: blob(500, 1) }));
    await s.whenIdle();
    await s.close();
    for (const f of await fsp.readdir(path.join(dir, SPILL_DIR))) await fsp.unlink(path.join(dir, SPILL_DIR, f));
    const s2 = await SpillStore.open({ dir, threshold: 100 });
    expect(s2.damage).toEqual(["event/u/1"]);
    expect(s2.tables.get("event")?.get("u/1")).toBeUndefined();
    await s2.close();
  });

  it("rows come back in the order they were first written, however often they were rewritten since (the order restoreAgent keeps)", async () => {
    const dir = await tempDir("rvbox-spill-order-");
    const s = await SpillStore.open({ dir, threshold: 1000, fileBytes: 10_000 });
    const put = (id: number, key: string, n: number): PersistEffect => ({ type: "persist", id, records: [{ table: "command", key, value: { uuid: key, n } }] });
    s.persist(put(1, "z-first", 1));
    s.persist(put(2, "a-second", 1));
    await s.whenIdle();
    s.persist(put(3, "z-first", 2));
    await s.whenIdle();
    await s.close();
    const s2 = await SpillStore.open({ dir, threshold: 1000, fileBytes: 10_000 });
    expect([...s2.tables.get("command")!.keys()]).toEqual(["z-first", "a-second"]);
    await s2.close();
  });
});
