// Zstandard for the simulator, pure and fast: a compressor that writes one
// frame of Raw_Blocks (valid zstd, no compression), and a checker that
// validates any frame against its declared size without throwing. Real
// compression lives in shells/zstd; the core only needs the contract of
// CorePorts.compress / checkCompressed.
//
// Frame layout (RFC 8878 3.1.1): magic 28 B5 2F FD, Frame_Header_Descriptor
// with Single_Segment set and a Frame_Content_Size field, then blocks, each
// with a 3-byte little-endian header: Last_Block (bit 0), Block_Type (bits
// 1-2: 0 raw, 1 RLE, 2 compressed, 3 reserved), Block_Size (bits 3-23).

import { Decompress } from "fzstd";
import { Code } from "../core/errors.js";
import type { DecompressResult } from "../core/ports.js";
import { MAX_CHUNK_BYTES } from "../core/limits.js";

const BLOCK_MAX = 128 * 1024;

export function encodeRawZstdFrame(raw: Uint8Array): Uint8Array {
  const n = raw.length;
  // FCS field size: 1 byte (<256, flag 0 + single segment), 2 bytes (256..65791, stored n-256), 4 bytes.
  let fcsFlag: number;
  let fcs: number[];
  if (n < 256) {
    fcsFlag = 0;
    fcs = [n];
  } else if (n < 65536 + 256) {
    fcsFlag = 1;
    const v = n - 256;
    fcs = [v & 255, v >>> 8];
  } else {
    fcsFlag = 2;
    fcs = [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, n >>> 24];
  }
  const blocks = Math.max(1, Math.ceil(n / BLOCK_MAX));
  const out = new Uint8Array(4 + 1 + fcs.length + blocks * 3 + n);
  out.set([0x28, 0xb5, 0x2f, 0xfd], 0);
  out[4] = (fcsFlag << 6) | 0x20;
  out.set(fcs, 5);
  let o = 5 + fcs.length;
  for (let b = 0; b < blocks; b++) {
    const start = b * BLOCK_MAX;
    const size = Math.min(BLOCK_MAX, n - start);
    const last = b === blocks - 1 ? 1 : 0;
    const hdr = (size << 3) | (0 << 1) | last;
    out[o] = hdr & 255;
    out[o + 1] = (hdr >>> 8) & 255;
    out[o + 2] = (hdr >>> 16) & 255;
    o += 3;
    out.set(raw.subarray(start, start + size), o);
    o += size;
  }
  return out;
}

function bad(message: string): DecompressResult {
  return { ok: false, code: Code.BAD_COMPRESSION, message };
}

/**
 * Validate one zstd frame against `declared`: sizes first (no allocation),
 * then structure, then (only for compressed blocks) a bounded decode. Never
 * throws.
 */
export function checkZstdFrame(frame: Uint8Array, declared: number, limit = MAX_CHUNK_BYTES): DecompressResult {
  try {
    return check(frame, declared, limit);
  } catch (e) {
    return bad(`unexpected: ${(e as Error).message}`);
  }
}

