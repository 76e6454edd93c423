// The server's storage schema: one row type per table, the key codecs, the
// persist records the core writes, and the one field mapping a command
// record is written and restored by. Every reader of the server's tables
// (restore, the control service, the simulator's oracles, the TUI's
// simulator source, the storage shell, tests) takes its types from here.
//
// Tables (docs/ARCHITECTURE.md "Storage"):
//
//   client         clientId            ClientRow (conn always 0)
//   command        uuid                CommandRow
//   event          eventKey(uuid, seq) EventRow (one per stored event)
//   script         uuid                ScriptRow (until the upload completes)
//   stdin          stdinKey(uuid, seq) StdinRow (a taken write or close, until acknowledged)
//   retention      uuid                RetentionRow (one cumulative marker)
//   pruned         uuid                PrunedRow
//   reconcile      clientId            ReconcileRow (the last result)
//   incident       incidentKey(n)      IncidentRow
//   incident_drop  clientId            IncidentDropRow
//   counter        COUNTER_KEYS        IncidentsDroppedRow | GenerationFloorRow | AuditDroppedRow (audit and refusals)
//   audit          auditKey(seq)       AuditRow (the operators' audit log, oldest first)
//   refusal        auditKey(seq)       RefusalRow (refused calls, aggregated, oldest first)
//   job            jobId               JobRow (targets, rates, each child's phase)
//
// The value of every row is exactly what is written here; changing a shape
// changes the stored bytes, and restore must still read rows written before
// (the optional fields of CommandRow and ClientRow are such legacy gaps).

