/**
 * Validated zstd decompression of one peer-supplied frame: natively with
 * `node:zlib` where this Node has zstd (native.ts), otherwise with `fzstd`.
 *
 * Everything that can be checked without decoding is checked first, from the
 * frame's own structure (see `scanZstdFrame`):
 *   1. declaredOriginalSize is an integer in 0..limit   (else PAYLOAD_TOO_LARGE
 *      when over the limit, BAD_COMPRESSION when not a size at all);
 *   2. the frame header parses (magic, reserved bit, no dictionary, not
 *      skippable) and carries Frame_Content_Size (our compressor always
 *      writes it) equal to the declared size;
 *   3. Window_Size <= DECODER_MAX_WINDOW_BYTES (bounds the decoder's history
 *      buffer);
 *   4. the block headers walk to the exact end of the input: exactly one frame,
 *      not truncated, no trailing bytes (a second frame or a skippable frame
 *      after it counts as trailing bytes), no Reserved block type, no block
 *      over Block_Maximum_Size;
 *   5. the structural size bounds admit the declared size (Raw/RLE bytes are
 *      known exactly, compressed blocks are bounded by Block_Maximum_Size).
 *
 * Only then is the frame decoded. Natively (the default where available):
 * `zstdDecompressSync` with `maxOutputLength` = the declared size and one
 * output buffer of declared + 1 bytes (native.ts `nativeDecode`), so a frame
 * that lies about its size fails inside that buffer; libzstd also verifies a
 * Content_Checksum when a frame carries one. Portable: fzstd's streaming
 * `Decompress`: every
 * decoded piece is copied into a preallocated `new Uint8Array(declared)` and
 * decoding is aborted as soon as the output would exceed it, so the output
 * can never exceed what was declared, and the exact decoded length is known
 * (fzstd's one-shot `decompress(data, out)` silently clamps writes into `out`
 * and returns the whole buffer, so it cannot report the real length). fzstd's
 * own allocations are bounded by Window_Size + 128 KiB per block, and both
 * are bounded by the checks above. Any exception from fzstd becomes
 * BAD_COMPRESSION; this function never throws for any input bytes.
 *
 * Not verified on the portable path: the optional XXH64 Content_Checksum
 * (fzstd skips it; RVBox frames carry none). A corrupted compressed block that still decodes to the
 * declared length is therefore returned as ok.
 */
import { Decompress } from "fzstd";
import { scanZstdFrame } from "./frame-header.js";
import { nativeDecode, nativeDecodeInto, nativeDecodedSize, ZSTD_BACKEND, type NativeDecodeResult, type ZstdBackend } from "./native.js";

export const DEFAULT_DECOMPRESS_LIMIT = 64 * 1024;
/**
 * Largest Window_Size accepted. Single_Segment frames (what libzstd writes
 * for small inputs) have Window_Size = content size <= limit; this only
 * matters for frames with an explicit window descriptor.
 */
export const DECODER_MAX_WINDOW_BYTES = 1024 * 1024;

export type DecompressErrorCode = "PAYLOAD_TOO_LARGE" | "BAD_COMPRESSION";

export type DecompressResult = { ok: true; data: Uint8Array } | { ok: false; code: DecompressErrorCode; message: string };

class OutputOverflow extends Error {}

function bad(message: string): DecompressResult {
  return { ok: false, code: "BAD_COMPRESSION", message };
}

/**
 * Decompress exactly one zstd frame whose content must be exactly
 * `declaredOriginalSize` bytes, with `declaredOriginalSize <= limit`.
 * `limit` must be a non-negative integer (a RangeError is thrown otherwise:
 * that is a caller bug, not bad input).
 */
