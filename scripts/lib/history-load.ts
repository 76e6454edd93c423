// The command history `npm run bench:history` measures, put into PostgreSQL
// in two steps (scripts/bench-history.ts says why this way):
//
//   seedHistory       a real server on the PostgreSQL store (ServerDaemon, as
//                     test/shells/e2e/helpers.ts startServer starts it) and
//                     real agents run a few hundred real commands: the rows
//                     are the ones the server writes (commands, events,
//                     output, audit, clients, reconcile_results).
//   replicateHistory  copies those rows N times into another database with a
//                     COPY per table: each copy of a command gets a new uuid,
//                     a client id of its own, its own creation time (the
//                     history spread over `spanMs`, in creation order) and
//                     every absolute time of its rows shifted by the same
//                     amount (command row, event rows, output rows; the
//                     typed columns are taken from the new row by
//                     pg-schema.ts's own extractors), its request hash
//                     recomputed (core requestDigest) and new request ids.
//                     Rows are decoded and re-encoded with value-codec.ts.
//                     The audit log gets what a server that took those N
//                     submits keeps: the newest `auditMax` entries and the
//                     `audit_dropped` counter. The table's `ord` (identity)
//                     is assigned in COPY order, which is creation order.
//                     Kept as in the seed: the event digests (digest53 of the
//                     agent's event bytes, read only for live commands), the
//                     output frames, sizes and offsets.
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import pg from "pg";
import postgres from "postgres";
import { toBinary } from "@bufbuild/protobuf";
import { ExecutionSpecSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { defaultServerConfig } from "../../core/index.js";
import { isTerminal } from "../../core/dispatch/lifecycle.js";
import { auditKey, COUNTER_KEYS, eventKey, type CommandRow } from "../../core/server/store.js";
import { requestDigest } from "../../core/server/submit.js";
import type { ServerEnv } from "../../core/server/server-types.js";
import { OUTPUT_TABLE, PG_TABLES, type PgTable, schemaStatements } from "../../shells/storage/pg-schema.js";
import { PgServerStore } from "../../shells/storage/pg-store.js";
import { decodeValue, encodeValue } from "../../shells/storage/value-codec.js";
import { collect, startAgent, startServer, waitFor } from "../../test/shells/e2e/helpers.js";

/** The commands the seed runs, round robin: what a fleet's history is made of (no output, a line, a few KiB, stderr, failures). */
export const SEED_PROGRAMS: string[][] = [
  ["true"],
  ["echo", "deploy ok"],
  ["sh", "-c", "uname -a; id; date"],
  ["sh", "-c", "seq 1 2000"],
  ["sh", "-c", "echo 'disk full' >&2; exit 3"],
  ["true"],
  ["sh", "-c", "printf 'a\\nb\\n'; printf 'warn\\n' >&2"],
  ["sh", "-c", "exit 1"],
];

/** Run `commands` real commands on `agents` real agents through a real server on database `url`; returns the uuids in submit order. */
export async function seedHistory(url: string, commands: number, agents: number): Promise<string[]> {
  const s = await startServer({ store: url, checkInvariants: false });
  const started = [];
  try {
    for (let i = 0; i < agents; i++) started.push(await startAgent(s.url, `seed-${i}`, { checkInvariants: false }));
    for (const a of started) await waitFor("seed agent connected", () => a.connected);
    const uuids: string[] = [];
    // Submitted one by one (the audit log's order is the commands' creation order), a few in flight.
    for (let i = 0; i < commands; i += 16) {
      const batch: string[] = [];
      for (let j = i; j < Math.min(commands, i + 16); j++) {
        const r = await s.client.submitCommand({
          clientId: `seed-${j % agents}`,
          program: { case: "argv", value: { argv: SEED_PROGRAMS[j % SEED_PROGRAMS.length]! } },
        });
        batch.push(r.command!.issueUuid);
      }
      for (const u of batch) {
        const f = (await collect(s.client, u)).finished;
        if (!f || !isTerminal(f.state)) throw new Error(`seed command ${u} did not end (${f ? L[f.state] : "no end"})`);
      }
      uuids.push(...batch);
    }
    await s.daemon.storage.whenIdle();
    return uuids;
  } finally {
    for (const a of started) await a.close().catch(() => {});
    await s.close();
  }
}

interface OutputRow {
  seq: string;
  stream: string;
  stream_offset: string;
  original_size: number;
  revision: string;
  time: number;
  digest: number;
  zstd: Buffer;
}

interface Template {
  command: CommandRow;
  events: Array<{ seq: number; row: Record<string, unknown> }>;
  output: OutputRow[];
  audit: Record<string, unknown>;
}

export interface Seed {
  templates: Template[];
  clients: Array<Record<string, unknown>>;
  reconcile: Map<string, unknown>;
}

/** The seed database's rows, decoded: per command its row, events, output and audit entry (in creation order). */
export async function readSeed(url: string): Promise<Seed> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    // Only the tables replicateHistory copies may hold rows of a command.
    for (const t of ["scripts", "stdin_writes", "retention_markers", "pruned_commands", "incidents", "jobs", "audit_refusals"]) {
      const n = Number((await c.query(`SELECT count(*) AS n FROM ${t}`)).rows[0].n);
      if (n > 0) throw new Error(`the seed wrote ${n} rows to ${t}, which the bulk loader does not replicate`);
    }
    const rows = (await c.query<{ row: Buffer }>("SELECT row FROM commands ORDER BY created_at, ord")).rows.map((r) => decodeValue(r.row) as CommandRow);
    const events = (await c.query<{ uuid: string; seq: string; row: Buffer }>("SELECT uuid, seq, row FROM events ORDER BY uuid, seq")).rows;
    const output = (await c.query<OutputRow & { uuid: string }>(`SELECT * FROM ${OUTPUT_TABLE} ORDER BY uuid, seq`)).rows;
    const audit = (await c.query<{ row: Buffer }>("SELECT row FROM audit ORDER BY key")).rows.map((r) => decodeValue(r.row) as Record<string, unknown>);
    if (audit.length !== rows.length) throw new Error(`the seed has ${audit.length} audit entries for ${rows.length} commands`);
    const templates = rows.map((command, i) => {
      if (!isTerminal(command.state)) throw new Error(`seed command ${command.uuid} is not finished`);
      const a = audit[i]!;
      if (a.rpc !== "SubmitCommand" || (a.clients as string[])[0] !== command.clientId)
        throw new Error(`seed audit entry ${a.seq} is not command ${command.uuid}'s submit`);
      return {
        command,
        events: events.filter((e) => e.uuid === command.uuid).map((e) => ({ seq: Number(e.seq), row: decodeValue(e.row) as Record<string, unknown> })),
        output: output.filter((o) => o.uuid === command.uuid),
        audit: a,
      };
    });
    const clients = (await c.query<{ row: Buffer }>("SELECT row FROM clients ORDER BY ord")).rows.map((r) => decodeValue(r.row) as Record<string, unknown>);
    const reconcile = new Map(
      (await c.query<{ key: string; row: Buffer }>("SELECT key, row FROM reconcile_results")).rows.map((r) => [r.key, decodeValue(r.row)]),
    );
    return { templates, clients, reconcile };
  } finally {
    await c.end();
  }
}

