// The reserved metadata tier's charge of one command record (history.ts
// explains the tier). A leaf, so that every module that changes a charged
// field can re-charge without importing history.

import { SERVER_DIGEST_BYTES, SERVER_EVENT_ROW_BYTES, SERVER_RECENT_DIGESTS, SERVER_RECORD_BASE_BYTES, SERVER_SEGMENT_ENTRY_BYTES } from "../limits.js";
import type { ServerCommand, ServerState } from "./server-types.js";

/** Bytes one command record is charged against the metadata tier. */
export function metaCharge(c: ServerCommand): number {
  return (
    SERVER_RECORD_BASE_BYTES +
    c.specBytes +
    c.ingest.rowEvents * SERVER_EVENT_ROW_BYTES +
    Math.min(c.ingest.receivedThrough, SERVER_RECENT_DIGESTS) * SERVER_DIGEST_BYTES +
    (c.output.segments.length + c.output.retention.length) * SERVER_SEGMENT_ENTRY_BYTES
  );
}

/** Re-charge `c` after a change to anything metaCharge reads. */
export function recharge(st: ServerState, c: ServerCommand): void {
  const now = metaCharge(c);
  st.metaBytes += now - c.charged;
  if (st.active.has(c.uuid)) st.activeIndex.charged += now - c.charged;
  c.charged = now;
}
