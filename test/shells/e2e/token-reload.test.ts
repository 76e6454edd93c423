// Token rotation without a restart (docs/DEPLOY.md, "Rotating tokens"): the
// server re-reads --agent-tokens and --operator-token on SIGHUP, the agent
// re-reads --token; a bad file keeps the old tokens; an agent session whose
// token was removed is closed and comes back with the agent's new token; a
// command running across the rotation is not disturbed.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, controlClient, spawnRvbox, tempDir, waitFor, type Child } from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

const OLD_AGENT = "agent-old-0123456789abcdef";
const NEW_AGENT = "agent-new-fedcba9876543210";
const OLD_OP = "operator-old-0123456789";
const NEW_OP = "operator-new-9876543210";

async function refused(client: ReturnType<typeof controlClient>): Promise<string> {
  try {
    await client.listClients({});
    return "accepted";
  } catch (err) {
    return String((err as Error).message);
  }
}

describe("e2e: token reload on SIGHUP", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await cleanupTemp();
  });

  it("server and agent re-read their token files on SIGHUP; rotation closes only the sessions on a removed token", async () => {
    const work = await tempDir("rvbox-reload-");
    const agentTokens = path.join(work, "agent-tokens");
    const operatorToken = path.join(work, "operator-token");
    const agentToken = path.join(work, "agent-token");
    writeFileSync(agentTokens, `* ${OLD_AGENT}\n`);
    writeFileSync(operatorToken, `${OLD_OP}\n`);
    writeFileSync(agentToken, `${OLD_AGENT}\n`);
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const server = spawnRvbox([
      "server",
      "--listen",
      `127.0.0.1:${agentPort}`,
      "--control",
      `127.0.0.1:${controlPort}`,
      "--data",
      path.join(work, "data"),
      "--agent-tokens",
      agentTokens,
      "--operator-token",
      operatorToken,
    ]);
    children.push(server);
    const base = `http://127.0.0.1:${controlPort}`;
    let op = controlClient(base, OLD_OP);
    await waitFor("server up", async () => (await op.listClients({}).catch(() => undefined)) !== undefined, 30_000);
    const agent = spawnRvbox([
      "agent",
      "--server",
      `ws://127.0.0.1:${agentPort}/v1/agent`,
      "--client-id",
      "rot-1",
      "--state",
      path.join(work, "agent"),
      "--token",
      agentToken,
    ]);
    children.push(agent);
    const client = async () => (await op.listClients({})).clients.find((c) => c.clientId === "rot-1");
    try {
      await waitFor("agent connected", async () => (await client())?.connected, 30_000);
      const gen1 = (await client())!.generation;
      // A command that runs across the whole rotation.
      const long = await op.submitCommand({
        clientId: "rot-1",
        program: { case: "shell", value: { commandLine: "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done" } },
      });

      // 1. Operator token: old and new accepted while both are listed, then only the new.
      writeFileSync(operatorToken, `${NEW_OP}\n${OLD_OP}\n`);
      server.proc.kill("SIGHUP");
      await waitFor("server reloaded", () => server.output().includes("tokens reloaded"));
      expect(await refused(controlClient(base, NEW_OP))).toBe("accepted");
      expect(await refused(op)).toBe("accepted");
      writeFileSync(operatorToken, `${NEW_OP}\n`);
      server.proc.kill("SIGHUP");
      await waitFor("second reload", () => server.output().split("tokens reloaded").length === 3);
      expect(await refused(op)).toMatch(/unauthenticated|401/i);
      op = controlClient(base, NEW_OP);
      expect(await refused(op)).toBe("accepted");

      // 2. A file that does not parse changes nothing.
      writeFileSync(agentTokens, "this line has three words\n");
      server.proc.kill("SIGHUP");
      await waitFor("reload refused", () => server.output().includes("token reload failed"));
      expect(server.output()).toContain(`--agent-tokens ${agentTokens}`);
      expect(await refused(op)).toBe("accepted");
      expect((await client())?.connected).toBe(true);

      // 3. Agent token: the server lists both, the agent switches, the server drops the old one.
      writeFileSync(agentTokens, `* ${OLD_AGENT}\n* ${NEW_AGENT}\n`);
      server.proc.kill("SIGHUP");
      await waitFor("third reload", () => server.output().split("tokens reloaded").length === 4);
      writeFileSync(agentToken, `${NEW_AGENT}\n`);
      agent.proc.kill("SIGHUP");
      await waitFor("agent reloaded", () => agent.output().includes("token reloaded"));
      expect((await client())!.generation).toBe(gen1); // the session that was up stays up
      writeFileSync(agentTokens, `* ${NEW_AGENT}\n`);
      server.proc.kill("SIGHUP");
      await waitFor("fourth reload", () => server.output().split("tokens reloaded").length === 5);
      expect(server.output()).toMatch(/tokens reloaded.*sessionsClosed=1/);
      await waitFor(
        "agent back on the new token",
        async () => {
          const c = await client();
          return c?.connected && c.generation > gen1;
        },
        30_000,
      );

      const got = await collect(op, long.command!.issueUuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      expect(got.stdout.toString()).toBe([1, 2, 3, 4, 5, 6].map((i) => `tick ${i}\n`).join(""));
      expect(server.proc.exitCode).toBeNull();
      expect(agent.proc.exitCode).toBeNull();
    } catch (err) {
      console.log(server.output(), agent.output());
      throw err;
    } finally {
      agent.proc.kill("SIGTERM");
      server.proc.kill("SIGTERM");
      await Promise.all([agent.exited, server.exited]);
    }
  }, 120_000);
});
