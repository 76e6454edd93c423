// The follow cursor (core/reader/follow-cursor.ts): what a reader shows of
// the items the server sends. Whatever the batching, redelivery or resume
// point, the shown stream is the same, each event is shown once, and every
// byte of each stream is output or covered by a marker (R-O3, R-O5, R-O7).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { admit, cursorErrorText, cursorInvariants, newCursor, step, type FollowCursor } from "../../../core/reader/follow-cursor.js";
import { lastSeqOf, type OutputItem, type StreamName } from "../../../core/reader/items.js";

type Ev = { kind: "out" | "trunc"; stream: StreamName; len: number } | { kind: "life" };

const ev: fc.Arbitrary<Ev> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({ kind: fc.constant("out" as const), stream: fc.constantFrom<StreamName>("stdout", "stderr"), len: fc.integer({ min: 1, max: 40 }) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("trunc" as const),
      stream: fc.constantFrom<StreamName>("stdout", "stderr"),
      len: fc.integer({ min: 1, max: 40 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "life" as const }) },
);

const byte = (s: StreamName, off: number): number => (off * 7 + (s === "stderr" ? 101 : 0)) & 255;

/** A command's stored events (seq 1..n), optionally with events a..b removed by server retention (one marker, R-O5). */
function storedStream(evs: Ev[], retention: { a: number; b: number } | null): { items: OutputItem[]; totals: Record<StreamName, number> } {
  const off: Record<StreamName, number> = { stdout: 0, stderr: 0 };
  const all: OutputItem[] = evs.map((e, i): OutputItem => {
    const seq = i + 1;
    if (e.kind === "life") return { kind: "lifecycle", seq, revision: seq, state: "running", exitCode: null, signalName: "", reason: "", error: "" };
    const offset = off[e.stream];
    off[e.stream] += e.len;
    if (e.kind === "trunc") return { kind: "truncation", seq, cause: "agent-watermark", events: null, ranges: [{ stream: e.stream, offset, length: e.len }] };
    return { kind: "output", seq, stream: e.stream, offset, data: Uint8Array.from({ length: e.len }, (_, k) => byte(e.stream, offset + k)) };
  });
  if (!retention) return { items: all, totals: off };
  const { a, b } = retention;
  const span: Partial<Record<StreamName, { from: number; to: number }>> = {};
  for (const it of all.slice(a - 1, b)) {
    const parts =
      it.kind === "output" ? [{ stream: it.stream as StreamName, offset: it.offset, length: it.data.length }] : it.kind === "truncation" ? it.ranges : [];
    for (const r of parts) {
      const s = r.stream as StreamName;
      const cur = span[s];
      span[s] = { from: Math.min(cur?.from ?? r.offset, r.offset), to: Math.max(cur?.to ?? 0, r.offset + r.length) };
    }
  }
  const ranges = (["stdout", "stderr"] as const).flatMap((s) => (span[s] ? [{ stream: s, offset: span[s].from, length: span[s].to - span[s].from }] : []));
  const marker: OutputItem = { kind: "truncation", seq: a, cause: "server-retention", events: { first: a, last: b }, ranges };
  return { items: [...all.slice(0, a - 1), marker, ...all.slice(b)], totals: off };
}

function run(cursor: FollowCursor, batches: OutputItem[][]): { cursor: FollowCursor; shown: OutputItem[] } {
  const shown: OutputItem[] = [];
  for (const b of batches) {
    const r = step(cursor, b);
    if (!r.ok) throw new Error(`refused: ${JSON.stringify(r.error)}`);
    expect(cursorInvariants(r.cursor)).toEqual([]);
    cursor = r.cursor;
    for (const a of r.admitted) shown.push(...a.shown);
  }
  return { cursor, shown };
}

