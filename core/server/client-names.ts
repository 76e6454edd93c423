// Naming clients in refusals: the known client ids closest to a mistyped one
// (a prefix either way, or a small edit distance), and the known ids a list
// or wildcard would have meant. Pure and bounded: at most
// CLIENT_SUGGESTION_MAX_DISTANCE edits are computed per candidate (a banded
// Levenshtein, O(length x distance)), candidates whose lengths differ by more
// are skipped at once, and at most MAX_CLIENT_SUGGESTIONS are kept.

import { CLIENT_SUGGESTION_MAX_DISTANCE, MAX_CLIENT_SUGGESTIONS } from "../limits.js";

/** Edit distance of a and b, or max + 1 once it is known to exceed max. */
export function boundedDistance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev: number[] = [];
  for (let j = 0; j <= b.length; j++) prev.push(j);
  for (let i = 1; i <= a.length; i++) {
    const cur: number[] = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      cur.push(v);
      if (v < best) best = v;
    }
    if (best > max) return max + 1;
    prev = cur;
  }
  return prev[b.length]!;
}

/** Known ids closest to `typed`, best first: prefixes (either way) first, then by edit distance, then by name. */
export function closestClients(known: Iterable<string>, typed: string, max = MAX_CLIENT_SUGGESTIONS): string[] {
  const t = typed.toLowerCase();
  const scored: Array<{ id: string; score: number }> = [];
  for (const id of known) {
    const k = id.toLowerCase();
    const prefix = t.length > 0 && (k.startsWith(t) || t.startsWith(k));
    const score = prefix ? 0 : boundedDistance(t, k, CLIENT_SUGGESTION_MAX_DISTANCE);
    if (score > CLIENT_SUGGESTION_MAX_DISTANCE) continue;
    scored.push({ id, score });
    scored.sort((x, y) => x.score - y.score || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    if (scored.length > max) scored.pop();
  }
  return scored.map((s) => s.id);
}

/** Does `id` match a pattern in which `*` stands for any run of characters? */
export function globMatches(pattern: string, id: string): boolean {
  const parts = pattern.split("*");
  if (parts.length === 1) return pattern === id;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!id.startsWith(first) || id.length < first.length + last.length || !id.endsWith(last)) return false;
  let at = first.length;
  const end = id.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const p = parts[i]!;
    const found = id.indexOf(p, at);
    if (found < 0 || found + p.length > end) return false;
    at = found + p.length;
  }
  return true;
}

/** Known ids a comma-separated list of ids or wildcards names (at most `max`, in the order known), and how many matched in all. */
export function clientsNamedBy(known: Iterable<string>, list: string, max = MAX_CLIENT_SUGGESTIONS): { ids: string[]; total: number } {
  const patterns = list
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
  const ids: string[] = [];
  let total = 0;
  for (const id of known) {
    if (!patterns.some((p) => globMatches(p, id))) continue;
    total++;
    if (ids.length < max) ids.push(id);
  }
  return { ids, total };
}