/** Everything checked before decoding (see the module comment); null when the frame may be decoded. */
function precheck(frame: Uint8Array, declaredOriginalSize: number, limit: number): DecompressResult | null {
  if (!Number.isSafeInteger(limit) || limit < 0) {
    throw new RangeError(`decompressValidated: limit must be a non-negative integer, got ${limit}`);
  }
  const declared = declaredOriginalSize;
  if (typeof declared !== "number" || !Number.isInteger(declared) || declared < 0) {
    return bad(`declared original size ${String(declared)} is not a non-negative integer`);
  }
  if (declared > limit) {
    return {
      ok: false,
      code: "PAYLOAD_TOO_LARGE",
      message: `declared original size ${declared} exceeds the limit of ${limit} bytes`,
    };
  }
  if (!(frame instanceof Uint8Array)) return bad("compressed payload is not a byte array");

  const scan = scanZstdFrame(frame);
  if (!scan.ok) return bad(`invalid zstd frame: ${scan.reason}`);
  if (scan.contentSize === null) return bad("zstd frame header does not carry Frame_Content_Size");
  if (scan.contentSize !== declared) {
    return bad(`zstd frame declares ${scan.contentSize} content bytes but ${declared} were declared`);
  }
  if (scan.windowSize > DECODER_MAX_WINDOW_BYTES) {
    return bad(`zstd Window_Size ${scan.windowSize} exceeds ${DECODER_MAX_WINDOW_BYTES}`);
  }
  if (scan.frameSize !== frame.length) {
    return bad(`payload holds ${frame.length - scan.frameSize} bytes after the zstd frame (exactly one frame is allowed)`);
  }
  if (scan.rawAndRleBytes > declared || scan.decodedSizeUpperBound < declared) {
    return bad(`zstd blocks cannot decode to ${declared} bytes (raw/RLE ${scan.rawAndRleBytes}, upper bound ${scan.decodedSizeUpperBound})`);
  }

  return null;
}

/**
 * The same verdict as `decompressValidated`, for a caller that needs only the
 * decoded size (the server validating a frame it stores as it came, R-T3):
 * on the native backend the frame is decoded into a reused scratch buffer
 * with a reused context (`nativeDecodedSize`), so nothing is allocated per
 * frame.
 */
export function validateCompressed(
  frame: Uint8Array,
  declaredOriginalSize: number,
  limit: number = DEFAULT_DECOMPRESS_LIMIT,
  backend: ZstdBackend = ZSTD_BACKEND,
): { ok: true; size: number } | { ok: false; code: DecompressErrorCode; message: string } {
  if (backend !== "native") {
    const r = decompressValidated(frame, declaredOriginalSize, limit, backend);
    return r.ok ? { ok: true, size: r.data.length } : r;
  }
  const refused = precheck(frame, declaredOriginalSize, limit);
  if (refused) return refused as { ok: false; code: DecompressErrorCode; message: string };
  const declared = declaredOriginalSize;
  const r = nativeDecodedSize(frame, declared);
  if (r.ok) {
    if (r.size !== declared) return { ok: false, code: "BAD_COMPRESSION", message: `zstd frame decoded to ${r.size} bytes but ${declared} were declared` };
    return r;
  }
  if (r.overflow) return { ok: false, code: "BAD_COMPRESSION", message: `zstd frame decodes to more than the declared ${declared} bytes` };
  return { ok: false, code: "BAD_COMPRESSION", message: `zstd decoding failed: ${r.message}` };
}

