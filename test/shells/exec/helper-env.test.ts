/**
 * A command's parent is the spawn helper, so whatever is in the helper's
 * environment a command can read in /proc/$PPID/environ. Against a REAL
 * `rvbox agent` process whose own environment holds a secret: the helper
 * holds none of the agent's variables beyond the safe base every command
 * gets anyway, and the command's own environment is what it always was (the
 * base taken from the agent's environment, the submitted variables over it).
 */
import { readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { buildChildEnv } from "../../../shells/exec/process-runner.js";
import { type Child, cleanupTemp, collect, FLEET_TOKEN, spawnRvbox, startServer, tempDir, waitFor } from "../e2e/helpers.js";

const SECRET = "RVBOX_TEST_AGENT_SECRET";

/** NUL- or newline-separated NAME=VALUE lines as a map. */
function envOf(text: string, sep: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split(sep)) {
    const eq = line.indexOf("=");
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}

describe.runIf(process.platform === "linux")("the spawn helper's environment", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await Promise.all(children.map((c) => c.exited));
    await cleanupTemp();
  });

  it("a command reading /proc/$PPID/environ does not see the agent's secrets; its own environment is unchanged", async () => {
    const s = await startServer();
    try {
      const work = await tempDir("rvbox-helper-env-");
      const tokenFile = path.join(work, "token");
      writeFileSync(tokenFile, `${FLEET_TOKEN}\n`);
      const agentArgs = ["agent", "--server", s.url, "--client-id", "env-a", "--state", path.join(work, "state"), "--token", tokenFile, "--log-level", "warn"];
      const agent = spawnRvbox(agentArgs, { [SECRET]: "x-secret-value" });
      children.push(agent);
      await waitFor("agent connected", async () => (await s.client.listClients({})).clients.find((c) => c.clientId === "env-a" && c.connected));

      // $PPID is the helper; the agent is the helper's parent. NULs become newlines (env values here have none).
      const script = 'tr "\\000" "\\n" < /proc/$PPID/environ; echo "--- $(cut -d" " -f4 /proc/$PPID/stat)"; env';
      const sub = await s.client.submitCommand({
        clientId: "env-a",
        program: { case: "argv", value: { argv: ["sh", "-c", script] } },
        environment: [{ name: "FROM_SUBMIT", value: "yes" }],
      });
      const got = await collect(s.client, sub.command!.issueUuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      const [parentText, rest] = got.stdout.toString().split("\n--- ");
      const [grandparent, ...ownLines] = rest!.split("\n");
      // The command's parent is the helper, whose parent is the agent process.
      expect(Number(grandparent)).toBe(agent.proc.pid);
      expect(readFileSync(`/proc/${agent.proc.pid}/environ`, "latin1")).toContain(`${SECRET}=x-secret-value`);

      const parentEnv = envOf(parentText!, "\n");
      expect(parentEnv[SECRET]).toBeUndefined();
      // The helper holds the safe base and nothing else of the agent's (fork adds its IPC channel's two).
      expect(parentEnv.NODE_CHANNEL_FD).toBeDefined();
      delete parentEnv.NODE_CHANNEL_FD;
      delete parentEnv.NODE_CHANNEL_SERIALIZATION_MODE;
      const agentEnv = envOf(readFileSync(`/proc/${agent.proc.pid}/environ`, "latin1"), "\0");
      // And the test run's marks, so the leak check sees a helper a test left running (helperEnv).
      expect(parentEnv.RVBOX_TEST_RUN).toBe(agentEnv.RVBOX_TEST_RUN);
      delete parentEnv.RVBOX_TEST_RUN;
      delete parentEnv.RVBOX_TEST_FILE;
      expect(parentEnv).toEqual(buildChildEnv(undefined, agentEnv));

      // The command's own environment: the base from the agent's environment, the submitted variable over it.
      const own = envOf(ownLines.join("\n"), "\n");
      delete own.PWD;
      delete own.SHLVL;
      delete own._;
      expect(own).toEqual(buildChildEnv({ FROM_SUBMIT: "yes" }, agentEnv));
    } finally {
      for (const c of children) c.proc.kill("SIGTERM");
      await Promise.all(children.map((c) => c.exited));
      await s.close();
    }
  }, 60_000);
});
