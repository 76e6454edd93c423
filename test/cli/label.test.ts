// rvbox label and rvbox clients -l against a REAL server and two agents on
// loopback: labels set at the server, shown and filtered, kept across a
// server restart on the same store.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../shells/agent/agent-daemon.js";
import { cleanupTemp, OPERATOR_TOKEN, startAgent, startServer, tempDir, waitFor, type TestServer } from "../shells/e2e/helpers.js";
import { cli } from "./helpers.js";

let s: TestServer;
const agents: AgentDaemon[] = [];
let env: Record<string, string>;

beforeAll(async () => {
  const dir = await tempDir("rvbox-cli-label-");
  const tokenFile = path.join(dir, "operator-token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  s = await startServer();
  for (const id of ["web-1", "db-1"]) agents.push(await startAgent(s.url, id, { cwd: path.join(dir, id) }));
  await waitFor("agents connected", () => agents.every((a) => a.connected));
  env = { RVBOX_SERVER: s.controlUrl, RVBOX_TOKEN_FILE: tokenFile };
});

afterAll(async () => {
  for (const a of agents) await a.close({ killProcesses: true });
  await s?.close();
  await cleanupTemp();
});

describe("rvbox label", () => {
  it("sets and removes labels; clients shows them, -l filters, --json includes them", async () => {
    const set = await cli(["label", "web-1", "role=web", "zone=eu-1", "tier=1"], { env });
    expect(set.code).toBe(0);
    expect(set.stdout).toBe("client web-1 labels: role=web,tier=1,zone=eu-1\n");
    const rm = await cli(["label", "web-1", "tier-"], { env });
    expect(rm.stdout).toBe("client web-1 labels: role=web,zone=eu-1\n");
    expect((await cli(["label", "db-1", "role=db"], { env })).code).toBe(0);

    const all = await cli(["clients"], { env });
    expect(all.stdout).toMatch(/CLIENT\s+STATE\s+INSTANCE\s+GEN.*LABELS\s+DETAIL/);
    expect(all.stdout).toMatch(/web-1\s.*role=web,zone=eu-1/);
    expect(all.stdout).toMatch(/db-1\s.*role=db/);

    const web = await cli(["clients", "-l", "role=web"], { env });
    expect(web.code).toBe(0);
    expect(web.stdout).toContain("web-1");
    expect(web.stdout).not.toContain("db-1");
    expect(web.stdout).toContain("1 client match role=web");
    const none = await cli(["clients", "-l", "role=web,zone=us-1"], { env });
    expect(none.stdout).toContain("no client matches role=web,zone=us-1");
    const notWeb = await cli(["clients", "--selector", "role!=web", "--json"], { env });
    const rows = JSON.parse(notWeb.stdout) as Array<{ clientId: string; labels: Record<string, string> }>;
    expect(rows.map((r) => [r.clientId, r.labels])).toEqual([["db-1", { role: "db" }]]);

    const shown = await cli(["label", "web-1", "--json"], { env });
    expect(JSON.parse(shown.stdout)).toEqual({ clientId: "web-1", labels: { role: "web", zone: "eu-1" } });
  });

  it("an unknown client exits 66 with a did-you-mean; bad edits and selectors are usage errors (exit 2) and change nothing", async () => {
    const miss = await cli(["label", "web-2", "role=web"], { env });
    expect(miss.code).toBe(66);
    expect(miss.stderr).toContain("did you mean web-1");
    for (const bad of [
      ["label", "web-1", "Role=web"],
      ["label", "web-1", "role"],
      ["label", "web-1", "role=a", "role-"],
      ["clients", "-l", "role=,x"],
    ]) {
      const r = await cli(bad, { env });
      expect(r.code, bad.join(" ")).toBe(2);
    }
    expect((await s.client.listClients({})).clients.find((c) => c.clientId === "web-1")?.labels).toEqual({ role: "web", zone: "eu-1" });
  });

  it("the server refuses a malformed selector in ListClients (InvalidArgument)", async () => {
    await expect(s.client.listClients({ selector: "role==" })).rejects.toThrow(/invalid_argument.*VALIDATION: selector term/);
  });

  it("labels are durable: a server restart on the same store keeps them", async () => {
    await s.close();
    s = await startServer({ dataDir: s.dataDir });
    const c = await s.client.listClients({ selector: "zone=eu-1" });
    expect(c.clients.map((x) => [x.clientId, { ...x.labels }])).toEqual([["web-1", { role: "web", zone: "eu-1" }]]);
  });
});
