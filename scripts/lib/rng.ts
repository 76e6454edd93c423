// The scripts' seeded random choices.
/** A small seeded PRNG (mulberry32): the same seed makes the same choices (fuzz:control, chaos). */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 1;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
  /** One key of `w`, with probability proportional to its weight. */
  weighted<T extends string>(w: Partial<Record<T, number>>): T {
    const es = Object.entries(w) as Array<[T, number]>;
    let r = this.next() * es.reduce((s, [, v]) => s + v, 0);
    for (const [k, v] of es) if ((r -= v) < 0) return k;
    return es[es.length - 1]![0];
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** Log-uniform in [lo, hi]: as many 1 KB ids as 1 MB ones. */
  logSize(lo: number, hi: number): number {
    return Math.round(Math.exp(Math.log(lo) + this.next() * (Math.log(hi) - Math.log(lo))));
  }
  bytes(n: number): Uint8Array {
    const b = new Uint8Array(n);
    for (let i = 0; i < n; i++) b[i] = Math.floor(this.next() * 256);
    return b;
  }
}
