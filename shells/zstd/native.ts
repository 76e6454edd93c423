/**
 * zstd through `node:zlib` (libzstd inside Node: `zstdCompressSync` /
 * `zstdDecompressSync`, Node >= 22.15 and >= 23.8), and the choice between
 * it and the portable pair (zstd-codec to compress, fzstd to decode).
 *
 * Detection happens once, when this module loads: both functions and the
 * parameter constants must exist, and a small frame must round-trip with its
 * Frame_Content_Size. Where that fails (an older Node, a Node built without
 * zstd), `ZSTD_BACKEND` is `portable`. `RVBOX_ZSTD=portable` in the
 * environment forces the portable pair even where native zstd exists (for
 * comparisons and as an escape hatch); `RVBOX_ZSTD=native` asks for native
 * and still falls back when it is missing.
 *
 * Both backends produce and accept the same frames (test/shells/zstd/
 * cross-decode.test.ts decodes each one's frames with the other).
 */
import zlib from "node:zlib";
import { scanZstdFrame } from "./frame-header.js";

export type ZstdBackend = "native" | "portable";

/** Largest Window_Size the native decoder may use: 2^20 = DECODER_MAX_WINDOW_BYTES. */
const NATIVE_WINDOW_LOG_MAX = 20;
/** node:zlib refuses chunkSize below 64 (Z_MIN_CHUNK). */
const ZLIB_MIN_CHUNK = 64;

interface NativeZstd {
  zstdCompressSync(buf: Uint8Array, opts: object): Buffer;
  zstdDecompressSync(buf: Uint8Array, opts: object): Buffer;
  constants: Record<string, number>;
}

function nativeApi(): NativeZstd | null {
  const z = zlib as unknown as Partial<NativeZstd>;
  if (typeof z.zstdCompressSync !== "function" || typeof z.zstdDecompressSync !== "function") return null;
  const c = z.constants;
  if (
    !c ||
    c.ZSTD_c_compressionLevel === undefined ||
    c.ZSTD_c_contentSizeFlag === undefined ||
    c.ZSTD_c_checksumFlag === undefined ||
    c.ZSTD_d_windowLogMax === undefined
  ) {
    return null;
  }
  return z as NativeZstd;
}

const api = nativeApi();

function compressOptions(raw: Uint8Array, level: number): object {
  const c = api!.constants;
  return {
    pledgedSrcSize: raw.length,
    params: {
      [c.ZSTD_c_compressionLevel!]: level,
      [c.ZSTD_c_contentSizeFlag!]: 1,
      [c.ZSTD_c_checksumFlag!]: 0,
    },
  };
}

/** One native zstd frame of `raw` at `level` with a fresh context (`zstdCompressSync`). */
export function nativeCompressOneShot(raw: Uint8Array, level: number): Uint8Array {
  if (!api) throw new Error("node:zlib has no zstd in this Node");
  const out = api.zstdCompressSync(raw, compressOptions(raw, level));
  return new Uint8Array(out.buffer, out.byteOffset, out.length);
}

/**
 * One native zstd frame of `raw` at `level`. The caller checks the level and
 * the input size and re-parses the frame header (compress.ts).
 *
 * `zstdCompressSync` builds a zlib stream object, a libzstd context and its
 * workspace per call; for a 64 KiB output chunk that set-up and the garbage
 * it leaves cost about a third of the compression itself (the agent's
 * profile). So one context (for the level last used) is kept and reset before each frame,
 * compressing into one scratch buffer of ZSTD_compressBound(input) bytes, in
 * one ZSTD_e_end call: libzstd then takes the input size as the pledged size
 * (the same parameters, and byte for byte the same frame, as the one-shot
 * call; test/shells/zstd/compress.test.ts) and writes Frame_Content_Size.
 * The frame is copied out of the scratch buffer. Like the reused decoder
 * below, this drives node:zlib's stream handle directly, which is not public
 * API: when its members are missing, on any error, or when the result is not
 * exactly one complete frame of the input's size, it falls back to
 * `zstdCompressSync` (and builds a fresh context next time).
 */
