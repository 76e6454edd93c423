// End to end: the real TUI in tmux opening a large finished command (tens of
// MB) from a real server and agent on loopback. Memory must be bounded by
// what the pane keeps, not by the output's size: the pane opens at the end
// after reading only the last events, says how many earlier ones it did not
// load, loads from the start (g) only up to its bound and then stops pulling,
// and loads earlier events when scrolled past the top. No timing is
// asserted: counts of events and lines the pane holds, and the TUI process's
// resident memory against a bound far below what reading everything costs.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { TAIL_EVENTS } from "../../tui/sources/control-source.js";
import { PANE_MAX_LINES } from "../../tui/output-buffer.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { hasTmux, memKiB, TmuxSession } from "./tmux.js";

let s: TestServer;
let a: AgentDaemon;
let tokenFile: string;
// seq 1 6000000: 47 MB of stdout, about 720 events of 64 KiB.
const LINES = 6_000_000;
let uuid = "";
let events = 0;
const terms: TmuxSession[] = [];

/** The status line's "events A–B of N" and "L lines". */
function held(screen: string): { first: number; last: number; of: number; lines: number } | null {
  const m = /· (\d+) lines · events (\d+)–(\d+) of (\d+)/.exec(screen);
  return m ? { lines: Number(m[1]), first: Number(m[2]), last: Number(m[3]), of: Number(m[4]) } : null;
}