import { toBinary } from "@bufbuild/protobuf";
import { type CommandLifecycle, ExecutionSpecSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import type { PersistRecord } from "../effects.js";
import type { StreamName } from "../window/outbox.js";
import type {
  AuditEntry,
  RefusalEntry,
  ClientRecord,
  CommittedView,
  Incident,
  IncidentDrops,
  Labels,
  PendingSignal,
  PrunedCommand,
  RetentionMarker,
  Segment,
  ServerCommand,
  ServerJob,
  StdinOp,
  TerminalSource,
} from "./server-types.js";

/** What restore reads the durable tables through (a shell's loaded tables, or a simulated disk). */
export interface ServerTables {
  get(table: string): ReadonlyMap<string, unknown> | undefined;
}

// ------------------------------------------------------------------ keys

/** Digits of the zero-padded sequence in an event key: keys sort in seq order. */
export const EVENT_SEQ_DIGITS = 12;

export const padSeq = (seq: number): string => seq.toString().padStart(EVENT_SEQ_DIGITS, "0");
/** Key of event `seq` of command `uuid` in table `event`. */
export const eventKey = (uuid: string, seq: number): string => `${uuid}/${padSeq(seq)}`;
/** Every event key of `uuid` starts with this (uuids contain no '/'). */
export const eventPrefix = (uuid: string): string => `${uuid}/`;

/** The command and sequence an event key names (null: not an event key). */
export function parseEventKey(key: string): { uuid: string; seq: number } | null {
  const i = key.lastIndexOf("/");
  if (i < 0) return null;
  const seq = Number(key.slice(i + 1));
  return Number.isInteger(seq) ? { uuid: key.slice(0, i), seq } : null;
}

/** Key of stdin write `seq` of command `uuid` in table `stdin` (sorts in seq order, like event keys). */
export const stdinKey = (uuid: string, seq: number): string => `${uuid}/${padSeq(seq)}`;
/** Every stdin key of `uuid` starts with this. */
export const stdinPrefix = (uuid: string): string => `${uuid}/`;

/** Key (and id) of the n-th incident. */
export const incidentKey = (n: number): string => `inc-${n}`;

/** The number in an incident key (NaN when it has none: such an id never raises the sequence). */
export const parseIncidentKey = (id: string): number => Number(id.replace(/^inc-/, ""));

export const COUNTER_KEYS = {
  incidentsDropped: "incidents_dropped",
  generationFloor: "generation_floor",
  auditDropped: "audit_dropped",
  refusalsDropped: "refusals_dropped",
} as const;

/** Digits of the zero-padded sequence in an audit key: keys sort in seq order. */
export const AUDIT_SEQ_DIGITS = 12;
/** Key of audit entry `seq` in table `audit`. */
export const auditKey = (seq: number): string => seq.toString().padStart(AUDIT_SEQ_DIGITS, "0");

// ------------------------------------------------------------------ rows

/**
 * A client record as stored: no live connection survives a restart. Rows
 * written before drains lack `draining`; `labels` is stored only when the
 * client has some (rows written before labels, and rows of unlabelled
 * clients, have none and restore as none).
 */
export type ClientRow = Omit<ClientRecord, "draining" | "labels"> & { draining?: boolean; labels?: Labels };

/**
 * A command record as stored: flat, one column per stored field, whatever
 * sub-struct of ServerCommand the field is in (COMMAND_FIELDS says which).
 * The optional columns are legacy gaps: records written before history
 * pruning lack endedAt, specBytes and rowEvents, records written before
 * command times lack startedTime and endedTime (restore fills them in).
 * `stdin.queue` holds only writes through `inlineThrough` (taken before stdin
 * rows existed; records of older servers hold every queued write there), and
 * `inlineThrough` itself is not stored: restore derives it from that queue.
 * The script bytes (table `script`), the committed view and the metadata
 * charge are never stored.
 */
export interface CommandRow {
  uuid: string;
  clientId: string;
  hash: string;
  revision: number;
  spec: ServerCommand["spec"];
  createdAt: number;
  queueExpiry: number;
  state: CommandLifecycle;
  terminalSource: TerminalSource;
  everDispatched: boolean;
  /** Always 0: nothing is in flight on a session after a restart. */
  dispatchedOn: number;
  dispatchedAt: number;
  attempts: number;
  nextAttemptAt: number;
  /** Written as receivedThrough: the record claims what is durable with it. */
  storedThrough: number;
  receivedThrough: number;
  streamNext: { stdout: number; stderr: number };
  exitCode: number | null;
  signalName: string;
  reason: string;
  stdin: Omit<ServerCommand["stdin"], "inlineThrough">;
  signals: PendingSignal[];
  scriptAcked: number;
  scriptSent: number;
  scriptCommitSentOn: number;
  scriptCommitted: boolean;
  segments: Segment[];
  storedOutputBytes: number;
  retention: RetentionMarker[];
  requests: Record<string, number>;
  /** Always {}: digests are reloaded from the event table. */
  digests: Record<number, number>;
  endedAt?: number;
  startedTime?: number;
  endedTime?: number;
  specBytes?: number;
  rowEvents?: number;
}

/** Row of `stdin`: one taken write (or the close), until the agent acknowledges it. */
export type StdinRow = StdinOp;

export interface ScriptRow {
  data: Uint8Array;
}

export interface RetentionRow extends RetentionMarker {
  uuid: string;
}

export type PrunedRow = PrunedCommand;

export interface ReconcileRow {
  /** The session generation the result was computed for. */
  generation: number;
  terminate: string[];
  discard: string[];
}

export type IncidentRow = Incident;
export type IncidentDropRow = IncidentDrops;
export interface IncidentsDroppedRow {
  count: number;
}
export interface GenerationFloorRow {
  generation: number;
}
export type AuditRow = AuditEntry;
export type RefusalRow = RefusalEntry;
/** Audit entries dropped to stay inside the bound, and the highest sequence number dropped. */
export interface AuditDroppedRow {
  count: number;
  throughSeq: number;
}

/** A job as stored: everything but its readers' view (jobs.ts). */
export type JobRow = Omit<ServerJob, "committed">;

/** Fields every stored event has. `time`: the agent's event time (wall clock). */
export interface EventRowBase {
  seq: number;
  revision: number;
  time: number;
  /** digest53 of the event's bytes as received (resend checks, R-O2). */
  digest: number;
}

export type ByteRange = { stream: StreamName; offset: number; length: number };

export interface OutputEventRow extends EventRowBase {
  kind: "output";
  stream: StreamName;
  offset: number;
  originalSize: number;
  /** The validated zstd frame (the storage shell keeps it in a segment file). */
  zstd: Uint8Array;
}
export interface TruncationEventRow extends EventRowBase {
  kind: "truncation";
  cause: number;
  ranges: ByteRange[];
}
export interface LifecycleEventRow extends EventRowBase {
  kind: "lifecycle";
  state: CommandLifecycle;
  exitCode: number | null;
  signalName: string;
  reason: string;
  error: { code: number; message: string } | null;
}
export interface StdinAckEventRow extends EventRowBase {
  kind: "stdin_ack";
  writeSeq: number;
  closed: boolean;
  failure: string;
}
export interface SignalResultEventRow extends EventRowBase {
  kind: "signal_result";
  signal: number;
  delivered: boolean;
  detail: string;
}
export interface ScriptUploadEventRow extends EventRowBase {
  kind: "script_upload";
  receivedBytes: number;
  complete: boolean;
}
export interface IncompleteEventRow extends EventRowBase {
  kind: "incomplete";
  streams: Array<StreamName | null>;
  reason: string;
}

export type EventRow =
  | OutputEventRow
  | TruncationEventRow
  | LifecycleEventRow
  | StdinAckEventRow
  | SignalResultEventRow
  | ScriptUploadEventRow
  | IncompleteEventRow;
export type EventKind = EventRow["kind"];

/**
 * What the storage shell loads for a stored output event at start: only its
 * digest (the bytes stay in their segment file). Restore reads `seq` and
 * `digest` of every event row, so it reads these too.
 */
export interface EventDigestRow {
  seq: number;
  digest: number;
  kind?: undefined;
}

/** Table name -> row type. */
export interface ServerRows {
  client: ClientRow;
  command: CommandRow;
  event: EventRow | EventDigestRow;
  script: ScriptRow;
  stdin: StdinRow;
  retention: RetentionRow;
  pruned: PrunedRow;
  reconcile: ReconcileRow;
  incident: IncidentRow;
  incident_drop: IncidentDropRow;
  counter: IncidentsDroppedRow | GenerationFloorRow | AuditDroppedRow;
  audit: AuditRow;
  refusal: RefusalRow;
  job: JobRow;
}
export type ServerTableName = keyof ServerRows;

/** The rows of one table, typed (the one place stored values are taken to be what this schema wrote). */
export function rowsOf<T extends ServerTableName>(tables: ServerTables, table: T): Iterable<[string, ServerRows[T]]> {
  return (tables.get(table) ?? []) as Iterable<[string, ServerRows[T]]>;
}

/** One row, typed (undefined: none). */
export function rowOf<T extends ServerTableName>(tables: ServerTables, table: T, key: string): ServerRows[T] | undefined {
  return tables.get(table)?.get(key) as ServerRows[T] | undefined;
}

export function incidentsDroppedOf(tables: ServerTables): number {
  return (rowOf(tables, "counter", COUNTER_KEYS.incidentsDropped) as IncidentsDroppedRow | undefined)?.count ?? 0;
}

export function auditDroppedOf(tables: ServerTables, key: "auditDropped" | "refusalsDropped" = "auditDropped"): AuditDroppedRow {
  const r = rowOf(tables, "counter", COUNTER_KEYS[key]) as AuditDroppedRow | undefined;
  return { count: r?.count ?? 0, throughSeq: r?.throughSeq ?? 0 };
}

export function generationFloorOf(tables: ServerTables): number {
  return (rowOf(tables, "counter", COUNTER_KEYS.generationFloor) as GenerationFloorRow | undefined)?.generation ?? 0;
}

/** A full stored event (not a digest-only row of the storage shell's restore). */
export const isEventRow = (v: EventRow | EventDigestRow): v is EventRow => v.kind !== undefined;

// ------------------------------------------------------------------ records the core writes

type Rec<T extends ServerTableName> = PersistRecord & { table: T; value: ServerRows[T] | null };

export function clientRecord(c: ClientRecord): Rec<"client"> {
  const { labels, ...rest } = c;
  const value: ClientRow = {
    ...rest,
    conn: 0,
    capacity: { ...c.capacity },
    pendingClaim: c.pendingClaim && { ...c.pendingClaim },
    authorization: c.authorization && { ...c.authorization },
    replaced: c.replaced && { ...c.replaced },
  };
  // Unlabelled clients store the row they stored before labels existed.
  if (Object.keys(labels).length > 0) value.labels = { ...labels };
  return { table: "client", key: c.clientId, value };
}

/** A client record from its row (restore): no connection; absent fields of older rows take their defaults. */
export function restoreClient(r: ClientRow): ClientRecord {
  const { labels, draining, ...rest } = r;
  return {
    ...rest,
    conn: 0,
    capacity: { ...r.capacity },
    replaced: r.replaced ? { ...r.replaced } : null,
    draining: draining === true,
    labels: labels ? { ...labels } : {},
  };
}

export const clientDelete = (clientId: string): Rec<"client"> => ({ table: "client", key: clientId, value: null });

export const commandDelete = (uuid: string): Rec<"command"> => ({ table: "command", key: uuid, value: null });

export const eventRecord = (uuid: string, row: EventRow): Rec<"event"> => ({ table: "event", key: eventKey(uuid, row.seq), value: row });

/** Deletes every stored event of `uuid`. */
export const eventsDelete = (uuid: string): Rec<"event"> & { prefix: true } => ({ table: "event", key: eventPrefix(uuid), value: null, prefix: true });

export const stdinRecord = (uuid: string, op: StdinOp): Rec<"stdin"> => ({ table: "stdin", key: stdinKey(uuid, op.seq), value: { ...op } });
export const stdinDelete = (uuid: string, seq: number): Rec<"stdin"> => ({ table: "stdin", key: stdinKey(uuid, seq), value: null });
/** Deletes every stdin row of `uuid`. */
export const stdinRowsDelete = (uuid: string): Rec<"stdin"> & { prefix: true } => ({ table: "stdin", key: stdinPrefix(uuid), value: null, prefix: true });

export const scriptRecord = (uuid: string, data: Uint8Array): Rec<"script"> => ({ table: "script", key: uuid, value: { data } });
export const scriptDelete = (uuid: string): Rec<"script"> => ({ table: "script", key: uuid, value: null });

export const retentionRecord = (uuid: string, m: RetentionMarker): Rec<"retention"> => ({
  table: "retention",
  key: uuid,
  value: { uuid, ...m, ranges: m.ranges.map((r) => ({ ...r })) },
});
export const retentionDelete = (uuid: string): Rec<"retention"> => ({ table: "retention", key: uuid, value: null });

export const prunedRecord = (p: PrunedCommand): Rec<"pruned"> => ({ table: "pruned", key: p.uuid, value: { ...p } });
export const prunedDelete = (uuid: string): Rec<"pruned"> => ({ table: "pruned", key: uuid, value: null });

export const reconcileRecord = (clientId: string, row: ReconcileRow): Rec<"reconcile"> => ({ table: "reconcile", key: clientId, value: row });
export const reconcileDelete = (clientId: string): Rec<"reconcile"> => ({ table: "reconcile", key: clientId, value: null });

export const incidentRecord = (i: Incident): Rec<"incident"> => ({ table: "incident", key: i.id, value: { ...i } });
export const incidentDelete = (id: string): Rec<"incident"> => ({ table: "incident", key: id, value: null });

export const incidentDropRecord = (clientId: string, d: IncidentDrops | undefined): Rec<"incident_drop"> => ({
  table: "incident_drop",
  key: clientId,
  value: d ? { ...d } : null,
});

export function jobRecord(j: ServerJob): Rec<"job"> {
  const { committed: _view, ...row } = j;
  return { table: "job", key: j.id, value: { ...row, children: j.children.map((c) => ({ ...c })) } };
}
export const jobDelete = (id: string): Rec<"job"> => ({ table: "job", key: id, value: null });

export const incidentsDroppedRecord = (count: number): Rec<"counter"> => ({ table: "counter", key: COUNTER_KEYS.incidentsDropped, value: { count } });
export const auditRecord = (e: AuditEntry): Rec<"audit"> => ({ table: "audit", key: auditKey(e.seq), value: { ...e, clients: [...e.clients] } });
export const auditDelete = (seq: number): Rec<"audit"> => ({ table: "audit", key: auditKey(seq), value: null });
export const auditDroppedRecord = (count: number, throughSeq: number): Rec<"counter"> => ({
  table: "counter",
  key: COUNTER_KEYS.auditDropped,
  value: { count, throughSeq },
});
export const refusalRecord = (e: RefusalEntry): Rec<"refusal"> => ({ table: "refusal", key: auditKey(e.seq), value: { ...e, clients: [...e.clients] } });
export const refusalDelete = (seq: number): Rec<"refusal"> => ({ table: "refusal", key: auditKey(seq), value: null });
export const refusalsDroppedRecord = (count: number, throughSeq: number): Rec<"counter"> => ({
  table: "counter",
  key: COUNTER_KEYS.refusalsDropped,
  value: { count, throughSeq },
});
export const generationFloorRecord = (generation: number): Rec<"counter"> => ({ table: "counter", key: COUNTER_KEYS.generationFloor, value: { generation } });

// ------------------------------------------------------------------ the command record's one field mapping

type Loader<V> = (r: CommandRow, script: Uint8Array | null) => V;

/**
 * How one field of a ServerCommand is stored and restored: `column`, the
 * column of CommandRow it is written to, with `save` its value there (both
 * null: not stored), and `load`, its value after a restart, from the record
 * and the command's script row.
 */
export type FieldCodec<V> = { column: keyof CommandRow; save: (c: ServerCommand) => unknown; load: Loader<V> } | { column: null; save: null; load: Loader<V> };

/** The sub-structs of ServerCommand (server-types.ts): each of their fields is mapped on its own. */
export type CommandGroup = "dispatch" | "ingest" | "exit" | "script" | "output";

/**
 * The mapping's type names every field of ServerCommand and of each of its
 * sub-structs, so a field added there does not compile until it says how it
 * is stored and what a restart makes of it.
 */
export type CommandFields = {
  [K in keyof ServerCommand]-?: K extends CommandGroup ? { [F in keyof ServerCommand[K]]-?: FieldCodec<ServerCommand[K][F]> } : FieldCodec<ServerCommand[K]>;
};

/** A stored field: `save` must give the column's stored type. */
const col = <C extends keyof CommandRow, V>(f: { column: C; save: (c: ServerCommand) => CommandRow[C]; load: Loader<V> }) => f;
/** A field no record holds. */
const unstored = <V>(load: Loader<V>) => ({ column: null, save: null, load });

const legacyTime = (t: number | undefined): number => t ?? 0;

/**
 * Every field of a command (sub-structs field by field) and its column.
 *
 * What a restart resets on purpose: nothing is in flight on a session
 * (dispatch.dispatchedOn, signals' sentOn, stdin.sentThrough, script.sent,
 * script.commitSentOn), ingest.digests are reloaded from the event table, and
 * the record claims what is durable with it (ingest.storedThrough =
 * receivedThrough).
 * In the order of a command's fields (server-types.ts); the stored bytes do
 * not depend on it (keys are sorted).
 */
export const COMMAND_FIELDS = {
  uuid: col({ column: "uuid", save: (c) => c.uuid, load: (r) => r.uuid }),
  clientId: col({ column: "clientId", save: (c) => c.clientId, load: (r) => r.clientId }),
  hash: col({ column: "hash", save: (c) => c.hash, load: (r) => r.hash }),
  revision: col({ column: "revision", save: (c) => c.revision, load: (r) => r.revision }),
  spec: col({ column: "spec", save: (c) => c.spec, load: (r) => r.spec }),
  createdAt: col({ column: "createdAt", save: (c) => c.createdAt, load: (r) => r.createdAt }),
  committed: unstored(
    (r): CommittedView => ({
      state: r.state,
      exitCode: r.exitCode,
      signalName: r.signalName,
      reason: r.reason,
      storedThrough: r.storedThrough,
      revision: r.revision,
      stdinAssigned: r.stdin.nextSeq - 1,
      startedTime: legacyTime(r.startedTime),
      endedTime: legacyTime(r.endedTime),
    }),
  ),
  queueExpiry: col({ column: "queueExpiry", save: (c) => c.queueExpiry, load: (r) => r.queueExpiry }),
  state: col({ column: "state", save: (c) => c.state, load: (r) => r.state }),
  dispatch: {
    everDispatched: col({ column: "everDispatched", save: (c) => c.dispatch.everDispatched, load: (r) => r.everDispatched }),
    dispatchedOn: col({ column: "dispatchedOn", save: () => 0, load: () => 0 }),
    dispatchedAt: col({ column: "dispatchedAt", save: (c) => c.dispatch.dispatchedAt, load: (r) => r.dispatchedAt }),
    attempts: col({ column: "attempts", save: (c) => c.dispatch.attempts, load: (r) => r.attempts }),
    nextAttemptAt: col({ column: "nextAttemptAt", save: (c) => c.dispatch.nextAttemptAt, load: (r) => r.nextAttemptAt }),
  },
  ingest: {
    // A record claims what will be durable with it: events through receivedThrough.
    storedThrough: col({ column: "storedThrough", save: (c) => c.ingest.receivedThrough, load: (r) => r.storedThrough }),
    receivedThrough: col({ column: "receivedThrough", save: (c) => c.ingest.receivedThrough, load: (r) => r.storedThrough }),
    streamNext: col({ column: "streamNext", save: (c) => ({ ...c.ingest.streamNext }), load: (r) => ({ ...r.streamNext }) }),
    digests: col({ column: "digests", save: () => ({}), load: () => ({}) }),
    // Records written before history pruning lack rowEvents.
    rowEvents: col({ column: "rowEvents", save: (c) => c.ingest.rowEvents, load: (r) => r.rowEvents ?? 0 }),
  },
  exit: {
    exitCode: col({ column: "exitCode", save: (c) => c.exit.exitCode, load: (r) => r.exitCode }),
    signalName: col({ column: "signalName", save: (c) => c.exit.signalName, load: (r) => r.signalName }),
    reason: col({ column: "reason", save: (c) => c.exit.reason, load: (r) => r.reason }),
    terminalSource: col({ column: "terminalSource", save: (c) => c.exit.terminalSource, load: (r) => r.terminalSource }),
  },
  // Only the writes through inlineThrough are in the record; the rest are `stdin` rows, which
  // restoreCommands adds to the queue.
  stdin: col({
    column: "stdin",
    save: (c) => {
      const { inlineThrough, ...rest } = c.stdin;
      const inline: StdinOp[] = [];
      for (const o of c.stdin.queue) if (o.seq <= inlineThrough) inline.push({ ...o });
      return { ...rest, queue: inline, sentThrough: c.stdin.ackedThrough };
    },
    load: (r) => ({
      ...r.stdin,
      queue: r.stdin.queue.map((o) => ({ ...o })),
      sentThrough: r.stdin.ackedThrough,
      inlineThrough: r.stdin.queue.reduce((m, o) => Math.max(m, o.seq), 0),
    }),
  }),
  signals: col({ column: "signals", save: (c) => c.signals.map((s) => ({ ...s, sentOn: 0 })), load: (r) => r.signals.map((s) => ({ ...s })) }),
  script: {
    bytes: unstored((_r, script) => script),
    acked: col({ column: "scriptAcked", save: (c) => c.script.acked, load: (r) => r.scriptAcked }),
    sent: col({ column: "scriptSent", save: (c) => c.script.sent, load: (r) => r.scriptAcked }),
    commitSentOn: col({ column: "scriptCommitSentOn", save: (c) => c.script.commitSentOn, load: () => 0 }),
    committed: col({ column: "scriptCommitted", save: (c) => c.script.committed, load: (r) => r.scriptCommitted }),
  },
  output: {
    segments: col({
      column: "segments",
      save: (c) => c.output.segments.map((s) => ({ ...s, ranges: s.ranges.map((x) => ({ ...x })) })),
      load: (r) => r.segments.map((s) => ({ ...s, ranges: s.ranges.map((x) => ({ ...x })) })),
    }),
    storedOutputBytes: col({ column: "storedOutputBytes", save: (c) => c.output.storedOutputBytes, load: (r) => r.storedOutputBytes }),
    retention: col({
      column: "retention",
      save: (c) => c.output.retention.map((m) => ({ ...m, ranges: m.ranges.map((x) => ({ ...x })) })),
      load: (r) => r.retention.map((m) => ({ ...m, ranges: m.ranges.map((x) => ({ ...x })) })),
    }),
  },
  requests: col({ column: "requests", save: (c) => ({ ...c.requests }), load: (r) => ({ ...r.requests }) }),
  // Records written before history pruning lack endedAt and specBytes.
  endedAt: col({ column: "endedAt", save: (c) => c.endedAt, load: (r) => r.endedAt ?? (isTerminal(r.state) ? r.createdAt : 0) }),
  // Records written before command times lack these two.
  startedTime: col({ column: "startedTime", save: (c) => c.startedTime, load: (r) => legacyTime(r.startedTime) }),
  endedTime: col({ column: "endedTime", save: (c) => c.endedTime, load: (r) => legacyTime(r.endedTime) }),
  specBytes: col({ column: "specBytes", save: (c) => c.specBytes, load: (r) => r.specBytes ?? toBinary(ExecutionSpecSchema, r.spec).length }),
  charged: unstored(() => 0),
} satisfies CommandFields;

/** The columns the mapping writes. */
type ColumnOf<T> = T extends { column: infer C } ? (C extends keyof CommandRow ? C : never) : { [F in keyof T]: ColumnOf<T[F]> }[keyof T];
type UnwrittenColumn = Exclude<keyof CommandRow, ColumnOf<typeof COMMAND_FIELDS>>;
/** Every column of CommandRow is written by some field (else this names the column that is not). */
const everyColumnWritten: [UnwrittenColumn] extends [never] ? true : UnwrittenColumn = true;
void everyColumnWritten;

type AnyCodec = FieldCodec<unknown>;
const isCodec = (x: object): x is AnyCodec => typeof (x as AnyCodec).load === "function";

/** The mapping flattened: each field's path in a ServerCommand (one or two keys) and its codec. */
export const COMMAND_FIELD_PATHS: ReadonlyArray<{ path: readonly string[]; codec: AnyCodec }> = (() => {
  const out: Array<{ path: string[]; codec: AnyCodec }> = [];
  for (const [k, v] of Object.entries(COMMAND_FIELDS as Record<string, object>)) {
    if (isCodec(v)) out.push({ path: [k], codec: v });
    else for (const [f, x] of Object.entries(v as Record<string, AnyCodec>)) out.push({ path: [k, f], codec: x });
  }
  return out;
})();

const SAVERS: Array<[string, (c: ServerCommand) => unknown]> = [];
for (const { codec } of COMMAND_FIELD_PATHS) if (codec.column !== null) SAVERS.push([codec.column, codec.save]);

export function commandRecord(c: ServerCommand): Rec<"command"> {
  const value = {} as Record<string, unknown>;
  for (const [k, save] of SAVERS) value[k] = save(c);
  return { table: "command", key: c.uuid, value: value as unknown as CommandRow };
}

/** A command as a restart finds it: from its record and its script row (if the upload had not completed). */
export function restoreCommand(r: CommandRow, script: ScriptRow | undefined): ServerCommand {
  const bytes = script?.data ?? null;
  const c = {} as Record<string, unknown>;
  for (const { path, codec } of COMMAND_FIELD_PATHS) {
    if (path.length === 1) c[path[0]!] = codec.load(r, bytes);
    else ((c[path[0]!] ??= {}) as Record<string, unknown>)[path[1]!] = codec.load(r, bytes);
  }
  return c as unknown as ServerCommand;
}
