// The ServerStore contract (shells/storage/server-store.ts): what the server
// daemon relies on from any store, checked through the interface alone.
// store-contract.test.ts runs it against every implementation; a new store
// passes it before the daemon may open it.
import { afterAll, describe, expect, it } from "vitest";
import type { PersistEffect, PersistRecord } from "../../../core/index.js";
import type { ServerStore, StoredEventRow, StoredOutputRow } from "../../../shells/storage/server-store.js";

/** How a suite gets stores: a fresh location, and a store opened (or reopened) on one. */
export interface StoreFactory<L> {
  location(): Promise<L>;
  open(at: L): Promise<ServerStore>;
  cleanup(): Promise<void>;
}

const eventKey = (uuid: string, seq: number) => `${uuid}/${String(seq).padStart(12, "0")}`;

export function outputRecord(uuid: string, seq: number, bytes: number): PersistRecord {
  const value = { seq, revision: 1, time: 1, digest: seq, kind: "output", stream: "stdout", offset: (seq - 1) * bytes, originalSize: bytes };
  return { table: "event", key: eventKey(uuid, seq), value: { ...value, zstd: new Uint8Array(bytes).fill(seq & 0xff) } };
}

export function outputEvent(id: number, uuid: string, seq: number, bytes: number): PersistEffect {
  return { type: "persist", id, records: [outputRecord(uuid, seq, bytes), { table: "command", key: uuid, value: { uuid, storedThrough: seq } }] };
}

const lifecycle = (uuid: string, seq: number): PersistRecord => ({ table: "event", key: eventKey(uuid, seq), value: { seq, kind: "lifecycle", state: 3 } });

/** The stored frame of each output row, by seq, read through the store's FrameReader. */
export async function framesOf(s: ServerStore, rows: readonly StoredEventRow[]): Promise<Map<number, Uint8Array | null>> {
  const reader = s.frameReader();
  const out = new Map<number, Uint8Array | null>();
  try {
    for (const run of await reader.read(rows.filter((r): r is StoredOutputRow => r.kind === "output"))) {
      let at = 0;
      run.rows.forEach((r, i) => {
        const n = run.lengths[i]!;
        out.set(r.seq, run.bytes ? new Uint8Array(run.bytes.subarray(at, at + n)) : null);
        at += n;
      });
    }
  } finally {
    await reader.close();
  }
  return out;
}

const seqs = (rows: readonly StoredEventRow[]) => rows.map((r) => r.seq);

