// How many entries walks over a Map yield while a function runs: a step's work counted, not timed.

/** Entries yielded by walks over `map` while `fn` runs (its iterators are wrapped, then the prototype's restored). */
export function walked<K, V>(map: Map<K, V>, fn: () => void): number {
  let n = 0;
  const m = map as unknown as Record<string | symbol, (this: unknown) => Iterator<unknown>>;
  const names = ["values", "entries", "keys", Symbol.iterator] as const;
  for (const k of names) {
    const orig = m[k]!;
    m[k] = function (this: unknown) {
      const it = orig.call(this);
      const next = it.next.bind(it);
      it.next = () => {
        const r = next();
        if (!r.done) n++;
        return r;
      };
      return it;
    };
  }
  try {
    fn();
  } finally {
    for (const k of names) delete m[k];
  }
  return n;
}
