// A small seeded PRNG (sfc32) whose whole state is four uint32s, so it lives
// inside reducer state, survives structured cloning and is replayable. Core
// never draws randomness from anywhere else.

export interface RngState {
  a: number;
  b: number;
  c: number;
  d: number;
}

export function rngFromSeed(seed: number): RngState {
  // splitmix32 to spread a small seed over the four words.
  let s = seed >>> 0;
  const next = (): number => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  const st = { a: next(), b: next(), c: next(), d: next() };
  for (let i = 0; i < 12; i++) nextU32(st);
  return st;
}

/** Next uint32; advances the state in place. */
export function nextU32(st: RngState): number {
  const t = (((st.a + st.b) >>> 0) + st.d) >>> 0;
  st.d = (st.d + 1) >>> 0;
  st.a = st.b ^ (st.b >>> 9);
  st.b = (st.c + (st.c << 3)) >>> 0;
  st.c = ((st.c << 21) | (st.c >>> 11)) >>> 0;
  st.c = (st.c + t) >>> 0;
  return t >>> 0;
}

/** Uniform float in [0, 1). */
export function nextFloat(st: RngState): number {
  return nextU32(st) / 4294967296;
}

/** Uniform integer in [0, n). */
export function nextInt(st: RngState, n: number): number {
  return Math.floor(nextFloat(st) * n);
}

/** 128 random bits as 32 lowercase hex characters. */
export function nextHex128(st: RngState): string {
  let s = "";
  for (let i = 0; i < 4; i++) s += nextU32(st).toString(16).padStart(8, "0");
  return s;
}
