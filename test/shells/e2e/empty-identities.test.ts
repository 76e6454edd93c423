// An identities file with no identity in it (issue 38 item 7) is refused
// like an empty agent-tokens file: at start the server does not start, and a
// SIGHUP that finds it empty keeps the identities in force and logs an
// error, instead of answering every call 401 from then on.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { operatorAdd } from "../../../shells/cli/server-cli.js";
import { cleanupTemp, controlClient, FLEET_TOKEN, spawnRvbox, tempDir, waitFor, writeTokenFiles, type Child } from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

describe("e2e: an empty identities file", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await cleanupTemp();
  });

  const args = async (work: string, identities: string, agentTokens: string): Promise<string[]> => {
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    return ["server", "--listen", `127.0.0.1:${agentPort}`, "--control", `127.0.0.1:${controlPort}`, "--data", path.join(work, "data")].concat([
      "--agent-tokens",
      agentTokens,
      "--identities",
      identities,
      "--log-level",
      "info",
    ]);
  };

  it("is refused at start, and on SIGHUP the previous identities stay in force", async () => {
    const work = await tempDir("rvbox-empty-ids-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const identities = path.join(work, "identities");
    writeFileSync(identities, "# nobody yet\n");
    const refused = spawnRvbox(await args(work, identities, files.agentTokens));
    children.push(refused);
    expect(await refused.exited).not.toBe(0);
    expect(refused.output()).toContain(`--identities ${identities} holds no identity`);

    const out: string[] = [];
    expect(operatorAdd(["add", "alice", "--role", "viewer", "--identities", identities], (l) => out.push(l))).toBe(0);
    const argv = await args(work, identities, files.agentTokens);
    const server = spawnRvbox(argv);
    children.push(server);
    const alice = controlClient(`http://127.0.0.1:${argv[4]!.split(":")[1]}`, out[0]!);
    await waitFor("server up", async () => (await alice.listClients({}).catch(() => undefined)) !== undefined, 30_000);
    writeFileSync(identities, "");
    server.proc.kill("SIGHUP");
    await waitFor("reload refused", () => server.output().includes("token reload failed"));
    expect(server.output()).toContain("holds no identity");
    expect((await alice.listClients({})).clients).toEqual([]);
    server.proc.kill("SIGTERM");
    expect(await server.exited).toBe(0);
  }, 60_000);
});
