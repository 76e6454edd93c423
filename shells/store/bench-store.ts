/**
 * Commit-cost benchmark for the durable store: `npx tsx shells/store/bench-store.ts`.
 * Measures sequential commit latency (one apply awaited at a time: one fsync
 * each) and concurrent throughput (group commit) on a small db and on a db with
 * ~100k rows, and prints the large/small ratio, which should stay near 1
 * because a commit only appends its own batch to the journal.
 * `--checkpoint=MiB`: instead, one checkpoint of a database that large and a
 * reopen that replays half an image of journal (runCheckpointBench).
 */
import { promises as fsp } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { openDurableDb, type DurableDb } from "./durable-db.js";

export interface BenchFigures {
  rows: number;
  seqMeanMs: number;
  seqP50Ms: number;
  seqP99Ms: number;
  seqCommitsPerSec: number;
  concCommitsPerSec: number;
  concCommitsPerFsync: number;
}

const SCHEMA = ["CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT)"];

async function measure(db: DurableDb, firstId: number, sequential: number, concurrent: number): Promise<Omit<BenchFigures, "rows">> {
  const lat: number[] = [];
  let id = firstId;
  const t0 = performance.now();
  for (let i = 0; i < sequential; i++) {
    const s = performance.now();
    await db.apply([{ sql: "INSERT INTO items (id, name, body) VALUES (?, ?, ?)", params: [id++, `n${i}`, "payload"] }]);
    lat.push(performance.now() - s);
  }
  const seqSecs = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  const before = db.stats();
  const t1 = performance.now();
  const inflight = new Set<Promise<void>>();
  for (let i = 0; i < concurrent; i++) {
    const p: Promise<void> = db.apply([{ sql: "INSERT INTO items (id, name, body) VALUES (?, ?, ?)", params: [id++, `c${i}`, "payload"] }]);
    inflight.add(p);
    void p.finally(() => inflight.delete(p));
    if (inflight.size >= 64) await Promise.race(inflight);
  }
  await Promise.all(inflight);
  const concSecs = (performance.now() - t1) / 1000;
  const after = db.stats();
  return {
    seqMeanMs: lat.reduce((a, b) => a + b, 0) / lat.length,
    seqP50Ms: lat[Math.floor(lat.length * 0.5)]!,
    seqP99Ms: lat[Math.floor(lat.length * 0.99)]!,
    seqCommitsPerSec: sequential / seqSecs,
    concCommitsPerSec: concurrent / concSecs,
    concCommitsPerFsync: (after.commits - before.commits) / Math.max(1, after.fsyncs - before.fsyncs),
  };
}

/** Runs the benchmark in a temp dir (under `baseDir`, default os.tmpdir()) and returns the figures. */
export async function runStoreBench(opts: { baseDir?: string; sequential?: number; concurrent?: number; largeRows?: number } = {}): Promise<{
  small: BenchFigures;
  large: BenchFigures;
  checkpointMs: number;
  snapshotBytes: number;
}> {
  const sequential = opts.sequential ?? 500;
  const concurrent = opts.concurrent ?? 5000;
  const largeRows = opts.largeRows ?? 100_000;
  const root = await fsp.mkdtemp(path.join(opts.baseDir ?? os.tmpdir(), "store-bench-"));
  try {
    // Warm-up (JIT, sql.js init, fs caches) on a throwaway store, not measured.
    const warm = await openDurableDb({ dir: path.join(root, "warm"), schema: SCHEMA });
    await measure(warm, 1, sequential, concurrent);
    await warm.close();

    const small = await openDurableDb({ dir: path.join(root, "small"), schema: SCHEMA });
    const smallFig = { rows: 0, ...(await measure(small, 1, sequential, concurrent)) };
    await small.close();

    const large = await openDurableDb({ dir: path.join(root, "large"), schema: SCHEMA });
    const body = "x".repeat(100);
    for (let base = 0; base < largeRows; base += 1000) {
      const batch = [];
      for (let i = base; i < Math.min(largeRows, base + 1000); i++) {
        batch.push({ sql: "INSERT INTO items (id, name, body) VALUES (?, ?, ?)", params: [i + 1_000_000, `row${i}`, body] });
      }
      await large.apply(batch);
    }
    const c0 = performance.now();
    await large.checkpoint();
    const checkpointMs = performance.now() - c0;
    const snapshotBytes = (await fsp.stat(path.join(root, "large", "snapshot.bin"))).size;
    const rows = large.query<{ c: number }>("SELECT count(*) AS c FROM items")[0]!.c;
    const largeFig = { rows, ...(await measure(large, 1, sequential, concurrent)) };
    await large.close();
    return { small: smallFig, large: largeFig, checkpointMs, snapshotBytes };
  } finally {
    await fsp.rm(root, { recursive: true, force: true });
  }
}

/**
 * What one checkpoint of a large database costs, and what the journal it
 * allows costs at the next open: `--checkpoint=MiB` builds a database of about
 * that size, takes one checkpoint (total time, and the longest stretch the
 * event loop was blocked, seen by a 1 ms interval), then journals updates
 * worth half the image (below the automatic threshold of durable-db.ts) and
 * times a reopen that loads the snapshot and replays them.
 */