/** Every byte of each stream, in order: shown output (with its content), a marker's range, or a gap. */
function tiles(shown: OutputItem[]): Record<StreamName, { end: number; ok: boolean }> {
  const t: Record<StreamName, { end: number; ok: boolean }> = { stdout: { end: 0, ok: true }, stderr: { end: 0, ok: true } };
  const take = (s: StreamName, offset: number, length: number): void => {
    if (offset !== t[s].end) t[s].ok = false;
    t[s].end = offset + length;
  };
  for (const it of shown) {
    if (it.kind === "output" && it.stream !== "unknown") {
      take(it.stream, it.offset, it.data.length);
      it.data.forEach((v, k) => {
        if (v !== byte(it.stream as StreamName, it.offset + k)) t[it.stream as StreamName].ok = false;
      });
    } else if (it.kind === "truncation") for (const r of it.ranges) take(r.stream as StreamName, r.offset, r.length);
    else if (it.kind === "gap") take(it.stream, it.offset, it.length);
  }
  return t;
}

const stream = fc
  .array(ev, { minLength: 1, maxLength: 40 })
  .chain((evs) =>
    fc.record({
      evs: fc.constant(evs),
      retention: fc.option(
        fc.integer({ min: 1, max: evs.length }).chain((a) => fc.record({ a: fc.constant(a), b: fc.integer({ min: a, max: evs.length }) })),
        { nil: null },
      ),
    }),
  )
  .map(({ evs, retention }) => storedStream(evs, retention));

/** Cut points 0 < c1 < ... < n, as batches. */
function split(items: OutputItem[], cuts: number[]): OutputItem[][] {
  const ps = [...new Set(cuts.map((c) => c % (items.length + 1)))].sort((x, y) => x - y);
  const out: OutputItem[][] = [];
  let from = 0;
  for (const p of [...ps, items.length]) {
    if (p > from) out.push(items.slice(from, p));
    from = Math.max(from, p);
  }
  return out;
}

