// The run's fingerprint: a SHA-256 over one line per delivered input and per
// emitted effect (kind plus a digest of any bytes). Same seed, same plan,
// same core => same hash; a difference means nondeterminism crept in.

import { createHash, type Hash } from "node:crypto";
import { shortDigest } from "./wire.js";

export class TraceHash {
  private h: Hash = createHash("sha256");
  private buf: string[] = [];
  count = 0;

  add(line: string): void {
    this.buf.push(line);
    this.count++;
    if (this.buf.length >= 256) this.flush();
  }

  bytes(b: Uint8Array): string {
    return `${b.length}:${shortDigest(b)}`;
  }

  private flush(): void {
    if (this.buf.length === 0) return;
    this.h.update(this.buf.join("\n"));
    this.h.update("\n");
    this.buf = [];
  }

  digest(): string {
    this.flush();
    return this.h.copy().digest("hex").slice(0, 32);
  }
}
