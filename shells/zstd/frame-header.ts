/**
 * Pure zstd frame-structure helpers (RFC 8878 section 3.1.1).
 *
 * This file is deliberately dependency-free: no imports, no Node APIs, no
 * Buffer; only Uint8Array and plain numbers. It is meant to move into the pure
 * core unchanged.
 *
 * - `readZstdFrameContentSize` parses the frame header and reports the
 *   Frame_Content_Size (FCS).
 * - `parseZstdFrameHeader` is the same parse with every header field exposed.
 * - `scanZstdFrame` additionally walks the block headers (without decoding
 *   anything) to learn the exact length of the frame and an upper bound on
 *   what it can decode to. This is how a caller tells "exactly one frame, no
 *   trailing bytes, not truncated" before handing data to a decoder.
 * - `encodeRawZstdFrame` writes a valid, uncompressed zstd frame (Raw_Block
 *   blocks only).
 *
 * Policy (RVBox never uses dictionaries): skippable frames are refused, and a
 * header that names a dictionary (Dictionary_ID != 0) is refused. A
 * Dictionary_ID field that is present but holds 0 means "no dictionary" per
 * the RFC and is accepted.
 */

/** Little-endian 0xFD2FB528. */
export const ZSTD_MAGIC = 0xfd2fb528;
/** Largest block (Block_Maximum_Size upper bound): 128 KiB. */
export const ZSTD_BLOCK_SIZE_MAX = 128 * 1024;
/** Smallest possible frame: magic + FHD + 1-byte FCS + one empty raw block header. */
export const ZSTD_MIN_FRAME_BYTES = 4 + 1 + 1 + 3;

export type ZstdHeaderResult = { ok: true; contentSize: number | null; headerSize: number } | { ok: false; reason: string };

export interface ZstdFrameHeader {
  /** Frame_Content_Size, or null when the header does not carry it. */
  contentSize: number | null;
  /** Bytes from the start of the frame (magic included) to the first block. */
  headerSize: number;
  singleSegment: boolean;
  hasChecksum: boolean;
  /**
   * Window_Size in bytes. For Single_Segment frames this equals the content
   * size (RFC 8878 3.1.1.1.2). Can exceed 2^32 for absurd descriptors.
   */
  windowSize: number;
  /** Dictionary_ID; always 0 here because non-zero ids are refused. */
  dictionaryId: number;
}

export type ZstdFrameHeaderResult = ({ ok: true } & ZstdFrameHeader) | { ok: false; reason: string };

export interface ZstdFrameScan extends ZstdFrameHeader {
  /** Exact byte length of the frame: header + all blocks + optional checksum. */
  frameSize: number;
  blockCount: number;
  compressedBlockCount: number;
  /** Sum of the regenerated sizes of the Raw and RLE blocks (known exactly). */
  rawAndRleBytes: number;
  /**
   * Upper bound on the decoded size: Raw/RLE sizes plus Block_Maximum_Size
   * for every compressed block.
   */
  decodedSizeUpperBound: number;
}

export type ZstdFrameScanResult = ({ ok: true } & ZstdFrameScan) | { ok: false; reason: string };

const TWO_POW_32 = 0x1_0000_0000;

function readLE(bytes: Uint8Array, offset: number, length: number): number {
  // Callers only use this for 1/2/4-byte fields, so the result fits a double
  // exactly. Multiplication (not shifts) keeps 4-byte values unsigned.
  let value = 0;
  let scale = 1;
  for (let i = 0; i < length; i++) {
    value += (bytes[offset + i] ?? 0) * scale;
    scale *= 256;
  }
  return value;
}

function isSkippableMagic(bytes: Uint8Array): boolean {
  // 0x184D2A50 .. 0x184D2A5F, little-endian: 5? 2A 4D 18
  return ((bytes[0] ?? 0) & 0xf0) === 0x50 && bytes[1] === 0x2a && bytes[2] === 0x4d && bytes[3] === 0x18;
}

/**
 * Parse the frame header at the start of `bytes`, exposing every field.
 */