/** One COPY ... FROM STDIN (text format) of a table, fed in chunks with back-pressure. */
class CopyWriter {
  private chunk: string[] = [];
  private size = 0;
  rows = 0;
  private constructor(private readonly w: NodeJS.WritableStream) {}

  static async open(sql: postgres.Sql, table: string, columns: string[]): Promise<CopyWriter> {
    return new CopyWriter(await sql.unsafe(`COPY ${table} (${columns.join(", ")}) FROM STDIN`).writable());
  }

  async row(values: unknown[]): Promise<void> {
    const line = `${values.map(copyField).join("\t")}\n`;
    this.chunk.push(line);
    this.size += line.length;
    this.rows++;
    if (this.size >= 1 << 20) await this.flush();
  }

  private async flush(): Promise<void> {
    if (this.chunk.length === 0) return;
    const data = this.chunk.join("");
    this.chunk = [];
    this.size = 0;
    if (!this.w.write(data)) await once(this.w, "drain");
  }

  async end(): Promise<void> {
    await this.flush();
    const done = once(this.w, "finish");
    this.w.end();
    await done;
  }
}

function copyField(v: unknown): string {
  if (v === null || v === undefined) return "\\N";
  if (v instanceof Uint8Array) return `\\\\x${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("hex")}`;
  if (typeof v === "number" || typeof v === "bigint") return String(v);
  // A text[] column (audit.clients): an array literal, each element quoted.
  if (Array.isArray(v)) return copyField(`{${v.map((e) => `"${String(e).replace(/["\\]/g, (ch) => `\\${ch}`)}"`).join(",")}}`);
  return String(v).replace(/[\\\t\n\r]/g, (ch) => ({ "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" })[ch]!);
}

