import { afterEach, describe, expect, it } from "vitest";
import { OutputBuffer, PANE_MAX_LINE_CHARS, sanitize } from "../../tui/output-buffer.js";
import { fakeCommand, fakeSession, FakeSource } from "../../tui/sources/fake-source.js";
import { eventually, KEY, lineWith, mount, type Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(() => h?.unmount());

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const UUID = "abcd0001-0000";

function source(): FakeSource {
  return new FakeSource({
    sessions: [fakeSession(0, { clientId: "web-1" })],
    commands: [fakeCommand("web-1", 1, { uuid: UUID, state: "running", revision: 1, program: "sh: ./build.sh", stdinOpen: true })],
  });
}

async function openOutput(src: FakeSource, opts: { columns?: number; rows?: number } = {}): Promise<Harness> {
  const hh = await mount(src, { initialClient: "web-1", ...opts });
  await hh.press(KEY.enter);
  return hh;
}

describe("output pane", () => {
  it("streams output live as the source pushes it (no polling), stdout and stderr interleaved", async () => {
    const src = source();
    h = await openOutput(src);
    expect(h.frame()).toContain("no output yet");
    src.pushText(UUID, "compiling 1/2\n");
    await eventually(() => expect(h!.frame()).toContain("compiling 1/2"));
    src.pushText(UUID, "warning: unused\n", "stderr");
    src.pushText(UUID, "compiling 2/2\n");
    await eventually(() => expect(h!.frame()).toContain("compiling 2/2"));
    const lines = h.lines();
    const i1 = lines.findIndex((l) => l.includes("compiling 1/2"));
    expect(lines[i1 + 1]).toContain("warning: unused");
    expect(lines[i1 + 2]).toContain("compiling 2/2");
  });

  it("R-O5: a server retention marker is shown inline with its event range and byte ranges", async () => {
    const src = source();
    src.pushOutput(UUID, { kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("first\n") });
    src.pushOutput(UUID, {
      kind: "truncation",
      seq: 2,
      cause: "server-retention",
      events: { first: 2, last: 40 },
      ranges: [{ stream: "stdout", offset: 6, length: 1258291 }],
    });
    src.pushOutput(UUID, { kind: "output", seq: 41, stream: "stdout", offset: 1258297, data: enc("after the gap\n") });
    h = await openOutput(src, { columns: 140 });
    const f = h.frame();
    const marker = lineWith(f, "removed by server retention")!;
    expect(marker).toContain("[… 1.2 MiB of stdout removed by server retention: events 2–40; stdout bytes 6–1258296 …]");
    const lines = h.lines();
    const m = lines.indexOf(marker);
    expect(lines[m - 1]).toContain("first");
    expect(lines[m + 1]).toContain("after the gap");
    expect(f).toContain("1 marker");
  });

  it("R-O7: an agent truncation marker (no event range, never sequenced) is shown inline", async () => {
    const src = source();
    src.pushOutput(UUID, {
      kind: "truncation",
      seq: 5,
      cause: "agent-budget",
      events: null,
      ranges: [
        { stream: "stdout", offset: 0, length: 3 * 1024 * 1024 },
        { stream: "stderr", offset: 0, length: 2048 },
      ],
    });
    h = await openOutput(src, { columns: 160 });
    expect(h.frame()).toContain(
      "[… 3.0 MiB of stdout+stderr dropped by the agent (output budget reached): at event 5, never sequenced; stdout bytes 0–3145727, stderr bytes 0–2047 …]",
    );
  });

  it("R-O8: an incomplete-capture marker is shown inline before the terminal lifecycle event", async () => {
    const src = source();
    src.pushOutput(
      UUID,
      { kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("started daemon\n") },
      { kind: "incomplete", seq: 2, streams: ["stdout", "stderr"], reason: "a descendant kept the pipe open" },
      { kind: "lifecycle", seq: 3, revision: 1, state: "succeeded", exitCode: 0, signalName: "", reason: "", error: "" },
    );
    h = await openOutput(src, { columns: 160 });
    const lines = h.lines();
    const i = lines.findIndex((l) => l.includes("output incomplete"));
    expect(lines[i]).toContain(
      "[! output incomplete at event 2: stdout+stderr not drained to EOF (a descendant kept the pipe open); nothing after this was captured !]",
    );
    expect(lines[i + 1]).toContain("── succeeded (exit 0) · event 3, revision 1 ──");
  });

  it("markers wrap instead of being cut on a narrow terminal", async () => {
    const src = source();
    src.pushOutput(UUID, {
      kind: "truncation",
      seq: 2,
      cause: "server-retention",
      events: { first: 2, last: 40 },
      ranges: [{ stream: "stdout", offset: 6, length: 1258291 }],
    });
    h = await openOutput(src, { columns: 40, rows: 24 });
    const joined = h
      .lines()
      .filter((l) => !l.startsWith("RVBox") && l.length > 0)
      .join("");
    expect(joined).toContain("stdout bytes 6–1258296 …]");
    for (const l of h.lines()) expect(l.length).toBeLessThanOrEqual(40);
  });

  it("lifecycle, stdin and signal events appear as separator lines", async () => {
    const src = source();
    src.pushOutput(
      UUID,
      { kind: "lifecycle", seq: 1, revision: 1, state: "running", exitCode: null, signalName: "", reason: "", error: "" },
      { kind: "stdin_ack", seq: 2, writeSeq: 1, closed: false, failure: "" },
      { kind: "signal_result", seq: 3, revision: 2, signal: "TERMINATE", delivered: true, detail: "" },
      { kind: "lifecycle", seq: 4, revision: 2, state: "cancelled", exitCode: null, signalName: "SIGTERM", reason: "operator", error: "" },
    );
    h = await openOutput(src, { columns: 120 });
    const f = h.frame();
    expect(f).toContain("── running · event 1, revision 1 ──");
    expect(f).toContain("── stdin acknowledged through write 1 · event 2 ──");
    expect(f).toContain("── signal TERMINATE delivered · event 3, revision 2 ──");
    expect(f).toContain("── cancelled (SIGTERM; operator) · event 4, revision 2 ──");
  });

  it("follows the tail; k/↑ scroll up and stop following, G follows again", async () => {
    const src = source();
    for (let i = 1; i <= 100; i++) src.pushText(UUID, `line ${i}\n`);
    h = await openOutput(src, { rows: 20 });
    expect(h.frame()).toContain("line 100");
    expect(h.frame()).toContain("following");
    await h.press("k", "k", "k");
    expect(h.frame()).not.toContain("line 100");
    expect(h.frame()).toContain("scrolled (G: follow)");
    src.pushText(UUID, "line 101\n");
    await h.press(KEY.up);
    expect(h.frame()).not.toContain("line 101");
    await h.press("G");
    await eventually(() => expect(h!.frame()).toContain("line 101"));
    await h.press("g");
    expect(h.frame()).toContain("line 1\n");
    await h.press(KEY.pageDown);
    expect(h.frame()).not.toContain("line 1\n");
    await h.press(KEY.pageUp, "j");
    expect(h.frame()).toContain("line 2\n");
  });

  it("c, x, i and D act on the command whose output is shown", async () => {
    const src = source();
    h = await openOutput(src);
    await h.press("x", "h");
    await h.press("i");
    await h.type("y");
    await h.press(KEY.enter, "D", "c", "y");
    await eventually(() => expect(src.calls).toHaveLength(4));
    expect(src.calls).toEqual([
      { op: "signal", uuid: UUID, signal: "HUP" },
      { op: "stdin", uuid: UUID, text: "y", appendNewline: true },
      { op: "close_stdin", uuid: UUID },
      { op: "signal", uuid: UUID, signal: "CANCEL" },
    ]);
  });

  it("says the viewer dropped old output when its buffer is full (never a silently shortened pane)", async () => {
    const src = source();
    const b = new OutputBuffer(UUID, { maxLines: 50, maxItems: 50 });
    src.outputs.set(UUID, b);
    for (let i = 1; i <= 200; i++) b.add({ kind: "output", seq: i, stream: "stdout", offset: b.streamOffset("stdout"), data: enc(`row ${i}\n`) });
    src.changed();
    h = await openOutput(src, { columns: 140 });
    await h.press("g");
    const f = h.frame();
    expect(f).toMatch(/\[… \d+ B in \d+ earlier events not kept by this viewer; `rvbox logs abcd0001-0000` prints everything …\]/);
  });
});

describe("output buffer", () => {
  it("keeps a UTF-8 character split across chunks whole", () => {
    const b = new OutputBuffer("u");
    const bytes = enc("naïve ☃\n");
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: bytes.subarray(0, 3) });
    b.add({ kind: "output", seq: 2, stream: "stdout", offset: 3, data: bytes.subarray(3, 8) });
    b.add({ kind: "output", seq: 3, stream: "stdout", offset: 8, data: bytes.subarray(8) });
    expect(b.snapshot().lines.map((l) => l.text)).toEqual(["naïve ☃"]);
  });

  it("joins a line continued over chunks of the same stream, not across streams", () => {
    const b = new OutputBuffer("u");
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("abc") });
    b.add({ kind: "output", seq: 2, stream: "stdout", offset: 3, data: enc("def\nx") });
    b.add({ kind: "output", seq: 3, stream: "stderr", offset: 0, data: enc("err\n") });
    b.add({ kind: "output", seq: 4, stream: "stdout", offset: 8, data: enc("y\n") });
    expect(b.snapshot().lines.some((l) => l.kind === "marker")).toBe(false);
    expect(b.snapshot().lines.map((l) => `${l.kind}:${l.text}`)).toEqual(["stdout:abcdef", "stdout:x", "stderr:err", "stdout:y"]);
  });

  it("drops events it already has when a stream is resumed", () => {
    const b = new OutputBuffer("u");
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("one\n") });
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("one\n") });
    b.add({ kind: "output", seq: 2, stream: "stdout", offset: 4, data: enc("two\n") });
    expect(b.snapshot().lines.map((l) => l.text)).toEqual(["one", "two"]);
    expect(b.next).toBe(3);
  });

  it("marks output that jumps ahead with no marker for the skipped bytes (a gap), so the pane is never silently short", () => {
    const b = new OutputBuffer("u");
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc("a\n") });
    b.add({ kind: "output", seq: 5, stream: "stdout", offset: 1002, data: enc("z\n") });
    expect(b.snapshot().lines.map((l) => l.text)).toEqual([
      "a",
      "[… 1000 B of stdout missing before event 5: stdout bytes 2–1001; no marker was sent for them …]",
      "z",
    ]);
  });

  it("R-O5: trims a retention marker to what this reader has not seen; a marker about bytes it already showed is dropped", () => {
    const b = new OutputBuffer("u");
    b.add({ kind: "output", seq: 1, stream: "stdout", offset: 0, data: enc(`${"x".repeat(99)}\n`) });
    b.add({ kind: "truncation", seq: 1, cause: "server-retention", events: { first: 1, last: 1 }, ranges: [{ stream: "stdout", offset: 0, length: 100 }] });
    expect(b.snapshot().lines.some((l) => l.kind === "marker")).toBe(false);
    b.add({ kind: "truncation", seq: 2, cause: "server-retention", events: { first: 1, last: 9 }, ranges: [{ stream: "stdout", offset: 0, length: 5000 }] });
    expect(
      b
        .snapshot()
        .lines.filter((l) => l.kind === "marker")
        .map((l) => l.text),
    ).toEqual(["[… 4.8 KiB of stdout removed by server retention: events 2–9; stdout bytes 100–4999 …]"]);
  });

  it("neutralises terminal escapes and control characters", () => {
    expect(sanitize("\x1b[31mred\x1b[0m")).toBe("red");
    expect(sanitize("a\tb")).toBe("a    b");
    expect(sanitize("10%\r50%\r100%")).toBe("100%");
    expect(sanitize("bell\x07")).toBe("bell·");
  });

  it("bounds what it holds by lines and by characters, whatever arrives; output items' bytes are not kept", () => {
    const b = new OutputBuffer("u", { maxLines: 100, maxItems: 10, maxText: 10_000 });
    let off = 0;
    for (let i = 1; i <= 500; i++) {
      const data = enc(`${"y".repeat(i % 7 === 0 ? 3000 : 20)}\n`);
      b.add({ kind: "output", seq: i, stream: "stdout", offset: off, data });
      off += data.length;
      expect(b.held.lines).toBeLessThanOrEqual(100);
      expect(b.held.text).toBeLessThanOrEqual(10_000 + 3001);
    }
    expect(b.snapshot().items).toEqual([]);
    // One endless line is cut, once, with "…".
    const c = new OutputBuffer("v");
    for (let i = 0; i < 100; i++) c.add({ kind: "output", seq: i + 1, stream: "stdout", offset: i * 1000, data: enc("z".repeat(1000)) });
    const l = c.snapshot().lines;
    expect(l).toHaveLength(1);
    expect(l[0]!.text).toHaveLength(PANE_MAX_LINE_CHARS);
    expect(l[0]!.text.endsWith("z…")).toBe(true);
  });

  it("a window that may not let lines go stops at its bound (full) and keeps its first lines; a later start says what it lacks", () => {
    const b = new OutputBuffer("u", { maxLines: 50, maxItems: 10 }, { reloadable: true });
    b.trimAllowance = 0;
    let i = 1;
    while (!b.full) {
      b.add({ kind: "output", seq: i, stream: "stdout", offset: (i - 1) * 4, data: enc(`${String(i).padStart(3, "0")}\n`) });
      i++;
    }
    expect(b.held.lines).toBe(50);
    expect(b.snapshot().lines[0]!.text).toBe("001");
    // Allowed 10 more: lets 10 go from the front, and keeps the scroll offset in step.
    b.trimAllowance = 10;
    for (let k = 0; k < 10; k++, i++) b.add({ kind: "output", seq: i, stream: "stdout", offset: (i - 1) * 4, data: enc(`${String(i).padStart(3, "0")}\n`) });
    const s = b.snapshot();
    expect(b.full).toBe(true);
    expect(s.lines[0]!.text).toBe("[… 10 earlier events not loaded (press g / Home to load from the start; ↑ at the top loads earlier ones) …]");
    expect(s.lines[1]!.text).toBe("011");
    expect(s.offset).toBe(9); // lines[1] ("011") is line 10 of the window, as before
    const w = new OutputBuffer("w", undefined, { startSeq: 700, reloadable: true });
    w.add({ kind: "output", seq: 700, stream: "stdout", offset: 123456, data: enc("tail\n") });
    expect(w.snapshot().lines.map((x) => x.text)).toEqual([
      "[… 699 earlier events not loaded (press g / Home to load from the start; ↑ at the top loads earlier ones) …]",
      "tail",
    ]);
    w.paused = true;
    w.touch();
    expect(w.snapshot().lines.at(-1)!.text).toBe("[… events from 701 on not loaded yet (↓ at the bottom loads more; G / End jumps to the end) …]");
  });
});
