/**
 * `rvbox server migrate --from DATA_DIR --to postgres://…`: copy a stopped
 * embedded store into an empty PostgreSQL database, then check the copy
 * against the source: every row of every table, and every stored event of
 * every command with its output frame, byte for byte.
 *
 * The source is opened as the server opens it (its lock refuses a running
 * server's directory). Rows go through the PostgreSQL store's own writes
 * (persist records, group-committed), each table in the order its rows were
 * first written, so the copy restores exactly as the source did. The digest
 * rows the embedded store derives at open (recent output, for resend checks)
 * are not copied: the output rows they come from are.
 */
import type { PersistRecord } from "../../core/index.js";
import { eventKey, rowsOf } from "../../core/server/store.js";
import type { Tables } from "../storage/kv-store.js";
import { PgServerStore } from "../storage/pg-store.js";
import type { ServerStore, StoredEventRow, StoredOutputRow } from "../storage/server-store.js";
import { ServerStorage } from "../storage/server-storage.js";

/** Records per persist, and persists between waits for durability: bounds what the copy holds in memory. */
const BATCH_RECORDS = 256;
const BATCHES_IN_FLIGHT = 8;
const EVENTS_PER_READ = 512;

export interface MigrateReport {
  rows: number;
  commands: number;
  events: number;
  outputBytes: number;
}

const isDerivedDigest = (table: string, v: unknown): boolean => table === "event" && (v as { kind?: unknown }).kind === undefined;

/** Writes records in bounded batches through a store's persists; fails on the store's first error. */
class BatchWriter {
  private pending: PersistRecord[] = [];
  private id = 0;
  private inFlight = 0;
  private failure: unknown = null;
  constructor(private readonly to: ServerStore) {
    to.onError = (err) => {
      this.failure ??= err;
    };
  }

  async add(r: PersistRecord): Promise<void> {
    this.pending.push(r);
    if (this.pending.length >= BATCH_RECORDS) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.pending.length > 0) {
      this.to.persist({ type: "persist", id: ++this.id, records: this.pending });
      this.pending = [];
      this.inFlight++;
    }
    if (this.inFlight >= BATCHES_IN_FLIGHT) await this.settle();
  }

  async settle(): Promise<void> {
    await this.to.whenIdle();
    this.inFlight = 0;
    if (this.failure) throw this.failure;
  }
}

/** Every stored event of `uuid`, with output rows' frames inline (`zstd`). */
async function* eventsOf(from: ServerStore, uuid: string, through: number): AsyncGenerator<StoredEventRow> {
  const reader = from.frameReader();
  try {
    for (let seq = 1; seq <= through; ) {
      const rows = await from.readEvents(uuid, seq, through, EVENTS_PER_READ);
      if (rows.length === 0) break;
      const frames = new Map<number, Uint8Array | null>();
      for (const run of await reader.read(rows.filter((r): r is StoredOutputRow => r.kind === "output"))) {
        let at = 0;
        run.rows.forEach((r, i) => {
          frames.set(r.seq, run.bytes ? new Uint8Array(run.bytes.subarray(at, at + run.lengths[i]!)) : null);
          at += run.lengths[i]!;
        });
      }
      for (const r of rows) {
        if (r.kind !== "output") yield r;
        else {
          const zstd = frames.get(r.seq);
          if (!zstd) throw new Error(`output ${uuid}/${r.seq} is listed but its frame cannot be read: the source store is damaged`);
          const { where: _where, ...row } = r;
          yield { ...row, zstd };
        }
      }
      seq = rows[rows.length - 1]!.seq + 1;
    }
  } finally {
    await reader.close();
  }
}

function storedThroughOf(tables: Tables): Map<string, number> {
  const out = new Map<string, number>();
  for (const [uuid, c] of rowsOf(tables, "command")) out.set(uuid, c.storedThrough ?? 0);
  return out;
}

async function copy(from: ServerStore, to: ServerStore, tables: Tables): Promise<MigrateReport> {
  const w = new BatchWriter(to);
  const report: MigrateReport = { rows: 0, commands: 0, events: 0, outputBytes: 0 };
  for (const [table, rows] of tables) {
    if (table === "event") continue; // below, with the output frames
    for (const [key, value] of rows) {
      await w.add({ table, key, value });
      report.rows++;
    }
  }
  for (const [uuid, through] of storedThroughOf(tables)) {
    report.commands++;
    for await (const e of eventsOf(from, uuid, through)) {
      await w.add({ table: "event", key: eventKey(uuid, e.seq), value: e });
      report.events++;
      if (e.kind === "output") report.outputBytes += e.zstd?.length ?? 0;
    }
  }
  await w.flush();
  await w.settle();
  return report;
}

/** A value as comparable text: bigints and bytes spelled out. */
const canon = (x: unknown): string =>
  JSON.stringify(x, (_, v) => (typeof v === "bigint" ? `${v}n` : v instanceof Uint8Array ? Buffer.from(v).toString("base64") : v));

/** The first difference between the two stores' rows and events, or null. */
async function compare(a: ServerStore, aTables: Tables, b: ServerStore, bTables: Tables): Promise<string | null> {
  const same = (x: unknown, y: unknown) => canon(x) === canon(y);
  for (const [table, rows] of aTables) {
    const other = bTables.get(table) ?? new Map<string, unknown>();
    const mine = [...rows].filter(([, v]) => !isDerivedDigest(table, v));
    const theirs = [...other].filter(([, v]) => !isDerivedDigest(table, v));
    if (table !== "event" && !same(mine, theirs)) return `table ${table}: the copy differs (${mine.length} rows, ${theirs.length} copied)`;
  }
  for (const [uuid, through] of storedThroughOf(aTables)) {
    const got = eventsOf(b, uuid, through);
    for await (const e of eventsOf(a, uuid, through)) {
      const f = await got.next();
      if (f.done || !same(e, f.value)) return `command ${uuid}: event ${e.seq} differs in the copy`;
    }
    if (!(await got.next()).done) return `command ${uuid}: the copy has events past ${through}`;
  }
  return null;
}

export async function migrateToPostgres(dataDir: string, url: string, segmentBytes: number, log: (line: string) => void): Promise<MigrateReport> {
  const from = await ServerStorage.open({ dir: dataDir, segmentBytes });
  try {
    const to = await PgServerStore.open(url);
    // The writer waits out a database that goes away meanwhile (pg-writer.ts): say so rather than seem to hang.
    to.onHealth = (now) =>
      log(
        now.ok
          ? "PostgreSQL takes writes again: copying on"
          : `PostgreSQL is not taking writes (${now.reason}): waiting for it (Ctrl-C stops; the copy is checked at the end)`,
      );
    try {
      if ([...to.tables.values()].some((t) => t.size > 0)) throw new Error("the target database already holds RVBox data: migrate into an empty database");
      const report = await copy(from, to, from.tables);
      log(`copied ${report.rows} rows, ${report.commands} commands, ${report.events} events, ${report.outputBytes} bytes of output frames`);
      await to.close();
      const check = await PgServerStore.open(url);
      try {
        const diff = await compare(from, from.tables, check, check.tables);
        if (diff) throw new Error(`the copy does not match the source: ${diff}`);
      } finally {
        await check.close();
      }
      log("checked: every row, every event and every output byte of the copy matches the source");
      return report;
    } catch (err) {
      await to.close().catch(() => {});
      throw err;
    }
  } finally {
    await from.close();
  }
}
