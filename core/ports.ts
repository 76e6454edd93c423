// Pure functions the core needs but does not implement itself. They are
// deterministic (same input, same output, no I/O), so injecting them keeps
// every reducer pure, like an injected PRNG. Shells pass node:zlib zstd (or
// zstd-codec/fzstd where node:zlib has none) and
// node:crypto; the simulator passes raw-block zstd frames and node:crypto.

import type { Code } from "./errors.js";

export type DecompressResult = { ok: true; size: number } | { ok: false; code: Code; message: string };

export interface CorePorts {
  /** Compress one chunk (≤ 64 KiB) into one zstd frame with its content size. */
  compress(raw: Uint8Array): Uint8Array;
  /**
   * Check a zstd frame against its declared original size: the declared and
   * header sizes are checked before allocation, the actual size after. Never
   * throws.
   */
  checkCompressed(frame: Uint8Array, declaredSize: number): DecompressResult;
  sha256(data: Uint8Array): Uint8Array;
}
