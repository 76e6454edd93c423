// End to end: the real TUI in a real terminal (tmux), against a real server
// and agent on loopback. Keys go in with send-keys; the screen comes back with
// capture-pane.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { hasTmux, TmuxSession } from "./tmux.js";

let s: TestServer;
let a: AgentDaemon;
let b: AgentDaemon | undefined;
let tokenFile: string;
const term = new TmuxSession("tui-e2e", 120, 40);

describe.skipIf(!hasTmux)("TUI in tmux against a real server and agent", () => {
  beforeAll(async () => {
    const dir = await tempDir("rvbox-tmux-");
    tokenFile = path.join(dir, "operator-token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer({});
    a = await startAgent(s.url, "tmux-a", { cwd: dir, killGraceMs: 1000 });
    await waitFor("agent", () => a.connected);
  });

  afterAll(async () => {
    term.kill();
    await b?.close();
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  it("sessions → submit → live output with the exit → commands → claims (authorize) → incidents → help → resize → quit", async () => {
    term.start(["tui", "--server", s.controlUrl, "--token", tokenFile, "--refresh", "300ms"]);
    let scr = await term.waitFor((x) => /tmux-a\s+connected/.test(x), "the sessions view with tmux-a connected", 40_000);
    expect(scr).toContain("RVBox · http://127.0.0.1:");
    // The fleet streams (WatchFleet): --refresh applies only to servers without it.
    expect(scr).toContain(" · stream ");
    expect(scr).not.toContain("refresh 300ms");
    // Window unknown live; budget: the server's retained output for this client against its budget.
    expect(scr).toMatch(/› tmux-a\s+connected\s+[0-9a-f]{10}\s+\d+.*\s-\s+0%\s+ready/);

    // Submit a command through the form; the TUI opens its live output.
    term.keys("s");
    await term.waitFor((x) => x.includes("Submit a command"), "the submit form");
    term.type("echo tmux-hello; sleep 1; echo tmux-bye >&2; exit 3");
    term.keys("Enter");
    // The output's end marker (from the follow stream) can be drawn before the header has the
    // command record with its start time (a separate stream): wait for both.
    const header = /on tmux-a · failed \(exit 3\) · \d+(\.\d)?(ms|s) · rev 1 · sh: echo tmux-hello/;
    scr = await term.waitFor((x) => x.includes("tmux-bye") && /failed \(exit 3\)/.test(x) && header.test(x), "live output, the exit and the header");
    expect(scr).toMatch(header);
    expect(scr).toContain("tmux-hello");
    expect(scr).toContain("── failed (exit 3) · event");

    // Back to the command list: state and revision.
    term.keys("Escape");
    scr = await term.waitFor((x) => /failed\s+1\s+exit 3/.test(x), "the commands view");
    expect(scr).toContain("› tmux-a");

    // A long-running command, cancelled from the TUI.
    term.keys("s");
    await term.waitFor((x) => x.includes("Submit a command"), "the submit form");
    term.type("sleep 60");
    term.keys("Enter");
    await term.waitFor((x) => /on tmux-a · running/.test(x), "sleep running");
    term.keys("c");
    await term.waitFor((x) => x.includes("? (y/n)"), "the cancel confirmation");
    term.keys("y");
    scr = await term.waitFor((x) => /on tmux-a · cancelled/.test(x), "cancelled");
    term.keys("Escape");
    await term.waitFor((x) => /cancelled\s+2/.test(x), "cancelled with revision 2 in the list");

    // An identity claim: another instance for tmux-a.
    b = await startAgent(s.url, "tmux-a", {});
    term.keys("3");
    scr = await term.waitFor((x) => /tmux-a\s+[0-9a-f]{32}/.test(x) && x.includes("Claims (1)"), "the pending claim");
    term.keys("a");
    await term.waitFor((x) => x.includes("to take over tmux-a once? (y/n)"), "the authorize confirmation");
    term.keys("y");
    await term.waitFor((x) => x.includes(`authorized instance ${b!.state.instanceId} for tmux-a once`), "authorized");
    await waitFor("the authorized instance took over", () => b!.connected);

    term.keys("4");
    await term.waitFor((x) => x.includes("no incidents") || /KIND\s+CLIENT/.test(x), "the incidents view");

    term.keys("?");
    await term.waitFor((x) => x.includes("Keys (? or esc closes)"), "the help overlay");
    term.keys("Escape");

    // Resize: every line fits the new width.
    term.keys("1");
    term.resize(70, 20);
    scr = await term.waitFor((x) => x.includes("tmux-a") && x.split("\n").every((l) => l.length <= 70) && !x.includes("BUDGET"), "a 70x20 redraw");
    expect(scr.trimEnd().split("\n").length).toBeLessThanOrEqual(20);
    term.resize(120, 40);
    await term.waitFor((x) => x.includes("BUDGET"), "a 120x40 redraw");

    term.keys("q");
    await term.waitFor((x) => x.includes("[exited 0]"), "the TUI to exit 0");
  });
});
