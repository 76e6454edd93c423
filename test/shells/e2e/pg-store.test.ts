// A real server on the PostgreSQL store (--store postgres://…) with a real
// agent: commands run, output streams back byte for byte, and a restarted
// server (state only in the database) still has every command and every
// byte; kill -9 of PostgreSQL under a live server is a store failure that
// stops it (fail-stop), never a silent loss; and after kill -9 of PostgreSQL
// mid-commit (a group's transaction open, held on a lock) with a command
// streaming, the output reads back byte-exact and the command ran once.
import { createHash } from "node:crypto";
import * as path from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { checkStoreUrl } from "../../../shells/server/server-daemon.js";
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
      // ~2.8 MB over ~3 s in bursts: the server commits a group after group while PostgreSQL dies.
      const r = await client.submitCommand({
        clientId: "pg-steady",
        program: {
          case: "shell",
          value: { commandLine: `echo start >> ${mark}; i=0; while [ $i -lt 60 ]; do seq $((i*5000+1)) $((i*5000+5000)); i=$((i+1)); sleep 0.05; done` },
        },
      });
      const uuid = r.command!.issueUuid;
      await waitFor("some output stored", async () => (await client.getCommand({ issueUuid: uuid })).command!.storedThroughEventSeq > 5n);
      // Acknowledged just before the crash: it must survive it (R-D1).
      const late = await client.submitCommand({ clientId: "pg-steady", program: { case: "argv", value: { argv: ["echo", "after the crash"] } } });
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
      const gl = await read(late.command!.issueUuid);
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