export function nativeCompress(raw: Uint8Array, level: number): Uint8Array {
  if (!api) throw new Error("node:zlib has no zstd in this Node");
  const e = reusedEncoder(level);
  if (e) {
    const cap = compressBound(raw.length);
    if (encodeScratch.length < cap) encodeScratch = new Uint8Array(cap);
    e.error = null;
    try {
      e.handle.reset();
      e.handle.writeSync(api.constants.ZSTD_e_end ?? 2, raw, 0, raw.length, encodeScratch, 0, cap);
    } catch (err) {
      e.error = { message: err instanceof Error ? err.message : String(err), code: "" };
    }
    if (!e.error && e.state[1] === 0 && e.state[0]! > 0) {
      const produced = cap - e.state[0]!;
      const frame = encodeScratch.slice(0, produced);
      const scan = scanZstdFrame(frame);
      if (scan.ok && scan.frameSize === produced && scan.contentSize === raw.length) return frame;
    }
    dropEncoder();
  }
  return nativeCompressOneShot(raw, level);
}

/** ZSTD_COMPRESSBOUND: the largest frame libzstd makes of `n` input bytes. */
function compressBound(n: number): number {
  return n + (n >>> 8) + (n < 128 * 1024 ? (128 * 1024 - n) >>> 11 : 0);
}

/** The one reused encoder (an agent compresses at one level; another level replaces it). */
let encoder: ReusedEncoder | null = null;
let encodersUnavailable = false;
let encodeScratch = new Uint8Array(compressBound(64 * 1024));

interface ReusedEncoder {
  level: number;
  handle: ZstdStreamHandle;
  state: Uint32Array;
  error: { message: string; code: string } | null;
}

function reusedEncoder(level: number): ReusedEncoder | null {
  if (encoder?.level === level) return encoder;
  if (encoder) dropEncoder();
  if (encodersUnavailable || !api) return null;
  try {
    const c = api.constants;
    const Ctor = (zlib as unknown as { ZstdCompress?: new (o: object) => { _handle?: unknown; _writeState?: unknown; on(e: string, f: () => void): void } })
      .ZstdCompress;
    if (typeof Ctor !== "function") throw new Error("no ZstdCompress");
    const engine = new Ctor({
      params: {
        [c.ZSTD_c_compressionLevel!]: level,
        [c.ZSTD_c_contentSizeFlag!]: 1,
        [c.ZSTD_c_checksumFlag!]: 0,
      },
    });
    engine.on("error", () => {});
    const handle = engine._handle as Partial<ZstdStreamHandle> | undefined;
    const state = engine._writeState;
    if (!handle || typeof handle.writeSync !== "function" || typeof handle.reset !== "function" || !(state instanceof Uint32Array) || state.length < 2) {
      throw new Error("node:zlib internals differ");
    }
    const e: ReusedEncoder = { level, handle: handle as ZstdStreamHandle, state, error: null };
    e.handle.onerror = (message, _errno, code) => {
      e.error = { message, code };
    };
    encoder = e;
    return e;
  } catch {
    encodersUnavailable = true;
    return null;
  }
}

function dropEncoder(): void {
  const e = encoder;
  encoder = null;
  try {
    e?.handle.close();
  } catch {
    // gone already
  }
}

export type NativeDecodeResult = { ok: true; data: Uint8Array } | { ok: false; overflow: boolean; message: string };

/**
 * Decode one frame with node:zlib, producing at most `declared` bytes.
 *
 * `maxOutputLength: declared` makes zlib throw as soon as its output passes
 * the declared size, and `chunkSize: declared + 1` makes its one output
 * buffer (allocated when the decoder is created) exactly one byte larger than
 * the declared size: a frame that decodes to exactly `declared` bytes fills
 * it without asking for another, and one that decodes to more overflows
 * `maxOutputLength` inside that same buffer, before any second one. So the
 * output side never allocates more than declared + 1 bytes (64 for tiny
 * frames: zlib's minimum chunk), whatever the frame claims or contains.
 * `ZSTD_d_windowLogMax` bounds libzstd's own window buffer at 1 MiB.
 * (`maxOutputLength` must be >= 1, so a declared 0 is checked by length.)
 */