export async function runCheckpointBench(
  imageMiB: number,
  baseDir?: string,
): Promise<{
  snapshotBytes: number;
  checkpointMs: number;
  longestStallMs: number;
  journalBytes: number;
  reopenMs: number;
  recordsReplayed: number;
  /** A reopen right after the checkpoint (the snapshot alone): the baseline. */
  reopenSnapshotOnlyMs: number;
}> {
  const root = await fsp.mkdtemp(path.join(baseDir ?? os.tmpdir(), "store-ckpt-bench-"));
  const dir = path.join(root, "db");
  // Bodies that compress badly, as stored records do; each update changes every byte.
  const body = (salt: number) => Array.from({ length: 1500 }, (_, i) => String.fromCharCode(33 + (((i + salt) * 2654435761) >>> 26))).join("");
  try {
    const db = await openDurableDb({ dir, schema: SCHEMA });
    let rows = 0;
    while (rows * 1600 < imageMiB * 1024 * 1024) {
      const batch = [];
      for (let i = 0; i < 200; i++, rows++)
        batch.push({ sql: "INSERT INTO items (id, name, body) VALUES (?, ?, ?)", params: [rows, `row${rows}`, body(rows)] });
      await db.apply(batch);
    }
    let longest = 0;
    let last = performance.now();
    const probe = setInterval(() => {
      const t = performance.now();
      longest = Math.max(longest, t - last);
      last = t;
    }, 1);
    const c0 = performance.now();
    await db.checkpoint();
    const checkpointMs = performance.now() - c0;
    clearInterval(probe);
    const snapshotBytes = db.stats().snapshotImageBytes;
    await db.close();
    const s0 = performance.now();
    const fresh = await openDurableDb({ dir, schema: SCHEMA });
    const reopenSnapshotOnlyMs = performance.now() - s0;
    await fresh.close();
    const db2 = await openDurableDb({ dir, schema: SCHEMA });
    for (let id = 0; db2.stats().journalBytes < snapshotBytes / 2; id += 200) {
      const batch = [];
      for (let i = id; i < id + 200; i++) batch.push({ sql: "UPDATE items SET body = ? WHERE id = ?", params: [body(i + 7), i % rows] });
      await db2.apply(batch);
    }
    const journalBytes = db2.stats().journalBytes;
    await db2.close();
    const r0 = performance.now();
    const again = await openDurableDb({ dir, schema: SCHEMA });
    const reopenMs = performance.now() - r0;
    const recordsReplayed = again.recovery.recordsReplayed;
    await again.close();
    return { snapshotBytes, checkpointMs, longestStallMs: longest, journalBytes, reopenMs, recordsReplayed, reopenSnapshotOnlyMs };
  } finally {
    await fsp.rm(root, { recursive: true, force: true });
  }
}

function fmt(f: BenchFigures): string {
  return (
    `rows=${f.rows.toString().padStart(6)}  sequential: mean ${f.seqMeanMs.toFixed(3)} ms, p50 ${f.seqP50Ms.toFixed(3)} ms, ` +
    `p99 ${f.seqP99Ms.toFixed(3)} ms, ${f.seqCommitsPerSec.toFixed(0)} commits/s | concurrent(64 in flight): ` +
    `${f.concCommitsPerSec.toFixed(0)} commits/s, ${f.concCommitsPerFsync.toFixed(1)} commits/fsync`
  );
}

const checkpointArg = process.argv.find((a) => a.startsWith("--checkpoint="));
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href && checkpointArg) {
  const mib = Number(checkpointArg.slice("--checkpoint=".length));
  if (!(mib > 0)) throw new Error(`--checkpoint=MiB: not a size: ${checkpointArg}`);
  const r = await runCheckpointBench(mib);
  const M = (b: number) => (b / 1024 / 1024).toFixed(1);
  console.log(
    `checkpoint of a ${M(r.snapshotBytes)} MiB image: ${r.checkpointMs.toFixed(0)} ms, event loop blocked for at most ${r.longestStallMs.toFixed(0)} ms at a time`,
  );
  console.log(`reopen with that snapshot alone: ${r.reopenSnapshotOnlyMs.toFixed(0)} ms`);
  console.log(
    `reopen with that snapshot and a ${M(r.journalBytes)} MiB journal: ${r.reopenMs.toFixed(0)} ms (${r.recordsReplayed} batches replayed; ` +
      `${(r.reopenMs / r.reopenSnapshotOnlyMs).toFixed(2)}x the snapshot alone)`,
  );
} else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await runStoreBench();
  console.log(`small db: ${fmt(r.small)}`);
  console.log(`large db: ${fmt(r.large)}`);
  console.log(`checkpoint of the large db: ${r.checkpointMs.toFixed(1)} ms, snapshot ${(r.snapshotBytes / 1024 / 1024).toFixed(1)} MiB`);
  console.log(
    `ratio large/small: sequential mean latency ${(r.large.seqMeanMs / r.small.seqMeanMs).toFixed(2)}x, ` +
      `concurrent throughput ${(r.large.concCommitsPerSec / r.small.concCommitsPerSec).toFixed(2)}x`,
  );
}
