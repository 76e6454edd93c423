// The run's fingerprint: a SHA-256 over one line per delivered input and per
// emitted effect (kind plus a digest of any bytes). Same seed, same plan,
// same core => same hash; a difference means nondeterminism crept in.

import { createHash, type Hash } from "node:crypto";
import { shortDigest } from "./wire.js";

export class TraceHash {
  private h: Hash = createHash("sha256");
  /** Lines not yet hashed, each followed by "\n" (hashed 256 at a time: the same bytes as line by line). */
  private buf = "";
  private pending = 0;
  count = 0;

  add(line: string): void {
    this.buf += `${line}\n`;
    this.count++;
    if (++this.pending >= 256) this.flush();
  }

  bytes(b: Uint8Array): string {
    return `${b.length}:${shortDigest(b)}`;
  }

  private flush(): void {
    if (this.pending === 0) return;
    this.h.update(this.buf);
    this.buf = "";
    this.pending = 0;
  }

  digest(): string {
    this.flush();
    return this.h.copy().digest("hex").slice(0, 32);
  }
}
