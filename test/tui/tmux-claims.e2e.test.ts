// The TUI in tmux against a real server: a pending identity claim is
// dismissed with `d` (after a confirmation), without authorizing it, and the
// live instance keeps its session (issue 12, item 7; R-F4).
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
const term = new TmuxSession("tui-claims", 140, 30);

describe.skipIf(!hasTmux)("TUI in tmux: dismissing a claim", () => {
  beforeAll(async () => {
    const dir = await tempDir("rvbox-tmux-claims-");
    tokenFile = path.join(dir, "operator-token");
    writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
    s = await startServer({});
    a = await startAgent(s.url, "claim-a", {});
    await waitFor("agent", () => a.connected);
  });

  afterAll(async () => {
    term.kill();
    await b?.close();
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  it("R-F4: d on a pending claim asks, then dismisses it without authorizing; the live instance stays connected", async () => {
    term.start(["tui", "--server", s.controlUrl, "--token", tokenFile]);
    await term.waitFor((x) => /claim-a\s+connected/.test(x), "the sessions view", 40_000);
    // A second instance under the same id: refused, and pending as a claim.
    b = await startAgent(s.url, "claim-a", {});
    const other = (await waitFor("the claim at the server", async () => (await s.client.listClaims({})).claims.find((c) => c.clientId === "claim-a")))!
      .instanceId;
    expect(other).toMatch(/^[0-9a-f]{32}$/);
    term.keys("3");
    await term.waitFor((x) => x.includes("Claims (1)") && x.includes(other), "the pending claim");
    // Stop the claimant so that it does not claim again right after the dismissal.
    await b.close();
    b = undefined;
    term.keys("d");
    await term.waitFor((x) => x.includes(`Dismiss the claim of instance ${other} for claim-a`) && x.includes("(y/n)"), "the confirmation");
    term.keys("y");
    const scr = await term.waitFor(
      (x) => x.includes(`dismissed the claim of instance ${other} for claim-a`) && x.includes("no pending identity claims"),
      "dismissed",
    );
    expect(scr).not.toContain(`authorized instance ${other}`);
    expect((await s.client.listClaims({})).claims).toEqual([]);
    expect(a.connected).toBe(true);
    term.keys("1");
    await term.waitFor((x) => /claim-a\s+connected/.test(x), "the original instance still connected");
  }, 90_000);
});
