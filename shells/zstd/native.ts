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
import zlib from 'node:zlib';

export type ZstdBackend = 'native' | 'portable';

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
  if (typeof z.zstdCompressSync !== 'function' || typeof z.zstdDecompressSync !== 'function') return null;
  const c = z.constants;
  if (
    !c ||
    c['ZSTD_c_compressionLevel'] === undefined ||
    c['ZSTD_c_contentSizeFlag'] === undefined ||
    c['ZSTD_c_checksumFlag'] === undefined ||
    c['ZSTD_d_windowLogMax'] === undefined
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
      [c['ZSTD_c_compressionLevel']!]: level,
      [c['ZSTD_c_contentSizeFlag']!]: 1,
      [c['ZSTD_c_checksumFlag']!]: 0,
    },
  };
}

/**
 * One native zstd frame of `raw` at `level`. The caller checks the level and
 * the input size and re-parses the frame header (compress.ts).
 */
export function nativeCompress(raw: Uint8Array, level: number): Uint8Array {
  if (!api) throw new Error('node:zlib has no zstd in this Node');
  const out = api.zstdCompressSync(raw, compressOptions(raw, level));
  return new Uint8Array(out.buffer, out.byteOffset, out.length);
}

export type NativeDecodeResult =
  | { ok: true; data: Uint8Array }
  | { ok: false; overflow: boolean; message: string };

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
  if (!api) throw new Error('node:zlib has no zstd in this Node');
  const c = api.constants;
  let out: Buffer;
  try {
    out = api.zstdDecompressSync(frame, {
      maxOutputLength: Math.max(1, declared),
      chunkSize: Math.max(ZLIB_MIN_CHUNK, declared + 1),
      params: { [c['ZSTD_d_windowLogMax']!]: NATIVE_WINDOW_LOG_MAX },
    });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    // ERR_BUFFER_TOO_LARGE: zlib's maxOutputLength. ZSTD_error_dstSize_tooSmall:
    // libzstd itself stops a frame that produces more than its own
    // Frame_Content_Size (which equals the declared size by now).
    if (code === 'ERR_BUFFER_TOO_LARGE' || code === 'ZSTD_error_dstSize_tooSmall') {
      return { ok: false, overflow: true, message: 'overflow' };
    }
    return { ok: false, overflow: false, message: err instanceof Error ? err.message : String(err) };
  }
  if (out.length > declared) return { ok: false, overflow: true, message: 'overflow' };
  return { ok: true, data: new Uint8Array(out.buffer, out.byteOffset, out.length) };
}

function selfTest(): boolean {
  if (!api) return false;
  try {
    const raw = new TextEncoder().encode('rvbox native zstd self-test\n'.repeat(8));
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
  const wanted = typeof process !== 'undefined' ? process.env['RVBOX_ZSTD'] : undefined;
  if (wanted === 'portable') return 'portable';
  return NATIVE_ZSTD_AVAILABLE ? 'native' : 'portable';
}

/** The backend `compress`, `decompressValidated` and `initZstd` use by default. */
export const ZSTD_BACKEND: ZstdBackend = choose();

/** Every backend that works in this process (native first when present). */
export const ZSTD_BACKENDS: readonly ZstdBackend[] = NATIVE_ZSTD_AVAILABLE ? ['native', 'portable'] : ['portable'];
