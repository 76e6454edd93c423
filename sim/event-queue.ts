// Virtual time: a binary min-heap of events ordered by (time, insertion
// sequence), so that events at the same instant run in the order they were
// scheduled. Nothing else decides order.

export interface SimEvent {
  at: number;
  seq: number;
  run: () => void;
  /** Cancelled events stay in the heap and are skipped when popped. */
  cancelled: boolean;
}

export class EventQueue {
  private heap: SimEvent[] = [];
  private seq = 0;
  now = 0;

  get size(): number {
    return this.heap.length;
  }

  schedule(at: number, run: () => void): SimEvent {
    const ev: SimEvent = { at: Math.max(at, this.now), seq: this.seq++, run, cancelled: false };
    const h = this.heap;
    h.push(ev);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
    return ev;
  }

  after(delay: number, run: () => void): SimEvent {
    return this.schedule(this.now + Math.max(0, delay), run);
  }

  peekTime(): number | null {
    return this.heap.length > 0 ? this.heap[0]!.at : null;
  }

  /** Pop the next live event and advance the clock to it; null when empty. */
  pop(): SimEvent | null {
    const h = this.heap;
    while (h.length > 0) {
      const top = h[0]!;
      const last = h.pop()!;
      if (h.length > 0) {
        h[0] = last;
        let i = 0;
        for (;;) {
          const l = 2 * i + 1;
          const r = l + 1;
          let m = i;
          if (l < h.length && less(h[l]!, h[m]!)) m = l;
          if (r < h.length && less(h[r]!, h[m]!)) m = r;
          if (m === i) break;
          [h[i], h[m]] = [h[m]!, h[i]!];
          i = m;
        }
      }
      if (top.cancelled) continue;
      this.now = top.at;
      return top;
    }
    return null;
  }
}

function less(a: SimEvent, b: SimEvent): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