describe("follow cursor", () => {
  it("R-O5 R-O7: a whole stream in one batch shows every byte once, output or marker, and no gap", () => {
    fc.assert(
      fc.property(stream, ({ items, totals }) => {
        const { cursor, shown } = run(newCursor(), [items]);
        const t = tiles(shown);
        for (const s of ["stdout", "stderr"] as const) expect(t[s]).toEqual({ end: totals[s], ok: true });
        expect(shown.some((x) => x.kind === "gap")).toBe(false);
        expect(cursor.gaps).toBe(0);
        expect(cursor.next).toBe(Math.max(...items.map(lastSeqOf)) + 1);
      }),
    );
  });

  it("R-O3: any split of the stream into batches shows the same items", () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 10 }), ({ items }, cuts) => {
        expect(run(newCursor(), split(items, cuts)).shown).toEqual(run(newCursor(), [items]).shown);
      }),
    );
  });

  it("R-O3: a resumed stream that repeats what the reader had (any overlap) shows each event once", () => {
    fc.assert(
      fc.property(stream, fc.array(fc.tuple(fc.nat(), fc.nat()), { minLength: 1, maxLength: 8 }), ({ items }, plan) => {
        // Each delivery starts at or before where the last one ended (a redelivery) and runs on.
        const batches: OutputItem[][] = [];
        let end = 0;
        for (const [back, len] of plan) {
          const start = Math.max(0, end - (back % (end + 1)));
          const stop = Math.min(items.length, start + 1 + (len % items.length));
          batches.push(items.slice(start, stop));
          end = Math.max(end, stop);
        }
        batches.push(items.slice(Math.max(0, end - 2)));
        const { shown } = run(newCursor(), batches);
        expect(shown).toEqual(run(newCursor(), [items]).shown);
        const seqs = shown.filter((x) => x.kind !== "gap").map((x) => x.seq);
        expect(new Set(seqs).size).toBe(seqs.length);
      }),
    );
  });

  it("R-O3: resuming a fresh reader at its `next` continues the stream exactly", () => {
    fc.assert(
      fc.property(stream, fc.nat(), ({ items }, cut) => {
        const k = cut % (items.length + 1);
        const first = run(newCursor(), [items.slice(0, k)]);
        // A reconnect: the server starts again at from_event_seq = next, as FollowOutput does.
        const rest = items.filter((x) => lastSeqOf(x) >= first.cursor.next);
        const second = run(first.cursor, [rest]);
        expect([...first.shown, ...second.shown]).toEqual(run(newCursor(), [items]).shown);
      }),
    );
  });

  it("R-O5: output lost with no marker for it is shown as a gap item of exactly its bytes, and counted", () => {
    fc.assert(
      fc.property(stream, fc.nat(), ({ items, totals }, pick) => {
        const outs = items.map((x, i) => [x, i] as const).filter(([x]) => x.kind === "output");
        fc.pre(outs.length > 0);
        const [lost, at] = outs[pick % outs.length]!;
        if (lost.kind !== "output") return;
        const s = lost.stream as StreamName;
        const later = items
          .slice(at + 1)
          .some((x) => (x.kind === "output" && x.stream === s) || (x.kind === "truncation" && x.ranges.some((r) => r.stream === s)));
        const { cursor, shown } = run(newCursor(), [items.filter((_, i) => i !== at)]);
        const gaps = shown.filter((x) => x.kind === "gap");
        if (later) {
          expect(gaps).toEqual([expect.objectContaining({ stream: s, offset: lost.offset, length: lost.data.length })]);
          expect(cursor.gaps).toBe(1);
          const t = tiles(shown);
          expect(t[s]).toEqual({ end: totals[s], ok: true });
        } else {
          // Nothing after it on that stream: the reader cannot know (the terminal state's byte counts say so).
          expect(gaps).toEqual([]);
        }
      }),
    );
  });

  it("a batch whose sequences go backwards is refused as a whole, the cursor unchanged", () => {
    fc.assert(
      fc.property(stream, fc.nat(), fc.nat(), ({ items }, i, j) => {
        fc.pre(items.length >= 2);
        const x = i % items.length;
        const y = j % items.length;
        fc.pre(items[x]!.seq !== items[y]!.seq);
        const swapped = [...items];
        [swapped[x], swapped[y]] = [swapped[y]!, swapped[x]!];
        const c = newCursor();
        const r = step(c, swapped);
        expect(r.ok).toBe(false);
        if (!r.ok) expect(r.error.code).toBe("OUT_OF_ORDER");
        expect(c).toEqual(newCursor());
      }),
    );
    expect(step(newCursor(), [{ kind: "stdin_ack", seq: 0, writeSeq: 1, closed: false, failure: "" }])).toEqual({
      ok: false,
      error: { code: "BAD_SEQ", index: 0, seq: 0 },
    });
  });

  it("R-O5: a retention marker is trimmed to what a live reader has not shown; a marker about nothing is dropped", () => {
    const out = (seq: number, offset: number, len: number): OutputItem => ({ kind: "output", seq, stream: "stdout", offset, data: new Uint8Array(len) });
    let c = run(newCursor(), [[out(1, 0, 10), out(2, 10, 10)]]).cursor;
    // Retention removed events 1..3 after this reader had 1..2: it is told only of event 3's bytes.
    const r = admit(c, {
      kind: "truncation",
      seq: 1,
      cause: "server-retention",
      events: { first: 1, last: 3 },
      ranges: [{ stream: "stdout", offset: 0, length: 30 }],
    });
    expect(r.shown).toEqual([
      { kind: "truncation", seq: 1, cause: "server-retention", events: { first: 3, last: 3 }, ranges: [{ stream: "stdout", offset: 20, length: 10 }] },
    ]);
    c = r.cursor;
    expect(c.next).toBe(4);
    // The same marker grown to event 4, whose bytes the reader also had: nothing to say about bytes.
    const c2 = run(c, [[out(4, 30, 5)]]).cursor;
    expect(
      admit(c2, { kind: "truncation", seq: 1, cause: "server-retention", events: { first: 1, last: 4 }, ranges: [{ stream: "stdout", offset: 0, length: 35 }] })
        .shown,
    ).toEqual([]);
  });

  it("a reader that starts after event 1 knows no offsets yet: no gap before its first item", () => {
    const c = newCursor(5);
    expect(c.offsets).toEqual({ stdout: null, stderr: null });
    const r = step(c, [{ kind: "output", seq: 5, stream: "stderr", offset: 900, data: new Uint8Array(3) }]);
    expect(r.ok && r.admitted[0]!.shown.map((x) => x.kind)).toEqual(["output"]);
    expect(r.ok && r.cursor.offsets).toEqual({ stdout: null, stderr: 903 });
    expect(r.ok && r.cursor.next).toBe(6);
  });

  describe("one item at a time", () => {
    const bytes = (from: number, len: number) => Uint8Array.from({ length: len }, (_, k) => from + k);
    const out = (seq: number, offset: number, len: number, stream: StreamName = "stdout"): OutputItem => ({
      kind: "output",
      seq,
      stream,
      offset,
      data: bytes(offset, len),
    });
    const cursorAfter = (items: OutputItem[]) => run(newCursor(), [items]).cursor;

    it("R-O3: output a reader partly has is cut to its new bytes; output it wholly has shows nothing and moves no offset back", () => {
      const c = cursorAfter([out(1, 0, 10)]);
      const part = admit(c, out(2, 5, 10));
      expect(part.shown).toEqual([{ kind: "output", seq: 2, stream: "stdout", offset: 10, data: bytes(10, 5) }]);
      expect(part.cursor.offsets.stdout).toBe(15);
      const whole = admit(c, out(2, 0, 5));
      expect(whole.shown).toEqual([]);
      expect(whole.cursor.offsets.stdout).toBe(10);
      expect(whole.cursor.next).toBe(3);
      // The next output at 10 follows on: no gap.
      expect(admit(whole.cursor, out(3, 10, 1)).shown.map((x) => x.kind)).toEqual(["output"]);
      // Output taken whole is passed on as the same item.
      const it = out(2, 10, 3);
      expect(admit(c, it).shown[0]).toBe(it);
    });

    it("output of an unknown stream is shown as it is, and moves neither stream's offset", () => {
      const c = cursorAfter([out(1, 0, 4)]);
      const odd: OutputItem = { kind: "output", seq: 2, stream: "unknown", offset: 99, data: bytes(0, 2) };
      const r = admit(c, odd);
      expect(r.shown).toEqual([odd]);
      expect(r.cursor.offsets).toEqual({ stdout: 4, stderr: 0 });
      expect(r.cursor.next).toBe(3);
    });

    it("R-O7: a marker with no byte ranges is shown as it is; a range of an unknown stream is kept", () => {
      const c = cursorAfter([out(1, 0, 4)]);
      const bare: OutputItem = { kind: "truncation", seq: 2, cause: "agent-budget", events: null, ranges: [] };
      expect(admit(c, bare).shown).toEqual([bare]);
      const odd: OutputItem = { kind: "truncation", seq: 2, cause: "unknown", events: null, ranges: [{ stream: "unknown", offset: 7, length: 3 }] };
      const r = admit(c, odd);
      expect(r.shown).toEqual([odd]);
      expect(r.cursor.offsets).toEqual({ stdout: 4, stderr: 0 });
    });

    it("R-O5: a marker that starts where the reader is makes no gap; one that starts further on makes a gap of the bytes between", () => {
      const c = cursorAfter([out(1, 0, 4)]);
      const at: OutputItem = { kind: "truncation", seq: 2, cause: "agent-watermark", events: null, ranges: [{ stream: "stdout", offset: 4, length: 6 }] };
      expect(admit(c, at).shown).toEqual([at]);
      const beyond: OutputItem = { ...at, ranges: [{ stream: "stdout", offset: 8, length: 2 }] };
      const r = admit(c, beyond);
      expect(r.shown).toEqual([{ kind: "gap", seq: 2, stream: "stdout", offset: 4, length: 4 }, beyond]);
      expect(r.cursor.gaps).toBe(1);
      expect(r.cursor.offsets.stdout).toBe(10);
    });

    it("R-O5: a retention marker about bytes the reader has is dropped, but still moves it past its events, and its offsets stay", () => {
      const c = cursorAfter([out(1, 0, 10), out(2, 10, 10)]);
      // Retention removed events 1..3, and event 3 carried no bytes (a lifecycle event).
      const r = admit(c, {
        kind: "truncation",
        seq: 1,
        cause: "server-retention",
        events: { first: 1, last: 3 },
        ranges: [{ stream: "stdout", offset: 0, length: 20 }],
      });
      expect(r.shown).toEqual([]);
      expect(r.cursor.next).toBe(4);
      expect(r.cursor.offsets.stdout).toBe(20);
      // A marker about bytes before the reader's offset leaves the offset where it is.
      const early = admit(c, { kind: "truncation", seq: 3, cause: "agent-watermark", events: null, ranges: [{ stream: "stdout", offset: 0, length: 5 }] });
      expect(early.shown).toEqual([]);
      expect(early.cursor.offsets.stdout).toBe(20);
      expect(admit(early.cursor, out(4, 20, 1)).shown.map((x) => x.kind)).toEqual(["output"]);
    });

    it("R-O5: a retention marker's event range is cut to the events the reader has not had", () => {
      const c = cursorAfter([out(1, 0, 10)]); // next = 2
      const r = admit(c, {
        kind: "truncation",
        seq: 1,
        cause: "server-retention",
        events: { first: 1, last: 5 },
        ranges: [{ stream: "stdout", offset: 0, length: 50 }],
      });
      expect(r.shown).toEqual([
        { kind: "truncation", seq: 1, cause: "server-retention", events: { first: 2, last: 5 }, ranges: [{ stream: "stdout", offset: 10, length: 40 }] },
      ]);
      expect(r.cursor.next).toBe(6);
    });

    it("R-O5: a reader that starts after event 1 takes a first marker as it is: no gap before it", () => {
      const m: OutputItem = { kind: "truncation", seq: 5, cause: "agent-watermark", events: null, ranges: [{ stream: "stdout", offset: 100, length: 8 }] };
      const r = admit(newCursor(5), m);
      expect(r.shown).toEqual([m]);
      expect(r.cursor.gaps).toBe(0);
      expect(r.cursor.offsets).toEqual({ stdout: 108, stderr: null });
    });

    it("R-O3: an item repeated within one batch is no error and is shown once", () => {
      const r = step(newCursor(), [out(1, 0, 3), out(1, 0, 3), out(2, 3, 1)]);
      expect(r.ok).toBe(true);
      if (r.ok) expect(r.admitted.map((a) => a.shown.length)).toEqual([1, 0, 1]);
    });
  });

  it("cursor invariants name each broken field", () => {
    expect(cursorInvariants(newCursor())).toEqual([]);
    expect(cursorInvariants(newCursor(9))).toEqual([]);
    const c = (over: Partial<FollowCursor>): FollowCursor => ({ ...newCursor(), ...over });
    expect(cursorInvariants(c({ next: 0 }))).toEqual(["next 0 is not a positive integer"]);
    expect(cursorInvariants(c({ next: 1.5 }))).toEqual(["next 1.5 is not a positive integer"]);
    expect(cursorInvariants(c({ offsets: { stdout: -1, stderr: 0 } }))).toEqual(["stdout offset -1 is not a byte offset"]);
    expect(cursorInvariants(c({ offsets: { stdout: 0, stderr: 2.5 } }))).toEqual(["stderr offset 2.5 is not a byte offset"]);
    expect(cursorInvariants(c({ gaps: -1 }))).toEqual(["gaps -1 < 0"]);
    expect(cursorInvariants(c({ next: -2, gaps: -1 }))).toHaveLength(2);
  });

  it("says what a refused batch was, in the operator's words", () => {
    expect(cursorErrorText({ code: "OUT_OF_ORDER", index: 1, seq: 3, after: 7 })).toBe("the server sent event 3 after event 7 in one batch (out of order)");
    expect(cursorErrorText({ code: "BAD_SEQ", index: 0, seq: -1 })).toBe("the server sent an event with sequence -1");
  });
});
