// Files and directories the daemons create for themselves (issue 38 item 8):
// outside systemd nothing sets their mode but the process umask, and under
// the common 022 the journal (every command line, every stdin write) was
// 0644 and its directories 0755. Whatever the umask, a data or state
// directory the daemon creates is 0700 and every file in it 0600; so is the
// identities file `operator add` creates.
import { readdirSync, statSync } from "node:fs";
import * as path from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { operatorAdd } from "../../../shells/cli/server-cli.js";
import { cleanupTemp, collect, startAgent, startServer, tempDir, waitFor } from "../e2e/helpers.js";

/** Every entry under `dir` (itself included) whose mode is not `dirMode`/`fileMode`: "path mode". */
function wrongModes(dir: string, dirMode: number, fileMode: number): string[] {
  const bad: string[] = [];
  const walk = (p: string): void => {
    const st = statSync(p);
    const mode = st.mode & 0o777;
    if (st.isDirectory()) {
      if (mode !== dirMode) bad.push(`${p} ${mode.toString(8)}`);
      for (const e of readdirSync(p)) walk(path.join(p, e));
    } else if (mode !== fileMode) bad.push(`${p} ${mode.toString(8)}`);
  };
  walk(dir);
  return bad;
}

describe("the daemons' own files are private whatever the umask", () => {
  let umask = 0;
  beforeEach(() => {
    umask = process.umask(0o022);
  });
  afterEach(() => {
    process.umask(umask);
  });
  afterAll(cleanupTemp);

  it("a data directory and a state directory the daemons create are 0700, their files 0600 (umask 022)", async () => {
    const work = await tempDir("rvbox-modes-");
    const dataDir = path.join(work, "server", "data");
    const stateDir = path.join(work, "agent", "state");
    const s = await startServer({ dataDir });
    const agent = await startAgent(s.url, "web-1", { stateDir });
    try {
      await waitFor("agent connected", () => agent.connected);
      const r = await s.client.submitCommand({ clientId: "web-1", program: { case: "argv", value: { argv: ["echo", "secret"] } } });
      expect((await collect(s.client, r.command!.issueUuid)).stdout.toString()).toBe("secret\n");
    } finally {
      await agent.close();
      await s.close();
    }
    expect(wrongModes(dataDir, 0o700, 0o600)).toEqual([]);
    expect(wrongModes(stateDir, 0o700, 0o600)).toEqual([]);
  });

  it("operator add creates its identities file 0600 (umask 022)", async () => {
    const file = path.join(await tempDir("rvbox-modes-"), "identities");
    expect(operatorAdd(["add", "alice", "--role", "viewer", "--identities", file], () => {})).toBe(0);
    expect((statSync(file).mode & 0o777).toString(8)).toBe("600");
  });
});
