/**
 * The PostgreSQL store's writer connection: each group's statements as one
 * transaction, applied exactly once across failures of the database.
 *
 * A failure the database can recover from (the connection lost, PostgreSQL
 * restarting or unreachable, disk full, read-only, a lock timeout: see
 * `transientDbError`) is not the end: the writer drops its connection,
 * reports the store unavailable (`down`), waits (doubling from retryMinMs to
 * retryMaxMs), connects again and retries the same transaction. Groups stay
 * in order because the store's group committer waits for this one.
 *
 * Exactly once: each transaction also sets this writer's row in
 * `rvbox_writer` (its epoch, a random id per opened store, and `through`,
 * the number of its groups committed). A COMMIT whose answer was lost with
 * the connection may have committed; before any retry the writer reads its
 * row on the new connection and, if it already names the group, takes the
 * group as committed instead of applying it again. That check writes the
 * row back in its own transaction, so a database that takes no writes
 * (read-only, disk full for the row) is waited out there, not reported as
 * back.
 *
 * Anything else (a constraint the rows break, a bug) is thrown: the store
 * stops (fail-stop), as before.
 */
import type { StoreWriteLimits } from "./store-group.js";

export type Query = { text: string; values: unknown[] };

/** What the writer needs of a connection (pg.Client; a fake in unit tests). */
export interface WriterConn {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
  end(): Promise<void>;
  on(event: "error", listener: (err: Error) => void): unknown;
}

export interface WriterHooks {
  connect(): Promise<WriterConn>;
  /** Writes are not accepted, for `reason` (called on every failure; the store logs only the change). */
  down(reason: string): void;
  /** The connection came back while no group was waiting: writes are accepted again. */
  up(): void;
  /** A failure that waiting will not mend, found while idle. */
  fail(err: unknown): void;
  limits(): Pick<StoreWriteLimits, "retryMinMs" | "retryMaxMs">;
  sleep(ms: number): Promise<void>;
}

export const WRITER_TABLE = "rvbox_writer";
/** A writer's row not written for this long belongs to a server that is gone: removed when a store opens. */
export const WRITER_ROW_STALE = "7 days";

const MARK = `INSERT INTO ${WRITER_TABLE} (epoch, through, at) VALUES ($1, $2, now())
  ON CONFLICT (epoch) DO UPDATE SET through = excluded.through, at = excluded.at`;

/** SQLSTATE classes and codes a database recovers from (PostgreSQL Appendix A). */
const TRANSIENT_CLASSES = ["08", "53", "57", "58", "40"];
const TRANSIENT_CODES = ["25006", "55P03", "42501", "55006"];
/** Class 08 but no outage: a statement the server cannot take (too many parameters, say) is refused the same way every time. */
const PROTOCOL_VIOLATION = "08P01";

/**
 * Whether `err` is a failure to wait out: a database error of a transient
 * class (connection exception, insufficient resources such as disk_full,
 * operator intervention such as admin_shutdown, system error, rollbacks),
 * read-only, lock not available, privileges revoked; or the connection
 * itself failing (refused, reset, timed out, terminated).
 */
export function transientDbError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { code?: unknown; severity?: unknown };
  const code = typeof e.code === "string" ? e.code : "";
  if (e.severity !== undefined && /^[0-9A-Z]{5}$/.test(code))
    return code !== PROTOCOL_VIOLATION && (TRANSIENT_CLASSES.includes(code.slice(0, 2)) || TRANSIENT_CODES.includes(code));
  if (/^E[A-Z]+$/.test(code)) return true; // ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, EHOSTUNREACH…
  return /connection|terminated|timeout|not queryable/i.test(e.message);
}

/** A short reason for logs and /readyz. */
export function describeDbError(err: unknown): string {
  const e = err as { code?: unknown; message?: unknown };
  const msg = typeof e?.message === "string" && e.message !== "" ? e.message : String(err);
  return typeof e?.code === "string" && e.code !== "" ? `${msg} (${e.code})` : msg;
}

export class PgWriter {
  private conn: WriterConn | null;
  /** Groups this writer committed: its row's `through`. */
  private through = 0;
  private committing = false;
  /** A reconnect started while idle (the connection was lost with no group waiting). */
  private idleRecovery: Promise<void> | null = null;
  private aborted = false;
  private wakeAbort: (() => void) | null = null;

  constructor(
    readonly epoch: string,
    conn: WriterConn,
    private readonly hooks: WriterHooks,
  ) {
    this.conn = conn;
    this.watch(conn);
  }

  /** Create the writer table if needed, forget rows of long-gone writers, and write this writer's row. */
  static async register(conn: WriterConn, epoch: string): Promise<void> {
    await conn.query(`CREATE TABLE IF NOT EXISTS ${WRITER_TABLE} (epoch text PRIMARY KEY, through bigint NOT NULL, at timestamptz NOT NULL)`);
    await conn.query(`DELETE FROM ${WRITER_TABLE} WHERE at < now() - interval '${WRITER_ROW_STALE}'`);
    await conn.query(MARK, [epoch, 0]);
  }

  /** Groups committed so far. */
  get committed(): number {
    return this.through;
  }

  /** Whether it holds a connection (false from a failure until a reconnect wrote its row). */
  get connected(): boolean {
    return this.conn !== null;
  }

