// The TUI in tmux against a real server and agent: a commands list that the
// operator leaves (another view, all clients) and comes back to is shown
// again, and the selection stays on the command it was on when new commands
// arrive above it (issue 12, item 1).
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { hasTmux, TmuxSession } from "./tmux.js";

let s: TestServer;
let a: AgentDaemon;
let tokenFile: string;
const term = new TmuxSession("tui-views", 120, 40);

async function run(tag: string): Promise<void> {
  const r = await s.client.submitCommand({ clientId: "views-a", program: { case: "argv", value: { argv: ["echo", tag] } } });
  await waitFor(`${tag} done`, async () => (await s.client.getCommand({ issueUuid: r.command!.issueUuid })).command!.state === L.SUCCEEDED);
}

/** The line the selection marker (›) is on. */
function selected(screen: string): string {
  return screen.split("\n").find((l) => l.includes("›") && l.includes("echo")) ?? "";
}

describe.skipIf(!hasTmux)("TUI in tmux: the commands view across view switches", () => {
  beforeAll(async () => {
    const dir = await tempDir("rvbox-tmux-views-");
    tokenFile = path.join(dir, "operator-token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer({});
    a = await startAgent(s.url, "views-a", { cwd: dir });
    await waitFor("agent", () => a.connected);
    for (const tag of ["view-one", "view-two", "view-three"]) await run(tag);
  });

  afterAll(async () => {
    term.kill();
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  it("a client's list and the all-clients list come back after 1 → 2 and after a → 1 → 2; the selection follows its command, not its row", async () => {
    const all = (x: string): boolean => x.includes("echo view-one") && x.includes("echo view-two") && x.includes("echo view-three");
    term.start(["tui", "--server", s.controlUrl, "--token", tokenFile]);
    await term.waitFor((x) => /views-a\s+connected/.test(x), "the sessions view", 40_000);
    term.keys("Enter");
    await term.waitFor(all, "views-a's commands");
    // Away and back: the list is watched again, not "no commands yet".
    term.keys("1");
    await term.waitFor((x) => /views-a\s+connected/.test(x) && !x.includes("echo view-one"), "the sessions view again");
    term.keys("2");
    let scr = await term.waitFor(all, "views-a's commands after 1 → 2");
    expect(scr).not.toMatch(/no commands/);
    // All clients, away, and back.
    term.keys("a");
    await term.waitFor((x) => all(x) && x.includes("› all clients"), "all clients' commands");
    term.keys("1");
    await term.waitFor((x) => !x.includes("echo view-one"), "the sessions view");
    term.keys("2");
    scr = await term.waitFor((x) => all(x) && x.includes("› all clients"), "all clients' commands after a → 1 → 2");
    expect(scr).not.toMatch(/no commands/);

    // The selection is on a command; new commands arrive at the top of the
    // list, and the marker stays on the same command.
    term.keys("j");
    scr = await term.waitFor((x) => selected(x).includes("echo view-two"), "view-two selected");
    await run("view-four");
    await run("view-five");
    scr = await term.waitFor((x) => x.includes("echo view-four") && x.includes("echo view-five"), "the new commands listed");
    expect(selected(scr)).toContain("echo view-two");
  }, 120_000);
});
