/**
 * The server's state in PostgreSQL: a ServerStore (server-store.ts) over the
 * tables of pg-schema.ts, through node-postgres (`pg`).
 *
 * Writes: the same group commit as the embedded store (group-commit.ts,
 * foldRecord's net effect per row): every persist queued since the last
 * commit becomes one transaction on one connection, output frames in one
 * multi-row INSERT, and `onDurable(through)` is reported only after COMMIT
 * returned (synchronous_commit on: the WAL is flushed). A failed
 * transaction stops the writer for good (fail-stop, like the embedded
 * store): nothing after it is acknowledged.
 *
 * Reads (readEvents, frames, command rows) go through a small pool and see
 * committed rows only. At open the schema is created or checked (a database
 * written by a newer server is refused), and the rows restoreServer needs
 * are loaded in first-write order, with the digests of each command's recent
 * output events. The store keeps the history (keepsHistory): a server loads
 * its live commands' rows and only the newest ended commands, already
 * reduced to its ledger's entries (`ledgerRows`, core ARCHIVED_TABLE), and
 * reads command rows on demand; `sweepHistory`
 * deletes what is past the retention.
 */
import pg from "pg";
import { ARCHIVED_TABLE, ledgerRowOf, type PersistRecord } from "../../core/index.js";
import type { CommandRow, OutputEventRow } from "../../core/server/store.js";
import { prefixEnd, type Tables } from "./kv-store.js";
import { GroupCommittedStore, isOutputRecord, netOfGroup, type StoreOp } from "./store-group.js";
import { OUTPUT_TABLE, PG_SCHEMA_VERSION, PG_TABLES, type PgTable, schemaStatements, TERMINAL_STATES } from "./pg-schema.js";
import { type CommandQuery, type FrameReader, type FrameRun, inlineRun, type ServerStore, type StoredEventRow, type StoredOutputRow } from "./server-store.js";
import { decodeValue, encodeValue } from "./value-codec.js";

/** Recent event digests the core keeps per command for resend checks (core SERVER_RECENT_DIGESTS), as the embedded store loads them. */
const RECENT_DIGESTS = 1024;
const READ_POOL = 4;
/** Ended command rows read per round trip at start (loadLedger). */
const LEDGER_BATCH = 2000;

/** Per-command tables: their rows are loaded only for live commands when history is not loaded whole. */
const PER_COMMAND: Record<string, string> = { event: "uuid", stdin: "uuid", retention: "uuid", script: "key" };

export interface PgOpenOptions {
  /**
   * Load every row (undefined: what `rvbox server migrate` verifies), or the
   * live commands' rows and the newest `ledgerRows` ended commands as ledger rows (what
   * a server restores: its ledger).
   */
  ledgerRows?: number;
}

