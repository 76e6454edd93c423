// A real server on the PostgreSQL store (--store postgres://…) with a real
// agent: commands run, output streams back byte for byte, and a restarted
// server (state only in the database) still has every command and every
// byte; kill -9 of PostgreSQL under a live server is a store failure that
// stops it (fail-stop), never a silent loss.
import { createHash } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { checkStoreUrl } from "../../../shells/server/server-daemon.js";
import { sharedPgCluster } from "../../support/pg-shared.js";
import { cleanupTemp, collect, startAgent, startServer, waitFor } from "./helpers.js";

const pgc = sharedPgCluster();
afterAll(cleanupTemp);

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("server on PostgreSQL", () => {
  it("R-O3 R-D1: commands and their output are served from PostgreSQL, and a restarted server still has every byte", async () => {
    const store = await pgc.database("e2e_restart");
    let s = await startServer({ store });
    const a = await startAgent(s.url, "pg-a");
    try {
      await waitFor("agent connected", () => a.connected);
      // About 2 MiB of varied output: many events, many output rows.
      const script = 'i=0; while [ $i -lt 20000 ]; do echo "line $i $(( i * 7919 % 10007 ))"; i=$((i+1)); done';
      const r = await s.client.submitCommand({ clientId: "pg-a", program: { case: "argv", value: { argv: ["sh", "-c", script] } } });
      const uuid = r.command!.issueUuid;
      const got = await collect(s.client, uuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      const lines = got.stdout.toString().split("\n");
      expect(lines.length).toBe(20001);
      expect(lines[19999]).toBe(`line 19999 ${(19999 * 7919) % 10007}`);
      const before = sha(got.stdout);
      await a.close();
      await s.close();
      s = await startServer({ store });
      const again = await collect(s.client, uuid);
      expect(sha(again.stdout)).toBe(before);
      expect(again.finished?.state).toBe(L.SUCCEEDED);
      const listed = await s.client.listCommands({ clientId: "pg-a" });
      expect(listed.commands.map((c) => c.issueUuid)).toContain(uuid);
    } finally {
      await a.close().catch(() => {});
      await s.close();
    }
  });

  it("a --store that is not a PostgreSQL URL is refused with a clear error", () => {
    expect(() => checkStoreUrl("mysql://x/db")).toThrow("expected a postgres:// URL");
    expect(() => checkStoreUrl("not a url")).toThrow("expected a PostgreSQL URL");
    expect(() => checkStoreUrl("postgres://u@127.0.0.1:5432")).toThrow("names no database");
    expect(checkStoreUrl("postgresql://u@127.0.0.1:5432/rvbox")).toBe("postgresql://u@127.0.0.1:5432/rvbox");
  });

  it("kill -9 of PostgreSQL under a live server is a store failure: the server stops instead of acknowledging what it cannot store", async () => {
    const store = await pgc.database("e2e_crash");
    const fatal: unknown[] = [];
    const s = await startServer({ store, onFatal: (err) => fatal.push(err) });
    try {
      const r = await s.client.submitCommand({ clientId: "nobody", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
      expect(r.command?.issueUuid).toBeTruthy();
      await (await pgc.cluster()).crashAndRestart();
      // The next write fails: the server reports it as fatal and does not answer as if it stored it.
      const second = s.client.submitCommand({ clientId: "nobody", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
      await waitFor("store failure reported", () => fatal.length > 0);
      await expect(Promise.race([second, new Promise((r) => setTimeout(() => r("no answer"), 500))])).resolves.not.toHaveProperty("command");
    } finally {
      await s.close().catch(() => {});
    }
  });
});
