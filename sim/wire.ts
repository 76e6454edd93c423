import { createHash } from "node:crypto";
// Looking at frames on the simulated wire: decode envelopes with the core's
// own codec, and pull the exact bytes of a sub-message out of an envelope
// (for "retries resend identical bytes": comparing re-decoded objects would
// hide a byte-level difference).

import { decodeFrame, type PayloadCase } from "../core/codec/frame-codec.js";
import type { AgentEnvelope } from "../protos/gen/rvbox/v1/agent_pb.js";

export type Envelope = AgentEnvelope & { payload: { case: PayloadCase } };

/**
 * Per-buffer caches of what the simulator computes about a frame. One frame
 * object is looked at several times (the sender's effect line and oracle, the
 * receiver's input line and oracle); wire bytes are never written after they
 * are emitted (the R-O2 oracle compares resends byte for byte), so what was
 * computed once holds. `wireCaches.enabled = false` recomputes every time
 * (the bench's baseline).
 */
export const wireCaches = { enabled: true };
const decoded = new WeakMap<Uint8Array, Envelope | null>();
const digests = new WeakMap<Uint8Array, string>();

/** Decode with the core's own codec. The result is shared: read it, never write it. */
export function decodeEnvelope(data: Uint8Array): Envelope | null {
  if (wireCaches.enabled) {
    const hit = decoded.get(data);
    if (hit !== undefined) return hit;
  }
  const d = decodeFrame(data, true);
  const env = d.ok ? d.envelope : null;
  if (wireCaches.enabled) decoded.set(data, env);
  return env;
}

/** Field number of each payload in AgentEnvelope (agent.proto). */
export const PAYLOAD_FIELD: Record<PayloadCase, number> = {
  clientHello: 3,
  serverWelcome: 4,
  commandDispatch: 5,
  commandAccepted: 6,
  commandEvent: 7,
  eventAck: 8,
  stdinWrite: 9,
  closeStdin: 10,
  signalCommand: 11,
  scriptChunk: 12,
  scriptCommit: 13,
  clientCapacity: 14,
  reconcileRequest: 15,
  reconcileSnapshot: 16,
  error: 17,
  reconcileResult: 18,
};

function varint(b: Uint8Array, pos: number): [number, number] | null {
  let v = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    if (pos >= b.length) return null;
    const x = b[pos++]!;
    v += (x & 0x7f) * mul;
    mul *= 128;
    if (!(x & 0x80)) return [v, pos];
  }
  return null;
}

/** session_generation (field 2) of an encoded envelope, without decoding it (0 if absent). */
export function envelopeGeneration(b: Uint8Array): number {
  let pos = 0;
  while (pos < b.length) {
    const t = varint(b, pos);
    if (!t) return 0;
    pos = t[1];
    const f = Math.floor(t[0] / 8);
    const wt = t[0] & 7;
    if (wt === 0) {
      const v = varint(b, pos);
      if (!v) return 0;
      if (f === 2) return v[0];
      pos = v[1];
    } else if (wt === 2) {
      const l = varint(b, pos);
      if (!l) return 0;
      pos = l[1] + l[0];
    } else if (wt === 1) pos += 8;
    else if (wt === 5) pos += 4;
    else return 0;
  }
  return 0;
}

/** The raw bytes of the last length-delimited field `field` of a message, or null. */
export function rawField(b: Uint8Array, field: number): Uint8Array | null {
  let pos = 0;
  let found: Uint8Array | null = null;
  while (pos < b.length) {
    const t = varint(b, pos);
    if (!t) return null;
    pos = t[1];
    const f = Math.floor(t[0] / 8);
    const wt = t[0] & 7;
    if (wt === 0) {
      const v = varint(b, pos);
      if (!v) return null;
      pos = v[1];
    } else if (wt === 1) pos += 8;
    else if (wt === 5) pos += 4;
    else if (wt === 2) {
      const l = varint(b, pos);
      if (!l) return null;
      pos = l[1];
      if (pos + l[0] > b.length) return null;
      if (f === field) found = b.subarray(pos, pos + l[0]);
      pos += l[0];
    } else return null;
  }
  return found;
}

/** shortDigest of a frame, remembered per buffer (a frame is digested when sent and again when delivered). */
export function frameDigest(b: Uint8Array): string {
  if (!wireCaches.enabled) return shortDigest(b);
  let d = digests.get(b);
  if (d === undefined) digests.set(b, (d = shortDigest(b)));
  return d;
}