describe.skipIf(!hasTmux)("TUI in tmux: a large finished command", () => {
  beforeAll(async () => {
    const dir = await tempDir("rvbox-tmux-large-");
    tokenFile = path.join(dir, "operator-token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    // Invariant checks after every step would dominate a run this size.
    s = await startServer({ checkInvariants: false });
    a = await startAgent(s.url, "big", { cwd: dir, checkInvariants: false });
    await waitFor("agent", () => a.connected);
    const r = await s.client.submitCommand({
      clientId: "big",
      program: { case: "argv", value: { argv: ["seq", "1", String(LINES)] } },
      issueUuid: crypto.randomUUID(),
      requestId: crypto.randomUUID(),
    });
    uuid = r.command!.issueUuid;
    const c = await waitFor(
      "seq to finish",
      async () => ((await s.client.getCommand({ issueUuid: uuid })).command?.endedTime ? (await s.client.getCommand({ issueUuid: uuid })).command : null),
      180_000,
      250,
    );
    events = Number(c.storedThroughEventSeq);
  }, 240_000);

  afterAll(async () => {
    for (const t of terms) t.kill();
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  it("opens at the end reading only the last events, loads the start up to its bound and stops, loads earlier ones on ↑, and lets go of them on Esc", async () => {
    expect(events).toBeGreaterThan(4 * TAIL_EVENTS);
    const term = new TmuxSession("tui-large", 120, 40);
    terms.push(term);
    term.start(["tui", "--server", s.controlUrl, "--token", tokenFile, "--client", "big"]);
    await term.waitFor((x) => x.includes(`seq 1 ${LINES}`), "the commands view", 40_000);
    const pid = term.programPid()!;
    expect(pid).toBeGreaterThan(0);
    const idle = memKiB(pid).rss;

    // Enter: the end of the output, from the last TAIL_EVENTS events only.
    term.keys("Enter");
    let scr = await term.waitFor((x) => new RegExp(`^${LINES}\\s*$`, "m").test(x) && held(x)?.last === events, "the last line and event", 60_000);
    let h = held(scr)!;
    expect(h).not.toBeNull();
    expect(h.last).toBe(events);
    expect(h.of).toBe(events);
    expect(h.last - h.first + 1).toBeLessThanOrEqual(TAIL_EVENTS);
    expect(h.lines).toBeLessThanOrEqual(PANE_MAX_LINES);
    expect(scr).toContain("following");
    const tail = h;
    expect(tail.first).toBeGreaterThan(1);

    // Up to the top of that window: its first line says what it does not hold, and how to get it.
    // (40 rows: 33 rows of output, PageUp moves 32; the marker line is one more line.)
    term.repeat("PageUp", Math.ceil((h.lines + 1 - 33) / 32));
    scr = await term.waitFor((x) => x.includes("earlier events not loaded"), "the top of the window", 60_000);
    expect(scr).toContain(`[… ${tail.first - 1} earlier events not loaded (press g / Home to load from the start`);
    // ↑ once more: the events just before it, shown from their end; the reader stops where the window began.
    term.keys("Up");
    scr = await term.waitFor((x) => (held(x)?.first ?? tail.first) < tail.first && x.includes("paused"), "an earlier window", 60_000);
    h = held(scr)!;
    expect(h.last).toBe(tail.first - 1);
    expect(h.lines).toBeLessThanOrEqual(PANE_MAX_LINES);
    expect(scr).toMatch(new RegExp(`\\[… events ${tail.first}–${events} not loaded yet \\(↓ at the bottom loads more`));
    // ↓ at its bottom reads on, from where it stopped.
    term.keys("Down");
    scr = await term.waitFor((x) => (held(x)?.last ?? 0) > tail.first - 1, "the window reading on", 60_000);
    expect(held(scr)!.lines).toBeLessThanOrEqual(PANE_MAX_LINES + 65_536);

    // g: from the first event, up to the pane's bound; then the reader stops pulling.
    term.keys("g");
    scr = await term.waitFor((x) => /^1\s*$/m.test(x) && x.includes("paused: pane full"), "the first lines, the reader paused at the bound", 60_000);
    h = held(scr)!;
    expect(h.first).toBe(1);
    // Stopped at the bound (plus at most the lines of the event that filled it), far before the end.
    expect(h.lines).toBeLessThanOrEqual(PANE_MAX_LINES + 65_536);
    expect(h.last).toBeLessThan(events / 4);
    // Paused means paused: waiting does not make it read more.
    await new Promise((r) => setTimeout(r, 1500));
    expect(held(term.screen())!.last).toBe(h.last);

    // End: back to the end, without reading what lies between.
    term.keys("End");
    scr = await term.waitFor((x) => new RegExp(`^${LINES}\\s*$`, "m").test(x) && x.includes("following"), "the end again", 60_000);
    h = held(scr)!;
    expect(h.last - h.first + 1).toBeLessThanOrEqual(TAIL_EVENTS);
    const rssAtEnd = memKiB(pid).rss;
    // Esc and back: nothing is read twice over, and memory does not grow with each visit.
    term.keys("Escape");
    await term.waitFor((x) => x.includes(`seq 1 ${LINES}`) && !x.includes("earlier events not loaded"), "the commands view again");
    term.keys("Enter");
    await term.waitFor((x) => new RegExp(`^${LINES}\\s*$`, "m").test(x), "the end once more", 60_000);
    // The pane's bound, not the output's size (47 MB; reading all of it cost hundreds of MiB):
    // the TUI holds at most about 160 MiB more than when idle.
    const m = memKiB(pid);
    expect(m.rss - idle).toBeLessThan(160 * 1024);
    expect(m.peak - idle).toBeLessThan(200 * 1024);
    expect(m.rss).toBeLessThan(rssAtEnd + 64 * 1024);

    console.log(
      `TUI RSS: idle ${Math.round(idle / 1024)} MiB, after the walk ${Math.round(m.rss / 1024)} MiB, peak ${Math.round(m.peak / 1024)} MiB (output ${events} events)`,
    );
    term.keys("q");
    await term.waitFor((x) => x.includes("[exited 0]"), "the TUI to exit 0");
  }, 300_000);

  it("in a 40x12 terminal: the end, g and End, every line within 40 columns", async () => {
    const term = new TmuxSession("tui-large-small", 40, 12);
    terms.push(term);
    term.start(["tui", "--server", s.controlUrl, "--token", tokenFile, "--client", "big"]);
    await term.waitFor((x) => x.includes("big") && /succeeded/.test(x), "the commands view", 40_000);
    term.keys("Enter");
    const fits = (x: string): boolean => x.split("\n").every((l) => l.length <= 40) && x.trimEnd().split("\n").length <= 12;
    let scr = await term.waitFor((x) => new RegExp(`^${LINES}\\s*$`, "m").test(x) && fits(x), "the last line at 40x12", 60_000);
    term.keys("g");
    scr = await term.waitFor((x) => /^1\s*$/m.test(x) && fits(x), "the first line at 40x12", 60_000);
    expect(scr).toMatch(/^2\s*$/m);
    term.keys("End");
    scr = await term.waitFor((x) => new RegExp(`^${LINES}\\s*$`, "m").test(x) && fits(x), "the end again at 40x12", 60_000);
    term.keys("q");
    await term.waitFor((x) => x.includes("[exited 0]"), "the TUI to exit 0");
  }, 180_000);
});
