/**
 * RVBox shell-side zstd: compression and validated decompression, native
 * (node:zlib) where this Node has zstd, else portable (zstd-codec WASM to
 * compress, fzstd to decode); and pure frame-structure helpers.
 */
export { ZSTD_BACKEND, ZSTD_BACKENDS, NATIVE_ZSTD_AVAILABLE } from "./native.js";
export type { ZstdBackend } from "./native.js";
export {
  ZSTD_MAGIC,
  ZSTD_BLOCK_SIZE_MAX,
  ZSTD_MIN_FRAME_BYTES,
  readZstdFrameContentSize,
  parseZstdFrameHeader,
  scanZstdFrame,
  encodeRawZstdFrame,
} from "./frame-header.js";
export type {
  ZstdHeaderResult,
  ZstdFrameHeader,
  ZstdFrameHeaderResult,
  ZstdFrameScan,
  ZstdFrameScanResult,
} from "./frame-header.js";
export {
  initZstd,
  isZstdReady,
  compress,
  DEFAULT_ZSTD_LEVEL,
  MIN_ZSTD_LEVEL,
  MAX_ZSTD_LEVEL,
  MAX_COMPRESS_INPUT_BYTES,
  ZSTD_INIT_TIMEOUT_MS,
} from "./compress.js";
export {
  decompressValidated,
  validateCompressed,
  decompressRun,
  decompressRunInto,
  DEFAULT_DECOMPRESS_LIMIT,
  DECODER_MAX_WINDOW_BYTES,
} from "./decompress.js";
export type { DecompressResult, DecompressErrorCode } from "./decompress.js";
