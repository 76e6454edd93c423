// The PostgreSQL store's own behaviour, beside the contract it shares with
// the embedded store (store-contract.test.ts): typed tables an operator can
// query, the schema version, durability across kill -9 of PostgreSQL,
// fail-stop when the database refuses a write for good, and the writer's
// side of waiting out a database that is away (pg-writer.ts; the daemon's
// side is test/shells/e2e/pg-failures.test.ts).
import * as net from "node:net";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PG_SCHEMA_VERSION } from "../../../shells/storage/pg-schema.js";
import { checkStoreUrl } from "../../../shells/server/server-daemon.js";
import {
  listQuery,
  loadParams,
  loadQuery,
  OUTPUT_ROWS_PER_INSERT,
  outputInserts,
  PgServerStore,
  recentDigestsQuery,
} from "../../../shells/storage/pg-store.js";
import { PG_TABLES } from "../../../shells/storage/pg-schema.js";
import type { CommandQuery } from "../../../shells/storage/server-store.js";
import { eventKey } from "../../../core/server/store.js";
import { ARCHIVED_TABLE } from "../../../core/index.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { argv, lifecycle, ServerRig } from "../../support/server-rig.js";
import { type PgCluster, startPgCluster } from "../../support/pg-cluster.js";
import type { OutputEventRow } from "../../../core/server/store.js";
import { transientDbError, WRITER_ROW_STALE } from "../../../shells/storage/pg-writer.js";
import { DEFAULT_STORE_WRITE_LIMITS } from "../../../shells/storage/store-group.js";
import { framesOf, outputEvent, outputRecord } from "./store-contract.js";

/**
 * A TCP proxy to PostgreSQL that, once armed, passes the next COMMIT (a
 * simple-protocol Query) through and then cuts the connection before its
 * answer is relayed: the COMMIT happened, the client never hears of it.
 */
