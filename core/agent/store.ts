// The agent's durable schema: one row type per table, the key codecs, typed
// record builders and decoders, and the ONE field mapping by which an
// AgentCommand is both recorded and restored. docs/ARCHITECTURE.md
// "Durable tables" lists the tables; this file is their definition.
//
//   table      key                    row
//   meta       "instance_id"          MetaRow (the instance id, R-F1)
//   command    uuid                   CommandRow (the command without its transient parts)
//   chunk      chunkKey(uuid, off)    ChunkRow (script bytes until the file is written)
//   stdin      stdinKey(uuid, seq)    StdinRow (a durable write or close, until written)
//   outbox     uuid                   OutboxRow (window header)          } written by
//   entry      entryKey(uuid, idx)    EntryRow (a LocalEntry: output |   } core/window/
//                                       truncation | meta)              } outbox.ts
//   event      eventKey(uuid, seq)    EventRow (pinned encoded bytes)    }
//   tombstone  uuid                   TombstoneRow (hash, ledger order)
//
// Readers outside the core (shells, the simulator's oracles, tests) decode
// rows with `agentRow` / `decodeAgentRow` instead of casting.
// Stored values are exactly what earlier versions stored: existing stores
// keep opening.

import { assert } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import type { EntryRow, EventRow, OutboxRow } from "../window/outbox.js";
import type { AgentCommand, AgentScript, StdinItem } from "./agent-types.js";
import { META_INSTANCE_ID, chunkKey, stdinKey } from "./store-keys.js";

export * from "./store-keys.js";
export type { EntryRow, EventRow, OutboxRow };

/** Row of `meta` under `instance_id`: the instance id, generated once. */
export type MetaRow = string;

/**
 * Row of `command`: an AgentCommand with its transient parts emptied. The
 * script's bytes live in `chunk` rows (until the file is written), the
 * pending stdin in `stdin` rows; whether a write is in flight is never
 * durable (a restart interrupts the process it was going to).
 */
export type CommandRow = Omit<AgentCommand, "script" | "stdin"> & {
  script: (Omit<AgentScript, "chunks"> & { chunks: never[] }) | null;
  stdin: { next: number; pending: never[]; pendingBytes: 0; inFlight: false; closed: boolean };
};

/** Row of `chunk`: the script bytes received at the key's offset. */
export interface ChunkRow {
  data: Uint8Array;
}

/** Row of `stdin`: one durably deduplicated write (or the close). */
export type StdinRow = StdinItem;

/** Row of `tombstone`: the request hash and the entry's place in the ledger. */
export interface TombstoneRow {
  hash: string;
  order: number;
}

/** Every agent table and the type of its rows. */
export interface AgentRows {
  meta: MetaRow;
  command: CommandRow;
  chunk: ChunkRow;
  stdin: StdinRow;
  outbox: OutboxRow;
  entry: EntryRow;
  event: EventRow;
  tombstone: TombstoneRow;
}

export type AgentTable = keyof AgentRows;

/** Durable tables as a store hands them to `restoreAgent`. */
export interface AgentTables {
  get(table: string): ReadonlyMap<string, unknown> | undefined;
}

// ------------------------------------------------------------ command rows

const same = <T>(v: T): T => v;

/**
 * How each field of an AgentCommand is stored. `commandRecord` and
 * `commandFromRow` both apply this one table, and its mapped type makes a
 * new AgentCommand field a compile error until it is listed here: no field
 * can be forgotten on restart. The order is the stored order.
 */
const COMMAND_FIELDS: { [K in keyof AgentCommand]-?: (v: AgentCommand[K]) => CommandRow[K] } = {
  uuid: same,
  hash: same,
  revision: same,
  spec: same,
  queueExpiry: same,
  acceptedAt: same,
  phase: same,
  lifecycle: same,
  pid: same,
  lastSignalRevision: same,
  cancelRevision: same,
  script: (s) => (s ? { ...s, chunks: [] } : null),
  stdin: (s) => ({ next: s.next, pending: [], pendingBytes: 0, inFlight: false, closed: s.closed }),
};

