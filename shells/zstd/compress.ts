/**
 * zstd compression: native (`node:zlib`, see native.ts) where this Node has
 * it, otherwise through `zstd-codec` (Emscripten build of libzstd, WASM with
 * an asm.js fallback; CommonJS, no native addon, no install script).
 *
 * Usage: `await initZstd()` once (on the portable backend it instantiates the
 * WASM module, ~30 ms; on the native one it does nothing), then call the
 * synchronous `compress` as often as needed. Both backends enforce the same
 * limits below and re-check the same frame property (exact content size), so
 * callers cannot tell them apart except by speed.
 *
 * Frame format: `zstd-codec`'s `Simple.compress` is libzstd's one-shot
 * `ZSTD_compress`, which always writes Frame_Content_Size (verified for sizes
 * 0 .. 512 KiB; the empty input gives a 9-byte Single_Segment frame with FCS 0)
 * and no checksum. `compress` re-parses every frame it produces and throws if
 * the content size is missing or wrong, so callers can rely on it. (The
 * library's *streaming* API does not write the content size; it is not used.)
 *
 * Limits, found by experiment: the WASM heap is fixed at 16 MiB (no memory
 * growth). One-shot compression needs roughly input + output + level
 * workspace; at 1 MiB, levels >= 19 already abort with OOM, and an abort
 * kills the whole module instance. `compress` therefore refuses inputs over
 * `MAX_COMPRESS_INPUT_BYTES` (256 KiB: 4x an RVBox chunk; every level -7..22
 * was verified at 512 KiB) and levels outside -7..22.
 */
import { createRequire } from "node:module";
import { readZstdFrameContentSize } from "./frame-header.js";
import { nativeCompress, ZSTD_BACKEND, type ZstdBackend } from "./native.js";
import type { ZstdCodecPackage, ZstdSimple } from "./zstd-codec.js";

export const DEFAULT_ZSTD_LEVEL = 3;
export const MIN_ZSTD_LEVEL = -7;
export const MAX_ZSTD_LEVEL = 22;
/** Largest input `compress` accepts (see the module comment). */
export const MAX_COMPRESS_INPUT_BYTES = 256 * 1024;
/** `initZstd` gives up if the WASM runtime has not come up by then. */
export const ZSTD_INIT_TIMEOUT_MS = 15_000;

const require = createRequire(import.meta.url);

let simple: ZstdSimple | null = null;
let initPromise: Promise<void> | null = null;

/**
 * Load and instantiate the codec. Idempotent and safe to call concurrently;
 * a failed attempt can be retried. After `compress` reports a codec abort,
 * call it again to get a fresh WASM instance.
 */
export function initZstd(backend: ZstdBackend = ZSTD_BACKEND): Promise<void> {
  if (backend === "native" || simple) return Promise.resolve();
  if (initPromise) return initPromise;
  const attempt = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`zstd-codec did not initialise within ${ZSTD_INIT_TIMEOUT_MS} ms`));
    }, ZSTD_INIT_TIMEOUT_MS);
    timer.unref();
    try {
      const pkg = require("zstd-codec") as ZstdCodecPackage;
      pkg.ZstdCodec.run((zstd) => {
        clearTimeout(timer);
        try {
          simple = new zstd.Simple();
          resolve();
        } catch (err) {
          reject(err);
        }
      });
    } catch (err) {
      clearTimeout(timer);
      reject(err);
    }
  });
  initPromise = attempt.catch((err: unknown) => {
    initPromise = null;
    throw err;
  });
  return initPromise;
}

/**
 * True when `compress` can run on `backend`: always for native, once
 * `initZstd()` has completed (and no abort has happened since) for portable.
 */
export function isZstdReady(backend: ZstdBackend = ZSTD_BACKEND): boolean {
  return backend === "native" || simple !== null;
}

/**
 * Compress `raw` into exactly one zstd frame that carries its exact
 * Frame_Content_Size. Synchronous; on the portable backend it requires a
 * completed `initZstd()`. Throws on: not initialised, input over
 * MAX_COMPRESS_INPUT_BYTES, a level that is not an integer in -7..22, or a
 * codec failure. Level 0 means the default (3), as in libzstd.
 */
export function compress(raw: Uint8Array, level: number = DEFAULT_ZSTD_LEVEL, backend: ZstdBackend = ZSTD_BACKEND): Uint8Array {
  const codec = simple;
  if (backend === "portable" && !codec) throw new Error("zstd codec is not initialised: await initZstd() first");
  if (!(raw instanceof Uint8Array)) throw new TypeError("compress: raw must be a Uint8Array");
  if (raw.length > MAX_COMPRESS_INPUT_BYTES) {
    throw new RangeError(`compress: input of ${raw.length} bytes exceeds MAX_COMPRESS_INPUT_BYTES (${MAX_COMPRESS_INPUT_BYTES})`);
  }
  if (!Number.isInteger(level) || level < MIN_ZSTD_LEVEL || level > MAX_ZSTD_LEVEL) {
    throw new RangeError(`compress: level must be an integer in ${MIN_ZSTD_LEVEL}..${MAX_ZSTD_LEVEL}, got ${level}`);
  }

  if (backend === "native") return checkedFrame(nativeCompress(raw, level === 0 ? DEFAULT_ZSTD_LEVEL : level), raw, "node:zlib");

  let frame: Uint8Array | null;
  try {
    frame = codec!.compress(raw, level);
  } catch (err) {
    // An Emscripten abort (e.g. OOM) leaves the instance unusable: drop it so
    // the next initZstd() builds a fresh one.
    simple = null;
    initPromise = null;
    throw new Error(`zstd-codec aborted; call initZstd() again before compressing: ${String(err)}`);
  }
  if (!frame) throw new Error("zstd-codec failed to compress (returned null)");
  return checkedFrame(frame, raw, "zstd-codec");
}

function checkedFrame(frame: Uint8Array, raw: Uint8Array, who: string): Uint8Array {
  const header = readZstdFrameContentSize(frame);
  if (!header.ok || header.contentSize !== raw.length) {
    throw new Error(
      `${who} produced a frame without the expected Frame_Content_Size (${header.ok ? String(header.contentSize) : header.reason}, expected ${raw.length})`,
    );
  }
  return frame;
}
