// Protobuf varints for the hand-written encoders (hot-codec.ts for the
// agent's output events and acks, shells/server/follow-wire.ts for
// FollowOutput batches): non-negative safe integers only, written with
// arithmetic rather than bit operations so values above 2^32 stay exact.

/** Bytes a varint of non-negative safe integer `n` takes. */
export function varintSize(n: number): number {
  let k = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    k++;
  }
  return k;
}

/** Writes `n` as a varint at `pos`; returns the position after it. */
export function putVarint(out: Uint8Array, pos: number, n: number): number {
  while (n >= 128) {
    out[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  out[pos++] = n;
  return pos;
}