export function nativeDecode(frame: Uint8Array, declared: number): NativeDecodeResult {
  if (!api) throw new Error("node:zlib has no zstd in this Node");
  const c = api.constants;
  let out: Buffer;
  try {
    out = api.zstdDecompressSync(frame, {
      maxOutputLength: Math.max(1, declared),
      chunkSize: Math.max(ZLIB_MIN_CHUNK, declared + 1),
      params: { [c.ZSTD_d_windowLogMax!]: NATIVE_WINDOW_LOG_MAX },
    });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    // ERR_BUFFER_TOO_LARGE: zlib's maxOutputLength. ZSTD_error_dstSize_tooSmall:
    // libzstd itself stops a frame that produces more than its own
    // Frame_Content_Size (which equals the declared size by now).
    if (code === "ERR_BUFFER_TOO_LARGE" || code === "ZSTD_error_dstSize_tooSmall") {
      return { ok: false, overflow: true, message: "overflow" };
    }
    return { ok: false, overflow: false, message: err instanceof Error ? err.message : String(err) };
  }
  if (out.length > declared) return { ok: false, overflow: true, message: "overflow" };
  return { ok: true, data: new Uint8Array(out.buffer, out.byteOffset, out.length) };
}

/**
 * One reused native decoder for validation only (the server checks every
 * incoming frame against its declared size, R-T3, and keeps the frame, not
 * the output): `zstdDecompressSync` builds a zlib stream object, a libzstd
 * context and an output buffer per call, which cost more than the decoding
 * of a 64 KiB frame. Here one context is reset before each frame and decodes
 * into one scratch buffer of declared + 1 bytes (the same bound as
 * `nativeDecode`: output past the declared size is detected inside it,
 * nothing more is ever written). This drives node:zlib's stream handle
 * directly (`_handle.writeSync`, `_writeState`), which is not public API:
 * when those members are missing (another Node), or after any error, it falls
 * back to `nativeDecode`, so the verdict never depends on this path existing.
 */
interface ZstdStreamHandle {
  writeSync(flush: number, input: Uint8Array, inOff: number, inLen: number, out: Uint8Array, outOff: number, outLen: number): void;
  reset(): void;
  close(): void;
  onerror: (message: string, errno: number, code: string) => void;
}

interface ReusedDecoder {
  handle: ZstdStreamHandle;
  state: Uint32Array;
  error: { message: string; code: string } | null;
}

let reused: ReusedDecoder | null = null;
let reuseUnavailable = false;
let scratch = new Uint8Array(64 * 1024 + 1);

function reusedDecoder(): ReusedDecoder | null {
  if (reused || reuseUnavailable || !api) return reused;
  try {
    const c = api.constants;
    const Ctor = (zlib as unknown as { ZstdDecompress?: new (o: object) => { _handle?: unknown; _writeState?: unknown; on(e: string, f: () => void): void } })
      .ZstdDecompress;
    if (typeof Ctor !== "function") throw new Error("no ZstdDecompress");
    const engine = new Ctor({ params: { [c.ZSTD_d_windowLogMax!]: NATIVE_WINDOW_LOG_MAX } });
    engine.on("error", () => {});
    const handle = engine._handle as Partial<ZstdStreamHandle> | undefined;
    const state = engine._writeState;
    if (!handle || typeof handle.writeSync !== "function" || typeof handle.reset !== "function" || !(state instanceof Uint32Array) || state.length < 2) {
      throw new Error("node:zlib internals differ");
    }
    const d: ReusedDecoder = { handle: handle as ZstdStreamHandle, state, error: null };
    d.handle.onerror = (message, _errno, code) => {
      d.error = { message, code };
    };
    reused = d;
  } catch {
    reuseUnavailable = true;
  }
  return reused;
}

function dropReused(): void {
  const d = reused;
  reused = null;
  try {
    d?.handle.close();
  } catch {
    // gone already
  }
}

/**
 * The decoded size of one frame, decoding at most `declared` + 1 bytes
 * (the caller has checked the frame's structure, as for `nativeDecode`).
 * `ok` with the exact size produced, or an overflow / failure.
 */