export function parseZstdFrameHeader(bytes: Uint8Array): ZstdFrameHeaderResult {
  if (bytes.length < 4) return { ok: false, reason: "truncated: shorter than the 4-byte magic number" };
  if (isSkippableMagic(bytes)) return { ok: false, reason: "skippable frame refused" };
  if (readLE(bytes, 0, 4) !== ZSTD_MAGIC) return { ok: false, reason: "bad magic number (not a zstd frame)" };
  if (bytes.length < 5) return { ok: false, reason: "truncated: missing Frame_Header_Descriptor" };

  const fhd = bytes[4] ?? 0;
  const fcsFlag = fhd >> 6;
  const singleSegment = (fhd & 0x20) !== 0;
  // bit 4 is "unused" (must be ignored by decoders); bit 3 is reserved and must be 0
  if ((fhd & 0x08) !== 0) return { ok: false, reason: "reserved bit set in Frame_Header_Descriptor" };
  const hasChecksum = (fhd & 0x04) !== 0;
  const didFlag = fhd & 0x03;

  const windowDescriptorSize = singleSegment ? 0 : 1;
  const didSize = didFlag === 3 ? 4 : didFlag; // 0, 1, 2, 4
  const fcsSize = fcsFlag === 0 ? (singleSegment ? 1 : 0) : 1 << fcsFlag; // 0/1, 2, 4, 8
  const headerSize = 5 + windowDescriptorSize + didSize + fcsSize;
  if (bytes.length < headerSize) {
    return { ok: false, reason: `truncated: frame header needs ${headerSize} bytes, have ${bytes.length}` };
  }

  let pos = 5;
  let windowSize = 0;
  if (!singleSegment) {
    const wd = bytes[pos] ?? 0;
    pos += 1;
    const exponent = wd >> 3;
    const mantissa = wd & 7;
    const windowBase = 2 ** (10 + exponent);
    windowSize = windowBase + (windowBase / 8) * mantissa;
  }

  let dictionaryId = 0;
  if (didSize > 0) {
    dictionaryId = readLE(bytes, pos, didSize);
    pos += didSize;
    if (dictionaryId !== 0) {
      return { ok: false, reason: `frame requires dictionary ${dictionaryId}; dictionaries are not supported` };
    }
  }

  let contentSize: number | null = null;
  if (fcsSize === 1) {
    contentSize = bytes[pos] ?? 0;
  } else if (fcsSize === 2) {
    contentSize = readLE(bytes, pos, 2) + 256;
  } else if (fcsSize === 4) {
    contentSize = readLE(bytes, pos, 4);
  } else if (fcsSize === 8) {
    const low = readLE(bytes, pos, 4);
    const high = readLE(bytes, pos + 4, 4);
    // 2^53 - 1 = high < 2^21. Anything larger cannot be a number exactly.
    if (high >= 0x20_0000) {
      return { ok: false, reason: "Frame_Content_Size exceeds Number.MAX_SAFE_INTEGER" };
    }
    contentSize = high * TWO_POW_32 + low;
  }
  pos += fcsSize;

  if (singleSegment) {
    // RFC 8878: with Single_Segment_Flag the window is the whole content.
    windowSize = contentSize ?? 0;
  }

  return { ok: true, contentSize, headerSize, singleSegment, hasChecksum, windowSize, dictionaryId };
}

/**
 * Parse the zstd frame header at the start of `bytes` and return its
 * Frame_Content_Size (null when the header does not carry one) and the header
 * length. Refuses skippable frames, dictionary ids, a set reserved bit,
 * truncated headers and sizes beyond Number.MAX_SAFE_INTEGER.
 */
export function readZstdFrameContentSize(bytes: Uint8Array): ZstdHeaderResult {
  const h = parseZstdFrameHeader(bytes);
  if (!h.ok) return h;
  return { ok: true, contentSize: h.contentSize, headerSize: h.headerSize };
}

/**
 * Parse the header and walk every block header of the single frame that
 * starts at offset 0, without decoding. Fails on a truncated frame, a
 * Reserved block type, or a block larger than Block_Maximum_Size
 * (min(Window_Size, 128 KiB)). Bytes after the frame are NOT an error here;
 * compare `frameSize` with `bytes.length` to detect them.
 */
