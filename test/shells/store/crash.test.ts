import { spawn } from "node:child_process";
import { readFileSync, promises as fsp } from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { openDurableDb, type DurableDb } from "../../../shells/store/index.js";
import { SCHEMA, cleanupTempDirs, copyStore, tempDir } from "./helpers.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const projectRoot = path.resolve(here, "../../..");

const open: DurableDb[] = [];
async function openDb(dir: string, checkpointEveryBytes?: number): Promise<DurableDb> {
  const db = await openDurableDb({ dir, schema: SCHEMA, ...(checkpointEveryBytes ? { checkpointEveryBytes } : {}) });
  open.push(db);
  return db;
}
async function closeDb(db: DurableDb): Promise<void> {
  open.splice(open.indexOf(db), 1);
  await db.close();
}
afterEach(async () => {
  for (const db of open.splice(0)) await db.close().catch(() => {});
  await cleanupTempDirs();
});

const insertN = (n: number, pad = "") => [
  { sql: "INSERT INTO seqs (n) VALUES (?)", params: [n] },
  ...(pad ? [{ sql: "INSERT OR REPLACE INTO kv VALUES (?, ?)", params: [`pad${n}`, pad] }] : []),
];
const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
function seqs(db: DurableDb): number[] {
  return db.query<{ n: number }>("SELECT n FROM seqs ORDER BY n").map((r) => r.n);
}