export function nativeDecodedSize(frame: Uint8Array, declared: number): { ok: true; size: number } | { ok: false; overflow: boolean; message: string } {
  if (!api) throw new Error("node:zlib has no zstd in this Node");
  const d = reusedDecoder();
  if (d) {
    const cap = declared + 1;
    if (scratch.length < cap) scratch = new Uint8Array(cap);
    d.error = null;
    try {
      d.handle.reset();
      d.handle.writeSync(api.constants.ZSTD_e_end ?? 2, frame, 0, frame.length, scratch, 0, cap);
    } catch (err) {
      d.error = { message: err instanceof Error ? err.message : String(err), code: "" };
    }
    if (!d.error) {
      const produced = cap - d.state[0]!;
      const leftIn = d.state[1]!;
      if (produced > declared) return { ok: false, overflow: true, message: "overflow" };
      if (leftIn === 0) return { ok: true, size: produced };
    }
    // An error, or input left over: decide on the one-shot path, from a fresh context next time.
    dropReused();
  }
  const r = nativeDecode(frame, declared);
  return r.ok ? { ok: true, size: r.data.length } : r;
}

/**
 * Decode `span` (one frame or several back to back) into `out`, producing at
 * most `declared` bytes, with the reused context (no allocation: the caller
 * owns `out`, at least declared + 1 bytes, so a frame that decodes to more
 * overflows inside it and is refused). The same verdicts as `nativeDecode`:
 * after any error, or input left over, the span is decided by the one-shot
 * path (and copied into `out` if it turns out good), and the context is
 * rebuilt next time.
 */
export function nativeDecodeInto(
  span: Uint8Array,
  declared: number,
  out: Uint8Array,
): { ok: true; size: number } | { ok: false; overflow: boolean; message: string } {
  if (!api) throw new Error("node:zlib has no zstd in this Node");
  if (out.length < declared + 1) throw new RangeError(`nativeDecodeInto: out holds ${out.length} bytes, needs ${declared + 1}`);
  const d = reusedDecoder();
  if (d) {
    const cap = declared + 1;
    d.error = null;
    let inOff = 0;
    let outOff = 0;
    try {
      d.handle.reset();
      // One call decodes up to a frame's end; a run of frames takes one call per frame.
      for (let calls = 0; inOff < span.length && outOff < cap && calls <= span.length; calls++) {
        d.handle.writeSync(api.constants.ZSTD_e_end ?? 2, span, inOff, span.length - inOff, out, outOff, cap - outOff);
        if (d.error) break;
        const taken = span.length - inOff - d.state[1]!;
        const produced = cap - outOff - d.state[0]!;
        inOff += taken;
        outOff += produced;
        if (taken === 0 && produced === 0) break;
      }
    } catch (err) {
      d.error = { message: err instanceof Error ? err.message : String(err), code: "" };
    }
    if (!d.error) {
      if (outOff > declared) return { ok: false, overflow: true, message: "overflow" };
      if (inOff === span.length) return { ok: true, size: outOff };
    }
    dropReused();
  }
  const r = nativeDecode(span, declared);
  if (!r.ok) return r;
  out.set(r.data, 0);
  return { ok: true, size: r.data.length };
}

function selfTest(): boolean {
  if (!api) return false;
  try {
    const raw = new TextEncoder().encode("rvbox native zstd self-test\n".repeat(8));
    const frame = nativeCompress(raw, 3);
    // Frame_Content_Size present: FHD's FCS flag or Single_Segment set.
    const fhd = frame[4] ?? 0;
    if ((fhd & 0xe0) === 0) return false;
    const back = nativeDecode(frame, raw.length);
    return back.ok && back.data.length === raw.length && back.data.every((b, i) => b === raw[i]);
  } catch {
    return false;
  }
}

/** True when node:zlib has working zstd in this process. */
export const NATIVE_ZSTD_AVAILABLE: boolean = selfTest();

function choose(): ZstdBackend {
  const wanted = typeof process !== "undefined" ? process.env.RVBOX_ZSTD : undefined;
  if (wanted === "portable") return "portable";
  return NATIVE_ZSTD_AVAILABLE ? "native" : "portable";
}

/** The backend `compress`, `decompressValidated` and `initZstd` use by default. */
export const ZSTD_BACKEND: ZstdBackend = choose();

/** Every backend that works in this process (native first when present). */
export const ZSTD_BACKENDS: readonly ZstdBackend[] = NATIVE_ZSTD_AVAILABLE ? ["native", "portable"] : ["portable"];