export type Query = { text: string; values: unknown[] };

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

  readonly keepsHistory = true;

  static async open(url: string, opts: PgOpenOptions = {}): Promise<PgServerStore> {
    const conn = new pg.Client({ connectionString: url });
    await conn.connect();
    const pool = new pg.Pool({ connectionString: url, max: READ_POOL });
    const s = new PgServerStore(conn, pool);
    try {
      const version = await s.migrate();
      await s.load(opts.ledgerRows);
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

  /** The rows for restoreServer, per table in first-write order; recent output digests as event rows. */
  private async load(ledgerRows: number | undefined): Promise<void> {
    const all = ledgerRows === undefined;
    for (const [core, t] of Object.entries(PG_TABLES) as Array<[string, PgTable]>) {
      const r = await this.conn.query<{ key: string; row: Buffer }>(loadQuery(core, t, all), loadParams(core, all));
      if (r.rows.length === 0) continue;
      const m = new Map<string, unknown>();
      for (const x of r.rows) m.set(x.key, decodeValue(x.row));
      this.tables.set(core, m);
    }
    if (!all) await this.loadLedger(ledgerRows);
    const q = recentDigestsQuery(all);
    const recent = await this.conn.query<{ uuid: string; seq: string; digest: number }>(q.text, q.values);
    let events = this.tables.get("event");
    if (!events && recent.rows.length > 0) this.tables.set("event", (events = new Map()));
    for (const x of recent.rows) {
      const seq = Number(x.seq);
      events!.set(`${x.uuid}/${String(seq).padStart(12, "0")}`, { seq, digest: x.digest });
    }
  }

  /**
   * The newest `n` ended commands, as the ledger rows a restore makes of
   * them (ARCHIVED_TABLE), read through a cursor a batch at a time: the rows
   * are never all held at once (100,000 rows of about 1 KiB decoded at once
   * left a server at 1.3 GiB RSS, with 90 MiB of live heap; bench:history).
   */
  private async loadLedger(n: number): Promise<void> {
    if (!Number.isSafeInteger(n) || n <= 0) return;
    const ledger = new Map<string, unknown>();
    await this.conn.query("BEGIN");
    try {
      await this.conn.query(
        `DECLARE ledger NO SCROLL CURSOR FOR SELECT key, row FROM commands WHERE state = ANY('{${TERMINAL_STATES.join(",")}}'::smallint[]) ORDER BY ended_at DESC LIMIT ${n}`,
      );
      for (;;) {
        const r = await this.conn.query<{ key: string; row: Buffer }>(`FETCH ${LEDGER_BATCH} FROM ledger`);
        for (const x of r.rows) ledger.set(x.key, ledgerRowOf(decodeValue(x.row) as CommandRow));
        if (r.rows.length < LEDGER_BATCH) break;
      }
      await this.conn.query("COMMIT");
    } catch (err) {
      await this.conn.query("ROLLBACK").catch(() => {});
      throw err;
    }
    if (ledger.size > 0) this.tables.set(ARCHIVED_TABLE, ledger);
  }

  protected async commitGroup(group: StoreOp[]): Promise<void> {
    const { net, drops, maxId } = netOfGroup(group);
    const queries: Query[] = [];
    const output: OutputEventRow[] = [];
    const outputUuids: string[] = [];
    for (const r of net.values()) {
      if (isOutputRecord(r)) {
        output.push(r.value as OutputEventRow);
        outputUuids.push(r.key.slice(0, r.key.lastIndexOf("/")));
      } else queries.push(...recordQueries(r));
    }
    if (output.length > 0) queries.push(outputInsert(outputUuids, output));
    for (const d of drops) queries.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1 AND seq <= $2`, values: [d.uuid, d.throughSeq] });
    if (queries.length > 0) {
      await this.conn.query("BEGIN");
      for (const q of queries) await this.conn.query(q.text, q.values);
      await this.conn.query("COMMIT");
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

  async readCommand(uuid: string): Promise<CommandRow | undefined> {
    const r = await this.pool.query<{ row: Buffer }>("SELECT row FROM commands WHERE key = $1", [uuid]);
    return r.rows[0] ? (decodeValue(r.rows[0].row) as CommandRow) : undefined;
  }

  async listCommands(q: CommandQuery): Promise<CommandRow[]> {
    const { text, values } = listQuery(q);
    const r = await this.pool.query<{ row: Buffer }>(text, values);
    return r.rows.map((x) => decodeValue(x.row) as CommandRow);
  }

  /** Ended commands past the retention, oldest first, with every row of theirs, in one transaction. */
  async sweepHistory(endedBefore: number, limit: number): Promise<number> {
    const c = await this.pool.connect();
    try {
      await c.query("BEGIN");
      const gone = await c.query<{ key: string }>(
        "DELETE FROM commands WHERE key IN (SELECT key FROM commands WHERE state = ANY($1) AND ended_at < $2 ORDER BY ended_at LIMIT $3) RETURNING key",
        [TERMINAL_STATES, endedBefore, limit],
      );
      const uuids = gone.rows.map((x) => x.key);
      if (uuids.length > 0) {
        for (const [core, col] of Object.entries(PER_COMMAND)) await c.query(`DELETE FROM ${tableOf(core).name} WHERE ${col} = ANY($1::text[])`, [uuids]);
        await c.query(`DELETE FROM ${OUTPUT_TABLE} WHERE uuid = ANY($1::text[])`, [uuids]);
      }
      await c.query("COMMIT");
      return uuids.length;
    } catch (err) {
      await c.query("ROLLBACK").catch(() => {});
      throw err;
    } finally {
      c.release();
    }
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

/**
 * One page of ListCommands as SQL: newest first, the rows after `q.after`.
 * The index gives the order, so a page costs its own rows, not the client's
 * or the table's whole history: one client is `client_id = $n` (an ordered
 * scan of commands_client_page; `= ANY` of one element is not, before
 * PostgreSQL 17), and the position adds `created_at <= t`, a bound the index
 * seeks to (the OR that follows is not one).
 */
export function listQuery(q: CommandQuery): Query {
  const where: string[] = [];
  const values: unknown[] = [];
  const arg = (v: unknown): string => `$${values.push(v)}`;
  if (q.clientIds !== null) where.push(q.clientIds.length === 1 ? `client_id = ${arg(q.clientIds[0])}` : `client_id = ANY(${arg(q.clientIds)}::text[])`);
  if (q.states.length > 0) where.push(`state = ANY(${arg(q.states)}::smallint[])`);
  if (q.createdFrom > 0) where.push(`created_at >= ${arg(q.createdFrom)}`);
  if (q.createdBefore > 0) where.push(`created_at < ${arg(q.createdBefore)}`);
  if (q.after) {
    const t = arg(q.after.createdAt);
    where.push(`created_at <= ${t} AND (created_at < ${t} OR (created_at = ${t} AND key > ${arg(q.after.uuid)}))`);
  }
  const text = `SELECT row FROM commands ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY created_at DESC, key LIMIT ${arg(q.limit)}`;
  return { text, values };
}

/** The load of one table at start: every row, or (history not loaded whole) the live commands' rows (`loadLedger` reads the ended ones). */
export function loadQuery(core: string, t: PgTable, all: boolean): string {
  if (all) return `SELECT key, row FROM ${t.name} ORDER BY ord`;
  // Live commands only: the ended ones come as ledger rows (loadLedger).
  if (core === "command") return "SELECT key, row FROM commands WHERE NOT (state = ANY($1)) ORDER BY ord";
  const col = PER_COMMAND[core];
  if (col === undefined) return `SELECT key, row FROM ${t.name} ORDER BY ord`;
  return `SELECT x.key, x.row FROM commands c CROSS JOIN LATERAL
      (SELECT key, row, ord FROM ${t.name} x WHERE ${sameUuid(`x.${col}`, col)} OFFSET 0) x
    WHERE NOT (c.state = ANY($1)) ORDER BY x.ord`;
}

/**
 * `column = c.key` for a join on commands' key. Keys are COLLATE "C", the
 * uuid columns of the other tables are not: compared as they are, the two
 * collations leave the uuid column's index unusable (a start then scanned
 * every event or output row of the history); compared in the uuid column's
 * collation, the join walks its index. (Equality is the same in both.)
 * The start's joins look the live commands' rows up one command at a time
 * (LATERAL, OFFSET 0 keeps it from being flattened into a join): the
 * planner's guess of how many commands are live (`state <> ALL(terminal)`,
 * 19 % of 1,000,000 finished commands) would otherwise choose a hash join
 * over a scan of every event row.
 */
const sameUuid = (column: string, name: string): string => (name === "key" ? `${column} = c.key` : `${column} = c.key COLLATE "default"`);

/** The digests of the recent output events of the commands a start loads (every command, or the live ones). */
export function recentDigestsQuery(all: boolean): Query {
  return {
    text: all
      ? `SELECT o.uuid, o.seq, o.digest FROM ${OUTPUT_TABLE} o JOIN commands c ON ${sameUuid("o.uuid", "uuid")}
       WHERE o.seq > c.stored_through - $1 ORDER BY o.uuid, o.seq`
      : `SELECT o.uuid, o.seq, o.digest FROM commands c CROSS JOIN LATERAL
      (SELECT uuid, seq, digest FROM ${OUTPUT_TABLE} o WHERE ${sameUuid("o.uuid", "uuid")} AND o.seq > c.stored_through - $1 OFFSET 0) o
       WHERE NOT (c.state = ANY($2)) ORDER BY o.uuid, o.seq`,
    values: all ? [RECENT_DIGESTS] : [RECENT_DIGESTS, TERMINAL_STATES],
  };
}

export function loadParams(core: string, all: boolean): unknown[] {
  if (all) return [];
  return core === "command" || PER_COMMAND[core] !== undefined ? [TERMINAL_STATES] : [];
}

/** The statements that apply one net record to its table (output events excepted). */
function recordQueries(r: PersistRecord): Query[] {
  const t = tableOf(r.table);
  if (r.prefix) {
    const range = [r.key, prefixEnd(r.key)];
    const q: Query[] = [{ text: `DELETE FROM ${t.name} WHERE key >= $1 AND key < $2`, values: range }];
    // A command's events by prefix: its output rows go with them.
    if (r.table === "event") q.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1`, values: [r.key.slice(0, -1)] });
    return q;
  }
  if (r.value === null) {
    const q: Query[] = [{ text: `DELETE FROM ${t.name} WHERE key = $1`, values: [r.key] }];
    if (r.table === "event") {
      const at = r.key.lastIndexOf("/");
      q.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1 AND seq = $2`, values: [r.key.slice(0, at), Number(r.key.slice(at + 1))] });
    }
    return q;
  }
  const row = r.value as Record<string, unknown>;
  const names = ["key", "row", ...t.columns.map((c) => c.name)];
  const values = [r.key, encodeValue(r.value), ...t.columns.map((c) => c.of(r.key, row))];
  const params = names.map((_, i) => `$${i + 1}`).join(", ");
  const set = names
    .slice(1)
    .map((n) => `${n} = excluded.${n}`)
    .join(", ");
  return [{ text: `INSERT INTO ${t.name} (${names.join(", ")}) VALUES (${params}) ON CONFLICT (key) DO UPDATE SET ${set}`, values }];
}

/** One multi-row INSERT of a group's output events (a rewrite of the same event keeps the first: frames never change). */
function outputInsert(uuids: string[], rows: OutputEventRow[]): Query {
  const values: unknown[] = [];
  const tuples = rows.map((v, i) => {
    const base = values.length;
    values.push(uuids[i], v.seq, v.stream, v.offset, v.originalSize, v.revision ?? 0, v.time ?? 0, v.digest ?? 0, v.zstd);
    return `(${Array.from({ length: 9 }, (_, j) => `$${base + j + 1}`).join(", ")})`;
  });
  return {
    text: `INSERT INTO ${OUTPUT_TABLE} (uuid, seq, stream, stream_offset, original_size, revision, time, digest, zstd) VALUES ${tuples.join(", ")}
      ON CONFLICT (uuid, seq) DO NOTHING`,
    values,
  };
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
