/**
 * The PostgreSQL store's schema (pg-store.ts): one table per core table, each
 * with its key, a first-write order column (`ord`, never changed by an
 * update: the order restoreServer keeps), the row as the core wrote it
 * (`row`, value-codec bytes: nested specs, bigints and byte fields survive
 * exactly), and typed columns an operator can query
 * (`SELECT state, count(*) FROM commands GROUP BY state`). Output events
 * live in `output`, one row per event with its validated zstd frame as it
 * arrived, so any server can read them.
 */
import type { ServerTableName } from "../../core/server/store.js";
import { TERMINAL } from "../../core/dispatch/lifecycle.js";

/** The lifecycle states that end a command, as stored in commands.state (ascending). */
export const TERMINAL_STATES: number[] = [...TERMINAL].sort((a, b) => a - b);

/**
 * The schema version this server writes; a database at a newer one is
 * refused, an older one is brought up to it at start (`UPGRADES`).
 * 2: audit.clients (ListAudit by client in SQL), rvbox_swept.
 */
export const PG_SCHEMA_VERSION = 2;

type Extract = (key: string, row: Record<string, unknown>) => unknown;

export interface PgColumn {
  name: string;
  type: string;
  of: Extract;
}

export interface PgTable {
  name: string;
  columns: PgColumn[];
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
const uuidOfKey = (key: string): string => key.slice(0, key.lastIndexOf("/"));
const seqOfKey = (key: string): number => Number(key.slice(key.lastIndexOf("/") + 1));

const col = (name: string, type: string, of: Extract): PgColumn => ({ name, type, of });

/** Each core table's PostgreSQL table and typed columns (a new core table does not compile until it has one). */
export const PG_TABLES = {
  client: { name: "clients", columns: [col("client_id", "text", (k) => k)] },
  command: {
    name: "commands",
    columns: [
      col("client_id", "text", (_, r) => str(r.clientId)),
      col("state", "smallint", (_, r) => num(r.state)),
      col("created_at", "double precision", (_, r) => num(r.createdAt)),
      col("ended_at", "double precision", (_, r) => num(r.endedAt)),
      col("stored_through", "bigint", (_, r) => num(r.storedThrough)),
    ],
  },
  event: {
    name: "events",
    columns: [col("uuid", "text", (k) => uuidOfKey(k)), col("seq", "bigint", (k) => seqOfKey(k)), col("kind", "text", (_, r) => str(r.kind))],
  },
  script: { name: "scripts", columns: [] },
  stdin: { name: "stdin_writes", columns: [col("uuid", "text", (k) => uuidOfKey(k))] },
  retention: { name: "retention_markers", columns: [col("uuid", "text", (_, r) => str(r.uuid))] },
  pruned: { name: "pruned_commands", columns: [col("client_id", "text", (_, r) => str(r.clientId))] },
  reconcile: { name: "reconcile_results", columns: [] },
  incident: {
    name: "incidents",
    columns: [
      col("client_id", "text", (_, r) => str(r.clientId)),
      col("kind", "text", (_, r) => str(r.kind)),
      col("at", "double precision", (_, r) => num(r.at)),
    ],
  },
  incident_drop: { name: "incident_drops", columns: [] },
  counter: { name: "counters", columns: [] },
  audit: {
    name: "audit",
    columns: [
      col("seq", "bigint", (_, r) => num(r.seq)),
      col("operator", "text", (_, r) => str(r.operator)),
      col("rpc", "text", (_, r) => str(r.rpc)),
      col("result", "text", (_, r) => str(r.result)),
      col("at", "double precision", (_, r) => num(r.at)),
      col("clients", "text[]", (_, r) => (Array.isArray(r.clients) ? r.clients : null)),
    ],
  },
  refusal: {
    name: "audit_refusals",
    columns: [
      col("seq", "bigint", (_, r) => num(r.seq)),
      col("operator", "text", (_, r) => str(r.operator)),
      col("rpc", "text", (_, r) => str(r.rpc)),
      col("result", "text", (_, r) => str(r.result)),
      col("count", "bigint", (_, r) => num(r.count)),
      col("last_at", "double precision", (_, r) => num(r.lastAt)),
    ],
  },
  job: { name: "jobs", columns: [] },
} as const satisfies Record<ServerTableName, PgTable>;

/** Output events: one row per event, the frame as it arrived. */
export const OUTPUT_TABLE = "output";

export function schemaStatements(): string[] {
  const out = [
    "CREATE TABLE IF NOT EXISTS rvbox_schema (version integer NOT NULL)",
    `CREATE TABLE IF NOT EXISTS ${OUTPUT_TABLE} (uuid text NOT NULL, seq bigint NOT NULL, stream text NOT NULL, stream_offset bigint NOT NULL,
      original_size integer NOT NULL, revision bigint NOT NULL, time double precision NOT NULL, digest double precision NOT NULL,
      zstd bytea NOT NULL, PRIMARY KEY (uuid, seq))`,
  ];
  for (const t of Object.values(PG_TABLES) as PgTable[]) {
    const typed = t.columns.map((c) => `, ${c.name} ${c.type}`).join("");
    out.push(`CREATE TABLE IF NOT EXISTS ${t.name} (key text COLLATE "C" PRIMARY KEY, ord bigint GENERATED ALWAYS AS IDENTITY, row bytea NOT NULL${typed})`);
    out.push(`CREATE INDEX IF NOT EXISTS ${t.name}_ord ON ${t.name} (ord)`);
  }
  // A client's ListCommands pages, in their order (newest first, then uuid): a page reads its own rows only.
  // (Before 2026-12-08 it was commands_client (client_id, created_at): a page then read and sorted every row of the client.)
  out.push("DROP INDEX IF EXISTS commands_client");
  out.push('CREATE INDEX IF NOT EXISTS commands_client_page ON commands (client_id, created_at DESC, key COLLATE "C")');
  out.push("CREATE INDEX IF NOT EXISTS commands_state ON commands (state)");
  // The live commands a server loads at start (pg-store.ts loadQuery), in first-write order: a start reads
  // them, not the whole history (the predicate is the load's, so the planner can use it).
  out.push(`CREATE INDEX IF NOT EXISTS commands_live ON commands (ord) WHERE NOT (state = ANY ('{${TERMINAL_STATES.join(",")}}'::smallint[]))`);
  // ListCommands pages (newest first) and the history's retention sweep.
  out.push('CREATE INDEX IF NOT EXISTS commands_created ON commands (created_at DESC, key COLLATE "C")');
  out.push(`CREATE INDEX IF NOT EXISTS commands_ended ON commands (ended_at) WHERE state IN (${TERMINAL_STATES.join(", ")})`);
  // A restart loads the live commands' rows of these tables by uuid (loadQuery's LATERAL joins), never scanning the history.
  out.push("CREATE INDEX IF NOT EXISTS stdin_writes_uuid ON stdin_writes (uuid)");
  out.push("CREATE INDEX IF NOT EXISTS retention_markers_uuid ON retention_markers (uuid)");
  out.push("CREATE INDEX IF NOT EXISTS events_uuid_seq ON events (uuid, seq)");
  out.push("CREATE INDEX IF NOT EXISTS audit_seq ON audit (seq)");
  // What the store's own retention deleted, per kind (the audit log says "N older entries dropped").
  out.push("CREATE TABLE IF NOT EXISTS rvbox_swept (what text PRIMARY KEY, n bigint NOT NULL)");
  return out;
}

/**
 * Statements that bring a database written at version `from` up to the next
 * one, run in the schema transaction before schemaStatements; a typed column
 * added to a table that has rows is filled from the rows (`backfill`).
 */
export const UPGRADES: Record<number, { sql: string[]; backfill?: { table: string; column: string } }> = {
  1: { sql: ["ALTER TABLE audit ADD COLUMN IF NOT EXISTS clients text[]"], backfill: { table: "audit", column: "clients" } },
};
