// What the chaos run's commands print, and the same bytes computed here, so
// every byte read back through FollowOutput can be checked against what the
// process must have written. Each line carries the command's nonce, its line
// number and a checksum; the payload is derived from (seed, line number), so
// the verifier knows the exact stream.
//
// The generator is one mawk/POSIX awk program (awk is on every agent host and
// costs far less CPU than a node process per command). All arithmetic stays
// below 2^53, so awk's doubles and this file's numbers agree exactly.

export interface GenParams {
  lines: number;
  minLen: number;
  maxLen: number;
  seed: number;
  /** 1: payload made of a fresh MINSTD value every 8 hex digits (compresses about 2x); 0: one value repeated. */
  noisy: 0 | 1;
  /** Every k-th line goes to stderr (0: none). */
  errEvery: number;
}

const M = 2147483647;

function lineState(seed: number, i: number): number {
  let x = (seed + i * 7919) % M;
  if (x === 0) x = 1;
  return (x * 48271) % M;
}

const hex8 = (x: number): string => x.toString(16).padStart(8, "0");

/** The awk program (a single-quoted shell word) that prints GenParams' lines. */
export function genAwk(nonce: string, p: GenParams): string {
  const prog =
    'function w(t){if(o)printf "%s",t > "/dev/stderr";else printf "%s",t}' +
    "BEGIN{for(i=1;i<=L;i++){x=(s+i*7919)%2147483647;if(x==0)x=1;x=(x*48271)%2147483647;" +
    "len=a+x%(b-a+1);c=(x*31+len*7+i)%1000000007;o=(e>0&&i%e==0);" +
    'w(sprintf("%s %d %d ",n,i,c));' +
    'if(z){y=x;r=len;while(r>0){y=(y*48271)%2147483647;h=sprintf("%08x",y);if(r<8)h=substr(h,1,r);w(h);r-=8}}' +
    'else{h=sprintf("%08x",x);q=h;while(length(q)<len)q=q q;w(substr(q,1,len))}' +
    'w("\\n")}}';
  return `awk -v n=${nonce} -v L=${p.lines} -v a=${p.minLen} -v b=${p.maxLen} -v s=${p.seed} -v z=${p.noisy} -v e=${p.errEvery} '${prog}'`;
}

/** Exactly what genAwk prints, per stream. */
export function genExpected(nonce: string, p: GenParams): { stdout: Buffer; stderr: Buffer } {
  const out: string[] = [];
  const err: string[] = [];
  for (let i = 1; i <= p.lines; i++) {
    const x = lineState(p.seed, i);
    const len = p.minLen + (x % (p.maxLen - p.minLen + 1));
    const c = (x * 31 + len * 7 + i) % 1000000007;
    let payload: string;
    if (p.noisy) {
      const parts: string[] = [];
      let y = x;
      for (let r = len; r > 0; r -= 8) {
        y = (y * 48271) % M;
        parts.push(r < 8 ? hex8(y).slice(0, r) : hex8(y));
      }
      payload = parts.join("");
    } else {
      const h = hex8(x);
      payload = h.repeat(Math.ceil(len / 8)).slice(0, len);
    }
    const line = `${nonce} ${i} ${c} ${payload}\n`;
    (p.errEvery > 0 && i % p.errEvery === 0 ? err : out).push(line);
  }
  return { stdout: Buffer.from(out.join("")), stderr: Buffer.from(err.join("")) };
}

/** Approximate bytes genAwk prints. */
export function genSize(nonce: string, p: GenParams): number {
  return p.lines * (nonce.length + 20 + (p.minLen + p.maxLen) / 2);
}

/** A ticker: one line every 0.2 s, T lines; for signals, cancels and timeouts. */
export function tickerSh(nonce: string, ticks: number, seed: number): string {
  return `i=0; while [ $i -lt ${ticks} ]; do i=$((i+1)); echo "${nonce} $i $(( (${seed} + i*7919) % 1000003 )) tick"; sleep 0.2; done`;
}

export function tickerExpected(nonce: string, ticks: number, seed: number): Buffer {
  const lines: string[] = [];
  for (let i = 1; i <= ticks; i++) lines.push(`${nonce} ${i} ${(seed + i * 7919) % 1000003} tick\n`);
  return Buffer.from(lines.join(""));
}

/** Echo every stdin line back, numbered and checksummed. */
export function echoAwk(nonce: string): string {
  return `awk -v n=${nonce} '{c=(length($0)*131+NR*7)%1000003;printf "%s in %d %d %s\\n",n,NR,c,$0;fflush()}'`;
}

export function echoLine(nonce: string, nr: number, data: string): string {
  return `${nonce} in ${nr} ${(data.length * 131 + nr * 7) % 1000003} ${data}\n`;
}

/**
 * Check echoed stdin against the writes attempted, in order. Acknowledged
 * writes may not be skipped except at the end (the process died or was
 * stopped before reading them); unacknowledged ones (their fate unknown) may
 * be present or absent. Returns an error or null, and how many lines matched.
 */
export function checkEcho(
  nonce: string,
  got: Buffer,
  attempts: Array<{ data: string; acked: boolean }>,
): { error: string | null; matched: number; lastAckedMatched: number } {
  const text = got.toString("latin1");
  const lines = text.split("\n");
  const tail = lines.pop()!; // "" after a final newline; a partial line otherwise
  let a = 0;
  let lastAcked = -1;
  let nr = 0;
  for (const l of lines) {
    nr++;
    for (;;) {
      const at = attempts[a];
      if (!at) return { error: `echo line ${nr} ${JSON.stringify(l.slice(0, 80))} matches no write attempted`, matched: nr - 1, lastAckedMatched: lastAcked };
      if (echoLine(nonce, nr, at.data) === `${l}\n`) {
        if (at.acked) lastAcked = a;
        a++;
        break;
      }
      if (at.acked)
        return {
          error: `echo line ${nr} ${JSON.stringify(l.slice(0, 80))}: expected acknowledged write ${JSON.stringify(at.data)}`,
          matched: nr - 1,
          lastAckedMatched: lastAcked,
        };
      a++; // an unacknowledged write that never arrived
    }
  }
  if (tail !== "") {
    const at = attempts[a];
    const want = at ? echoLine(nonce, nr + 1, at.data) : "";
    if (!want.startsWith(tail))
      return { error: `partial echo line ${JSON.stringify(tail.slice(0, 80))} is no prefix of the next write`, matched: nr, lastAckedMatched: lastAcked };
  }
  return { error: null, matched: nr, lastAckedMatched: lastAcked };
}
