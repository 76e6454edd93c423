// Ports for tests: real zstd frames (raw blocks, cheap) checked by the real
// validating decompressor, and node:crypto SHA-256.
import { createHash } from "node:crypto";
import type { CorePorts } from "../../core/ports.js";
import { Code } from "../../core/errors.js";
import { encodeRawZstdFrame } from "../../shells/zstd/frame-header.js";
import { decompressValidated } from "../../shells/zstd/decompress.js";

export const testPorts: CorePorts = {
  compress: (raw) => encodeRawZstdFrame(raw),
  checkCompressed: (frame, declared) => {
    const r = decompressValidated(frame, declared);
    if (r.ok) return { ok: true, size: r.data.length };
    return { ok: false, code: r.code === "PAYLOAD_TOO_LARGE" ? Code.PAYLOAD_TOO_LARGE : Code.BAD_COMPRESSION, message: r.message };
  },
  sha256: (d) => new Uint8Array(createHash("sha256").update(d).digest()),
};
