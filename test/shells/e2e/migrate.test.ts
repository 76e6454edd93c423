// rvbox server migrate: a real server's embedded store, with commands and
// their output, copied into PostgreSQL and checked; a server started on the
// copy (--store) serves every command and every byte as the original did.
import { createHash } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { migrateMain } from "../../../shells/cli/server-cli.js";
import { sharedPgCluster } from "../../support/pg-shared.js";
import { cleanupTemp, collect, startAgent, startServer, waitFor } from "./helpers.js";

const pgc = sharedPgCluster();
afterAll(cleanupTemp);

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("rvbox server migrate", () => {
  it("copies a stopped server's store into PostgreSQL, checks it, and a server on the copy serves every command and byte", async () => {
    const s = await startServer();
    const a = await startAgent(s.url, "mig-a");
    const want = new Map<string, { out: string; err: string; state: number }>();
    try {
      await waitFor("agent connected", () => a.connected);
      const programs = [
        ["sh", "-c", "echo hello; echo oops >&2; exit 3"],
        ["sh", "-c", 'i=0; while [ $i -lt 30000 ]; do echo "row $i $((i * 31 % 977))"; i=$((i+1)); done'],
        ["true"],
      ];
      for (const argv of programs) {
        const r = await s.client.submitCommand({ clientId: "mig-a", program: { case: "argv", value: { argv } } });
        const got = await collect(s.client, r.command!.issueUuid);
        want.set(r.command!.issueUuid, { out: sha(got.stdout), err: sha(got.stderr), state: got.finished!.state });
      }
      // One still queued for a client that has not registered.
      const q = await s.client.submitCommand({ clientId: "later", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
      want.set(q.command!.issueUuid, { out: "", err: "", state: -1 });
    } finally {
      await a.close();
      await s.close();
    }
    const url = await pgc.database("migrated");
    const said: string[] = [];
    expect(await migrateMain(["--from", s.dataDir, "--to", url], (l) => said.push(l))).toBe(0);
    expect(said.join("\n")).toMatch(/checked: every row, every event and every output byte/);
    // Into a database that already holds data: refused, nothing changed.
    await expect(migrateMain(["--from", s.dataDir, "--to", url], () => {})).rejects.toThrow("already holds RVBox data");
    const p = await startServer({ store: url });
    try {
      const listed = await p.client.listCommands({});
      expect(new Set(listed.commands.map((c) => c.issueUuid))).toEqual(new Set(want.keys()));
      for (const [uuid, w] of want) {
        if (w.state === -1) {
          const c = await p.client.getCommand({ issueUuid: uuid });
          expect(c.command?.clientId).toBe("later");
          continue;
        }
        const got = await collect(p.client, uuid);
        expect([uuid, sha(got.stdout), sha(got.stderr), got.finished?.state]).toEqual([uuid, w.out, w.err, w.state]);
      }
    } finally {
      await p.close();
    }
  });

  it("refuses what it cannot do, saying why", async () => {
    await expect(migrateMain(["--from", "/nonexistent-rvbox", "--to", "postgres://x@127.0.0.1:1/db"], () => {})).rejects.toThrow("no server store there");
    await expect(migrateMain(["--to", "postgres://x@127.0.0.1:1/db"], () => {})).rejects.toThrow("usage: rvbox server migrate");
  });
});