export function scanZstdFrame(bytes: Uint8Array): ZstdFrameScanResult {
  const h = parseZstdFrameHeader(bytes);
  if (!h.ok) return h;
  const blockMax = Math.min(h.windowSize, ZSTD_BLOCK_SIZE_MAX);

  let pos = h.headerSize;
  let blockCount = 0;
  let compressedBlockCount = 0;
  let rawAndRleBytes = 0;
  let upper = 0;
  for (;;) {
    if (pos + 3 > bytes.length) {
      return { ok: false, reason: `truncated: block header ${blockCount} needs 3 bytes at offset ${pos}` };
    }
    const bh = readLE(bytes, pos, 3);
    pos += 3;
    const last = (bh & 1) === 1;
    const type = (bh >> 1) & 3;
    const size = bh >>> 3;
    if (type === 3) return { ok: false, reason: `block ${blockCount} has the Reserved block type` };
    if (size > blockMax) {
      return {
        ok: false,
        reason: `block ${blockCount} size ${size} exceeds Block_Maximum_Size ${blockMax}`,
      };
    }
    let payload: number;
    if (type === 0) {
      payload = size; // Raw_Block: size bytes of content
      rawAndRleBytes += size;
      upper += size;
    } else if (type === 1) {
      payload = 1; // RLE_Block: one byte, repeated `size` times
      rawAndRleBytes += size;
      upper += size;
    } else {
      payload = size; // Compressed_Block: size bytes, decodes to <= blockMax
      compressedBlockCount += 1;
      upper += blockMax;
    }
    if (pos + payload > bytes.length) {
      return {
        ok: false,
        reason: `truncated: block ${blockCount} needs ${payload} bytes at offset ${pos}, have ${bytes.length - pos}`,
      };
    }
    pos += payload;
    blockCount += 1;
    if (last) break;
  }
  if (h.hasChecksum) {
    if (pos + 4 > bytes.length) return { ok: false, reason: "truncated: missing Content_Checksum" };
    pos += 4;
  }
  return {
    ...h,
    frameSize: pos,
    blockCount,
    compressedBlockCount,
    rawAndRleBytes,
    decodedSizeUpperBound: upper,
  };
}

/**
 * Encode `raw` as one valid zstd frame made only of Raw_Block blocks
 * (no compression): Single_Segment set, exact Frame_Content_Size in its
 * smallest form, blocks of at most 128 KiB, the last one flagged, no
 * dictionary, no checksum. An empty input yields one empty last raw block.
 *
 * Note: Single_Segment makes Window_Size equal the content size, so a decoder
 * must be willing to buffer the whole content; fine for RVBox's <= 64 KiB
 * chunks.
 */
export function encodeRawZstdFrame(raw: Uint8Array): Uint8Array {
  const n = raw.length;
  let fcsFlag: number;
  let fcsSize: number;
  if (n < 256) {
    fcsFlag = 0;
    fcsSize = 1; // with Single_Segment, flag 0 means a 1-byte FCS
  } else if (n < 65536 + 256) {
    fcsFlag = 1;
    fcsSize = 2;
  } else if (n < TWO_POW_32) {
    fcsFlag = 2;
    fcsSize = 4;
  } else {
    fcsFlag = 3;
    fcsSize = 8;
  }
  const blockCount = Math.max(1, Math.ceil(n / ZSTD_BLOCK_SIZE_MAX));
  const headerSize = 5 + fcsSize;
  const out = new Uint8Array(headerSize + blockCount * 3 + n);

  out[0] = 0x28;
  out[1] = 0xb5;
  out[2] = 0x2f;
  out[3] = 0xfd;
  out[4] = (fcsFlag << 6) | 0x20; // FCS flag | Single_Segment; no checksum, no dictionary

  let fcsValue = fcsFlag === 1 ? n - 256 : n;
  for (let i = 0; i < fcsSize; i++) {
    out[5 + i] = fcsValue % 256;
    fcsValue = Math.floor(fcsValue / 256);
  }

  let pos = headerSize;
  for (let b = 0; b < blockCount; b++) {
    const start = b * ZSTD_BLOCK_SIZE_MAX;
    const size = Math.min(ZSTD_BLOCK_SIZE_MAX, n - start);
    const last = b === blockCount - 1 ? 1 : 0;
    const bh = (size << 3) | (0 << 1) | last; // Block_Type 0 = Raw_Block
    out[pos] = bh & 0xff;
    out[pos + 1] = (bh >> 8) & 0xff;
    out[pos + 2] = (bh >> 16) & 0xff;
    pos += 3;
    out.set(raw.subarray(start, start + size), pos);
    pos += size;
  }
  return out;
}
