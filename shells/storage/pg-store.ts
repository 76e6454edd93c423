/**
 * The server's state in PostgreSQL: a ServerStore (server-store.ts) over the
 * tables of pg-schema.ts, through node-postgres (`pg`).
 *
 * Writes: the same group commit as the embedded store (group-commit.ts,
 * foldRecord's net effect per row): every persist queued since the last
 * commit becomes one transaction on one connection, a few multi-row
 * statements pipelined with its BEGIN and COMMIT, and `onDurable(through)` is
 * reported only after COMMIT returned (synchronous_commit on: the WAL is
 * flushed). The writer connection (pg-writer.ts) waits out a database that
 * is restarting, unreachable or refusing writes: it reports the store
 * unavailable and retries the same transaction, exactly once, after
 * reconnecting; only a failure waiting cannot mend stops the writer for good
 * (fail-stop): nothing after it is acknowledged.
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
import { randomUUID } from "node:crypto";
import pg from "pg";
import { ARCHIVED_TABLE, ledgerRowOf, type PersistRecord } from "../../core/index.js";
import type { AuditRow, CommandRow, OutputEventRow } from "../../core/server/store.js";
import { prefixEnd, type Tables } from "./kv-store.js";
import { PgWriter, type Query, type WriterConn } from "./pg-writer.js";
import { DEFAULT_STORE_WRITE_LIMITS, GroupCommittedStore, isOutputRecord, netOfGroup, type StoreOp, type StoreWriteLimits } from "./store-group.js";
import { OUTPUT_TABLE, PG_SCHEMA_VERSION, PG_TABLES, type PgTable, schemaStatements, TERMINAL_STATES, UPGRADES } from "./pg-schema.js";
import {
  type AuditPage,
  type AuditQuery,
  type CommandQuery,
  type FrameReader,
  type FrameRun,
  inlineRun,
  type ServerStore,
  type StoredEventRow,
  type StoredOutputRow,
} from "./server-store.js";
import { decodeValue, encodeValue } from "./value-codec.js";

/** Recent event digests the core keeps per command for resend checks (core SERVER_RECENT_DIGESTS), as the embedded store loads them. */
const RECENT_DIGESTS = 1024;
const READ_POOL = 4;
/** A read PostgreSQL holds longer than this (a lock, an overloaded server) fails instead of holding a pool connection for ever. */
const READ_TIMEOUT_MS = 30_000;
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
  /** The writer's bounds and waits (DEFAULT_STORE_WRITE_LIMITS). */
  writeLimits?: StoreWriteLimits;
}

const tableOf = (name: string): PgTable => {
  const t = (PG_TABLES as Record<string, PgTable>)[name];
  if (!t) throw new Error(`no PostgreSQL table for core table ${JSON.stringify(name)}`);
  return t;
};

export class PgServerStore extends GroupCommittedStore implements ServerStore {
  readonly tables: Tables = new Map();
  opened: Readonly<Record<string, string | number | boolean>> = {};

  /** Set once the store is open: the writer connection, from then on its own. */
  private pgWriter: PgWriter | null = null;

  private constructor(
    private readonly conn: pg.Client,
    private readonly pool: pg.Pool,
  ) {
    super();
    // A connection PostgreSQL ends (restart, network) emits 'error'. While the store opens, the query
    // in progress fails with it; then the writer (pg-writer.ts) waits it out. An idle reader's is dropped by the pool.
    conn.on("error", () => {});
    pool.on("error", () => {});
  }

  readonly keepsHistory = true;

