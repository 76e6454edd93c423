/**
 * The core's pure-function ports for the real daemons: zstd compression and
 * validated decompression on the backend chosen at startup (native node:zlib
 * where present, else zstd-codec + fzstd; call `await initZstd()` once
 * first), node:crypto SHA-256.
 */
import { createHash } from "node:crypto";
import { Code, type CorePorts } from "../../core/index.js";
import { compress, validateCompressed } from "../zstd/index.js";

export function realPorts(level = 3): CorePorts {
  return {
    compress: (raw) => compress(raw, level),
    checkCompressed: (frame, declared) => {
      const r = validateCompressed(frame, declared);
      if (r.ok) return { ok: true, size: r.size };
      return { ok: false, code: r.code === "PAYLOAD_TOO_LARGE" ? Code.PAYLOAD_TOO_LARGE : Code.BAD_COMPRESSION, message: r.message };
    },
    sha256: (d) => new Uint8Array(createHash("sha256").update(d).digest()),
  };
}

/** Bytes of a `ws` message (Buffer, ArrayBuffer or fragments) as a Uint8Array. */
export function messageBytes(data: unknown): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (Array.isArray(data)) return Buffer.concat(data as Buffer[]);
  throw new TypeError("unexpected ws message type");
}

/** Largest WebSocket message `ws` accepts: a little above the core's 1 MiB
 * envelope limit, so that an envelope slightly too large reaches the core
 * and is answered with a structured CODE_PAYLOAD_TOO_LARGE (R-T2, R-W10);
 * anything larger is cut by `ws` itself (close 1009) before it is buffered. */
export const TRANSPORT_MAX_PAYLOAD = 1024 * 1024 + 64 * 1024;
