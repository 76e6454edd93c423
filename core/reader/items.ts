/**
 * What an operator's reader shows of a command's output: one item per stored
 * event (or per retention marker the server merged into the stream), in the
 * plain shapes the CLI and the TUI print. Converted from the control API by
 * client/model.ts and from a simulated server's store by the simulator, so
 * every reader sees the same shapes. Counters are numbers.
 */

export type Lifecycle =
  | "queued"
  | "dispatched"
  | "accepted"
  | "running"
  | "succeeded"
  | "failed"
  | "rejected"
  | "cancelled"
  | "interrupted"
  | "expired"
  | "unknown";

export type StreamName = "stdout" | "stderr";

export interface ByteSpan {
  stream: StreamName | "unknown";
  offset: number;
  length: number;
}

export type TruncationSource = "agent-watermark" | "agent-budget" | "server-retention" | "unknown";

export type OutputItem =
  | { kind: "output"; seq: number; stream: StreamName | "unknown"; offset: number; data: Uint8Array }
  /** Output that is gone: an agent marker (R-O7, no event range) or a server retention marker (R-O5). */
  | { kind: "truncation"; seq: number; cause: TruncationSource; events: { first: number; last: number } | null; ranges: ByteSpan[] }
  /** A capture pipe was not drained to EOF (R-O8). */
  | { kind: "incomplete"; seq: number; streams: Array<StreamName | "unknown">; reason: string }
  /** Bytes the reader never got and no marker explained (made by the follow cursor, see follow-cursor.ts). */
  | { kind: "gap"; seq: number; stream: StreamName; offset: number; length: number }
  | { kind: "lifecycle"; seq: number; revision: number; state: Lifecycle; exitCode: number | null; signalName: string; reason: string; error: string }
  | { kind: "stdin_ack"; seq: number; writeSeq: number; closed: boolean; failure: string }
  | { kind: "signal_result"; seq: number; revision: number; signal: string; delivered: boolean; detail: string }
  | { kind: "script_upload"; seq: number; receivedBytes: number; complete: boolean };

/** The highest event sequence an item accounts for (a retention marker covers a range). */
export function lastSeqOf(it: OutputItem): number {
  return it.kind === "truncation" && it.events ? Math.max(it.seq, it.events.last) : it.seq;
}