function check(frame: Uint8Array, declared: number, limit: number): DecompressResult {
  if (!Number.isSafeInteger(declared) || declared < 0) return bad(`declared size ${declared} is not a size`);
  if (declared > limit) return { ok: false, code: Code.PAYLOAD_TOO_LARGE, message: `declared size ${declared} over ${limit}` };
  if (frame.length < 6) return bad("frame too short");
  if (frame[0] !== 0x28 || frame[1] !== 0xb5 || frame[2] !== 0x2f || frame[3] !== 0xfd) return bad("bad magic");
  const fhd = frame[4]!;
  if (fhd & 0x08) return bad("reserved bit set");
  const single = (fhd & 0x20) !== 0;
  const checksum = (fhd & 0x04) !== 0;
  const didFlag = fhd & 3;
  const fcsFlag = fhd >> 6;
  const didSize = didFlag === 3 ? 4 : didFlag;
  const fcsSize = fcsFlag === 0 ? (single ? 1 : 0) : 1 << fcsFlag;
  let pos = 5 + (single ? 0 : 1);
  let dict = 0;
  for (let i = 0; i < didSize; i++) dict += (frame[pos + i] ?? 0) * 2 ** (8 * i);
  if (dict !== 0) return bad("dictionary frames are not supported");
  pos += didSize;
  if (fcsSize === 0) return bad("frame does not declare its content size");
  if (pos + fcsSize > frame.length) return bad("truncated frame header");
  let fcs = 0;
  for (let i = 0; i < fcsSize; i++) fcs += frame[pos + i]! * 2 ** (8 * i);
  if (fcsSize === 2) fcs += 256;
  pos += fcsSize;
  if (fcs !== declared) return bad(`frame content size ${fcs} != declared ${declared}`);
  if (!single) {
    const wd = frame[5]!;
    const base = 2 ** (10 + (wd >> 3));
    if (base + (base / 8) * (wd & 7) > 1024 * 1024) return bad("window too large");
  }
  let exact = 0;
  let compressed = 0;
  for (;;) {
    if (pos + 3 > frame.length) return bad("truncated block header");
    const h = frame[pos]! | (frame[pos + 1]! << 8) | (frame[pos + 2]! << 16);
    pos += 3;
    const last = h & 1;
    const type = (h >> 1) & 3;
    const size = h >>> 3;
    if (size > BLOCK_MAX) return bad("block over maximum size");
    if (type === 3) return bad("reserved block type");
    if (type === 0) {
      pos += size;
      exact += size;
    } else if (type === 1) {
      pos += 1;
      exact += size;
    } else {
      pos += size;
      compressed++;
    }
    if (pos > frame.length) return bad("truncated block");
    if (exact > declared) return bad("frame expands beyond its declared size");
    if (last) break;
  }
  if (checksum) pos += 4;
  if (pos !== frame.length) return bad(pos > frame.length ? "truncated checksum" : "trailing bytes after the frame");
  if (compressed === 0) {
    return exact === declared ? { ok: true, size: exact } : bad(`frame decodes to ${exact} bytes, declared ${declared}`);
  }
  // Compressed blocks: decode with a bound.
  let got = 0;
  let over = false;
  const d = new Decompress((chunk) => {
    got += chunk.length;
    if (got > declared) over = true;
  });
  try {
    d.push(frame, true);
  } catch (e) {
    return bad(`zstd: ${(e as Error).message}`);
  }
  if (over || got !== declared) return bad(`frame decodes to ${got} bytes, declared ${declared}`);
  return { ok: true, size: got };
}

/** Decode a frame written by encodeRawZstdFrame (oracles read stored output). */
export function decodeRawZstdFrame(frame: Uint8Array): Uint8Array | null {
  const r = checkZstdFrame(frame, readFcs(frame) ?? -1, Number.MAX_SAFE_INTEGER);
  if (!r.ok) return null;
  const fhd = frame[4]!;
  const fcsFlag = fhd >> 6;
  const fcsSize = fcsFlag === 0 ? 1 : 1 << fcsFlag;
  let pos = 5 + fcsSize;
  const out = new Uint8Array(r.size);
  let o = 0;
  for (;;) {
    const h = frame[pos]! | (frame[pos + 1]! << 8) | (frame[pos + 2]! << 16);
    pos += 3;
    const type = (h >> 1) & 3;
    const size = h >>> 3;
    if (type === 0) {
      out.set(frame.subarray(pos, pos + size), o);
      pos += size;
    } else if (type === 1) {
      out.fill(frame[pos]!, o, o + size);
      pos += 1;
    } else return null;
    o += size;
    if (h & 1) break;
  }
  return out;
}

function readFcs(frame: Uint8Array): number | null {
  if (frame.length < 6) return null;
  const fhd = frame[4]!;
  if (!(fhd & 0x20)) return null;
  const fcsFlag = fhd >> 6;
  const fcsSize = fcsFlag === 0 ? 1 : 1 << fcsFlag;
  let v = 0;
  for (let i = 0; i < fcsSize; i++) v += (frame[5 + i] ?? 0) * 2 ** (8 * i);
  return fcsSize === 2 ? v + 256 : v;
}
