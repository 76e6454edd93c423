// The TUI as an operator starts it: `rvbox tui` (bin/rvbox.js executed), from a
// directory outside the tree. The other tmux tests start the sources from the
// tree's root, where tsx finds the tree's tsconfig by itself; from anywhere
// else tsx once compiled the TUI's JSX for a global React, and `rvbox tui`
// stopped at once with "React is not defined".
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanupTemp, OPERATOR_TOKEN, startServer, tempDir, type TestServer } from "../shells/e2e/helpers.js";
import { hasTmux, TmuxSession } from "./tmux.js";

let s: TestServer;
let dir: string;
const term = new TmuxSession("tui-installed", 100, 20);

describe.skipIf(!hasTmux)("rvbox tui started from outside the tree", () => {
  beforeAll(async () => {
    dir = await tempDir("rvbox-tmux-cwd-");
    writeFileSync(path.join(dir, "operator-token"), `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer({});
  });

  afterAll(async () => {
    term.kill();
    await s?.close();
    await cleanupTemp();
  });

  it("draws its views and quits with q (exit 0)", async () => {
    term.startInstalled(["tui"], { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: "operator-token" }, dir);
    const scr = await term.waitFor((x) => x.includes("1 Sessions") || x.includes("[exited"), "the sessions view", 40_000);
    expect(scr).not.toContain("React is not defined");
    expect(scr).toContain(`RVBox · ${s.controlUrl}`);
    term.keys("q");
    await term.waitFor((x) => x.includes("[exited 0]"), "the TUI to quit with exit 0");
  }, 60_000);
});
