// The simulator's randomness: one seed, forked into named streams so that a
// change in how one part draws numbers does not shift every other part.
// Built on the core's sfc32 (core/rng.ts) so the whole world is replayable.

import { nextU32, rngFromSeed, type RngState } from "../core/rng.js";

/** 32-bit FNV-1a of a string, mixed with a number: used to name streams. */
export function hashLabel(seed: number, label: string): number {
  let h = (0x811c9dc5 ^ (seed >>> 0)) >>> 0;
  for (let i = 0; i < label.length; i++) {
    h ^= label.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d) >>> 0;
  h ^= h >>> 12;
  return h >>> 0;
}

export class Rng {
  private readonly st: RngState;
  constructor(readonly seed: number) {
    this.st = rngFromSeed(seed >>> 0);
  }
  /** An independent stream named `label`. */
  fork(label: string): Rng {
    return new Rng(hashLabel(this.seed, label));
  }
  u32(): number {
    return nextU32(this.st);
  }
  /** [0, 1) */
  float(): number {
    return nextU32(this.st) / 4294967296;
  }
  /** [0, n) */
  int(n: number): number {
    return n <= 0 ? 0 : Math.floor(this.float() * n);
  }
  /** [lo, hi] inclusive. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }
  chance(p: number): boolean {
    return p > 0 && this.float() < p;
  }
  pick<T>(xs: readonly T[]): T {
    if (xs.length === 0) throw new Error("pick from empty list");
    return xs[this.int(xs.length)]!;
  }
  /** Log-uniform integer in [lo, hi] (sizes from tiny to large). */
  logUniform(lo: number, hi: number): number {
    const a = Math.log(Math.max(1, lo));
    const b = Math.log(Math.max(1, hi));
    return Math.min(hi, Math.max(lo, Math.round(Math.exp(a + (b - a) * this.float()))));
  }
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    let i = 0;
    for (; i + 4 <= n; i += 4) {
      const v = nextU32(this.st);
      out[i] = v & 255;
      out[i + 1] = (v >>> 8) & 255;
      out[i + 2] = (v >>> 16) & 255;
      out[i + 3] = v >>> 24;
    }
    if (i < n) {
      const v = nextU32(this.st);
      for (let k = 0; i < n; i++, k++) out[i] = (v >>> (8 * k)) & 255;
    }
    return out;
  }
  /** 32 lowercase hex characters. */
  hex128(): string {
    let s = "";
    for (let i = 0; i < 4; i++) s += nextU32(this.st).toString(16).padStart(8, "0");
    return s;
  }
  uuid(): string {
    const h = this.hex128();
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
  }
}
