/**
 * The server's state in PostgreSQL: a ServerStore (server-store.ts) over the
 * tables of pg-schema.ts, through node-postgres (`pg`).
 *
 * Writes: the same group commit as the embedded store (group-commit.ts,
 * foldRecord's net effect per row): every persist queued since the last
 * commit becomes one transaction on one connection, a few multi-row
 * statements pipelined with its BEGIN and COMMIT, and `onDurable(through)` is
 * reported only after COMMIT returned (synchronous_commit on: the WAL is
 * flushed). A failed transaction stops the writer for good (fail-stop, like
 * the embedded store): nothing after it is acknowledged.
 *
 * Reads (readEvents, frames) go through a small pool and see committed rows
 * only. At open the schema is created or checked (a database written by a
 * newer server is refused), and every row is loaded in first-write order for
 * restoreServer, with the digests of each command's recent output events.
 */
import pg from "pg";
import type { PersistRecord } from "../../core/index.js";
import type { OutputEventRow } from "../../core/server/store.js";
import { prefixEnd, type Tables } from "./kv-store.js";
import { GroupCommittedStore, isOutputRecord, netOfGroup, type StoreOp } from "./store-group.js";
import { OUTPUT_TABLE, PG_SCHEMA_VERSION, PG_TABLES, type PgTable, schemaStatements } from "./pg-schema.js";
import { type FrameReader, type FrameRun, inlineRun, type ServerStore, type StoredEventRow, type StoredOutputRow } from "./server-store.js";
import { decodeValue, encodeValue } from "./value-codec.js";

/** Recent event digests the core keeps per command for resend checks (core SERVER_RECENT_DIGESTS), as the embedded store loads them. */
const RECENT_DIGESTS = 1024;
const READ_POOL = 4;

type Query = { text: string; values: unknown[] };

const tableOf = (name: string): PgTable => {
  const t = (PG_TABLES as Record<string, PgTable>)[name];
  if (!t) throw new Error(`no PostgreSQL table for core table ${JSON.stringify(name)}`);
  return t;
};

export class PgServerStore extends GroupCommittedStore implements ServerStore {
  readonly tables: Tables = new Map();
  opened: Readonly<Record<string, string | number | boolean>> = {};

  private constructor(
    private readonly conn: pg.Client,
    private readonly pool: pg.Pool,
  ) {
    super();
    // A connection PostgreSQL ends (restart, network) emits 'error': the writer's is a store
    // failure (fail-stop, reported once); an idle reader's is dropped by the pool.
    conn.on("error", (err) => this.fail(err));
    pool.on("error", () => {});
  }

  static async open(url: string): Promise<PgServerStore> {
    // The writer pipelines a group's statements (pg's pipeline mode): see commitGroup.
    const conn = new pg.Client({ connectionString: url, pipeline: true });
    await conn.connect();
    const pool = new pg.Pool({ connectionString: url, max: READ_POOL });
    const s = new PgServerStore(conn, pool);
    try {
      const version = await s.migrate();
      await s.load();
      const u = new URL(url);
      s.opened = { store: "postgres", host: u.host, database: u.pathname.slice(1), schema: version };
    } catch (err) {
      await s.end();
      throw err;
    }
    return s;
  }

  /** Create the schema, or check a database's version against ours. */
  private async migrate(): Promise<number> {
    await this.conn.query("BEGIN");
    try {
      // One server migrates at a time (a second waits here, then finds the schema made).
      await this.conn.query("SELECT pg_advisory_xact_lock(7400001)");
      await this.conn.query("CREATE TABLE IF NOT EXISTS rvbox_schema (version integer NOT NULL)");
      const r = await this.conn.query<{ version: number }>("SELECT version FROM rvbox_schema");
      const found = r.rows[0]?.version;
      if (found !== undefined && found > PG_SCHEMA_VERSION)
        throw new Error(`the database's RVBox schema is version ${found}, newer than this server's ${PG_SCHEMA_VERSION}: run a newer rvbox server`);
      for (const sql of schemaStatements()) await this.conn.query(sql);
      if (found === undefined) await this.conn.query("INSERT INTO rvbox_schema (version) VALUES ($1)", [PG_SCHEMA_VERSION]);
      await this.conn.query("COMMIT");
      return PG_SCHEMA_VERSION;
    } catch (err) {
      await this.conn.query("ROLLBACK").catch(() => {});
      throw err;
    }
  }

  /** Every row for restoreServer, per table in first-write order; recent output digests as event rows. */
  private async load(): Promise<void> {
    for (const [core, t] of Object.entries(PG_TABLES) as Array<[string, PgTable]>) {
      const r = await this.conn.query<{ key: string; row: Buffer }>(`SELECT key, row FROM ${t.name} ORDER BY ord`);
      if (r.rows.length === 0) continue;
      const m = new Map<string, unknown>();
      for (const x of r.rows) m.set(x.key, decodeValue(x.row));
      this.tables.set(core, m);
    }
    const recent = await this.conn.query<{ uuid: string; seq: string; digest: number }>(
      `SELECT o.uuid, o.seq, o.digest FROM ${OUTPUT_TABLE} o JOIN commands c ON c.key = o.uuid
       WHERE o.seq > c.stored_through - $1 ORDER BY o.uuid, o.seq`,
      [RECENT_DIGESTS],
    );
    let events = this.tables.get("event");
    if (!events && recent.rows.length > 0) this.tables.set("event", (events = new Map()));
    for (const x of recent.rows) {
      const seq = Number(x.seq);
      events!.set(`${x.uuid}/${String(seq).padStart(12, "0")}`, { seq, digest: x.digest });
    }
  }

