// A min-heap with lazy deletion, the shape of every deadline and order index
// in the server core (heartbeats, kept command wakes, parked commands, queue
// expiries).
//
// Removing an arbitrary entry from a binary heap costs a search, so an index
// never removes one: when an item leaves, or its key moves and a new entry is
// pushed, the old entry stays behind, stale. The index's own `live` test tells
// stale from live; stale entries are dropped when they reach the top (`top`).
// Left alone, an item whose key moves on every step would grow the heap
// without bound, so once the heap holds more than `slack + 2 × live` entries
// it is rebuilt from the live items alone (`keepBound`): the heap then stays
// within that bound between steps, which each index asserts in its invariants
// and names its slack for in core/limits.ts.

import TinyQueue from "tinyqueue";

export class LazyHeap<T> {
  private q: TinyQueue<T>;

  constructor(
    private readonly compare: (a: T, b: T) => number,
    /** Stale entries allowed beyond twice the live ones (a named bound in core/limits.ts). */
    readonly slack: number,
  ) {
    this.q = new TinyQueue<T>([], compare);
  }

  /** Entries held, stale ones included. */
  get length(): number {
    return this.q.length;
  }

  push(e: T): void {
    this.q.push(e);
  }

  /** The least entry, live or stale. */
  peek(): T | undefined {
    return this.q.peek();
  }

  pop(): T | undefined {
    return this.q.pop();
  }

  /** The least entry that `live` accepts; the stale ones above it are dropped. */
  top(live: (e: T) => boolean): T | undefined {
    for (let e = this.q.peek(); e !== undefined; e = this.q.peek()) {
      if (live(e)) return e;
      this.q.pop();
    }
    return undefined;
  }

  /** The most entries this heap may hold between steps with `live` live ones. */
  bound(live: number): number {
    return this.slack + 2 * live;
  }

  /** Whether it holds more than its bound for `live` live entries. */
  over(live: number): boolean {
    return this.q.length > this.bound(live);
  }

  /** Replace every entry by `entries`: the live ones, made afresh. */
  rebuild(entries: T[]): void {
    this.q = new TinyQueue<T>(entries, this.compare);
  }

  /** Past its bound for `live` live entries, rebuild from `entries()`. */
  keepBound(live: number, entries: () => T[]): void {
    if (this.over(live)) this.rebuild(entries());
  }

  /** Every entry held, stale ones included, in no particular order (for invariants). */
  entries(): T[] {
    return this.q.data.slice(0, this.q.length);
  }
}