/** A short, stable digest of bytes (for trace lines and maps). */
export function shortDigest(b: Uint8Array): string {
  if (b.length > 512) return createHash("sha1").update(b).digest("hex").slice(0, 16);
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193;
  for (let i = 0; i < b.length; i++) {
    h1 = Math.imul(h1 ^ b[i]!, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ b[i]!, 0x5bd1e995) >>> 0;
  }
  return (h1 >>> 0).toString(16).padStart(8, "0") + (h2 >>> 0).toString(16).padStart(8, "0");
}

/** One-line summary of a frame for timelines. */
export function frameSummary(data: Uint8Array): string {
  const env = decodeEnvelope(data);
  if (!env) return `<undecodable ${data.length} bytes>`;
  const p = env.payload;
  const g = env.sessionGeneration > 0n ? ` gen=${env.sessionGeneration}` : "";
  switch (p.case) {
    case "commandEvent": {
      const ev = p.value;
      const e = ev.event;
      let what: string = e.case ?? "?";
      if (e.case === "output") what = `output ${e.value.stream === 1 ? "stdout" : "stderr"}@${e.value.streamOffset}+${e.value.originalSize}`;
      else if (e.case === "lifecycle")
        what = `lifecycle ${e.value.state}${e.value.exitCode !== undefined ? ` exit=${e.value.exitCode}` : ""}${e.value.signalName ? ` ${e.value.signalName}` : ""}`;
      else if (e.case === "truncation") what = `truncation ${e.value.removedBytes.map((r) => `${r.stream}@${r.offset}+${r.length}`).join(",")}`;
      return `commandEvent ${ev.issueUuid} seq=${ev.eventSeq} ${what}${g}`;
    }
    case "eventAck":
      return `eventAck ${p.value.issueUuid} through=${p.value.throughEventSeq}${g}`;
    case "commandDispatch":
      return `commandDispatch ${p.value.issueUuid} rev=${p.value.commandRevision} target=${p.value.targetSessionGeneration}${g}`;
    case "commandAccepted":
      return `commandAccepted ${p.value.issueUuid} ${p.value.accepted ? "accepted" : `rejected ${p.value.rejection?.code ?? ""} ${p.value.rejection?.message ?? ""}`}${g}`;
    case "error":
      return `error code=${p.value.error?.code} ${p.value.error?.message ?? ""}${p.value.closeSession ? " (close)" : ""}${g}`;
    case "clientHello":
      return `clientHello ${p.value.clientId} instance=${p.value.clientInstanceId.slice(0, 12)}`;
    case "reconcileRequest":
      return `reconcileRequest ${p.value.targets.map((t) => `${t.issueUuid.slice(0, 8)}@${t.lastServerEventSeq}`).join(",")}${g}`;
    case "reconcileSnapshot":
      return `reconcileSnapshot ${p.value.retainedCommands.map((c) => `${c.issueUuid.slice(0, 8)}:${c.lifecycle}${c.tombstoned ? "(tomb)" : ""}@${c.lastClientEventSeq}`).join(",")}${g}`;
    case "reconcileResult":
      return `reconcileResult terminate=[${p.value.terminateLocalIssueUuids.map((u) => u.slice(0, 8)).join(",")}] discard=[${p.value.discardLocalTerminalIssueUuids.map((u) => u.slice(0, 8)).join(",")}]${g}`;
    case "stdinWrite":
      return `stdinWrite ${p.value.issueUuid} seq=${p.value.writeSeq} ${p.value.data.length}B${g}`;
    case "closeStdin":
      return `closeStdin ${p.value.issueUuid} seq=${p.value.writeSeq}${g}`;
    case "signalCommand":
      return `signalCommand ${p.value.issueUuid} rev=${p.value.commandRevision} sig=${p.value.signal}${g}`;
    case "scriptChunk":
      return `scriptChunk ${p.value.issueUuid} @${p.value.offset}+${p.value.data.length}${g}`;
    case "scriptCommit":
      return `scriptCommit ${p.value.issueUuid} size=${p.value.sizeBytes}${g}`;
    case "clientCapacity":
      return `clientCapacity ${p.value.runningCommands}/${p.value.queuedCommands}${g}`;
    default:
      return `${p.case}${g}`;
  }
}
