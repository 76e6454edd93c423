// Stopping an agent (`systemctl stop`, SIGTERM to `rvbox agent`): its running
// commands get SIGTERM and a grace to exit before SIGKILL, as an admin expects
// of a service stop; after a restart they end `interrupted` (the agent lost
// them; R-C4), never relaunched (R-D2).
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, processAlive, startAgent, startServer, tempDir, waitFor, type TestServer } from "./helpers.js";

async function read(file: string): Promise<string> {
  try {
    return await fsp.readFile(file, "utf8");
  } catch {
    return "";
  }
}

const alive = processAlive;

describe("e2e: agent stop", () => {
  let s: TestServer | undefined;
  afterAll(async () => {
    await s?.close();
    await cleanupTemp();
  });

  it("R-C4 R-D2: stop sends SIGTERM first and waits; a command that exits on it is not SIGKILLed; after a restart it is interrupted, not relaunched", async () => {
    s = await startServer();
    const work = await tempDir("rvbox-stop-");
    const stateDir = await tempDir("rvbox-agent-stop-");
    const mark = path.join(work, "mark");
    const a = await startAgent(s.url, "stopper", { stateDir });
    await waitFor("agent connected", () => a.connected);
    const r = await s.client.submitCommand({
      clientId: "stopper",
      program: { case: "shell", value: { commandLine: `trap 'echo term >> ${mark}; exit 0' TERM; echo start >> ${mark}; while :; do sleep 0.05; done` } },
    });
    const uuid = r.command!.issueUuid;
    await waitFor("command started", async () => (await read(mark)).includes("start"));
    await a.close({ killProcesses: true, killGraceMs: 10_000 });
    expect((await read(mark)).split("\n").filter(Boolean)).toEqual(["start", "term"]);

    const b = await startAgent(s.url, "stopper", { stateDir });
    try {
      const c = await waitFor("command terminal", async () => {
        const got = (await s!.client.getCommand({ issueUuid: uuid })).command!;
        return got.state === L.INTERRUPTED || got.state === L.SUCCEEDED || got.state === L.FAILED ? got : undefined;
      });
      expect(c.state).toBe(L.INTERRUPTED);
      expect((await read(mark)).split("\n").filter(Boolean)).toEqual(["start", "term"]);
    } finally {
      await b.close({ killProcesses: true });
    }
  }, 60_000);

  it("R-C4: a command that ignores SIGTERM is SIGKILLed when the grace ends", async () => {
    s ??= await startServer();
    const work = await tempDir("rvbox-stop-");
    const pidFile = path.join(work, "pid");
    const a = await startAgent(s.url, "stubborn");
    await waitFor("agent connected", () => a.connected);
    await s.client.submitCommand({
      clientId: "stubborn",
      program: { case: "shell", value: { commandLine: `trap '' TERM; echo $$ > ${pidFile}; while :; do sleep 0.05; done` } },
    });
    const pid = Number(await waitFor("pid written", async () => (await read(pidFile)).trim()));
    expect(alive(pid)).toBe(true);
    await a.close({ killProcesses: true, killGraceMs: 300 });
    await waitFor("process gone", () => !alive(pid), 5_000);
  }, 60_000);
});