  /** Apply `queries` as one transaction, exactly once; resolves once committed, throws only what cannot be waited out. */
  async commit(queries: readonly Query[]): Promise<void> {
    if (this.idleRecovery) await this.idleRecovery;
    this.committing = true;
    try {
      const n = this.through + 1;
      for (;;) {
        if (this.conn === null && (await this.reconnect()) >= n) break;
        try {
          await this.transaction(this.conn!, n, queries);
          break;
        } catch (err) {
          if (!transientDbError(err)) throw err;
          this.lose(err);
        }
      }
      this.through = n;
    } finally {
      this.committing = false;
      // Lost after the COMMIT was answered (its 'error' came with the answer): reconnect now, and the store is not back until then.
      if (this.conn === null && !this.aborted && !this.idleRecovery) this.idleRecovery = this.recoverIdle();
    }
  }

  /**
   * Stop waiting for the database (the store closes): a retry in progress
   * ends and its commit rejects; it was never committed, so never
   * acknowledged.
   */
  abort(): void {
    this.aborted = true;
    this.wakeAbort?.();
    // A transaction waiting on the database (a lock, a slow disk) ends with its connection.
    if (this.committing) void this.conn?.end().catch(() => {});
  }

  /** Abort, and end the connection. A connect attempt in progress ends itself when it completes (reconnect sees the abort). */
  async end(): Promise<void> {
    this.abort();
    const c = this.conn;
    this.conn = null;
    await c?.end().catch(() => {});
  }

  /**
   * One group's transaction: BEGIN, its statements, this writer's row and
   * COMMIT leave together (the connection is in pipeline mode) and the group
   * waits for one round trip, not one per statement (each await was a turn
   * of a busy event loop and of a backend on shared cores). A failed
   * statement aborts the transaction: the ones after it fail, COMMIT answers
   * ROLLBACK, and the group is not durable.
   */
  private async transaction(c: WriterConn, n: number, queries: readonly Query[]): Promise<void> {
    try {
      const sent = [c.query("BEGIN"), ...queries.map((q) => c.query(q.text, q.values)), c.query(MARK, [this.epoch, n]), c.query("COMMIT")];
      // Every promise is awaited (allSettled), so none is left rejected unhandled; the first failure is the one reported.
      const done = await Promise.allSettled(sent);
      const failed = done.find((d): d is PromiseRejectedResult => d.status === "rejected");
      if (failed) throw failed.reason;
      const end = (done.at(-1) as PromiseFulfilledResult<{ command?: string }>).value.command;
      if (end !== undefined && end !== "COMMIT") throw new Error(`the group's transaction ended with ${end}, not COMMIT`);
    } catch (err) {
      if (!transientDbError(err)) await c.query("ROLLBACK").catch(() => {});
      throw err;
    }
  }

  /**
   * Connect again, with backoff, until this writer's row can be read and
   * written back; returns the `through` it holds (the groups that committed).
   */
  private async reconnect(): Promise<number> {
    const { retryMinMs, retryMaxMs } = this.hooks.limits();
    for (let wait = retryMinMs; ; wait = Math.min(retryMaxMs, wait * 2)) {
      await this.pause(wait);
      let c: WriterConn | null = null;
      try {
        c = await this.hooks.connect();
        if (this.aborted) {
          void c.end().catch(() => {});
          throw new Error("the store closed while PostgreSQL was not taking writes: this group was never committed");
        }
        this.conn = c;
        this.watch(c);
        const through = await this.probe(c);
        if (through < this.through) throw new Error(`${WRITER_TABLE}: this writer's row says ${through} groups committed, it committed ${this.through}`);
        return through;
      } catch (err) {
        if (!transientDbError(err)) throw err;
        this.lose(err);
      }
    }
  }

  private async pause(ms: number): Promise<void> {
    const closed = (): Error => new Error("the store closed while PostgreSQL was not taking writes: this group was never committed");
    if (this.aborted) throw closed();
    await Promise.race([this.hooks.sleep(ms), new Promise<void>((r) => (this.wakeAbort = r))]);
    this.wakeAbort = null;
    if (this.aborted) throw closed();
  }

  /** Read this writer's row and write it back unchanged, in one transaction: proof that writes are accepted. */
  private async probe(c: WriterConn): Promise<number> {
    await c.query("BEGIN");
    const r = await c.query(`SELECT through FROM ${WRITER_TABLE} WHERE epoch = $1 FOR UPDATE`, [this.epoch]);
    const through = Number(r.rows[0]?.through ?? 0);
    await c.query(MARK, [this.epoch, through]);
    await c.query("COMMIT");
    return through;
  }

  /** Forget the connection after a failure (ending it aborts whatever it had open) and report the store down. */
  private lose(err: unknown): void {
    const c = this.conn;
    this.conn = null;
    void c?.end().catch(() => {});
    this.hooks.down(describeDbError(err));
  }

  private watch(c: WriterConn): void {
    c.on("error", (err) => {
      if (c !== this.conn) return;
      // While a group commits, its query fails too and the commit retries; idle, reconnect now.
      this.lose(err);
      if (!this.committing && !this.idleRecovery) this.idleRecovery = this.recoverIdle();
    });
  }

  private async recoverIdle(): Promise<void> {
    try {
      await this.reconnect();
      this.hooks.up();
    } catch (err) {
      this.hooks.fail(err);
    } finally {
      this.idleRecovery = null;
    }
  }
}
