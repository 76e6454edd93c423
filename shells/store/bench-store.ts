/**
 * Commit-cost benchmark for the durable store: `npx tsx shells/store/bench-store.ts`.
 * Measures sequential commit latency (one apply awaited at a time: one fsync
 * each) and concurrent throughput (group commit) on a small db and on a db with
 * ~100k rows, and prints the large/small ratio, which should stay near 1
 * because a commit only appends its own batch to the journal.
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

function fmt(f: BenchFigures): string {
  return (
    `rows=${f.rows.toString().padStart(6)}  sequential: mean ${f.seqMeanMs.toFixed(3)} ms, p50 ${f.seqP50Ms.toFixed(3)} ms, ` +
    `p99 ${f.seqP99Ms.toFixed(3)} ms, ${f.seqCommitsPerSec.toFixed(0)} commits/s | concurrent(64 in flight): ` +
    `${f.concCommitsPerSec.toFixed(0)} commits/s, ${f.concCommitsPerFsync.toFixed(1)} commits/fsync`
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await runStoreBench();
  console.log(`small db: ${fmt(r.small)}`);
  console.log(`large db: ${fmt(r.large)}`);
  console.log(`checkpoint of the large db: ${r.checkpointMs.toFixed(1)} ms, snapshot ${(r.snapshotBytes / 1024 / 1024).toFixed(1)} MiB`);
  console.log(
    `ratio large/small: sequential mean latency ${(r.large.seqMeanMs / r.small.seqMeanMs).toFixed(2)}x, ` +
      `concurrent throughput ${(r.large.concCommitsPerSec / r.small.concCommitsPerSec).toFixed(2)}x`,
  );
}
