// Naming clients in refusals (core/server/client-names.ts), against plain
// reference definitions: full Levenshtein, a regular expression for `*`,
// and a sort of every candidate. Each property draws from a small alphabet so
// that prefixes, near misses and repeated parts are common.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CLIENT_SUGGESTION_MAX_DISTANCE } from "../../../core/limits.js";
import { boundedDistance, clientsNamedBy, closestClients, globMatches } from "../../../core/server/client-names.js";
import { runs } from "../../support/runs.js";

const word = (chars: string, maxLength: number) => fc.array(fc.constantFrom(...chars), { maxLength }).map((a) => a.join(""));

function levenshtein(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++) d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length]![b.length]!;
}

const globRef = (pattern: string, id: string): boolean =>
  new RegExp(
    `^${pattern
      .split("*")
      .map((p) => p.replace(/[.+?^${}()|[\]\\-]/g, "\\$&"))
      .join(".*")}$`,
    "s",
  ).test(id);

describe("client names", () => {
  it("boundedDistance is the edit distance while it is at most max; beyond, some number over max (and never over the distance)", () => {
    fc.assert(
      fc.property(word("abc", 9), word("abc", 9), fc.integer({ min: 0, max: 5 }), (a, b, max) => {
        const d = levenshtein(a, b);
        const got = boundedDistance(a, b, max);
        if (d <= max) expect(got).toBe(d);
        else expect(got > max && got <= d, `${got} for ${d} over ${max}`).toBe(true);
      }),
      { numRuns: runs(600) },
    );
  });

  it("globMatches: * stands for any run of characters (none included), everything else for itself", () => {
    fc.assert(
      fc.property(word("ab*-", 8), word("ab-", 9), (pattern, id) => {
        expect(globMatches(pattern, id)).toBe(globRef(pattern, id));
      }),
      { numRuns: runs(1000) },
    );
    // Parts that overlap the fixed ends must not be counted twice.
    expect(globMatches("ab*b*ba", "abba")).toBe(false);
    expect(globMatches("ab*b*ba", "abbba")).toBe(true);
    expect(globMatches("a*a", "a")).toBe(false);
  });

  it("closestClients: prefixes either way first, then by edit distance up to the bound, then by name; at most max", () => {
    fc.assert(
      fc.property(fc.uniqueArray(word("abc", 6), { maxLength: 12 }), word("abcA", 6), fc.integer({ min: 0, max: 4 }), (known, typed, max) => {
        const t = typed.toLowerCase();
        const want = known
          .map((id) => {
            const k = id.toLowerCase();
            const prefix = t.length > 0 && (k.startsWith(t) || t.startsWith(k));
            return { id, score: prefix ? 0 : levenshtein(t, k) };
          })
          .filter((x) => x.score <= CLIENT_SUGGESTION_MAX_DISTANCE)
          .sort((x, y) => x.score - y.score || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0))
          .slice(0, max)
          .map((x) => x.id);
        expect(closestClients(known, typed, max)).toEqual(want);
      }),
      { numRuns: runs(600) },
    );
  });

  it("clientsNamedBy: a comma list of ids and wildcards, blanks around each ignored; the ids in known order, at most max, and the total", () => {
    const known = ["web-1", "web-2", "db-1", "web-10"];
    expect(clientsNamedBy(known, " web-1 , db-* ,, ")).toEqual({ ids: ["web-1", "db-1"], total: 2 });
    expect(clientsNamedBy(known, "web-*", 2)).toEqual({ ids: ["web-1", "web-2"], total: 3 });
    expect(clientsNamedBy(known, " , ")).toEqual({ ids: [], total: 0 });
    expect(clientsNamedBy(known, "*")).toEqual({ ids: ["web-1", "web-2", "db-1"], total: 4 });
  });
});
