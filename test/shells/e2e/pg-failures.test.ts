// Failures of PostgreSQL are normal events (issue 39 item 4): a real server
// on a real PostgreSQL with a real agent, while the database is restarted
// (kill -9), stopped for a while, slowed by a lock, out of disk, and
// read-only. In each case the server stays up, /readyz says 503 with the
// reason while the database takes no writes and 200 after, /healthz stays
// 200, the change is logged once each way, the agent's command runs once,
// and its output afterwards is byte for byte what it printed. The retry
// logic itself, with a fake database, is test/shells/storage/pg-writer.test.ts.
import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import path from "node:path";
import { Code as ConnectCode, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ControlService } from "../../../protos/gen/rvbox/v1/control_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { createLogger } from "../../../shells/runtime/log.js";
import type { StoreWriteLimits } from "../../../shells/storage/store-group.js";
import { type PgCluster, startPgCluster } from "../../support/pg-cluster.js";
import {
  cleanupTemp,
  collect,
  controlClient,
  FLEET_TOKEN,
  OPERATOR_TOKEN,
  sleep,
  startAgent,
  startServer,
  type TestServer,
  tempDir,
  waitFor,
} from "./helpers.js";

let cluster: PgCluster;
beforeAll(async () => {
  cluster = await startPgCluster();
});
afterAll(async () => {
  await cluster?.stop();
  await cleanupTemp();
});

// Short retries; slowCommitMs stays at its default except where a slow commit is the case tested (a loaded
// test machine can take more than a second over a commit, which would be an outage of its own).
const LIMITS: Partial<StoreWriteLimits> = { retryMinMs: 50, retryMaxMs: 400 };

/** `lines` numbered lines, a pause every `every`; appends one line to `mark` each time it is launched. */
function script(mark: string, lines: number, every: number, pause: number): string {
  return `echo launched >> ${mark}; i=0; while [ $i -lt ${lines} ]; do echo "line $i $(( i * 7919 % 10007 ))"; i=$((i+1)); if [ $((i % ${every})) -eq 0 ]; then sleep ${pause}; fi; done`;
}
function expected(lines: number): string {
  let s = "";
  for (let i = 0; i < lines; i++) s += `line ${i} ${(i * 7919) % 10007}\n`;
  return s;
}

interface Rig {
  s: TestServer;
  a: AgentDaemon;
  db: string;
  mark: string;
  logs: string[];
  /** Each change of /readyz's answer, in order (status and body). */
  ready: string[];
  health: number[];
  close(): Promise<void>;
}

async function rig(db: string, limits: Partial<StoreWriteLimits> = LIMITS): Promise<Rig> {
  const store = await cluster.createDatabase(db);
  const logs: string[] = [];
  const s = await startServer({ store, storeLimits: limits, log: createLogger("server", "info", (l) => logs.push(l)) });
  const a = await startAgent(s.url, `${db}-a`);
  await waitFor("agent connected", () => a.connected);
  const mark = path.join(await tempDir("rvbox-pgfail-"), "launched");
  const ready: string[] = [];
  const health: number[] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const r = await fetch(`${s.controlUrl}/readyz`).catch(() => null);
      const h = await fetch(`${s.controlUrl}/healthz`).catch(() => null);
      if (r) {
        const seen = `${r.status} ${(await r.text()).trim()}`;
        if (ready.at(-1) !== seen) ready.push(seen);
      }
      if (h && health.at(-1) !== h.status) health.push(h.status);
      await h?.text();
      await sleep(20);
    }
  })();
  return {
    s,
    a,
    db,
    mark,
    logs,
    ready,
    health,
    async close() {
      polling = false;
      await poller;
      await a.close().catch(() => {});
      await s.close();
    },
  };
}

async function submit(r: Rig, sh: string, issueUuid = ""): Promise<string> {
  const res = await r.s.client.submitCommand({ clientId: `${r.db}-a`, issueUuid, program: { case: "argv", value: { argv: ["sh", "-c", sh] } } });
  return res.command!.issueUuid;
}

/** The command ran to the end once, and its stored output is exactly what it printed. */
async function expectRanOnce(r: Rig, uuid: string, lines: number): Promise<void> {
  const got = await collect(r.s.client, uuid);
  expect(got.finished?.state).toBe(L.SUCCEEDED);
  expect(got.stdout.toString()).toBe(expected(lines));
  expect(readFileSync(r.mark, "utf8")).toBe("launched\n");
}

