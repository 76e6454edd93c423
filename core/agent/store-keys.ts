// Key codecs of the agent's durable tables (docs/ARCHITECTURE.md "Durable
// tables"). A leaf: it imports nothing, so the outbox (core/window) and the
// agent's store schema (core/agent/store.ts, which re-exports all of this)
// can both use it without an import cycle.
//
// Per-command rows are keyed `uuid/NNNN…`: the number zero-padded so that
// string order is numeric order within a command. The widths differ by table
// for historical reasons and are part of the storage format: stores written
// with them must keep opening, so they never change.

/** Digits of a script chunk offset and of a stdin write_seq in their keys. */
export const SCRIPT_STDIN_KEY_DIGITS = 16;
/** Digits of an outbox entry index and of an event_seq in their keys. */
export const OUTBOX_KEY_DIGITS = 12;

/** `n` in decimal, zero-padded to `width` digits (the one padding of every agent key). */
export function pad(n: number, width: number): string {
  return n.toString().padStart(width, "0");
}

/** Row key of the instance id in table `meta`. */
export const META_INSTANCE_ID = "instance_id";

/** `chunk` row: the script bytes received at `offset`. */
export const chunkKey = (uuid: string, offset: number): string => `${uuid}/${pad(offset, SCRIPT_STDIN_KEY_DIGITS)}`;
/** `stdin` row: the write (or close) with this write_seq. */
export const stdinKey = (uuid: string, seq: number): string => `${uuid}/${pad(seq, SCRIPT_STDIN_KEY_DIGITS)}`;
/** `entry` row: the unsequenced outbox entry with this local index. */
export const entryKey = (uuid: string, idx: number): string => `${uuid}/${pad(idx, OUTBOX_KEY_DIGITS)}`;
/** `event` row: the pinned event with this event_seq. */
export const eventKey = (uuid: string, seq: number): string => `${uuid}/${pad(seq, OUTBOX_KEY_DIGITS)}`;

/** The command a per-command key (`uuid/NNNN…`) belongs to. */
export function keyUuid(key: string): string {
  return key.slice(0, key.lastIndexOf("/"));
}

/** Both parts of a per-command key: its command and its number. */
export function parseKey(key: string): { uuid: string; n: number } {
  const i = key.lastIndexOf("/");
  return { uuid: key.slice(0, i), n: Number(key.slice(i + 1)) };
}