  protected async commitGroup(group: StoreOp[]): Promise<void> {
    const { net, drops, maxId } = netOfGroup(group);
    const queries = groupQueries(net);
    for (const d of drops) queries.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1 AND seq <= $2`, values: [d.uuid, d.throughSeq] });
    if (queries.length > 0) {
      // BEGIN, the statements and COMMIT leave together and the group waits for one round trip,
      // not one per statement: each await was a turn of the server's busy event loop (and of a
      // PostgreSQL backend on shared cores) before the next statement left. A failed statement
      // aborts the transaction: the statements after it fail, COMMIT answers ROLLBACK, and
      // Promise.all rejects (fail-stop), so nothing of the group is reported durable.
      const done = await Promise.all([this.conn.query("BEGIN"), ...queries.map((q) => this.conn.query(q.text, q.values)), this.conn.query("COMMIT")]);
      const end = done.at(-1)!.command;
      if (end !== "COMMIT") throw new Error(`the group's transaction ended with ${end}, not COMMIT`);
    }
    if (maxId > 0) this.onDurable(maxId);
  }

  async readEvents(uuid: string, fromSeq: number, toSeq: number, limit: number): Promise<StoredEventRow[]> {
    if (toSeq < fromSeq || limit <= 0) return [];
    const from = Math.max(0, fromSeq);
    const [other, out] = await Promise.all([
      this.pool.query<{ row: Buffer }>("SELECT row FROM events WHERE uuid = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4", [uuid, from, toSeq, limit]),
      this.pool.query<{ seq: string; stream: string; stream_offset: string; original_size: number; revision: string; time: number; digest: number; n: number }>(
        `SELECT seq, stream, stream_offset, original_size, revision, time, digest, length(zstd) AS n FROM ${OUTPUT_TABLE}
         WHERE uuid = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4`,
        [uuid, from, toSeq, limit],
      ),
    ]);
    const rows: StoredEventRow[] = other.rows.map((r) => decodeValue(r.row) as StoredEventRow);
    for (const r of out.rows) {
      const seq = Number(r.seq);
      rows.push({
        seq,
        revision: Number(r.revision),
        time: r.time,
        digest: r.digest,
        kind: "output",
        stream: r.stream === "stderr" ? "stderr" : "stdout",
        offset: Number(r.stream_offset),
        originalSize: r.original_size,
        where: { f: uuid, o: seq, n: r.n },
      });
    }
    rows.sort((a, b) => a.seq - b.seq);
    return rows.length > limit ? rows.slice(0, limit) : rows;
  }

  frameReader(): FrameReader {
    return new PgFrameReader(this.pool);
  }

  async close(): Promise<void> {
    await this.writer.close();
    await this.end();
  }

  private async end(): Promise<void> {
    await this.conn.end().catch(() => {});
    await this.pool.end().catch(() => {});
  }
}

/** Bind parameters per statement: PostgreSQL takes at most 65,535; a multi-row statement is cut into chunks below that. */
const MAX_PARAMS = 60_000;

/**
 * A group's net records (netOfGroup) as few statements as the tables allow:
 * every delete first (prefix ranges, then the deleted keys of each table in
 * one statement), then one multi-row upsert per table, then the output
 * events in one multi-row INSERT. Deletes before writes is the net order:
 * foldRecord drops any write that a delete later in the group covers, so a
 * write left in the net never precedes a delete of its row. One statement per
 * record instead cost a round trip and a parse each: 30 of them per group
 * with 200 agents running `true` kept the writer busy 94 % of the run.
 */