describe("crash recovery", () => {
  it("truncating the journal at every byte offset of the last record leaves earlier records intact", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    for (let i = 0; i < 4; i++) await db.apply(insertN(i));
    const lastStart = db.stats().journalBytes;
    await db.apply(insertN(4, "last record payload"));
    const end = db.stats().journalBytes;
    await closeDb(db);
    const full = await fsp.readFile(path.join(dir, "journal.bin"));
    expect(full.length).toBe(end);

    for (let cut = lastStart; cut <= end; cut++) {
      const copy = await copyStore(dir);
      await fsp.writeFile(path.join(copy, "journal.bin"), full.subarray(0, cut));
      const d = await openDb(copy);
      expect(d.recovery.corrupt).toBeNull();
      if (cut === end) {
        expect(d.recovery.tornTail).toBeNull();
        expect(seqs(d)).toEqual([0, 1, 2, 3, 4]);
      } else {
        if (cut === lastStart) expect(d.recovery.tornTail).toBeNull();
        else expect(d.recovery.tornTail).toMatchObject({ offset: lastStart, bytesDiscarded: cut - lastStart });
        expect(seqs(d)).toEqual([0, 1, 2, 3]);
        expect((await fsp.stat(path.join(copy, "journal.bin"))).size).toBe(lastStart);
        // the store keeps working after the torn tail was cut away
        await d.apply(insertN(100));
        await closeDb(d);
        const again = await openDb(copy);
        expect(again.recovery.tornTail).toBeNull();
        expect(seqs(again)).toEqual([0, 1, 2, 3, 100]);
      }
    }
  });

  it("a zero-filled or garbage tail after the last record is a torn tail", async () => {
    const dir = await tempDir();
    const db = await openDb(dir);
    for (let i = 0; i < 3; i++) await db.apply(insertN(i));
    const end = db.stats().journalBytes;
    await closeDb(db);
    const full = await fsp.readFile(path.join(dir, "journal.bin"));
    const garbage = Buffer.alloc(3000);
    for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 2654435761) >>> 24;
    for (const tail of [Buffer.alloc(4096), garbage]) {
      const copy = await copyStore(dir);
      await fsp.writeFile(path.join(copy, "journal.bin"), Buffer.concat([full, tail]));
      const d = await openDb(copy);
      expect(d.recovery.corrupt).toBeNull();
      expect(d.recovery.tornTail).toMatchObject({ offset: end, bytesDiscarded: tail.length });
      expect(seqs(d)).toEqual([0, 1, 2]);
    }
  });

  it("point-in-time copies taken mid-stream (incl. during checkpoints) recover every acknowledged batch", async () => {
    const dir = await tempDir();
    const db = await openDb(dir, 4 * 1024);
    let ackedUpTo = -1; // every batch <= this has resolved (promises resolve in order)
    const N = 1500;
    const copies: Array<{ acked: number; files: Map<string, Buffer> }> = [];
    let stop = false;
    const copier = (async () => {
      while (!stop) {
        await new Promise((r) => setTimeout(r, 2));
        const acked = ackedUpTo;
        const files = new Map<string, Buffer>();
        // Synchronous reads: the writer has at most one fs operation in flight,
        // so this is (nearly) a point-in-time image of the directory, like kill -9.
        for (const name of ["journal.bin", "snapshot.bin"]) {
          try {
            files.set(name, readFileSync(path.join(dir, name)));
          } catch {
            // not created yet
          }
        }
        copies.push({ acked, files });
      }
    })();
    const all: Promise<void>[] = [];
    // At least N batches, and on until two checkpoints happened: on a loaded
    // machine more batches wait in the queue and are covered by a snapshot
    // without ever reaching the journal, so N alone may fill it only once.
    for (let i = 0; i < N || (db.stats().checkpoints < 2 && i < 20 * N); i++) {
      all.push(db.apply(insertN(i, "x".repeat(i % 50))).then(() => void (ackedUpTo = i)));
      if (i % 16 === 15) await new Promise((r) => setImmediate(r));
    }
    await Promise.all(all);
    stop = true;
    await copier;
    expect(db.stats().checkpoints).toBeGreaterThanOrEqual(2);
    expect(copies.length).toBeGreaterThan(5);

    for (const c of copies) {
      const copy = await tempDir("store-pit-");
      for (const [name, data] of c.files) await fsp.writeFile(path.join(copy, name), data);
      const d = await openDb(copy);
      expect(d.recovery.corrupt).toBeNull();
      const got = seqs(d);
      // a gap-free prefix that contains everything acknowledged before the copy
      expect(got).toEqual(range(0, got.length));
      expect(got.length).toBeGreaterThanOrEqual(c.acked + 1);
      await closeDb(d);
    }
  });

  it("survives a real kill -9: every number printed as durable is present after reopen", async () => {
    const dir = await tempDir();
    const child = path.join(here, "fixtures", "kill-child.ts");
    const printed: number[] = [];
    for (let round = 0; round < 2; round++) {
      const proc = spawn(process.execPath, ["--import", "tsx", child, dir], {
        cwd: projectRoot,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let stderr = "";
      let roundCount = 0;
      const killAfter = 250 + Math.floor(Math.random() * 150);
      proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const exited = new Promise<NodeJS.Signals | null>((resolve) => proc.on("close", (_code, sig) => resolve(sig)));
      proc.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        let nl: number;
        while ((nl = out.indexOf("\n")) >= 0) {
          const line = out.slice(0, nl);
          out = out.slice(nl + 1);
          if (line.startsWith("ready")) continue;
          printed.push(Number(line));
          if (++roundCount === killAfter) proc.kill("SIGKILL");
        }
      });
      const sig = await exited;
      expect(sig, stderr).toBe("SIGKILL");
      expect(roundCount).toBeGreaterThanOrEqual(killAfter);

      const d = await openDb(dir);
      expect(d.recovery.corrupt).toBeNull();
      const got = new Set(seqs(d));
      const missing = printed.filter((n) => !got.has(n));
      expect(missing).toEqual([]);
      expect([...got].sort((a, b) => a - b)).toEqual(range(0, got.size));
      await closeDb(d);
    }
    // the child checkpointed (16 KiB threshold) while it was being killed
    await expect(fsp.stat(path.join(dir, "snapshot.bin"))).resolves.toBeTruthy();
  }, 20_000);
});
