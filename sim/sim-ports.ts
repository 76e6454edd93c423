// CorePorts for the simulator: raw-block zstd frames (pure), a validating
// checker, and SHA-256 from node:crypto. All deterministic.

import { createHash } from "node:crypto";
import type { CorePorts } from "../core/ports.js";
import { checkZstdFrame, encodeRawZstdFrame } from "./zstd-raw.js";

export function sha256(data: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(data).digest());
}

export const simPorts: CorePorts = {
  compress: encodeRawZstdFrame,
  checkCompressed: (frame, declared) => checkZstdFrame(frame, declared),
  sha256,
};