async function commitCutter(pgPort: number): Promise<{ port: number; armed: boolean; cuts: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const state = { port: 0, armed: false, cuts: 0, close: async () => {} };
  const server = net.createServer((client) => {
    const up = net.connect(pgPort, "127.0.0.1");
    let cut = false;
    for (const x of [client, up]) {
      sockets.add(x);
      x.on("error", () => {});
      x.on("close", () => {
        sockets.delete(x);
        client.destroy();
        up.destroy();
      });
    }
    client.on("data", (d: Buffer) => {
      up.write(d);
      if (state.armed && d.includes("COMMIT\0")) {
        state.armed = false;
        cut = true;
        // Long enough for PostgreSQL to have committed; the answer is never relayed.
        setTimeout(() => {
          state.cuts++;
          client.destroy();
        }, 200);
      }
    });
    up.on("data", (d: Buffer) => {
      if (!cut) client.write(d);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  state.port = (server.address() as net.AddressInfo).port;
  state.close = async () => {
    for (const x of sockets) x.destroy();
    await new Promise((r) => server.close(r));
  };
  return state;
}

async function waitUntil(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
  expect(ok()).toBe(true);
}

let cluster: PgCluster;
beforeAll(async () => {
  cluster = await startPgCluster();
});
afterAll(async () => {
  await cluster?.stop();
});

async function sql<T extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end();
  }
}

describe("PostgreSQL store", () => {
  it("keeps real tables with typed columns: an operator counts commands by state and reads output rows with SQL", async () => {
    const url = await cluster.createDatabase("typed");
    const s = await PgServerStore.open(url);
    s.persist({
      type: "persist",
      id: 1,
      records: [
        { table: "command", key: "u1", value: { uuid: "u1", clientId: "web-1", state: 1, createdAt: 10, storedThrough: 0 } },
        { table: "command", key: "u2", value: { uuid: "u2", clientId: "web-1", state: 1, createdAt: 11, storedThrough: 0 } },
        { table: "command", key: "u3", value: { uuid: "u3", clientId: "db-1", state: 3, createdAt: 12, storedThrough: 0 } },
      ],
    });
    s.persist({ type: "persist", id: 2, records: [outputRecord("u3", 1, 50)] });
    await s.whenIdle();
    expect(await sql(url, "SELECT state, count(*)::int AS n FROM commands GROUP BY state ORDER BY state")).toEqual([
      { state: 1, n: 2 },
      { state: 3, n: 1 },
    ]);
    expect(await sql(url, "SELECT key FROM commands WHERE client_id = $1 ORDER BY created_at", ["web-1"])).toEqual([{ key: "u1" }, { key: "u2" }]);
    expect(await sql(url, "SELECT uuid, seq::int, original_size, length(zstd) AS n FROM output")).toEqual([{ uuid: "u3", seq: 1, original_size: 50, n: 50 }]);
    expect(await sql(url, "SELECT version FROM rvbox_schema")).toEqual([{ version: PG_SCHEMA_VERSION }]);
    await s.close();
  });

  it("opens over the Unix socket (postgres:///DB?host=SOCKET_DIR), the form DEPLOY.md uses with peer authentication", async () => {
    await cluster.createDatabase("socket");
    const url = checkStoreUrl(`postgres:///socket?host=${cluster.dir}&port=${cluster.port}&user=postgres`);
    const s = await PgServerStore.open(url);
    s.persist(outputEvent(1, "c", 1, 10));
    await s.whenIdle();
    expect(s.opened).toMatchObject({ store: "postgres", database: "socket" });
    await s.close();
    expect(await sql(cluster.url("socket"), "SELECT count(*)::int AS n FROM output")).toEqual([{ n: 1 }]);
  });

  it("refuses a database written by a newer server, saying so, and leaves it untouched", async () => {
    const url = await cluster.createDatabase("newer");
    await (await PgServerStore.open(url)).close();
    await sql(url, "UPDATE rvbox_schema SET version = $1", [PG_SCHEMA_VERSION + 1]);
    await expect(PgServerStore.open(url)).rejects.toThrow(`schema is version ${PG_SCHEMA_VERSION + 1}, newer than this server's ${PG_SCHEMA_VERSION}`);
    expect(await sql(url, "SELECT version FROM rvbox_schema")).toEqual([{ version: PG_SCHEMA_VERSION + 1 }]);
  });

  it("brings a database of schema version 1 up to the current one at start, filling the new typed column from the rows", async () => {
    const url = await cluster.createDatabase("upgrade");
    const s = await PgServerStore.open(url);
    const e = {
      seq: 7,
      at: 1,
      operator: "ann",
      role: "admin",
      rpc: "SetClientLabels",
      summary: "",
      clients: ["web-9"],
      clientsOmitted: 0,
      result: "OK",
      message: "",
    };
    s.persist({ type: "persist", id: 1, records: [{ table: "audit", key: "000000000007", value: e }] });
    await s.whenIdle();
    await s.close();
    // What a version-1 server left: no audit.clients, no rvbox_swept.
    await sql(url, "ALTER TABLE audit DROP COLUMN clients");
    await sql(url, "DROP TABLE rvbox_swept");
    await sql(url, "UPDATE rvbox_schema SET version = 1");
    const again = await PgServerStore.open(url);
    expect(again.opened.schema).toBe(PG_SCHEMA_VERSION);
    expect(await sql(url, "SELECT version FROM rvbox_schema")).toEqual([{ version: PG_SCHEMA_VERSION }]);
    expect(await sql(url, "SELECT clients FROM audit")).toEqual([{ clients: ["web-9"] }]);
    expect((await again.listAudit({ since: 0, operator: "", clientId: "web-9", limit: 10 })).entries).toEqual([e]);
    await again.close();
  });

  it("R-D1: what was reported durable survives kill -9 of PostgreSQL, byte for byte", async () => {
    const url = await cluster.createDatabase("crash");
    const s = await PgServerStore.open(url);
    let durable = 0;
    s.onDurable = (n) => {
      durable = n;
    };
    for (let i = 1; i <= 20; i++) s.persist(outputEvent(i, "c", i, 1000));
    await s.whenIdle();
    expect(durable).toBe(20);
    await cluster.crashAndRestart();
    await s.close();
    const again = await PgServerStore.open(url);
    expect(again.tables.get("command")?.get("c")).toEqual({ uuid: "c", storedThrough: 20 });
    const frames = await framesOf(again, await again.readEvents("c", 1, 100, 100));
    for (let i = 1; i <= 20; i++) expect(frames.get(i)).toEqual(new Uint8Array(1000).fill(i));
    await again.close();
  });

  it("fail-stop: a write the database refuses for good (a constraint the row breaks) is reported once, never acknowledged, and nothing after it is written", async () => {
    const url = await cluster.createDatabase("refuse");
    const s = await PgServerStore.open(url);
    const errors: unknown[] = [];
    const durable: number[] = [];
    s.onError = (e) => errors.push(e);
    s.onDurable = (n) => durable.push(n);
    s.persist(outputEvent(1, "c", 1, 10));
    await s.whenIdle();
    await sql(url, "ALTER TABLE commands ADD CONSTRAINT no_more CHECK (stored_through < 2)");
    s.persist(outputEvent(2, "c", 2, 10));
    await s.whenIdle();
    s.persist(outputEvent(3, "c", 3, 10));
    await s.whenIdle();
    expect(durable).toEqual([1]);
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/no_more/);
    expect(await sql(url, "SELECT seq::int FROM output ORDER BY seq")).toEqual([{ seq: 1 }]);
    await s.close();
  });

  it("a group's output rows go in INSERTs of at most OUTPUT_ROWS_PER_INSERT rows: n rows one, n + 1 two", () => {
    const rows = (n: number) => Array.from({ length: n }, (_, i) => outputRecord("u", i + 1, 1).value as OutputEventRow);
    const uuids = (n: number) => Array.from({ length: n }, () => "u");
    expect(outputInserts(uuids(OUTPUT_ROWS_PER_INSERT), rows(OUTPUT_ROWS_PER_INSERT))).toHaveLength(1);
    const two = outputInserts(uuids(OUTPUT_ROWS_PER_INSERT + 1), rows(OUTPUT_ROWS_PER_INSERT + 1));
    expect(two.map((q) => q.values.length / 9)).toEqual([OUTPUT_ROWS_PER_INSERT, 1]);
  });

  it("one group of 8,000 output events (past PostgreSQL's 65,535 parameters in one statement, as after an outage) commits whole", async () => {
    const url = await cluster.createDatabase("biggroup");
    const s = await PgServerStore.open(url);
    let durable = 0;
    s.onDurable = (n) => {
      durable = n;
    };
    for (let i = 1; i <= 8000; i++) s.persist(outputEvent(i, "c", i, 8));
    await s.whenIdle();
    expect(durable).toBe(8000);
    expect(await sql(url, "SELECT count(*)::int AS n FROM output")).toEqual([{ n: 8000 }]);
    // One transaction, and the writer's row counts it.
    expect(await sql(url, "SELECT through::int FROM rvbox_writer")).toEqual([{ through: 1 }]);
    await s.close();
  });

  it("closing while PostgreSQL is down ends the wait at once: the group it held is reported never committed, and nothing of it is stored", async () => {
    const url = await cluster.createDatabase("closedown");
    const s = await PgServerStore.open(url, { writeLimits: { ...DEFAULT_STORE_WRITE_LIMITS, retryMinMs: 50, retryMaxMs: 200 } });
    const errors: unknown[] = [];
    const durable: number[] = [];
    s.onError = (e) => errors.push(e);
    s.onDurable = (n) => durable.push(n);
    await cluster.down();
    try {
      s.persist(outputEvent(1, "c", 1, 10));
      await waitUntil(() => !s.health.ok);
      const t0 = Date.now();
      await s.close();
      expect(Date.now() - t0).toBeLessThan(1000);
      expect(durable).toEqual([]);
      expect(String(errors[0])).toMatch(/never committed/);
    } finally {
      await cluster.up();
    }
    expect(await sql(url, "SELECT count(*)::int AS n FROM output")).toEqual([{ n: 0 }]);
  });

  it("a connection attempt that gets no answer is given up after connectTimeoutMs (a failure to wait out, not a hang)", async () => {
    const silent = net.createServer(() => {}); // accepts, never speaks
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const t0 = Date.now();
      const err = await PgServerStore.open(`postgres://postgres@127.0.0.1:${port}/x`, {
        writeLimits: { ...DEFAULT_STORE_WRITE_LIMITS, connectTimeoutMs: 300 },
      }).catch((e: unknown) => e);
      const took = Date.now() - t0;
      expect(took).toBeGreaterThanOrEqual(290);
      expect(took).toBeLessThan(3000);
      expect(transientDbError(err)).toBe(true);
    } finally {
      silent.close();
    }
  });

  it("opening a store removes writer rows not written for WRITER_ROW_STALE and keeps younger ones", async () => {
    const url = await cluster.createDatabase("stale");
    await (await PgServerStore.open(url)).close();
    await sql(
      url,
      "INSERT INTO rvbox_writer (epoch, through, at) VALUES ('old', 5, now() - interval '7 days 1 minute'), ('young', 5, now() - interval '6 days 23 hours')",
    );
    await (await PgServerStore.open(url)).close();
    const epochs = (await sql<{ epoch: string }>(url, "SELECT epoch FROM rvbox_writer")).map((r) => r.epoch);
    expect(epochs).toContain("young");
    expect(epochs).not.toContain("old");
    expect(WRITER_ROW_STALE).toBe("7 days");
  });

  it("a connection cut after COMMIT reached PostgreSQL but before its answer came back: the group is found committed by the writer's row and not applied again (its rows keep their first-write order)", async () => {
    const url = await cluster.createDatabase("lostcommit");
    const cutter = await commitCutter(cluster.port);
    const viaProxy = url.replace(`:${cluster.port}/`, `:${cutter.port}/`);
    const s = await PgServerStore.open(viaProxy, { writeLimits: { ...DEFAULT_STORE_WRITE_LIMITS, retryMinMs: 20, retryMaxMs: 100 } });
    const durable: number[] = [];
    const health: boolean[] = [];
    s.onDurable = (n) => durable.push(n);
    s.onHealth = (now) => health.push(now.ok);
    try {
      s.persist({ type: "persist", id: 1, records: [{ table: "stdin", key: "c/1", value: { n: 1 } }] });
      await s.whenIdle();
      cutter.armed = true;
      // Applied twice, the prefix delete and the write after it would move c/1 behind e.
      s.persist({
        type: "persist",
        id: 2,
        records: [
          { table: "stdin", key: "c/", value: null, prefix: true },
          { table: "stdin", key: "c/1", value: { n: 2 } },
          { table: "stdin", key: "e/1", value: { n: 2 } },
        ],
      });
      await s.whenIdle();
      expect(cutter.cuts).toBe(1);
      expect(durable).toEqual([1, 2]);
      expect(health).toEqual([false, true]);
      expect(await sql(url, "SELECT key FROM stdin_writes ORDER BY ord")).toEqual([{ key: "c/1" }, { key: "e/1" }]);
      // Its own ord values tell: c/1 was inserted once after the delete (2), e/1 after it (3); a second apply would give c/1 a 4.
      expect(await sql(url, "SELECT key, ord::int FROM stdin_writes ORDER BY ord")).toEqual([
        { key: "c/1", ord: 2 },
        { key: "e/1", ord: 3 },
      ]);
      expect(await sql(url, "SELECT through::int FROM rvbox_writer")).toEqual([{ through: 2 }]);
    } finally {
      await s.close();
      await cutter.close();
    }
  });

  it("a page of ListCommands reads its own rows in the index's order, for one client or all, after a position too: no sort of a client's whole history", async () => {
    const url = await cluster.createDatabase("list_plan");
    const s = await PgServerStore.open(url);
    // 50 clients: one client's page is best served by its own index (a planner's choice on this many rows).
    const records = Array.from({ length: 2000 }, (_, i) => ({
      table: "command" as const,
      key: `u${String(i).padStart(4, "0")}`,
      value: { uuid: `u${String(i).padStart(4, "0")}`, clientId: `c${i % 50}`, state: 5, createdAt: 1000 + Math.floor(i / 100), storedThrough: 0 },
    }));
    s.persist({ type: "persist", id: 1, records });
    await s.whenIdle();
    const q = (o: Partial<CommandQuery>): CommandQuery => ({ clientIds: null, states: [], createdFrom: 0, createdBefore: 0, after: null, limit: 10, ...o });
    // The rows: newest first, then by uuid; the next page starts right after the last one (equal creation times included).
    const all = (await sql<{ key: string }>(url, "SELECT key FROM commands WHERE client_id = 'c1' ORDER BY created_at DESC, key")).map((r) => r.key);
    const p1 = await s.listCommands(q({ clientIds: ["c1"] }));
    const last = p1.at(-1)!;
    const p2 = await s.listCommands(q({ clientIds: ["c1"], after: { createdAt: last.createdAt, uuid: last.uuid } }));
    expect([...p1, ...p2].map((r) => r.uuid)).toEqual(all.slice(0, 20));
    await s.close();
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query("ANALYZE commands");
      // No plan may sort: the index must give the order. A table this small is cheaper to sort, so the
      // other scans are priced out: an index scan that cannot give the order would show a Sort above it.
      await c.query("SET enable_seqscan = off");
      await c.query("SET enable_bitmapscan = off");
      const plan = async (x: CommandQuery): Promise<string> => {
        const { text, values } = listQuery(x);
        return JSON.stringify((await c.query(`EXPLAIN (FORMAT JSON) ${text}`, values)).rows[0]["QUERY PLAN"]);
      };
      const after = { createdAt: 1010, uuid: "u1051" };
      for (const x of [q({ clientIds: ["c1"] }), q({ clientIds: ["c1"], after }), q({ clientIds: ["c1"], states: [5] })]) {
        const p = await plan(x);
        expect(p).toContain('"Index Name":"commands_client_page"');
        expect(p).not.toContain('"Node Type":"Sort"');
      }
      for (const x of [q({}), q({ after })]) {
        const p = await plan(x);
        expect(p).toContain('"Index Name":"commands_created"');
        expect(p).not.toContain('"Node Type":"Sort"');
      }
      // The position is a bound the index seeks to, not only a filter.
      expect(await plan(q({ clientIds: ["c1"], after }))).toMatch(/"Index Cond":"\(\(client_id = 'c1'::text\) AND \(created_at <= /);
    } finally {
      await c.end();
    }
  });

  it("a start reads the live commands through commands_live, and their events and output through the uuid indexes, not the whole history", async () => {
    const url = await cluster.createDatabase("live_plan");
    const s = await PgServerStore.open(url);
    const records = Array.from({ length: 2000 }, (_, i) => ({
      table: "command" as const,
      key: `u${i}`,
      value: { uuid: `u${i}`, clientId: "c", state: i % 500 === 0 ? 3 : 5, createdAt: 1000 + i, storedThrough: 2 },
    }));
    s.persist({ type: "persist", id: 1, records });
    const rows = records.flatMap((r) => [
      outputRecord(r.key, 1, 10),
      { table: "event" as const, key: eventKey(r.key, 2), value: { seq: 2, kind: "lifecycle", state: 3 } },
    ]);
    s.persist({ type: "persist", id: 2, records: rows });
    await s.whenIdle();
    await s.close();
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query("ANALYZE commands");
      const text = loadQuery("command", PG_TABLES.command, false);
      const plan = JSON.stringify((await c.query(`EXPLAIN (FORMAT JSON) ${text}`, loadParams("command", false))).rows[0]["QUERY PLAN"]);
      expect(plan).toContain('"Index Name":"commands_live"');
      expect((await c.query<{ key: string }>(text, loadParams("command", false))).rows.map((r) => r.key)).toEqual(["u0", "u500", "u1000", "u1500"]);
      // Keys are COLLATE "C", uuid columns are not: the joins compare in the uuid column's collation, so its index serves them.
      await c.query("SET enable_seqscan = off");
      const events = loadQuery("event", PG_TABLES.event, false);
      const eventsPlan = JSON.stringify((await c.query(`EXPLAIN (FORMAT JSON) ${events}`, loadParams("event", false))).rows[0]["QUERY PLAN"]);
      expect(eventsPlan).toContain('"Index Name":"events_uuid_seq"');
      const recent = recentDigestsQuery(false);
      expect(JSON.stringify((await c.query(`EXPLAIN (FORMAT JSON) ${recent.text}`, recent.values)).rows[0]["QUERY PLAN"])).toContain(
        '"Index Name":"output_pkey"',
      );
      expect((await c.query<{ uuid: string }>(recent.text, recent.values)).rows.map((r) => r.uuid)).toEqual(["u0", "u1000", "u1500", "u500"]);
    } finally {
      await c.end();
    }
  });
});