export function describeStoreContract<L>(name: string, f: StoreFactory<L>): void {
  describe(`ServerStore contract: ${name}`, () => {
    afterAll(() => f.cleanup());

    it("R-O3 R-D1: durability is reported in id order, grouped, once the whole persist is stored; a reopen restores the rows and reads every frame back byte for byte", async () => {
      const at = await f.location();
      const s = await f.open(at);
      const durable: number[] = [];
      s.onDurable = (n) => durable.push(n);
      for (let i = 1; i <= 10; i++) s.persist(outputEvent(i, "cmd-a", i, 300));
      await s.whenIdle();
      expect(durable.at(-1)).toBe(10);
      expect(durable).toEqual([...durable].sort((a, b) => a - b));
      expect(durable.length).toBeLessThan(10);
      const rows = await s.readEvents("cmd-a", 1, 100, 100);
      expect(seqs(rows)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      const frames = await framesOf(s, rows);
      for (let i = 1; i <= 10; i++) expect(frames.get(i)).toEqual(new Uint8Array(300).fill(i));
      await s.close();
      const s2 = await f.open(at);
      expect(s2.tables.get("command")?.get("cmd-a")).toEqual({ uuid: "cmd-a", storedThrough: 10 });
      const again = await s2.readEvents("cmd-a", 10, 10, 1);
      expect((await framesOf(s2, again)).get(10)).toEqual(new Uint8Array(300).fill(10));
      await s2.close();
    });

    it("readEvents: the committed events in [from, to], in seq order, output and other kinds together, at most `limit`", async () => {
      const s = await f.open(await f.location());
      s.persist(outputEvent(1, "r", 1, 10));
      s.persist({ type: "persist", id: 2, records: [lifecycle("r", 2)] });
      s.persist(outputEvent(3, "r", 3, 10));
      s.persist(outputEvent(4, "r", 4, 10));
      s.persist({ type: "persist", id: 5, records: [lifecycle("r", 5), lifecycle("other", 1)] });
      await s.whenIdle();
      expect(seqs(await s.readEvents("r", 1, 100, 100))).toEqual([1, 2, 3, 4, 5]);
      expect(seqs(await s.readEvents("r", 2, 4, 100))).toEqual([2, 3, 4]);
      expect(seqs(await s.readEvents("r", 1, 100, 2))).toEqual([1, 2]);
      expect(seqs(await s.readEvents("r", 4, 3, 100))).toEqual([]);
      expect((await s.readEvents("r", 1, 100, 100)).map((r) => r.kind)).toEqual(["output", "lifecycle", "output", "output", "lifecycle"]);
      expect(seqs(await s.readEvents("other", 1, 100, 100))).toEqual([1]);
      await s.close();
    });

    it("R-O5: after dropOutput every event past the drop is still read back exactly (a store may keep some it covers: readers skip what the marker covers)", async () => {
      const s = await f.open(await f.location());
      for (let i = 1; i <= 10; i++) s.persist(outputEvent(i, "cmd-b", i, 300));
      await s.whenIdle();
      s.persist({ type: "persist", id: 11, records: [{ table: "retention", key: "cmd-b", value: { uuid: "cmd-b", firstSeq: 1, lastSeq: 6 } }] });
      await s.whenIdle();
      s.dropOutput("cmd-b", 6);
      // In the same group as new output: nothing past the drop may go with it.
      s.persist(outputEvent(12, "cmd-b", 11, 300));
      await s.whenIdle();
      const rows = await s.readEvents("cmd-b", 1, 100, 100);
      expect(seqs(rows.filter((r) => r.seq > 6))).toEqual([7, 8, 9, 10, 11]);
      const frames = await framesOf(s, rows);
      for (let i = 7; i <= 11; i++) expect(frames.get(i)).toEqual(new Uint8Array(300).fill(i));
      await s.close();
    });

    it("pruning: the prefix delete removes one command's events and no other's, and pruneOutput takes its output", async () => {
      const s = await f.open(await f.location());
      for (let i = 1; i <= 3; i++) s.persist(outputEvent(i, "ab", i, 100));
      s.persist({ type: "persist", id: 4, records: [lifecycle("ab", 4), lifecycle("abc", 1)] });
      s.persist(outputEvent(5, "keep", 1, 100));
      await s.whenIdle();
      s.persist({
        type: "persist",
        id: 6,
        records: [
          { table: "command", key: "ab", value: null },
          { table: "event", key: "ab/", value: null, prefix: true },
          { table: "pruned", key: "ab", value: { uuid: "ab" } },
        ],
      });
      await s.whenIdle();
      s.pruneOutput("ab");
      await s.whenIdle();
      expect(await s.readEvents("ab", 1, 100, 100)).toEqual([]);
      expect(seqs(await s.readEvents("abc", 1, 100, 100))).toEqual([1]);
      const keep = await s.readEvents("keep", 1, 100, 100);
      expect((await framesOf(s, keep)).get(1)).toEqual(new Uint8Array(100).fill(1));
      await s.close();
    });

    it("one group mixing writes and deletes: a row written after a prefix delete survives it, one written before does not; deleted keys go; thousands of rows of one table land in order", async () => {
      const at = await f.location();
      const s = await f.open(at);
      const many = Array.from(
        { length: 9000 },
        (_, i): PersistRecord => ({ table: "command", key: `m-${String(i).padStart(5, "0")}`, value: { uuid: `m-${i}`, n: i } }),
      );
      s.persist({
        type: "persist",
        id: 1,
        records: [
          { table: "command", key: "x-kept", value: { uuid: "x-kept", n: 1 } },
          { table: "command", key: "x-gone", value: { uuid: "x-gone", n: 1 } },
          lifecycle("p", 1),
          outputRecord("p", 2, 50),
          { table: "event", key: "p/", value: null, prefix: true },
          lifecycle("p", 3),
          outputRecord("p", 4, 50),
          { table: "command", key: "x-gone", value: null },
          ...many,
          lifecycle("q", 1),
        ],
      });
      await s.whenIdle();
      const p = await s.readEvents("p", 1, 100, 100);
      expect(seqs(p)).toEqual([3, 4]);
      expect((await framesOf(s, p)).get(4)).toEqual(new Uint8Array(50).fill(4));
      expect(seqs(await s.readEvents("q", 1, 100, 100))).toEqual([1]);
      await s.close();
      const s2 = await f.open(at);
      const commands = [...s2.tables.get("command")!.keys()];
      expect(commands).toEqual(["x-kept", ...many.map((r) => r.key)]);
      expect(s2.tables.get("command")!.get("m-08999")).toEqual({ uuid: "m-8999", n: 8999 });
      await s2.close();
    });

    it("rows come back in the order they were first written, however often rewritten since (the order restoreServer keeps)", async () => {
      const at = await f.location();
      const s = await f.open(at);
      const put = (id: number, key: string, n: number): PersistEffect => ({
        type: "persist",
        id,
        records: [{ table: "command", key, value: { uuid: key, n } }],
      });
      s.persist(put(1, "c-old", 1));
      s.persist(put(2, "b-mid", 1));
      s.persist(put(3, "a-new", 1));
      await s.whenIdle();
      s.persist(put(4, "c-old", 2));
      s.persist(put(5, "b-mid", 2));
      await s.whenIdle();
      await s.close();
      const s2 = await f.open(at);
      expect([...s2.tables.get("command")!.entries()]).toEqual([
        ["c-old", { uuid: "c-old", n: 2 }],
        ["b-mid", { uuid: "b-mid", n: 2 }],
        ["a-new", { uuid: "a-new", n: 1 }],
      ]);
      await s2.close();
    });
  });
}
