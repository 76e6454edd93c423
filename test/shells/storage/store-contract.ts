// The ServerStore contract (shells/storage/server-store.ts): what the server
// daemon relies on from any store, checked through the interface alone.
// store-contract.test.ts runs it against every implementation; a new store
// passes it before the daemon may open it.
import { afterAll, describe, expect, it } from "vitest";
import type { PersistEffect, PersistRecord } from "../../../core/index.js";
import type { AuditQuery, CommandQuery, ServerStore, StoredEventRow, StoredOutputRow } from "../../../shells/storage/server-store.js";

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

    it("readCommand and listCommands: the committed rows, newest first (then by uuid), by client, state and creation time, paged after a position", async () => {
      const s = await f.open(await f.location());
      const rows = [cmd("c1", "web-1", 5, 100), cmd("c2", "web-2", 6, 200), cmd("c3", "web-1", 2, 300), cmd("c4", "web-1", 5, 300), cmd("c0", "web-1", 5, 300)];
      s.persist({ type: "persist", id: 1, records: rows.map((v) => ({ table: "command", key: v.uuid, value: v })) });
      await s.whenIdle();
      expect(await s.readCommand("c2")).toEqual(rows[1]);
      expect(await s.readCommand("nope")).toBeUndefined();
      expect((await s.storedUuids(["c4", "nope", "c0"])).sort()).toEqual(["c0", "c4"]);
      const q = { clientIds: null, states: [], createdFrom: 0, createdBefore: 0, after: null, limit: 100 };
      const ids = async (over: Partial<CommandQuery>) => (await s.listCommands({ ...q, ...over })).map((r) => r.uuid);
      expect(await ids({})).toEqual(["c0", "c3", "c4", "c2", "c1"]);
      expect(await ids({ clientIds: ["web-1"] })).toEqual(["c0", "c3", "c4", "c1"]);
      expect(await ids({ clientIds: ["web-1"], states: [5] })).toEqual(["c0", "c4", "c1"]);
      expect(await ids({ createdFrom: 200, createdBefore: 300 })).toEqual(["c2"]);
      // Pages: each after the last row of the one before, none lost or repeated across equal times.
      expect(await ids({ limit: 2 })).toEqual(["c0", "c3"]);
      expect(await ids({ limit: 2, after: { createdAt: 300, uuid: "c3" } })).toEqual(["c4", "c2"]);
      expect(await ids({ limit: 2, after: { createdAt: 200, uuid: "c2" } })).toEqual(["c1"]);
      await s.close();
    });

    it("sweepHistory: a store that keeps the history deletes ended commands past the age, oldest first, with their events and output; live ones and younger ones stay", async () => {
      const s = await f.open(await f.location());
      const rows = [cmd("old1", "a", 5, 1, 10), cmd("old2", "a", 6, 2, 20), cmd("young", "a", 5, 3, 500), cmd("live", "a", 4, 4, 0)];
      s.persist({ type: "persist", id: 1, records: rows.map((v) => ({ table: "command", key: v.uuid, value: v })) });
      for (const [i, u] of ["old1", "old2", "young", "live"].entries())
        s.persist({ ...outputEvent(2 + i, u, 1, 10), records: [outputRecord(u, 1, 10), lifecycle(u, 2)] });
      await s.whenIdle();
      if (!s.keepsHistory) {
        expect(await s.sweepHistory(1000, 100)).toBe(0);
        expect(await s.readCommand("old1")).toBeDefined();
        await s.close();
        return;
      }
      expect(await s.sweepHistory(100, 1)).toBe(1);
      expect(await s.readCommand("old1")).toBeUndefined();
      expect(await s.readCommand("old2")).toBeDefined();
      expect(await s.sweepHistory(100, 10)).toBe(1);
      for (const u of ["old1", "old2"]) expect(await s.readEvents(u, 1, 10, 10)).toEqual([]);
      for (const u of ["young", "live"]) {
        expect(await s.readCommand(u)).toBeDefined();
        const ev = await s.readEvents(u, 1, 10, 10);
        expect(seqs(ev)).toEqual([1, 2]);
        expect((await framesOf(s, ev)).get(1)).toEqual(new Uint8Array(10).fill(1));
      }
      expect(await s.sweepHistory(100, 10)).toBe(0);
      await s.close();
    });

    it("listAudit: the newest `limit` matching entries oldest first, by time, operator and client, with how many matched; sweepAudit keeps the newest and counts what it deleted", async () => {
      const s = await f.open(await f.location());
      const rows = [
        auditRow(1, "ann", ["web-1"], 10),
        auditRow(2, "bob", ["web-2"], 20),
        auditRow(3, "ann", ["web-1", "web-2"], 30),
        auditRow(4, "ann", [], 40),
      ];
      s.persist({ type: "persist", id: 1, records: rows.map((v) => ({ table: "audit", key: String(v.seq).padStart(12, "0"), value: v })) });
      await s.whenIdle();
      const q = { since: 0, operator: "", clientId: "", limit: 100 };
      const seqsOf = async (over: Partial<AuditQuery>) => {
        const p = await s.listAudit({ ...q, ...over });
        return [p.entries.map((e) => e.seq), p.matched];
      };
      expect(await seqsOf({})).toEqual([[1, 2, 3, 4], 4]);
      expect(await seqsOf({ limit: 2 })).toEqual([[3, 4], 4]);
      expect(await seqsOf({ operator: "ann" })).toEqual([[1, 3, 4], 3]);
      expect(await seqsOf({ clientId: "web-2" })).toEqual([[2, 3], 2]);
      expect(await seqsOf({ since: 25, operator: "ann", clientId: "web-1" })).toEqual([[3], 1]);
      expect((await s.listAudit(q)).entries[2]).toEqual(rows[2]);
      if (s.keepsHistory) {
        expect(await s.sweepAudit(3, 10)).toBe(1);
        expect(await s.sweepAudit(3, 10)).toBe(0);
        const p = await s.listAudit(q);
        expect([p.entries.map((e) => e.seq), p.swept]).toEqual([[2, 3, 4], 1]);
      } else expect(await s.sweepAudit(0, 10)).toBe(0);
      await s.close();
    });
  });
}

/** An audit row as the core writes it (audit.ts). */
function auditRow(seq: number, operator: string, clients: string[], at: number) {
  return { seq, at, operator, role: "admin", rpc: "SubmitCommand", summary: `call ${seq}`, clients, clientsOmitted: 0, result: "OK", message: "" };
}

/** A command row with what listing and retention read (the rest of a real row is opaque to a store). */
function cmd(uuid: string, clientId: string, state: number, createdAt: number, endedAt = 0) {
  return { uuid, clientId, state, createdAt, endedAt, storedThrough: 0 };
}
