// The throwaway PostgreSQL the store tests run on (test/support/pg-cluster.ts):
// loopback only, a committed row survives kill -9 of the postmaster
// (synchronous_commit on, the default the PostgreSQL store relies on), and
// stop() leaves no process and no directory behind. Never skipped: CI
// installs Debian's postgresql (.ci/run).
import { existsSync } from "node:fs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { alive, type PgCluster, startPgCluster } from "../../support/pg-cluster.js";

let cluster: PgCluster;
beforeAll(async () => {
  cluster = await startPgCluster();
});
afterAll(async () => {
  await cluster?.stop();
});

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

describe("throwaway PostgreSQL cluster", () => {
  it("listens on loopback only, with synchronous_commit on, and gives each caller its own database", async () => {
    const url = await cluster.createDatabase("harness_a");
    const settings = await withClient(url, async (c) => {
      const r = await c.query<{ name: string; setting: string }>(
        "SELECT name, setting FROM pg_settings WHERE name IN ('listen_addresses', 'synchronous_commit', 'fsync') ORDER BY name",
      );
      return Object.fromEntries(r.rows.map((x) => [x.name, x.setting]));
    });
    expect(settings).toEqual({ fsync: "on", listen_addresses: "127.0.0.1", synchronous_commit: "on" });
    await expect(cluster.createDatabase("harness_a")).rejects.toThrow(/already exists/);
  });

  it("a committed row survives kill -9 of the postmaster, and the cluster comes back on its port", async () => {
    const url = await cluster.createDatabase("harness_crash");
    await withClient(url, async (c) => {
      await c.query("CREATE TABLE t (k int PRIMARY KEY, v bytea NOT NULL)");
      await c.query("INSERT INTO t VALUES (1, $1)", [Buffer.from("committed")]);
    });
    const before = cluster.pid();
    await cluster.crashAndRestart();
    expect(cluster.pid()).not.toBe(before);
    const rows = await withClient(url, async (c) => (await c.query<{ v: Buffer }>("SELECT v FROM t WHERE k = 1")).rows);
    expect(rows.map((r) => r.v.toString())).toEqual(["committed"]);
  });

  it("stop() ends every process of the cluster and deletes its directory", async () => {
    const other = await startPgCluster();
    const pid = other.pid();
    await other.stop();
    expect(existsSync(other.dir)).toBe(false);
    expect(alive(pid)).toBe(false);
    await other.stop();
  });
});
