// Captures each TUI view as text into docs/tui/*.txt by driving the real TUI
// in tmux: `rvbox tui --demo` (a local server, two agents, an impostor and
// sample commands) and `rvbox tui --sim 42`.
//
//   npx tsx test/tui/capture-screens.ts
//   npx tsx test/tui/capture-screens.ts --only=large   # only the output-large-*.txt screens
import { mkdirSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { ROOT, TmuxSession } from "./tmux.js";

const OUT = path.join(ROOT, "docs/tui");
mkdirSync(OUT, { recursive: true });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function save(name: string, screen: string, note: string): void {
  const body = screen.replace(/[ \t]+$/gm, "").replace(/\n+$/, "");
  writeFileSync(path.join(OUT, `${name}.txt`), `${body}\n`);
  console.log(`docs/tui/${name}.txt  ${note}`);
}

/** Press j until the selected row (› gutter) matches. */
async function select(t: TmuxSession, re: RegExp, max = 40): Promise<void> {
  for (let i = 0; i < max; i++) {
    const sel = t
      .screen()
      .split("\n")
      .find((l) => l.startsWith("› "));
    if (sel && re.test(sel)) return;
    t.keys("j");
    await sleep(150);
  }
  throw new Error(`no row matching ${re}`);
}

async function live(): Promise<void> {
  const t = new TmuxSession("capture-live", 120, 32);
  try {
    t.start(["tui", "--demo"]);
    await t.waitFor((x) => /demo-b\s+connected/.test(x) && x.includes("Claims (1)"), "the demo fleet", 60_000);
    await sleep(2500);
    save("sessions", t.screen(), "sessions view (live demo fleet)");

    t.keys("2");
    await t.waitFor((x) => x.includes("chatty done") || /succeeded.*urandom/.test(x) || x.includes("head -c 300000"), "commands");
    await t.waitFor((x) => /demo-b\s+succeeded\s+1\s+exit 0.*head -c 300000/.test(x), "the chatty command to finish", 60_000);
    save("commands", t.screen(), "commands view, all clients (states, revisions, exits)");

    await select(t, /head -c 300000/);
    t.keys("Enter");
    await t.waitFor((x) => x.includes("chatty done"), "the chatty output");
    t.keys("g");
    await t.waitFor((x) => x.includes("removed by server retention"), "the retention marker at the top");
    save("output-retention", t.screen(), "output pane: a server retention marker inline (R-O5)");

    t.keys("Escape");
    await sleep(300);
    await select(t, /exit 3/);
    t.keys("Enter");
    await t.waitFor((x) => x.includes("── failed (exit 3)"), "the failed command's output");
    save("output-failed", t.screen(), "output pane: stderr, lifecycle events and the exit");

    t.keys("Escape");
    await sleep(300);
    t.keys("s");
    await t.waitFor((x) => x.includes("Submit a command"), "the submit form");
    t.type("for i in 1 2 3; do echo step $i; sleep 1; done");
    await sleep(300);
    save("submit", t.screen(), "submit form");
    t.keys("Enter");
    await t.waitFor((x) => x.includes("step 2"), "the new command's live output");
    save("output-live", t.screen(), "output pane following a running command");

    t.keys("Escape");
    await sleep(400);
    t.keys("a");
    await sleep(300);
    await select(t, /sleep 600/);
    t.keys("x");
    await t.waitFor((x) => x.includes("t TERM"), "the signal picker");
    save("signal", t.screen(), "signal picker on a running command");
    t.keys("Escape");
    await sleep(400);

    t.keys("3");
    await t.waitFor((x) => /demo-a\s+[0-9a-f]{32}/.test(x), "the pending claim");
    t.keys("a");
    await t.waitFor((x) => x.includes("(y/n)"), "the authorize confirmation");
    save("claims", t.screen(), "claims view with the authorize confirmation (R-F4, R-F5)");
    t.keys("n");

    t.keys("4");
    await sleep(500);
    save("incidents-live", t.screen(), "incidents view (live: none)");

    t.keys("?");
    await t.waitFor((x) => x.includes("Keys (? or esc closes)"), "help");
    save("help", t.screen(), "the key list");
    t.keys("Escape");
    await sleep(400);

    t.keys("1");
    t.resize(80, 20);
    await sleep(800);
    save("sessions-80x20", t.screen(), "sessions view resized to 80x20");
    t.keys("q");
    await t.waitFor((x) => x.includes("[exited 0]"), "exit");
  } finally {
    t.kill();
  }
}

async function sim(): Promise<void> {
  const t = new TmuxSession("capture-sim", 120, 32);
  try {
    t.start(["tui", "--sim", "42"]);
    await t.waitFor((x) => x.includes("seed ok"), "the recording", 60_000);
    t.keys("]", "]", "]", "]", "]", "]", "]", "]", "]", "]", "]", "]");
    await sleep(800);
    save("sim-sessions", t.screen(), "sim replay: sessions with the timeline bar (seed 42, ~120 s in)");
    t.keys("4");
    t.keys(">");
    await sleep(600);
    save("sim-incidents", t.screen(), "sim replay: incidents at the end of seed 42");
    t.keys("3");
    await sleep(400);
    save("sim-claims", t.screen(), "sim replay: pending identity claims");
    t.keys("2");
    await sleep(400);
    t.keys("n", "n");
    await sleep(400);
    save("sim-commands-node-filter", t.screen(), "sim replay: commands filtered to node agent-0");
    t.keys("q");
  } finally {
    t.kill();
  }
}

/** A finished 14.9 MB command (seq 1 2000000) in the demo fleet: its end, the top of that window, one step earlier, the start. */
async function large(): Promise<void> {
  const t = new TmuxSession("capture-large", 120, 32);
  try {
    t.start(["tui", "--demo"]);
    await t.waitFor((x) => /demo-b\s+connected/.test(x), "the demo fleet", 60_000);
    t.keys("s");
    await t.waitFor((x) => x.includes("Submit a command"), "the submit form");
    t.type("seq 1 2000000");
    t.keys("Enter");
    await t.waitFor((x) => /^2000000\s*$/m.test(x) && x.includes("ended"), "the command to finish", 120_000);
    t.keys("Escape");
    await sleep(500);
    await select(t, /seq 1 2000000/);
    t.keys("Enter");
    const scr = await t.waitFor((x) => /^2000000\s*$/m.test(x) && /events \d+–\d+ of \d+/.test(x) && x.includes("── succeeded"), "the end", 60_000);
    save("output-large-end", scr, "output pane: a finished 14.9 MB command opened at its end");
    // 32 rows: 25 rows of output, PageUp moves 24; the marker line is one more.
    const lines = Number(/· (\d+) lines ·/.exec(scr)![1]);
    t.repeat("PageUp", Math.ceil((lines + 1 - 25) / 24));
    await t.waitFor((x) => x.includes("earlier events not loaded") && x.includes("scrolled"), "the top of the window", 60_000);
    await sleep(300);
    save("output-large-top", t.screen(), "output pane: the top of the window over the end");
    t.keys("Up");
    await t.waitFor((x) => x.includes("not loaded yet") && x.includes("paused"), "the events before it", 60_000);
    await sleep(300);
    save("output-large-earlier", t.screen(), "output pane: ↑ at the top loaded the events before it");
    t.keys("g");
    await t.waitFor((x) => /events 1–\d+/.test(x) && x.includes("paused: pane full"), "the start", 60_000);
    await sleep(300);
    save("output-large-start", t.screen(), "output pane: g loaded from the first event up to the pane's bound");
    t.keys("q");
    await t.waitFor((x) => x.includes("[exited 0]"), "exit");
  } finally {
    t.kill();
  }
}

const only = process.argv.find((a) => a.startsWith("--only="))?.slice(7);
if (only === "large") await large();
else {
  await live();
  await sim();
  await large();
}