/** /readyz went 200 -> 503 (with `reason` in its body) -> 200, and /healthz stayed 200; logged once each way. */
function expectOneOutage(r: Rig, reason: RegExp): void {
  const why = `readyz: ${r.ready.join(" | ")}\nlog:\n${r.logs.join("\n")}`;
  const states = r.ready.map((x) => x.split(" ")[0]);
  expect(states[0], why).toBe("200");
  expect(states.at(-1), why).toBe("200");
  expect(states, why).toContain("503");
  expect(
    r.ready.filter((x) => x.startsWith("503")).some((x) => reason.test(x)),
    why,
  ).toBe(true);
  expect(r.health, why).toEqual([200]);
  expect(
    r.logs.filter((l) => l.includes("store unavailable: acknowledging nothing")),
    why,
  ).toHaveLength(1);
  expect(
    r.logs.filter((l) => l.includes("store available again")),
    why,
  ).toHaveLength(1);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/** What the agent endpoint answers a WebSocket upgrade with (status and body), when it does not switch protocols. */
function upgradeStatus(wsUrl: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(wsUrl.replace("ws:", "http:"), {
      headers: {
        upgrade: "websocket",
        connection: "Upgrade",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "sec-websocket-version": "13",
        authorization: `Bearer ${FLEET_TOKEN}`,
      },
    });
    req.on("response", (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("upgrade", (_res, socket) => {
      socket.destroy();
      reject(new Error("the upgrade was accepted"));
    });
    req.on("error", reject);
  });
}

const storedThrough = (r: Rig, uuid: string) => r.s.daemon.state.commands.get(uuid)?.committed.storedThrough ?? 0;
const isReady = async (r: Rig) => (await fetch(`${r.s.controlUrl}/readyz`)).status === 200;

describe("PostgreSQL failures under a live server", () => {
  it("a server started while PostgreSQL is down listens on its control port, not ready and every call UNAVAILABLE, and starts once the database does", async () => {
    const store = await cluster.createDatabase("startup");
    await cluster.down();
    const logs: string[] = [];
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    let upAgain = false;
    try {
      const starting = startServer({
        store,
        storeLimits: LIMITS,
        control: { host: "127.0.0.1", port },
        log: createLogger("server", "info", (l) => logs.push(l)),
      });
      const early = await waitFor("the control port answers", () => fetch(`${base}/readyz`).catch(() => null));
      expect([early.status, await early.text()]).toEqual([503, expect.stringMatching(/^not ready: (restoring|waiting for the store: .*ECONNREFUSED)/)]);
      await waitFor("waiting for the store", async () => /waiting for the store/.test(await (await fetch(`${base}/readyz`)).text()));
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const call = await controlClient(base)
        .listClients({})
        .catch((e: unknown) => e);
      expect((call as ConnectError).code).toBe(ConnectCode.Unavailable);
      expect((call as ConnectError).rawMessage).toMatch(/the server is starting \(waiting for the store/);
      await cluster.up();
      upAgain = true;
      const s = await starting;
      try {
        expect(await isReady({ s } as Rig)).toBe(true);
        expect(logs.filter((l) => l.includes("store unavailable at start"))).toHaveLength(1);
        expect(logs.filter((l) => l.includes("store available again"))).toHaveLength(1);
        expect((await s.client.listClients({})).clients).toEqual([]);
      } finally {
        await s.close();
      }
    } finally {
      if (!upAgain) await cluster.up();
    }
  });

  it("R-D1 R-O3: PostgreSQL killed and restarted mid-stream: the server waits, then stores every byte; the command ran once", async () => {
    const r = await rig("restart");
    try {
      const uuid = await submit(r, script(r.mark, 3000, 150, 0.05));
      await waitFor("some output stored", () => storedThrough(r, uuid) > 2);
      await cluster.crashAndRestart();
      await waitFor("finished", () => r.s.daemon.state.commands.get(uuid)?.committed.state === L.SUCCEEDED, 30_000);
      await waitFor("ready", () => isReady(r));
      await expectRanOnce(r, uuid, 3000);
      await sleep(100);
      expectOneOutage(r, /PostgreSQL is not taking writes/);
      expect(r.s.daemon.fatal).toBeNull();
    } finally {
      await r.close();
    }
  });

  it("R-D1 R-O3: PostgreSQL stopped for a while: not ready, calls UNAVAILABLE at once, the agent's session kept; back when it starts", async () => {
    const r = await rig("unreachable");
    try {
      const uuid = await submit(r, script(r.mark, 2000, 100, 0.05));
      await waitFor("some output stored", () => storedThrough(r, uuid) > 2);
      await cluster.down();
      await waitFor("not ready", async () => !(await isReady(r)));
      const t0 = Date.now();
      const refused = await submit(r, "true").catch((e: unknown) => e);
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(refused).toBeInstanceOf(ConnectError);
      expect((refused as ConnectError).code).toBe(ConnectCode.Unavailable);
      expect((refused as ConnectError).rawMessage).toMatch(/store is not taking writes .*this call was not made/);
      // Reads of what is in memory still answer; a read of stored output is UNAVAILABLE, saying what to do.
      expect((await r.s.client.getCommand({ issueUuid: uuid })).command?.issueUuid).toBe(uuid);
      const follow = await collect(r.s.client, uuid).catch((e: unknown) => e);
      expect((follow as ConnectError).code).toBe(ConnectCode.Unavailable);
      expect((follow as ConnectError).rawMessage).toMatch(/not answering reads .*follow again from the last event seq/);
      // The same through connect-node's own path (JSON, not the fast binary one).
      const json = createClient(
        ControlService,
        createConnectTransport({
          baseUrl: r.s.controlUrl,
          httpVersion: "1.1",
          useBinaryFormat: false,
          interceptors: [(next) => (req) => (req.header.set("Authorization", `Bearer ${OPERATOR_TOKEN}`), next(req))],
        }),
      );
      const viaJson = await collect(json, uuid).catch((e: unknown) => e);
      expect((viaJson as ConnectError).code).toBe(ConnectCode.Unavailable);
      await sleep(1500);
      expect(r.a.connected).toBe(true);
      expect(r.s.daemon.connectionCount).toBe(1);
      await cluster.up();
      await waitFor("ready again", () => isReady(r), 20_000);
      await waitFor("finished", () => r.s.daemon.state.commands.get(uuid)?.committed.state === L.SUCCEEDED, 30_000);
      await expectRanOnce(r, uuid, 2000);
      expectOneOutage(r, /not taking writes|ECONNREFUSED|terminating connection/);
      expect(r.logs.find((l) => l.includes("store available again"))).toMatch(/after_s/);
    } finally {
      await r.close();
    }
  });

  it("R-D1: a lock another session holds on the commands table: past slowCommitMs not ready and the waiting call UNAVAILABLE; the same submit repeated (same issue uuid) returns the one command", async () => {
    const r = await rig("slow", { ...LIMITS, slowCommitMs: 1000 });
    const locker = await import("pg").then((m) => new m.default.Client({ connectionString: cluster.url("slow") }));
    await locker.connect();
    try {
      await locker.query("BEGIN");
      await locker.query("LOCK TABLE commands IN ACCESS EXCLUSIVE MODE");
      // A submit naming its uuid first reads the stored history (a repeated submit is answered from it):
      // the lock holds that read back, and past slowCommitMs the call is refused, never made.
      const t0 = Date.now();
      const first = await submit(r, script(r.mark, 500, 100, 0.01), "slow-1").catch((e: unknown) => e);
      expect((first as ConnectError).code).toBe(ConnectCode.Unavailable);
      expect((first as ConnectError).rawMessage).toMatch(/read has waited more than 1000 ms.*this call was not made/);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
      expect(await isReady(r)).toBe(false);
      // A submit without a uuid goes straight to the core: its commit waits on the lock, and past slowCommitMs
      // the store is down and the waiting call is told it may still take effect.
      const second = await submit(r, "true").catch((e: unknown) => e);
      expect((second as ConnectError).code).toBe(ConnectCode.Unavailable);
      expect((second as ConnectError).rawMessage).toMatch(/commit has waited more than 1000 ms.*repeat it with the same ids/);
      await waitFor("the readiness poll saw 503", () => r.ready.some((x) => x.startsWith("503")));
      await locker.query("ROLLBACK");
      await waitFor("ready again", () => isReady(r));
      const uuid = await submit(r, script(r.mark, 500, 100, 0.01), "slow-1");
      await expectRanOnce(r, uuid, 500);
      // The one slow-1, and the uuid-less submit that took effect once the lock went.
      const listed = (await r.s.client.listCommands({ clientId: "slow-a" })).commands.map((c) => c.issueUuid);
      expect(listed.filter((u) => u === "slow-1")).toHaveLength(1);
      expect(listed).toHaveLength(2);
      expectOneOutage(r, /(commit|read) has waited more than 1000 ms/);
    } finally {
      await locker.end().catch(() => {});
      await r.close();
    }
  });

  it("R-O3: disk full (a trigger raising disk_full on output rows): not ready while it lasts, nothing acknowledged, every byte stored after", async () => {
    const r = await rig("diskfull");
    try {
      await cluster.sql(
        "diskfull",
        `CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$`,
      );
      await cluster.sql("diskfull", "CREATE TRIGGER full_disk BEFORE INSERT ON output FOR EACH STATEMENT EXECUTE FUNCTION full_disk()");
      const uuid = await submit(r, script(r.mark, 1000, 100, 0.02));
      await waitFor("not ready", async () => !(await isReady(r)));
      const before = storedThrough(r, uuid);
      await sleep(1000);
      // The agent's output was never acknowledged: none of it is stored, the command is not finished.
      expect(storedThrough(r, uuid)).toBe(before);
      expect(r.s.daemon.state.commands.get(uuid)?.committed.state).not.toBe(L.SUCCEEDED);
      expect(await cluster.sql("diskfull", "SELECT count(*)::int AS n FROM output")).toEqual([{ n: 0 }]);
      await cluster.sql("diskfull", "DROP TRIGGER full_disk ON output");
      await waitFor("ready again", () => isReady(r), 20_000);
      await expectRanOnce(r, uuid, 1000);
      expectOneOutage(r, /No space left on device \(53100\)/);
    } finally {
      await r.close();
    }
  });

  it("R-O3: read-only (default_transaction_read_only and the writer's backend ended): not ready until writes are allowed again", async () => {
    const r = await rig("readonly");
    try {
      const uuid = await submit(r, script(r.mark, 2000, 100, 0.05));
      await waitFor("some output stored", () => storedThrough(r, uuid) > 2);
      await cluster.sql("postgres", "ALTER DATABASE readonly SET default_transaction_read_only = on");
      await cluster.sql("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'readonly' AND pid <> pg_backend_pid()");
      await waitFor("not ready", async () => !(await isReady(r)));
      await sleep(1000);
      expect(await isReady(r)).toBe(false);
      await waitFor("readyz names read-only", async () => /read-only transaction \(25006\)/.test(await (await fetch(`${r.s.controlUrl}/readyz`)).text()));
      await cluster.sql("postgres", "ALTER DATABASE readonly RESET default_transaction_read_only");
      await waitFor("ready again", () => isReady(r), 20_000);
      await waitFor("finished", () => r.s.daemon.state.commands.get(uuid)?.committed.state === L.SUCCEEDED, 30_000);
      await expectRanOnce(r, uuid, 2000);
      expectOneOutage(r, /read-only|terminating connection/);
    } finally {
      await r.close();
    }
  });

  it("R-O3: past the backlog bound the agent's session is closed with a reason and its reconnects refused; once the database is back it returns and every byte is stored", async () => {
    const r = await rig("backlog", { ...LIMITS, backlogMaxBytes: 64 * 1024 });
    try {
      const uuid = await submit(r, script(r.mark, 20000, 2000, 0.05));
      await waitFor("some output stored", () => storedThrough(r, uuid) > 2);
      await cluster.down();
      await waitFor("session closed", () => r.logs.some((l) => l.includes("store backlog past its bound while the store takes no writes")), 20_000);
      await waitFor("agent disconnected", () => !r.a.connected);
      expect(await upgradeStatus(r.s.url)).toEqual({ status: 503, body: "the server's store is not taking writes: try again later\n" });
      await cluster.up();
      await waitFor("agent back", () => r.a.connected, 30_000);
      await waitFor("finished", () => r.s.daemon.state.commands.get(uuid)?.committed.state === L.SUCCEEDED, 30_000);
      await expectRanOnce(r, uuid, 20000);
      expect(r.logs.filter((l) => l.includes("closing agents' sessions"))).toHaveLength(1);
      expect(r.logs.filter((l) => l.includes("accepting agents"))).toHaveLength(1);
    } finally {
      await r.close();
    }
  });
});