  static async open(url: string, opts: PgOpenOptions = {}): Promise<PgServerStore> {
    const writeLimits = opts.writeLimits ?? DEFAULT_STORE_WRITE_LIMITS;
    const conn = await connectWriter(url, writeLimits.connectTimeoutMs);
    const pool = new pg.Pool({ connectionString: url, max: READ_POOL, statement_timeout: READ_TIMEOUT_MS });
    const s = new PgServerStore(conn, pool);
    s.writeLimits = writeLimits;
    try {
      const version = await s.migrate();
      await s.load(opts.ledgerRows);
      const epoch = randomUUID();
      await PgWriter.register(conn, epoch);
      s.pgWriter = new PgWriter(epoch, conn, {
        connect: () => connectWriter(url, s.writeLimits.connectTimeoutMs),
        down: (reason) => s.markDown(`PostgreSQL is not taking writes: ${reason}`),
        up: () => s.markUp(),
        fail: (err) => s.fail(err),
        limits: () => s.writeLimits,
        sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
      });
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
      for (let v = found ?? PG_SCHEMA_VERSION; v < PG_SCHEMA_VERSION; v++) await this.upgrade(v);
      for (const sql of schemaStatements()) await this.conn.query(sql);
      if (found === undefined) await this.conn.query("INSERT INTO rvbox_schema (version) VALUES ($1)", [PG_SCHEMA_VERSION]);
      else if (found < PG_SCHEMA_VERSION) await this.conn.query("UPDATE rvbox_schema SET version = $1", [PG_SCHEMA_VERSION]);
      await this.conn.query("COMMIT");
      return PG_SCHEMA_VERSION;
    } catch (err) {
      await this.conn.query("ROLLBACK").catch(() => {});
      throw err;
    }
  }

