// rvbox drain against a REAL server and agent on loopback: the upgrade
// procedure of docs/DEPLOY.md (drain --wait, restart, drain --off).
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { cli } from "./helpers.js";

let s: TestServer;
let agent: AgentDaemon;
let env: Record<string, string>;

beforeAll(async () => {
  const dir = await tempDir("rvbox-cli-drain-");
  const tokenFile = path.join(dir, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  s = await startServer();
  agent = await startAgent(s.url, "host-d", { cwd: dir, killGraceMs: 1000 });
  await waitFor("agent connected", () => agent.connected);
  env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile };
});

afterAll(async () => {
  await agent?.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

const state = async (uuid: string) => (await s.client.getCommand({ issueUuid: uuid })).command!;

describe("rvbox drain", () => {
  it("an unknown client exits 66 and names the closest known one", async () => {
    const r = await cli(["drain", "host-x"], { env });
    expect(r.code).toBe(66);
    expect(r.stderr).toContain("host-d");
  });

  it("R-D1: drain --wait returns once a running sleep 1 ends; a command submitted during the drain waits (client draining) and runs only after --off", async () => {
    const sleeper = (await cli(["run", "host-d", "--id", "drain-sleep-1", "--", "sleep", "1"], { env })).stdout.trim();
    await waitFor("sleep running", async () => (await state(sleeper)).state === L.RUNNING);
    const t0 = Date.now();
    const d = await cli(["drain", "host-d", "--wait", "--timeout", "30s"], { env });
    expect(d.code).toBe(0);
    expect(d.stdout).toContain("client host-d draining");
    expect(d.stdout).toContain("drained: safe to restart rvbox-agent on host-d");
    // It returned because the sleep ended, not at once.
    expect((await state(sleeper)).state).toBe(L.SUCCEEDED);
    expect(Date.now() - t0).toBeGreaterThan(200);

    const cl = await cli(["clients"], { env });
    expect(cl.stdout).toMatch(/host-d\s.*draining/);
    expect((await s.client.listClients({})).clients.find((c) => c.clientId === "host-d")?.draining).toBe(true);

    // Submitted during the drain: it stays queued and run --follow says why.
    const follow = cli(["run", "host-d", "-f", "--id", "drain-later-1", "--", "echo", "later"], { env });
    await waitFor("submitted", async () => (await s.client.listCommands({ clientId: "host-d" })).commands.some((c) => c.issueUuid === "drain-later-1"));
    await new Promise((r) => setTimeout(r, 1500));
    const held = await state("drain-later-1");
    expect(held.state).toBe(L.QUEUED);
    expect(held.waitingReason).toContain("client draining");

    const off = await cli(["drain", "host-d", "--off"], { env });
    expect(off.code).toBe(0);
    expect(off.stdout).toContain("drain ended");
    const f = await follow;
    expect(f.code).toBe(0);
    expect(f.stdout).toBe("later\n");
    expect(f.stderr).toContain("rvbox: waiting: client draining");
    expect((await s.client.listClients({})).clients.find((c) => c.clientId === "host-d")?.draining).toBe(false);
  });

  it("drain --wait --timeout gives up with exit 75, lists what still runs, and leaves the drain on", async () => {
    const long = (await cli(["run", "host-d", "--id", "drain-long-1", "--", "sleep", "30"], { env })).stdout.trim();
    await waitFor("sleep running", async () => (await state(long)).state === L.RUNNING);
    const d = await cli(["drain", "host-d", "--wait", "--timeout", "1s"], { env });
    expect(d.code).toBe(75);
    expect(d.stderr).toContain("timed out");
    expect(d.stderr).toMatch(/drain-long-1\s+running/);
    expect((await s.client.listClients({})).clients.find((c) => c.clientId === "host-d")?.draining).toBe(true);
    await cli(["cancel", long], { env });
    await waitFor("cancelled", async () => (await state(long)).state === L.CANCELLED);
    expect((await cli(["drain", "host-d", "--off"], { env })).code).toBe(0);
    const again = await cli(["drain", "host-d", "--off"], { env });
    expect(again.stdout).toContain("was not draining");
  });

  it("usage errors: --off with --wait, --timeout without --wait", async () => {
    expect((await cli(["drain", "host-d", "--off", "--wait"], { env })).code).toBe(2);
    expect((await cli(["drain", "host-d", "--timeout", "5s"], { env })).code).toBe(2);
  });
});