const COMMAND_KEYS = Object.keys(COMMAND_FIELDS) as Array<keyof AgentCommand>;

function project(c: AgentCommand | CommandRow): CommandRow {
  const out: Record<string, unknown> = {};
  for (const k of COMMAND_KEYS) out[k] = (COMMAND_FIELDS[k] as (v: unknown) => unknown)(c[k]);
  return out as CommandRow;
}

/** The `command` row of `c`. */
export function commandRecord(c: AgentCommand): PersistRecord {
  return { table: "command", key: c.uuid, value: project(c) };
}

/**
 * A command rebuilt from its row: fresh transient parts, to which the
 * restore adds the `chunk` and `stdin` rows of this command.
 */
export function commandFromRow(row: CommandRow): AgentCommand {
  return project(row);
}

// ------------------------------------------------------------ other rows

export const deleteRecord = (table: AgentTable, key: string): PersistRecord => ({ table, key, value: null });

export function instanceIdRecord(id: MetaRow): PersistRecord {
  return { table: "meta", key: META_INSTANCE_ID, value: id };
}

export function chunkRecord(uuid: string, offset: number, data: Uint8Array): PersistRecord {
  const value: ChunkRow = { data };
  return { table: "chunk", key: chunkKey(uuid, offset), value };
}

export function stdinRecord(uuid: string, item: StdinRow): PersistRecord {
  const value: StdinRow = { seq: item.seq, data: item.data, close: item.close };
  if (item.resize) value.resize = { rows: item.resize.rows, cols: item.resize.cols };
  return { table: "stdin", key: stdinKey(uuid, item.seq), value };
}

export function tombstoneRecord(uuid: string, row: TombstoneRow): PersistRecord {
  const value: TombstoneRow = { hash: row.hash, order: row.order };
  return { table: "tombstone", key: uuid, value };
}

// ------------------------------------------------------------ decoding

/**
 * A stored value as the row type of its table. The core wrote it, so this
 * checks only its outline (an object, or the instance id's string); the
 * one place a stored agent value becomes a type.
 */
export function decodeAgentRow<T extends AgentTable>(table: T, v: unknown): AgentRows[T] {
  if (table === "meta") assert(typeof v === "string", `agent meta row is ${typeof v}`);
  else assert(typeof v === "object" && v !== null, `agent ${table} row is ${v === null ? "null" : typeof v}`);
  return v as AgentRows[T];
}

/** One row of an agent table, decoded (undefined when absent). */
export function agentRow<T extends AgentTable>(tables: AgentTables, table: T, key: string): AgentRows[T] | undefined {
  const v = tables.get(table)?.get(key);
  return v === undefined ? undefined : decodeAgentRow(table, v);
}

/** Every row of an agent table in stored order, decoded. */
export function agentRows<T extends AgentTable>(tables: AgentTables, table: T): Array<[string, AgentRows[T]]> {
  const t = tables.get(table);
  if (!t) return [];
  const out: Array<[string, AgentRows[T]]> = [];
  for (const [k, v] of t) out.push([k, decodeAgentRow(table, v)]);
  return out;
}

/** Every row of a per-command table in key order (within a command: numeric order), decoded. */
export function agentRowsByKey<T extends AgentTable>(tables: AgentTables, table: T): Array<[string, AgentRows[T]]> {
  return agentRows(tables, table).sort((a, b) => (a[0] < b[0] ? -1 : 1));
}

/** Deletes of every `chunk` row of a command, given its received chunks in offset order. */
export function chunkDeletes(uuid: string, chunks: readonly Uint8Array[]): PersistRecord[] {
  const out: PersistRecord[] = [];
  let off = 0;
  for (const ch of chunks) {
    out.push(deleteRecord("chunk", chunkKey(uuid, off)));
    off += ch.length;
  }
  return out;
}
