/**
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init/xorout 0xFFFFFFFF),
 * the same checksum as zlib/gzip/PNG. Uses `node:zlib`'s native `crc32` when the
 * running Node has it (>= 20.15 / 22.2) and a table-driven fallback otherwise.
 * Both give identical results (tested).
 */
import * as zlib from "node:zlib";

const TABLE: Uint32Array = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** Table-driven CRC-32; exported for tests. */
export function crc32Table(data: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = TABLE[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const native = (zlib as { crc32?: (data: Uint8Array) => number }).crc32;

/** CRC-32 of `data` as an unsigned 32-bit integer. */
export const crc32: (data: Uint8Array) => number = typeof native === "function" ? (data) => native(data) >>> 0 : crc32Table;
