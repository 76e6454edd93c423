/**
 * RVBox shell-side zstd: compression (zstd-codec, WASM), validated
 * decompression (fzstd) and pure frame-structure helpers.
 */
export {
  ZSTD_MAGIC,
  ZSTD_BLOCK_SIZE_MAX,
  ZSTD_MIN_FRAME_BYTES,
  readZstdFrameContentSize,
  parseZstdFrameHeader,
  scanZstdFrame,
  encodeRawZstdFrame,
} from './frame-header.js';
export type {
  ZstdHeaderResult,
  ZstdFrameHeader,
  ZstdFrameHeaderResult,
  ZstdFrameScan,
  ZstdFrameScanResult,
} from './frame-header.js';
export {
  initZstd,
  isZstdReady,
  compress,
  DEFAULT_ZSTD_LEVEL,
  MIN_ZSTD_LEVEL,
  MAX_ZSTD_LEVEL,
  MAX_COMPRESS_INPUT_BYTES,
  ZSTD_INIT_TIMEOUT_MS,
} from './compress.js';
export {
  decompressValidated,
  DEFAULT_DECOMPRESS_LIMIT,
  DECODER_MAX_WINDOW_BYTES,
} from './decompress.js';
export type { DecompressResult, DecompressErrorCode } from './decompress.js';
