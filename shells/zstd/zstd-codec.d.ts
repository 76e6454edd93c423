/**
 * Minimal types for the parts of `zstd-codec` (0.1.x, CommonJS + Emscripten
 * WASM, ships no types) that RVBox uses. This is a plain module of types, not
 * an ambient `declare module 'zstd-codec'`, so it cannot clash with other
 * declarations; `compress.ts` loads the package with `createRequire` and casts
 * to `ZstdCodecPackage`.
 */

export interface ZstdSimple {
  /**
   * One-shot ZSTD_compress (writes Frame_Content_Size). Returns null when the
   * codec reports an error. `level` falsy (0/undefined) means level 3.
   */
  compress(content: Uint8Array, level?: number): Uint8Array | null;
  /** Returns null on error or when the frame lacks a content size. */
  decompress(compressed: Uint8Array): Uint8Array | null;
}

export interface ZstdStreaming {
  /** Streaming compression: does NOT write Frame_Content_Size. */
  compress(content: Uint8Array, level?: number): Uint8Array | null;
  compressChunks(chunks: Iterable<Uint8Array>, sizeHint?: number, level?: number): Uint8Array | null;
  decompress(compressed: Uint8Array, sizeHint?: number): Uint8Array | null;
}

export interface ZstdApi {
  Simple: new () => ZstdSimple;
  Streaming: new () => ZstdStreaming;
}

export interface ZstdCodecStatic {
  /** Instantiates a fresh WASM module, then calls `onReady` (asynchronously). */
  run(onReady: (zstd: ZstdApi) => void): void;
}

export interface ZstdCodecPackage {
  ZstdCodec: ZstdCodecStatic;
}
