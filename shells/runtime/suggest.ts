/**
 * "Did you mean …?" for a mistyped command or flag name: the one candidate
 * within a small edit distance (insertions, deletions, substitutions and
 * swaps of neighbours, each costing one), or none when no candidate is that
 * close or two are equally close.
 */

/** Edits allowed: one for names of up to four characters, two for longer ones. */
function allowed(input: string): number {
  return input.length <= 4 ? 1 : 2;
}

/** Optimal-string-alignment distance between a and b (rows of the edit table kept small). */
export function editDistance(a: string, b: string): number {
  const n = b.length;
  let prev2: number[] = [];
  let prev = Array.from({ length: n + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= n; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, prev2[j - 2]! + 1);
      cur.push(d);
    }
    prev2 = prev;
    prev = cur;
  }
  return prev[n]!;
}

export function closest(input: string, candidates: Iterable<string>): string | undefined {
  const limit = allowed(input);
  let best: string | undefined;
  let bestD = Infinity;
  let tie = false;
  for (const c of candidates) {
    if (c === input) return c;
    // At least the difference in length apart: an over-long value costs no edit table.
    if (Math.abs(c.length - input.length) > limit) continue;
    const d = editDistance(input, c);
    if (d < bestD) {
      best = c;
      bestD = d;
      tie = false;
    } else if (d === bestD) tie = true;
  }
  return bestD <= limit && !tie ? best : undefined;
}

/** " (did you mean X?)", or "" when nothing is close. */
export function didYouMean(input: string, candidates: Iterable<string>, prefix = ""): string {
  const c = closest(input, candidates);
  return c === undefined || c === input ? "" : ` (did you mean ${prefix}${c}?)`;
}
