// The deployable tree: `npm run build` compiles the sources to dist/, and
// `node dist/bin/rvbox.js` (what the systemd units run) serves agents and the
// control API with no TypeScript loader in the process.
import { execFile, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, controlClient, FLEET_TOKEN, ROOT, spawnRvbox, tempDir, waitFor, writeTokenFiles, type Child } from "./helpers.js";
import { DAEMON_NODE_FLAGS } from "../../../bin/cli-child.js";
import { findOldNode, nodeVersion } from "../../support/node-versions.js";
import { freePort } from "./tcp-proxy.js";

const run = promisify(execFile);
const DIST_BIN = path.join(ROOT, "dist/bin/rvbox.js");
const PACKAGED = path.join(ROOT, "node_modules/.bin/node");
const oldNode = findOldNode();

describe("compiled build (dist/)", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await cleanupTemp();
  });

  it("R-T1: `npm run build` emits dist/bin/rvbox.js, and the compiled server and agent run a command end to end", async () => {
    await run(process.execPath, [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", path.join(ROOT, "tsconfig.build.json")], { cwd: ROOT });
    expect(existsSync(DIST_BIN)).toBe(true);
    // Nothing in the compiled tree loads a TypeScript loader: plain node runs it.
    const loaders = readdirSync(path.join(ROOT, "dist"), { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".js"))
      .filter((f) => /from "tsx|import\("tsx/.test(readFileSync(path.join(ROOT, "dist", f), "utf8")));
    expect(loaders).toEqual([]);

    const work = await tempDir("rvbox-dist-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const agentToken = path.join(work, "agent-token");
    writeFileSync(agentToken, `${FLEET_TOKEN}\n`, { mode: 0o600 });
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const server = spawnRvbox(
      [
        "server",
        "--listen",
        `127.0.0.1:${agentPort}`,
        "--control",
        `127.0.0.1:${controlPort}`,
        "--data",
        path.join(work, "data"),
        "--agent-tokens",
        files.agentTokens,
        "--operator-token",
        files.operatorToken,
        "--log-level",
        "warn",
      ],
      {},
      DIST_BIN,
    );
    children.push(server);
    const client = controlClient(`http://127.0.0.1:${controlPort}`);
    await waitFor("server up", async () => (await client.listClients({})) !== undefined, 30_000);
    const agent = spawnRvbox(
      [
        "agent",
        "--server",
        `ws://127.0.0.1:${agentPort}/v1/agent`,
        "--client-id",
        "dist-a",
        "--state",
        path.join(work, "agent"),
        "--token",
        agentToken,
        "--log-level",
        "warn",
      ],
      {},
      DIST_BIN,
    );
    children.push(agent);
    await waitFor("agent connected", async () => (await client.listClients({})).clients.some((c) => c.clientId === "dist-a" && c.connected), 30_000);

    const r = await client.submitCommand({ clientId: "dist-a", program: { case: "argv", value: { argv: ["echo", "from the compiled tree"] } } });
    const got = await collect(client, r.command!.issueUuid);
    expect(got.stdout.toString()).toBe("from the compiled tree\n");
    expect(got.finished?.state).toBe(L.SUCCEEDED);

    // Started as plain `node dist/bin/rvbox.js server|agent`, each daemon replaced itself (same pid) with a
    // process that has the daemons' Node flags and environment (bin/cli-child.js, execDaemon).
    for (const c of [server, agent]) {
      const cmdline = readFileSync(`/proc/${c.proc.pid}/cmdline`, "utf8").split("\0");
      for (const f of DAEMON_NODE_FLAGS) expect(cmdline).toContain(f);
    }

    expect(server.output()).not.toMatch(/ERR_/);
    for (const c of [agent, server]) c.proc.kill("SIGTERM");
    expect(await agent.exited).toBe(0);
    expect(await server.exited).toBe(0);
  }, 120_000);

  // Runs after the build above (tests in one file run in order).
  it.runIf(oldNode !== null && existsSync(PACKAGED))(
    "`node dist/bin/rvbox.js` with an older Node (Debian's 20) re-executes itself on node_modules/.bin/node; exit codes pass through",
    () => {
      const version = spawnSync(oldNode!, [DIST_BIN, "version"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
      expect(version.stdout).toContain(`on Node v${nodeVersion(PACKAGED)!} (${realpathSync(PACKAGED)})`);
      expect(version.stdout).toMatch(/zstd native$/m);
      expect(version.status).toBe(0);
      const typo = spawnSync(oldNode!, [DIST_BIN, "no-such-command"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
      expect(typo.stderr).toMatch(/unknown command "no-such-command"/);
      expect(typo.status).toBe(2);
      // Re-executed once at most: a child still on the old Node says so instead of looping.
      const loop = spawnSync(oldNode!, [DIST_BIN, "version"], { cwd: ROOT, encoding: "utf8", env: { ...process.env, RVBOX_REEXEC: "1" }, timeout: 60_000 });
      expect(loop.stderr).toMatch(/^rvbox: Node v\d+\.\d+\.\d+ is too old; RVBox needs Node >= 22\.15/);
      expect(loop.status).toBe(1);
    },
    60_000,
  );
});
