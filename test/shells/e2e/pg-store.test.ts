// A real server on the PostgreSQL store (--store postgres://…) with a real
// agent: commands run, output streams back byte for byte, and a restarted
// server (state only in the database) still has every command and every
// byte; kill -9 of PostgreSQL under a live server is waited out, never a
// silent loss; and after kill -9 of PostgreSQL mid-commit (a group's
// transaction open, held on a lock) with a command streaming, the output
// reads back byte-exact and the command ran once. The history lives in the
// database: the server reads back what its memory let go of.
import { createHash } from "node:crypto";
import * as path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { checkStoreUrl } from "../../../shells/server/server-daemon.js";
import { SERVER_PRUNED_LEDGER_IN_STORE } from "../../../core/limits.js";
import { sharedPgCluster } from "../../support/pg-shared.js";
import {
  type Child,
  cleanupTemp,
  collect,
  controlClient,
  FLEET_TOKEN,
  fileLines,
  type Collected,
  seqText,
  serverArgv,
  spawnRvbox,
  startAgent,
  startServer,
  steadyStream,
  tempDir,
  waitFor,
  writeTokenFiles,
} from "./helpers.js";
import { freePort } from "./tcp-proxy.js";

const pgc = sharedPgCluster();
const children: Child[] = [];
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await cleanupTemp();
});

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

  it("the history lives in PostgreSQL: the server holds at most historyHeld ended commands, reads the rest back (GetCommand, ListCommands pages, logs), holds none after a restart, and deletes what is past historyMs", async () => {
    const store = await pgc.database("e2e_history");
    let s = await startServer({ store, limits: { historyHeld: 2 } });
    // The ledger's default is smaller when the database keeps the history (a repeated submit is answered from it).
    expect(s.daemon.state.config.limits.prunedMax).toBe(SERVER_PRUNED_LEDGER_IN_STORE);
    const a = await startAgent(s.url, "pg-h");
    const uuids: string[] = [];
    try {
      await waitFor("agent connected", () => a.connected);
      for (let i = 1; i <= 5; i++) {
        const r = await s.client.submitCommand({ clientId: "pg-h", program: { case: "argv", value: { argv: ["echo", `run ${i}`] } } });
        uuids.push(r.command!.issueUuid);
        expect((await collect(s.client, uuids.at(-1)!)).finished?.state).toBe(L.SUCCEEDED);
      }
      // internal: what memory holds is what this issue bounds (the operator sees no difference, below)
      await waitFor("history bounded", () => s.daemon.state.history.size <= 2);
      expect(s.daemon.state.commands.has(uuids[0]!)).toBe(false);
      const check = async () => {
        for (const [i, u] of uuids.entries()) {
          expect((await s.client.getCommand({ issueUuid: u })).command?.state).toBe(L.SUCCEEDED);
          expect((await collect(s.client, u)).stdout.toString()).toBe(`run ${i + 1}\n`);
        }
        const pages: string[][] = [];
        let token = "";
        do {
          const p = await s.client.listCommands({ clientId: "pg-h", pageSize: 2, pageToken: token });
          pages.push(p.commands.map((c) => c.issueUuid));
          token = p.nextPageToken;
        } while (token !== "");
        expect(pages.flat()).toEqual([...uuids].reverse());
        expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
        // By the client's labels and by creation time, still from the database.
        const ids = async (q: Parameters<typeof s.client.listCommands>[0]) => (await s.client.listCommands(q)).commands.map((c) => c.issueUuid);
        expect(await ids({ selector: "role=web" })).toEqual([...uuids].reverse());
        expect(await ids({ selector: "role=db" })).toEqual([]);
        const third = (await s.client.getCommand({ issueUuid: uuids[2]! })).command!.createdTime!;
        expect(await ids({ clientId: "pg-h", createdAfter: third })).toEqual(uuids.slice(2).reverse());
        expect(await ids({ clientId: "pg-h", createdBefore: third })).toEqual(uuids.slice(0, 2).reverse());
        await expect(s.client.listCommands({ selector: "role==" })).rejects.toThrow(/invalid_argument|selector/i);
      };
      await s.client.setClientLabels({ clientId: "pg-h", set: { role: "web" } });
      await check();
      await a.close();
      await s.close();
      s = await startServer({ store, limits: { historyHeld: 2, prunedMax: 1 } });
      // internal: a restart holds no ended command (the newest prunedMax are ledger entries), yet every one reads back.
      expect(s.daemon.state.history.size).toBe(0);
      expect([...s.daemon.state.pruned.keys()]).toEqual([uuids[4]]);
      await check();
      // A repeated submit of a command memory and the ledger let go of is refused (from its row): it never runs twice.
      await expect(
        s.client.submitCommand({ issueUuid: uuids[0]!, clientId: "pg-h", program: { case: "argv", value: { argv: ["echo", "run 1"] } } }),
      ).rejects.toThrow(/already/i);
      // The audit log is the database's too: every call since the first server is there after a restart.
      const audited = await s.client.listAudit({});
      expect(audited.entries.filter((e) => e.rpc === "SubmitCommand").length).toBeGreaterThanOrEqual(6);
      expect(s.daemon.state.audit.size).toBe(0); // internal: memory holds none of it
      await s.close();
      s = await startServer({ store, limits: { historyMs: 1, auditMax: 2 }, historySweepMs: 50 });
      await waitFor("history swept", async () => (await s.client.listCommands({ clientId: "pg-h" })).commands.length === 0);
      const trimmed = await waitFor("audit trimmed", async () => {
        const a = await s.client.listAudit({});
        return a.entries.length === 2 ? a : null;
      });
      expect(Number(trimmed.droppedEntries)).toBe(audited.entries.length - 2);
      expect(trimmed.entries.map((e) => e.seq)).toEqual(audited.entries.slice(-2).map((e) => e.seq));
      await expect(s.client.getCommand({ issueUuid: uuids[0]! })).rejects.toThrow(/NOT_FOUND|not_found|no command/i);
    } finally {
      await a.close().catch(() => {});
      await s.close();
    }
  });

  it("a job never reuses a command uuid only the database still holds: job jy's child jy.1 is refused when a command jy.1 ran long ago", async () => {
    const store = await pgc.database("e2e_job_reuse");
    const s = await startServer({ store, limits: { historyHeld: 1, prunedMax: 1 } });
    const a = await startAgent(s.url, "pg-j");
    try {
      await waitFor("agent connected", () => a.connected);
      const run = async (issueUuid: string) => {
        await s.client.submitCommand({ clientId: "pg-j", issueUuid, program: { case: "argv", value: { argv: ["echo", issueUuid] } } });
        expect((await collect(s.client, issueUuid)).finished?.state).toBe(L.SUCCEEDED);
      };
      for (const u of ["jy.1", "other-1", "other-2", "other-3"]) await run(u);
      // internal: memory and the ledger have let go of jy.1; only its rows know it
      await waitFor("jy.1 let go", () => !s.daemon.state.commands.has("jy.1") && !s.daemon.state.pruned.has("jy.1"));
      await expect(s.client.submitJob({ jobId: "jy", clientIds: ["pg-j"], program: { case: "argv", value: { argv: ["true"] } } })).rejects.toThrow(
        /command uuid jy\.1 \(child 1 of job jy\) is already used/,
      );
      expect((await collect(s.client, "jy.1")).stdout.toString()).toBe("jy.1\n");
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

  it("kill -9 of PostgreSQL under a live server is waited out: the server stays up, is ready again once it reconnected, and stores the next call", async () => {
    const store = await pgc.database("e2e_crash");
    const fatal: unknown[] = [];
    const s = await startServer({ store, onFatal: (err) => fatal.push(err) });
    try {
      const r = await s.client.submitCommand({ clientId: "nobody", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
      expect(r.command?.issueUuid).toBeTruthy();
      await (await pgc.cluster()).crashAndRestart();
      // The server never stopped; it takes writes again once its writer reconnected (pg-failures.test.ts has each failure).
      await waitFor("ready", async () => (await fetch(`${s.controlUrl}/readyz`)).status === 200);
      const second = await s.client.submitCommand({ clientId: "nobody", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
      expect(second.command?.issueUuid).toBeTruthy();
      expect(fatal).toEqual([]);
    } finally {
      await s.close().catch(() => {});
    }
  });

  it("R-D1 R-O3 R-H6: kill -9 of PostgreSQL mid-commit while a command streams: once it is back (the server restarted if it stopped), the output reads back byte-exact and the command ran once", async () => {
    const work = await tempDir("rvbox-pg-crash-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const store = await pgc.database("e2e_pg_crash");
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const serverArgs = serverArgv({ agentPort, controlPort, data: path.join(work, "unused"), files }, "--store", store);
    const spawnServer = () => {
      const c = spawnRvbox(serverArgs);
      children.push(c);
      return c;
    };
    let server = spawnServer();
    const client = controlClient(`http://127.0.0.1:${controlPort}`);
    await waitFor("server up", async () => (await client.listClients({})) !== undefined, 30_000);
    const agent = await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "pg-steady");
    try {
      await waitFor("agent connected", () => agent.connected);
      const mark = path.join(work, "marker");
      // ~2.8 MB over ~3 s in bursts (the server commits group after group while PostgreSQL dies), and a
      // submit acknowledged just before the crash: it must survive it (R-D1).
      const { uuid, late } = await steadyStream(client, "pg-steady", mark);
      // Mid-commit for certain: hold the output table so the server's next group stops inside its
      // transaction (BEGIN and its other rows sent, the output INSERT waiting), then kill -9 PostgreSQL.
      const holder = new pg.Client({ connectionString: store });
      holder.on("error", () => {});
      await holder.connect();
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE output IN SHARE ROW EXCLUSIVE MODE");
      await waitFor("a group commit waiting inside its transaction", async () => {
        const w = await holder.query(
          "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
        );
        return w.rows.length > 0;
      });
      await (await pgc.cluster()).crashAndRestart();
      await holder.end().catch(() => {});
      // Either design holds here: a server that stops on the failure (fail-stop; its supervisor
      // starts it again, as this test does) or one that waits for the database and resumes.
      const read = async (id: string): Promise<Collected> => {
        for (let attempt = 0; ; attempt++) {
          if (server.proc.exitCode !== null || server.proc.signalCode !== null) {
            server = spawnServer();
          }
          try {
            return await collect(client, id);
          } catch (err) {
            if (attempt >= 240) throw err;
            await new Promise((res) => setTimeout(res, 250));
          }
        }
      };
      const got = await read(uuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      expect(got.stdout.toString() === seqText(1, 300000)).toBe(true);
      expect(got.stderr.length).toBe(0);
      expect(await fileLines(mark)).toEqual(["start"]);
      const gl = await read(late);
      expect(gl.stdout.toString()).toBe("after the crash\n");
      expect(gl.finished?.state).toBe(L.SUCCEEDED);
      // Read again from a server started afresh on the database: the same bytes, from what was committed.
      server.proc.kill("SIGTERM");
      await server.exited;
      server = spawnServer();
      const again = await read(uuid);
      expect(sha(again.stdout)).toBe(sha(got.stdout));
      expect(await fileLines(mark)).toEqual(["start"]);
    } catch (err) {
      console.log(server.output());
      throw err;
    } finally {
      await agent.close({ killProcesses: true });
      server.proc.kill("SIGTERM");
      await server.exited;
    }
  }, 120_000);
});
