// Text fitting for the TUI's fixed-width lines (tui/format.ts).
import { describe, expect, it } from "vitest";
import { wrap } from "../../tui/format.js";

describe("wrap", () => {
  it("breaks at spaces, pads each line to the width, and keeps to the line budget with … on the last", () => {
    expect(wrap("one two three four", 9, 3)).toEqual(["one two  ", "three    ", "four     "]);
    expect(wrap("one two three four", 9, 2)).toEqual(["one two  ", "three fo…"]);
    expect(wrap("short", 9, 3)).toEqual(["short    "]);
    expect(wrap("", 4, 3)).toEqual(["    "]);
  });

  it("cuts a word longer than a line, and folds runs of whitespace and newlines", () => {
    expect(wrap("abcdefghijkl mn", 5, 3)).toEqual(["abcde", "fghij", "kl mn"]);
    expect(wrap("a \n\n b", 5, 3)).toEqual(["a b  "]);
  });

  it("no line is ever longer than the width", () => {
    const text = "submit to db-1: permission denied: operator alice may run only on clients matching role=web";
    for (let w = 1; w < 40; w++) for (let n = 1; n < 5; n++) for (const l of wrap(text, w, n)) expect(l.length).toBe(w);
  });
});
