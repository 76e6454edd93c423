// Issue 38 item 2 on a REAL server process: a viewer's refused calls, far
// more than both audit bounds, never push the admin's or a scoped operator's
// accepted entries out of the audit log. The refusals are counted apart
// (repeats in one line with a count, the oldest dropped and counted), `rvbox
// audit` shows both, and the log line of every accepted action is written
// however many there are.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, expect, it } from "vitest";
import { operatorAdd } from "../../../shells/cli/server-cli.js";
import { cli } from "../../cli/helpers.js";
import {
  cleanupTemp,
  controlClient,
  describeStores,
  FLEET_TOKEN,
  serverArgv,
  spawnRvbox,
  startAgent,
  tempDir,
  waitFor,
  writeTokenFiles,
  type Child,
} from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

function mint(file: string, args: string[]): string {
  const out: string[] = [];
  expect(operatorAdd(["add", ...args, "--identities", file], (l) => out.push(l))).toBe(0);
  return out[0]!;
}

const children: Child[] = [];
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await cleanupTemp();
});

// The audit log's bounds evict and count rows in the store: on each store.
describeStores("e2e: a flood of refused calls and the audit log", (st) => {
  it("a viewer refused 400 times (and the operator 8) erases neither the admin's entries nor the scoped operator's; refusals are counted apart", async () => {
    const work = await tempDir("rvbox-audit-flood-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const identities = path.join(work, "identities");
    const alice = mint(identities, ["alice", "--role", "operator", "--selector", "role=web"]);
    const bob = mint(identities, ["bob", "--role", "viewer"]);
    const config = path.join(work, "server.json");
    writeFileSync(config, JSON.stringify({ limits: { auditMax: 40, auditRefusalMax: 10 } }));
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const argv = serverArgv(
      { agentPort, controlPort, data: path.join(work, "data"), files },
      "--identities",
      identities,
      "--config",
      config,
      ...st.flags(await st.fresh()),
    );
    const server = spawnRvbox(argv.map((a) => (a === "warn" ? "info" : a)));
    children.push(server);
    const url = `http://127.0.0.1:${controlPort}`;
    const [admin, asAlice, asBob] = [controlClient(url), controlClient(url, alice), controlClient(url, bob)];
    await waitFor("server up", async () => (await admin.listClients({}).catch(() => undefined)) !== undefined, 30_000);
    const agent = await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "web-1");
    try {
      await waitFor("agent connected", () => agent.connected);
      await admin.setClientLabels({ clientId: "web-1", set: { role: "web" } });
      // More accepted actions of one kind than the log's per-kind budget (20 per 10 s): every one is logged.
      for (let i = 0; i < 25; i++) await admin.setClientDraining({ clientId: "web-1", draining: i % 2 === 0 });
      await asAlice.submitCommand({ clientId: "web-1", issueUuid: "alice-1", program: { case: "argv", value: { argv: ["true"] } } });

      // The flood: 400 refused calls, 4 RPCs (so 4 reasons) 100 times over.
      const calls = [
        () => asBob.setClientDraining({ clientId: "web-1", draining: true }),
        () => asBob.setClientLabels({ clientId: "web-1", set: { x: "y" } }),
        () => asBob.forgetClient({ clientId: "web-1" }),
        () => asBob.dismissClaim({ clientId: "web-1" }),
      ];
      const outcomes = Array.from({ length: 400 }, (_, i) =>
        calls[i % 4]!().then(
          () => "accepted",
          () => "refused",
        ),
      );
      expect(new Set(await Promise.all(outcomes))).toEqual(new Set(["refused"]));
      // Then the scoped operator refused on 8 clients outside its selector, one each: past the refusal bound (10), the oldest go.
      for (let i = 0; i < 8; i++)
        await asAlice.submitCommand({ clientId: `db-${i}`, program: { case: "argv", value: { argv: ["true"] } } }).catch(() => undefined);

      const log = await admin.listAudit({});
      expect(log.entries.map((e) => [e.operator, e.rpc, e.result])).toEqual([
        ["admin", "SetClientLabels", "OK"],
        ...Array.from({ length: 25 }, () => ["admin", "SetClientDraining", "OK"]),
        ["alice", "SubmitCommand", "OK"],
      ]);
      expect(log.droppedEntries).toBe(0n);
      expect(log.refusals).toHaveLength(10);
      expect(log.droppedRefusals).toBe(2n);
      expect(log.maxRefusals).toBe(10);
      expect(log.refusals.every((e) => e.result === "PERMISSION_DENIED")).toBe(true);
      // The four flood lines counted 100 calls each; the two newest are still kept, then alice's 8 refusals.
      expect(log.refusals.map((e) => [e.operator, Number(e.count)])).toEqual([["bob", 100], ["bob", 100], ...Array.from({ length: 8 }, () => ["alice", 1])]);

      const env = { RVBOX_SERVER: url, RVBOX_TOKEN_FILE: files.operatorToken };
      const asAdmin = await cli(["audit", "--operator", "admin"], { env });
      expect(asAdmin.code).toBe(0);
      expect(asAdmin.stdout).not.toContain("no audit entries");
      expect(asAdmin.stdout.match(/SetClientDraining/g)).toHaveLength(25);
      const all = await cli(["audit"], { env });
      expect(all.stdout).toContain("… 2 older refusal entries dropped (the server keeps the newest 10)");
      expect(all.stdout).toMatch(/ 100 +bob +viewer +[A-Za-z]+ +web-1 .*PERMISSION_DENIED: viewer bob may not call/);
      expect(all.stdout).toMatch(/ 1 +alice +operator +SubmitCommand +db-7 /);

      await waitFor("alice's submit logged", () => server.output().includes("operator submit"));
      expect(server.output().match(/operator set_draining/g)).toHaveLength(25);
      expect(server.output()).not.toContain("lines were left out");
    } finally {
      await agent.close();
      server.proc.kill("SIGTERM");
      await server.exited;
    }
  }, 120_000);
});