const tableOf = (core: keyof typeof PG_TABLES): PgTable => PG_TABLES[core];
const columnsOf = (t: PgTable): string[] => ["key", "row", ...t.columns.map((c) => c.name)];
const valuesOf = (t: PgTable, key: string, row: Record<string, unknown>): unknown[] => [key, encodeValue(row), ...t.columns.map((c) => c.of(key, row))];
const OUTPUT_COLUMNS = ["uuid", "seq", "stream", "stream_offset", "original_size", "revision", "time", "digest", "zstd"];

/** Absolute times in a command row (deadline or wall clock ms; 0: unset). */
const COMMAND_TIMES = ["createdAt", "queueExpiry", "dispatchedAt", "nextAttemptAt", "endedAt", "startedTime", "endedTime"] as const;

const sha256Env = { ports: { sha256: (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest()) } } as unknown as ServerEnv;

export interface LoadOptions {
  commands: number;
  clients: number;
  /** The history's creation times run over this span, ending `endsAgoMs` before now. */
  spanMs: number;
  endsAgoMs: number;
  /** How many uuids to return, spread over the history (GetCommand's sample). */
  sample: number;
}

export interface Loaded {
  clientIds: string[];
  /** Uuids of replicated commands, spread evenly over the history (oldest first). */
  sample: string[];
  rows: Record<string, number>;
  ms: number;
}

/**
 * Fill database `url` (empty; the schema is made by PgServerStore.open, as a
 * server makes it) with `o.commands` finished commands replicated from `seed`.
 * The secondary indexes are dropped for the load and made again afterwards
 * by the schema's own statements; then VACUUM ANALYZE (what autovacuum would
 * have done by the time an operator reads a long history).
 */