  /** One step of UPGRADES (inside the schema transaction): its statements, then the new column filled from each row. */
  private async upgrade(from: number): Promise<void> {
    const u = UPGRADES[from];
    if (!u) throw new Error(`no upgrade of the RVBox schema from version ${from}`);
    for (const sql of u.sql) await this.conn.query(sql);
    if (!u.backfill) return;
    const t = tableOf(u.backfill.table);
    const col = t.columns.find((c) => c.name === u.backfill!.column)!;
    const rows = await this.conn.query<{ key: string; row: Buffer }>(`SELECT key, row FROM ${t.name}`);
    for (const r of rows.rows)
      await this.conn.query(`UPDATE ${t.name} SET ${col.name} = $2 WHERE key = $1`, [r.key, col.of(r.key, decodeValue(r.row) as Record<string, unknown>)]);
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
        // ended_at is NULL only in rows written before it existed: they would sort first (DESC puts NULLs
        // first) and pass for the newest; they are left to the database (a repeated submit is checked there).
        `DECLARE ledger NO SCROLL CURSOR FOR SELECT key, row FROM commands WHERE state = ANY('{${TERMINAL_STATES.join(",")}}'::smallint[]) AND ended_at IS NOT NULL ORDER BY ended_at DESC LIMIT ${n}`,
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
    const queries = groupQueries(net);
    for (const d of drops) queries.push({ text: `DELETE FROM ${OUTPUT_TABLE} WHERE uuid = $1 AND seq <= $2`, values: [d.uuid, d.throughSeq] });
    if (queries.length > 0) await this.pgWriter!.commit(queries);
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

  async storedUuids(uuids: readonly string[]): Promise<string[]> {
    if (uuids.length === 0) return [];
    const r = await this.pool.query<{ key: string }>("SELECT key FROM commands WHERE key = ANY($1::text[])", [uuids]);
    return r.rows.map((x) => x.key);
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

  async listAudit(q: AuditQuery): Promise<AuditPage> {
    const where = "at >= $1 AND ($2 = '' OR operator = $2) AND ($3 = '' OR $3 = ANY(clients))";
    const args = [q.since, q.operator, q.clientId];
    const [rows, n, swept] = await Promise.all([
      this.pool.query<{ row: Buffer }>(`SELECT row FROM audit WHERE ${where} ORDER BY seq DESC LIMIT $4`, [...args, q.limit]),
      this.pool.query<{ n: string }>(`SELECT count(*) AS n FROM audit WHERE ${where}`, args),
      this.pool.query<{ n: string }>("SELECT n FROM rvbox_swept WHERE what = 'audit'"),
    ]);
    return {
      entries: rows.rows.map((r) => decodeValue(r.row) as AuditRow).reverse(),
      matched: Number(n.rows[0]?.n ?? 0),
      swept: Number(swept.rows[0]?.n ?? 0),
    };
  }

  /** The oldest audit entries past the newest `keep`, counted in rvbox_swept in the same transaction. */
  async sweepAudit(keep: number, limit: number): Promise<number> {
    return this.inTransaction(async (c) => {
      const gone = await c.query("DELETE FROM audit WHERE key IN (SELECT key FROM audit ORDER BY seq DESC OFFSET $1 LIMIT $2)", [keep, limit]);
      const n = gone.rowCount ?? 0;
      if (n > 0) await c.query("INSERT INTO rvbox_swept (what, n) VALUES ('audit', $1) ON CONFLICT (what) DO UPDATE SET n = rvbox_swept.n + $1", [n]);
      return n;
    });
  }

  private async inTransaction<T>(body: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect();
    try {
      await c.query("BEGIN");
      const out = await body(c);
      await c.query("COMMIT");
      return out;
    } catch (err) {
      await c.query("ROLLBACK").catch(() => {});
      throw err;
    } finally {
      c.release();
    }
  }

  /** Ended commands past the retention, oldest first, with every row of theirs, in one transaction. */
  async sweepHistory(endedBefore: number, limit: number): Promise<number> {
    return this.inTransaction(async (c) => {
      const gone = await c.query<{ key: string }>(
        `DELETE FROM commands WHERE key IN (SELECT key FROM commands WHERE state IN ${ENDED} AND ended_at < $1 ORDER BY ended_at LIMIT $2) RETURNING key`,
        [endedBefore, limit],
      );
      const uuids = gone.rows.map((x) => x.key);
      if (uuids.length > 0) {
        for (const [core, col] of Object.entries(PER_COMMAND)) await c.query(`DELETE FROM ${tableOf(core).name} WHERE ${col} = ANY($1::text[])`, [uuids]);
        await c.query(`DELETE FROM ${OUTPUT_TABLE} WHERE uuid = ANY($1::text[])`, [uuids]);
      }
      return uuids.length;
    });
  }

  protected override takingWrites(): boolean {
    return this.pgWriter?.connected ?? true;
  }

  /** Waits for queued writes while PostgreSQL takes them; while it does not, what is queued is dropped (never acknowledged) and reported through onError. */
  async close(): Promise<void> {
    if (!this.health.ok) this.pgWriter?.abort();
    await this.writer.close();
    await this.end();
  }

  private async end(): Promise<void> {
    if (this.pgWriter) await this.pgWriter.end();
    else await this.conn.end().catch(() => {});
    await this.pool.end().catch(() => {});
  }
}

/** The terminal states as an SQL list (constants), so the planner matches the partial index commands_ended. */
const ENDED = `(${TERMINAL_STATES.join(", ")})`;

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
  // The store keeps the audit log: a restore needs only where its sequence is.
  if (core === "audit") return "SELECT key, row FROM audit ORDER BY seq DESC LIMIT 1";
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

/** A writer connection: keepalive on, so a peer that vanished without a word is noticed; a connect that hangs is given up. */
async function connectWriter(url: string, timeoutMs: number): Promise<pg.Client & WriterConn> {
  // Pipeline mode: a group's BEGIN, statements and COMMIT leave together (pg-writer.ts `transaction`).
  const c = new pg.Client({ connectionString: url, keepAlive: true, connectionTimeoutMillis: timeoutMs, pipeline: true });
  c.on("error", () => {}); // reported through the failing query, or by the writer's own listener once it has it
  try {
    await c.connect();
  } catch (err) {
    await c.end().catch(() => {});
    throw err;
  }
  return c as pg.Client & WriterConn;
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

/**
 * Output rows per INSERT. A statement takes at most 65,535 parameters (9 per
 * row), and the group after an outage holds everything queued meanwhile (up
 * to the backlog bound), so a group's rows go in INSERTs of at most this many.
 */
export const OUTPUT_ROWS_PER_INSERT = Math.min(1000, Math.floor(MAX_PARAMS / 9));

/** The group's output events in multi-row INSERTs of at most OUTPUT_ROWS_PER_INSERT rows (a rewrite of the same event keeps the first: frames never change). */
export function outputInserts(uuids: string[], rows: OutputEventRow[]): Query[] {
  const width = 9;
  const per = OUTPUT_ROWS_PER_INSERT;
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