export function decompressValidated(
  frame: Uint8Array,
  declaredOriginalSize: number,
  limit: number = DEFAULT_DECOMPRESS_LIMIT,
  backend: ZstdBackend = ZSTD_BACKEND,
): DecompressResult {
  const refused = precheck(frame, declaredOriginalSize, limit);
  if (refused) return refused;
  const declared = declaredOriginalSize;

  if (backend === "native") {
    const r = nativeDecode(frame, declared);
    if (r.ok) {
      if (r.data.length !== declared) {
        return bad(`zstd frame decoded to ${r.data.length} bytes but ${declared} were declared`);
      }
      return { ok: true, data: r.data };
    }
    if (r.overflow) return bad(`zstd frame decodes to more than the declared ${declared} bytes`);
    return bad(`zstd decoding failed: ${r.message}`);
  }

  const out = new Uint8Array(declared);
  let written = 0;
  try {
    const decoder = new Decompress((chunk) => {
      if (chunk.length > declared - written) throw new OutputOverflow("overflow");
      out.set(chunk, written);
      written += chunk.length;
    });
    decoder.push(frame, true);
  } catch (err) {
    if (err instanceof OutputOverflow) {
      return bad(`zstd frame decodes to more than the declared ${declared} bytes`);
    }
    return bad(`zstd decoding failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (written !== declared) {
    return bad(`zstd frame decoded to ${written} bytes but ${declared} were declared`);
  }
  return { ok: true, data: out };
}

/**
 * A run of stored frames that sit back to back in `span` (the read path:
 * consecutive output events of one segment file), each checked like
 * decompressValidated checks one (a single frame, its Frame_Content_Size
 * equal to its declared size, within `limit`, a bounded window), then
 * decoded together: the native decoder takes concatenated frames in one call,
 * a third of the per-frame cost for 64 KiB frames (one zlib context per run
 * instead of per frame). libzstd checks each frame's decoded size against its
 * Frame_Content_Size, and the total is checked here, so the output splits
 * exactly at the declared sizes. The portable backend decodes frame by frame.
 */
export function decompressRun(
  span: Uint8Array,
  frames: ReadonlyArray<{ length: number; originalSize: number }>,
  limit: number = DEFAULT_DECOMPRESS_LIMIT,
  backend: ZstdBackend = ZSTD_BACKEND,
): DecompressResult {
  const checked = checkRun(span, frames, limit);
  if (typeof checked !== "number") return checked;
  const total = checked;
  if (frames.length === 0) return { ok: true, data: new Uint8Array(0) };
  if (backend === "native" && total > 0) return runResult(nativeDecode(span, total), total);
  return decodeFrameByFrame(span, frames, total, limit, backend);
}

/**
 * `decompressRun` into a buffer the caller owns (at least the run's declared
 * total + 1 bytes), with the native backend's reused context: nothing is
 * allocated per run, which spares a reader that decodes many runs the
 * garbage (external memory) of an output buffer each. The same checks, the
 * same verdicts; `data` is a view of `out`. The portable backend decodes as
 * decompressRun does and copies into `out`.
 */
export function decompressRunInto(
  span: Uint8Array,
  frames: ReadonlyArray<{ length: number; originalSize: number }>,
  out: Uint8Array,
  limit: number = DEFAULT_DECOMPRESS_LIMIT,
  backend: ZstdBackend = ZSTD_BACKEND,
): DecompressResult {
  const checked = checkRun(span, frames, limit);
  if (typeof checked !== "number") return checked;
  const total = checked;
  if (out.length < total + 1) throw new RangeError(`decompressRunInto: out holds ${out.length} bytes, the run needs ${total + 1}`);
  if (backend === "native" && total > 0) {
    const r = nativeDecodeInto(span, total, out);
    return runResult(r.ok ? { ok: true, data: out.subarray(0, r.size) } : r, total);
  }
  const r = frames.length === 0 ? ({ ok: true, data: new Uint8Array(0) } as const) : decodeFrameByFrame(span, frames, total, limit, backend);
  if (!r.ok) return r;
  out.set(r.data, 0);
  return { ok: true, data: out.subarray(0, r.data.length) };
}

/** Every frame of a run checked without decoding; the total declared size, or the refusal. */
function checkRun(span: Uint8Array, frames: ReadonlyArray<{ length: number; originalSize: number }>, limit: number): number | DecompressResult {
  let at = 0;
  let total = 0;
  for (const f of frames) {
    const frame = span.subarray(at, at + f.length);
    if (frame.length !== f.length) return bad(`run of ${frames.length} frames is shorter than its index (${span.length} bytes)`);
    const declared = f.originalSize;
    if (!Number.isInteger(declared) || declared < 0) return bad(`declared original size ${String(declared)} is not a non-negative integer`);
    if (declared > limit) return { ok: false, code: "PAYLOAD_TOO_LARGE", message: `declared original size ${declared} exceeds the limit of ${limit} bytes` };
    const scan = scanZstdFrame(frame);
    if (!scan.ok) return bad(`invalid zstd frame at ${at}: ${scan.reason}`);
    if (scan.contentSize !== declared) return bad(`zstd frame at ${at} declares ${String(scan.contentSize)} content bytes but ${declared} were declared`);
    if (scan.windowSize > DECODER_MAX_WINDOW_BYTES) return bad(`zstd Window_Size ${scan.windowSize} exceeds ${DECODER_MAX_WINDOW_BYTES}`);
    if (scan.frameSize !== frame.length) return bad(`frame at ${at} is ${scan.frameSize} bytes, its index says ${frame.length}`);
    at += f.length;
    total += declared;
  }
  if (at !== span.length) return bad(`run holds ${span.length - at} bytes after its frames`);
  return total;
}

function runResult(r: NativeDecodeResult, total: number): DecompressResult {
  if (!r.ok) return bad(r.overflow ? `zstd frames decode to more than the declared ${total} bytes` : `zstd decoding failed: ${r.message}`);
  if (r.data.length !== total) return bad(`zstd frames decoded to ${r.data.length} bytes but ${total} were declared`);
  return { ok: true, data: r.data };
}

function decodeFrameByFrame(
  span: Uint8Array,
  frames: ReadonlyArray<{ length: number; originalSize: number }>,
  total: number,
  limit: number,
  backend: ZstdBackend,
): DecompressResult {
  const out = new Uint8Array(total);
  let o = 0;
  let at = 0;
  for (const f of frames) {
    const r = decompressValidated(span.subarray(at, at + f.length), f.originalSize, limit, backend);
    if (!r.ok) return r;
    out.set(r.data, o);
    o += r.data.length;
    at += f.length;
  }
  return { ok: true, data: out };
}