export async function replicateHistory(url: string, seed: Seed, o: LoadOptions): Promise<Loaded> {
  const t0 = performance.now();
  await (await PgServerStore.open(url, { ledgerRows: 0 })).close();
  const indexes = schemaStatements().filter((s) => s.startsWith("CREATE INDEX"));
  const sql = postgres(url, { max: 6, onnotice: () => {} });
  try {
    for (const s of indexes) await sql.unsafe(`DROP INDEX IF EXISTS ${/INDEX IF NOT EXISTS (\w+)/.exec(s)![1]}`);
    await sql.unsafe("ALTER SYSTEM SET max_wal_size = '4GB'");
    await sql.unsafe("SELECT pg_reload_conf()");
    const T = seed.templates;
    const clientIds = Array.from({ length: o.clients }, (_, i) => `node-${String(i).padStart(4, "0")}`);
    const end = Date.now() - o.endsAgoMs;
    const start = end - o.spanMs;
    const step = o.spanMs / o.commands;
    const commands = await CopyWriter.open(sql, "commands", columnsOf(tableOf("command")));
    const events = await CopyWriter.open(sql, "events", columnsOf(tableOf("event")));
    const output = await CopyWriter.open(sql, OUTPUT_TABLE, OUTPUT_COLUMNS);
    const audit = await CopyWriter.open(sql, "audit", columnsOf(tableOf("audit")));
    const auditMax = defaultServerConfig().limits.auditMax;
    const firstAudit = Math.max(0, o.commands - auditMax);
    checkTimes(seed);
    const sample: string[] = [];
    const sampleEvery = Math.max(1, Math.floor(o.commands / o.sample));
    for (let i = 0; i < o.commands; i++) {
      const t = T[i % T.length]!;
      const uuid = randomUUID();
      const clientId = clientIds[i % clientIds.length]!;
      const createdAt = Math.round(start + i * step);
      const delta = createdAt - t.command.createdAt;
      const shift = (v: unknown): unknown => (typeof v === "number" && v > 0 ? v + delta : v);
      const row = decodeValue(encodeValue(t.command)) as CommandRow & Record<string, unknown>;
      row.uuid = uuid;
      row.clientId = clientId;
      for (const k of COMMAND_TIMES) row[k] = shift(row[k]) as never;
      row.requests = Object.fromEntries(Object.entries(row.requests).map(([k, v]) => [k.replace(/[0-9a-f-]{36}$/, randomUUID()), v]));
      row.hash = Buffer.from(requestDigest(sha256Env, uuid, clientId, toBinary(ExecutionSpecSchema, row.spec), 0)).toString("hex");
      await commands.row(valuesOf(tableOf("command"), uuid, row));
      for (const e of t.events) {
        const r = { ...e.row, time: shift(e.row.time) };
        await events.row(valuesOf(tableOf("event"), eventKey(uuid, e.seq), r));
      }
      for (const x of t.output) await output.row([uuid, x.seq, x.stream, x.stream_offset, x.original_size, x.revision, shift(x.time), x.digest, x.zstd]);
      if (i >= firstAudit) {
        const seq = i + 1;
        const a = {
          ...t.audit,
          seq,
          at: shift(t.audit.at),
          clients: [clientId],
          summary: String(t.audit.summary).replace(`client=${t.command.clientId} `, `client=${clientId} `),
        };
        await audit.row(valuesOf(tableOf("audit"), auditKey(seq), a));
      }
      if (i % sampleEvery === 0 && sample.length < o.sample) sample.push(uuid);
    }
    for (const w of [commands, events, output, audit]) await w.end();
    // The clients the history names, each with the reconcile result its last session left.
    const rowsOfClients: unknown[][] = [];
    for (const [k, clientId] of clientIds.entries()) {
      const tpl = seed.clients[k % seed.clients.length]!;
      rowsOfClients.push(valuesOf(tableOf("client"), clientId, { ...tpl, clientId, instanceId: randomBytes(16).toString("hex"), lastSeen: end }));
    }
    const cw = await CopyWriter.open(sql, "clients", columnsOf(tableOf("client")));
    for (const r of rowsOfClients) await cw.row(r);
    await cw.end();
    const rw = await CopyWriter.open(sql, "reconcile_results", columnsOf(tableOf("reconcile")));
    for (const [k, clientId] of clientIds.entries()) {
      const tpl = seed.reconcile.get(String(seed.clients[k % seed.clients.length]!.clientId));
      if (tpl) await rw.row(valuesOf(tableOf("reconcile"), clientId, tpl as Record<string, unknown>));
    }
    await rw.end();
    if (firstAudit > 0) {
      const cnt = await CopyWriter.open(sql, "counters", columnsOf(tableOf("counter")));
      await cnt.row(valuesOf(tableOf("counter"), COUNTER_KEYS.auditDropped, { count: firstAudit, throughSeq: firstAudit }));
      await cnt.end();
    }
    await sql.unsafe("SET maintenance_work_mem = '512MB'");
    for (const s of indexes) await sql.unsafe(s);
    for (const t of ["commands", "events", OUTPUT_TABLE, "audit", "clients", "reconcile_results", "counters"]) await sql.unsafe(`VACUUM ANALYZE ${t}`);
    const rows: Record<string, number> = {};
    for (const t of ["commands", "events", OUTPUT_TABLE, "audit", "clients"]) rows[t] = Number((await sql.unsafe(`SELECT count(*) AS n FROM ${t}`))[0]!.n);
    return { clientIds, sample, rows, ms: performance.now() - t0 };
  } finally {
    await sql.end();
  }
}

/**
 * Every time in the seed's rows is one the loader shifts: a number near the
 * seed's times anywhere else (a field added to a row since) is refused, so
 * the copies never carry a time of the seed's.
 */
function checkTimes(seed: Seed): void {
  const times = seed.templates.map((t) => t.command.createdAt);
  const lo = Math.min(...times) - 86_400_000;
  const hi = Math.max(...times) + 2 * 86_400_000;
  const walk = (v: unknown, path: string, allowed: readonly string[]): void => {
    if (typeof v === "number" && v >= lo && v <= hi && !allowed.includes(path))
      throw new Error(`seed row: ${path} looks like a time the loader does not shift (${v})`);
    if (v && typeof v === "object" && !(v instanceof Uint8Array)) for (const [k, x] of Object.entries(v)) walk(x, path === "" ? k : `${path}.${k}`, allowed);
  };
  for (const t of seed.templates) {
    walk(t.command, "", COMMAND_TIMES);
    for (const e of t.events) walk(e.row, "", ["time"]);
    walk(t.audit, "", ["at"]);
  }
}
