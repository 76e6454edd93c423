/**
 * The cores' persist batches on the durable sql.js store (shells/store).
 *
 * Every PersistRecord {table, key, value} is one row of
 *   kv(t TEXT, k TEXT, v BLOB, PRIMARY KEY (t, k))
 * with `v` the value-codec encoding of `value`; `value: null` deletes the
 * row, and `prefix: true` every row of the table whose key starts with `key`
 * (a range on the primary key). The stores built on this (spill-store.ts for the agent,
 * server-storage.ts for the server) take every persist queued since their
 * last commit, reduce them to their net effect per row and apply that as one
 * atomic db batch (group commit), then report `durable through` the group's
 * last id; the node loop coalesces reports into one reducer input.
 *
 * Restore: `loadTables` decodes every row into Map<table, Map<key, value>>,
 * which is exactly the `tables.get(name)` shape restoreAgent/restoreServer
 * read.
 */
import type { PersistEffect, PersistRecord } from "../../core/index.js";
import type { DurableDb, Stmt } from "../store/index.js";
import { decodeValue, encodeValue } from "./value-codec.js";

export const KV_SCHEMA = ["CREATE TABLE IF NOT EXISTS kv (t TEXT NOT NULL, k TEXT NOT NULL, v BLOB NOT NULL, PRIMARY KEY (t, k))"];

// An update keeps the row in place (its rowid): INSERT OR REPLACE would delete
// and re-insert it at the end, and loadTables' rowid order is the order the
// cores' restores keep (first write first, as the simulator's disk keeps it).
const UPSERT = "INSERT INTO kv (t, k, v) VALUES (?, ?, ?) ON CONFLICT (t, k) DO UPDATE SET v = excluded.v";
const DELETE = "DELETE FROM kv WHERE t = ? AND k = ?";
/** Every row in the order first written (a row deleted and written again counts as new). */
export const LOAD_ALL = "SELECT t, k, v FROM kv ORDER BY rowid";

const DELETE_RANGE = "DELETE FROM kv WHERE t = ? AND k >= ? AND k < ?";

export function recordStmt(r: PersistRecord, value: unknown = r.value): Stmt {
  if (r.prefix) return { sql: DELETE_RANGE, params: [r.table, r.key, prefixEnd(r.key)] };
  if (value === null) return { sql: DELETE, params: [r.table, r.key] };
  return { sql: UPSERT, params: [r.table, r.key, encodeValue(value)] };
}

/** The least string greater than every string that starts with `prefix` (ASCII keys). */
export function prefixEnd(prefix: string): string {
  const last = prefix.charCodeAt(prefix.length - 1);
  if (prefix.length === 0 || !(last < 0x7f)) throw new Error(`prefix delete needs a non-empty ASCII prefix, got ${JSON.stringify(prefix)}`);
  return prefix.slice(0, -1) + String.fromCharCode(last + 1);
}

/**
 * Fold one record into a group's net effect per row (insertion order kept).
 * A prefix delete drops the rows it covers that the group wrote before it and
 * keeps its own place, so rows written after it in the group survive.
 */
export function foldRecord(net: Map<string, PersistRecord>, r: PersistRecord): void {
  if (r.prefix) {
    const head = `${r.table}\0${r.key}`;
    for (const k of [...net.keys()]) if (k.startsWith(head)) net.delete(k);
    net.set(`${head}\0*`, r);
    return;
  }
  net.set(`${r.table}\0${r.key}`, r);
}

export type Tables = Map<string, Map<string, unknown>>;

/** Every row, per table in the order first written (rowid order; see UPSERT). */
export function loadTables(db: DurableDb): Tables {
  const out: Tables = new Map();
  for (const row of db.query<{ t: string; k: string; v: Uint8Array }>(LOAD_ALL)) {
    let t = out.get(row.t);
    if (!t) out.set(row.t, (t = new Map()));
    t.set(row.k, decodeValue(row.v));
  }
  return out;
}

export function tablesView(t: Tables): { get(table: string): ReadonlyMap<string, unknown> | undefined } {
  return { get: (name) => t.get(name) };
}

/** Rows of one table whose keys start with `prefix`, in key order. */
export function queryPrefix(db: DurableDb, table: string, prefix: string, fromKey: string, limit: number): Array<{ k: string; v: unknown }> {
  const rows = db.query<{ k: string; v: Uint8Array }>("SELECT k, v FROM kv WHERE t = ? AND k >= ? AND k < ? ORDER BY k LIMIT ?", [
    table,
    fromKey < prefix ? prefix : fromKey,
    `${prefix}\uffff`,
    limit,
  ]);
  return rows.map((r) => ({ k: r.k, v: decodeValue(r.v) }));
}

export interface PersistSink {
  persist(e: PersistEffect): void;
}
