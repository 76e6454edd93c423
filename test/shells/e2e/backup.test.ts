// docs/DEPLOY.md, "Backups": the procedure as written. Stop the server
// (agents keep running their commands and spool output meanwhile), archive
// the data directory with tar, start it again; restore = unpack the archive
// into an empty data directory and start a server on it; the output reads
// back byte for byte, and the agent carries on with the restored server.
// A copy taken from a live filesystem snapshot holds the LOCK of the running
// server: the restored server refuses a lock whose pid is alive, and starts
// once LOCK is removed, as the procedure says.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, controlClient, FLEET_TOKEN, spawnRvbox, startAgent, tempDir, waitFor, writeTokenFiles, type Child, seqText } from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

describe("e2e: backup and restore of the server's data directory", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await cleanupTemp();
  });

  it("stop, tar, start; restore into an empty directory; output reads back exactly and the agent carries on", async () => {
    const work = await tempDir("rvbox-backup-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const data = path.join(work, "data");
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const serverArgs = (dir: string) => [
      "server",
      "--listen",
      `127.0.0.1:${agentPort}`,
      "--control",
      `127.0.0.1:${controlPort}`,
      "--data",
      dir,
      "--agent-tokens",
      files.agentTokens,
      "--operator-token",
      files.operatorToken,
      "--log-level",
      "warn",
    ];
    const client = controlClient(`http://127.0.0.1:${controlPort}`);
    const up = () => waitFor("server up", async () => (await client.listClients({}).catch(() => undefined)) !== undefined, 30_000);
    const stop = async (c: Child) => {
      c.proc.kill("SIGTERM");
      expect(await c.exited).toBe(0);
    };
    let server = spawnRvbox(serverArgs(data));
    children.push(server);
    await up();
    const agent = await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "backed-up");
    try {
      await waitFor("agent connected", () => agent.connected);
      const a = await client.submitCommand({ clientId: "backed-up", program: { case: "shell", value: { commandLine: "seq 1 50000; echo to-stderr >&2" } } });
      const au = a.command!.issueUuid;
      expect((await collect(client, au)).finished?.state).toBe(L.SUCCEEDED);
      // A command that runs while the server is down for the backup.
      const b = await client.submitCommand({ clientId: "backed-up", program: { case: "shell", value: { commandLine: "sleep 1; seq 1 1000" } } });
      const bu = b.command!.issueUuid;
      await waitFor("B running", async () => (await client.getCommand({ issueUuid: bu })).command!.state === L.RUNNING);

      // Backup: stop, archive, start.
      await stop(server);
      expect(existsSync(path.join(data, "db/LOCK"))).toBe(false); // a clean stop releases it
      const archive = path.join(work, "rvbox-backup.tar");
      execFileSync("tar", ["-C", data, "-cf", archive, "."]);
      server = spawnRvbox(serverArgs(data));
      children.push(server);
      await up();
      const gb = await collect(client, bu);
      expect(gb.finished?.state).toBe(L.SUCCEEDED); // it ran on while the server was down
      expect(gb.stdout.toString()).toBe(seqText(1, 1000));
      await stop(server);

      // Restore into an empty directory; start a server on it (same ports, so the agent finds it).
      const restored = path.join(work, "restored");
      mkdirSync(restored, { mode: 0o700 });
      execFileSync("tar", ["-C", restored, "-xf", archive]);
      // As from a live snapshot: LOCK names a live process (pid 1 here) -> refused, by name.
      writeFileSync(path.join(restored, "db/LOCK"), "1\n");
      const refused = spawnRvbox(serverArgs(restored));
      children.push(refused);
      expect(await refused.exited).not.toBe(0);
      expect(refused.output()).toMatch(/locked by live process 1/);
      execFileSync("rm", [path.join(restored, "db/LOCK")]);
      server = spawnRvbox(serverArgs(restored));
      children.push(server);
      await up();
      const ga = await collect(client, au);
      expect(ga.finished?.state).toBe(L.SUCCEEDED);
      expect(ga.stdout.toString() === seqText(1, 50000)).toBe(true);
      expect(ga.stderr.toString()).toBe("to-stderr\n");
      // B was still running in the backup; the agent's tombstone settles it without a second run.
      await waitFor("agent back", async () => (await client.listClients({})).clients.find((c) => c.clientId === "backed-up")?.connected, 30_000);
      const c = await client.submitCommand({ clientId: "backed-up", program: { case: "argv", value: { argv: ["echo", "after the restore"] } } });
      expect((await collect(client, c.command!.issueUuid)).stdout.toString()).toBe("after the restore\n");
      const bAfter = await waitFor(
        "B settled",
        async () => {
          const cmd = (await client.getCommand({ issueUuid: bu })).command!;
          return cmd.state !== L.RUNNING ? cmd : null;
        },
        30_000,
      );
      expect(bAfter.state).toBe(L.INTERRUPTED);
      expect(bAfter.reason).toMatch(/already executed/);
    } catch (err) {
      console.log(server.output());
      throw err;
    } finally {
      await agent.close({ killProcesses: true });
      if (server.proc.exitCode === null) await stop(server);
    }
  }, 180_000);
});