function groupQueries(net: Map<string, PersistRecord>): Query[] {
  const ranges: Query[] = [];
  const deleted = new Map<PgTable, string[]>();
  const outputDeleted: { uuids: string[]; seqs: number[] } = { uuids: [], seqs: [] };
  const written = new Map<PgTable, PersistRecord[]>();
  const output: OutputEventRow[] = [];
  const outputUuids: string[] = [];
  for (const r of net.values()) {
    if (isOutputRecord(r)) {
      output.push(r.value as OutputEventRow);
      outputUuids.push(r.key.slice(0, r.key.lastIndexOf("/")));
      continue;
    }
    const t = tableOf(r.table);
    if (r.prefix) {
      ranges.push({ text: `DELETE FROM ${t.name} WHERE key >= $1 AND key < $2`, values: [r.key, prefixEnd(r.key)] });
      // A command's events by prefix: its output rows go with them.
      if (r.table === "event") ranges.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1`, values: [r.key.slice(0, -1)] });
    } else if (r.value === null) {
      (deleted.get(t) ?? deleted.set(t, []).get(t)!).push(r.key);
      if (r.table === "event") {
        const at = r.key.lastIndexOf("/");
        outputDeleted.uuids.push(r.key.slice(0, at));
        outputDeleted.seqs.push(Number(r.key.slice(at + 1)));
      }
    } else (written.get(t) ?? written.set(t, []).get(t)!).push(r);
  }
  const out = ranges;
  for (const [t, keys] of deleted) out.push({ text: `DELETE FROM ${t.name} WHERE key = ANY($1::text[])`, values: [keys] });
  if (outputDeleted.uuids.length > 0)
    out.push({
      text: `DELETE FROM ${OUTPUT_TABLE} WHERE (uuid, seq) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`,
      values: [outputDeleted.uuids, outputDeleted.seqs],
    });
  for (const [t, rows] of written) out.push(...upserts(t, rows));
  if (output.length > 0) out.push(...outputInserts(outputUuids, output));
  return out;
}

/** `VALUES (…), (…)` of `rows` rows of `width` parameters each, numbered from $1. */
function tuples(rows: number, width: number): string {
  return Array.from({ length: rows }, (_, i) => `(${Array.from({ length: width }, (_, j) => `$${i * width + j + 1}`).join(", ")})`).join(", ");
}

/** Rows of one table, written as the core wrote them (key, value-codec row, typed columns): multi-row upserts that keep `ord` (first-write order). */
function upserts(t: PgTable, rows: PersistRecord[]): Query[] {
  const names = ["key", "row", ...t.columns.map((c) => c.name)];
  const set = names
    .slice(1)
    .map((n) => `${n} = excluded.${n}`)
    .join(", ");
  const per = Math.max(1, Math.floor(MAX_PARAMS / names.length));
  const out: Query[] = [];
  for (let i = 0; i < rows.length; i += per) {
    const chunk = rows.slice(i, i + per);
    const values: unknown[] = [];
    for (const r of chunk) {
      const row = r.value as Record<string, unknown>;
      values.push(r.key, encodeValue(r.value), ...t.columns.map((c) => c.of(r.key, row)));
    }
    out.push({
      text: `INSERT INTO ${t.name} (${names.join(", ")}) VALUES ${tuples(chunk.length, names.length)} ON CONFLICT (key) DO UPDATE SET ${set}`,
      values,
    });
  }
  return out;
}

/** The group's output events in multi-row INSERTs (a rewrite of the same event keeps the first: frames never change). */
function outputInserts(uuids: string[], rows: OutputEventRow[]): Query[] {
  const width = 9;
  const per = Math.floor(MAX_PARAMS / width);
  const out: Query[] = [];
  for (let i = 0; i < rows.length; i += per) {
    const values: unknown[] = [];
    const chunk = rows.slice(i, i + per);
    chunk.forEach((v, j) => {
      values.push(uuids[i + j], v.seq, v.stream, v.offset, v.originalSize, v.revision ?? 0, v.time ?? 0, v.digest ?? 0, v.zstd);
    });
    out.push({
      text: `INSERT INTO ${OUTPUT_TABLE} (uuid, seq, stream, stream_offset, original_size, revision, time, digest, zstd) VALUES ${tuples(chunk.length, width)}
      ON CONFLICT (uuid, seq) DO NOTHING`,
      values,
    });
  }
  return out;
}

/** Frames from the output table: the rows asked for, one run of back-to-back frames per query. */
class PgFrameReader implements FrameReader {
  constructor(private readonly pool: pg.Pool) {}

  async read(rows: readonly StoredOutputRow[]): Promise<FrameRun[]> {
    const out: FrameRun[] = [];
    const wanted = rows.filter((r) => r.where);
    for (const r of rows) if (!r.where) out.push(inlineRun(r));
    if (wanted.length === 0) return out;
    const uuid = wanted[0]!.where!.f;
    const got = await this.pool.query<{ seq: string; zstd: Buffer }>(
      `SELECT seq, zstd FROM ${OUTPUT_TABLE} WHERE uuid = $1 AND seq = ANY($2::bigint[]) ORDER BY seq`,
      [uuid, wanted.map((r) => r.seq)],
    );
    const bySeq = new Map(got.rows.map((x) => [Number(x.seq), x.zstd]));
    // Consecutive rows that are all present form one run (one decode); a missing one is a run of its own.
    let run: StoredOutputRow[] = [];
    const flush = () => {
      if (run.length === 0) return;
      const parts = run.map((r) => bySeq.get(r.seq)!);
      out.push({ rows: run, bytes: Buffer.concat(parts), lengths: parts.map((p) => p.length) });
      run = [];
    };
    for (const r of wanted) {
      if (bySeq.has(r.seq)) {
        run.push(r);
        continue;
      }
      flush();
      out.push({ rows: [r], bytes: null, lengths: [r.where!.n] });
    }
    flush();
    out.sort((a, b) => a.rows[0]!.seq - b.rows[0]!.seq);
    return out;
  }

  async close(): Promise<void> {}
}