describe("PostgreSQL store: what a server loads of the history", () => {
  it("the ledger is the newest ledgerRows ended commands by ended_at; a row without ended_at (written before it existed) never passes for the newest", async () => {
    const url = await cluster.createDatabase("ledger_order");
    const s = await PgServerStore.open(url);
    // Real command rows (the core's), their end times set: one of them as a row from before endedAt existed.
    const r = new ServerRig();
    const c = r.connect();
    for (const u of ["old", "legacy", "newer", "newest"]) {
      r.running(c, u);
      r.event(c, u, 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    }
    r.submit("a", "live", argv("sleep", "9"));
    const stored = r.disk.durable.get("command")!;
    const ends: Record<string, number | undefined> = { old: 10, legacy: undefined, newer: 20, newest: 30 };
    const rows = ["old", "legacy", "newer", "newest", "live"].map((u) => {
      const v = { ...(stored.get(u) as Record<string, unknown>) };
      if (u in ends) {
        if (ends[u] === undefined) delete v.endedAt;
        else v.endedAt = ends[u];
      }
      return v as { uuid: string };
    });
    s.persist({ type: "persist", id: 1, records: rows.map((v) => ({ table: "command", key: v.uuid, value: v })) });
    await s.whenIdle();
    await s.close();
    const again = await PgServerStore.open(url, { ledgerRows: 2 });
    expect([...(again.tables.get(ARCHIVED_TABLE)?.keys() ?? [])].sort()).toEqual(["newer", "newest"]);
    expect([...(again.tables.get("command")?.keys() ?? [])]).toEqual(["live"]);
    await again.close();
  });
});
