// A drain is durable: a real server restarted on the same data directory
// still holds the client's queued commands back until the drain ends.
import * as path from "node:path";
import { afterAll, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, describeStores, startAgent, startServer, tempDir, waitFor } from "./helpers.js";
import { TcpProxy } from "./tcp-proxy.js";

afterAll(cleanupTemp);

describeStores("e2e: drain across a server restart", (st) => {
  it("R-D1: the drain flag is restored from the store; the agent reconnects and a queued command runs only after SetClientDraining(false)", async () => {
    const work = await tempDir("rvbox-drain-");
    // The same store after the restart: the data directory, or the same database.
    const where = { ...(await st.fresh()), dataDir: path.join(work, "data") };
    const s1 = await startServer(where);
    const proxy = new TcpProxy(s1.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "drained");
    let s2: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      await waitFor("connected", () => agent.connected);
      expect(await s1.client.setClientDraining({ clientId: "drained", draining: true })).toMatchObject({ wasDraining: false });
      await s1.close();
      s2 = await startServer(where);
      proxy.setTarget(s2.daemon.agentAddress.port);
      proxy.cutAll();
      const c2 = s2.client;
      await waitFor("reconnected", async () => (await c2.listClients({})).clients.find((c) => c.clientId === "drained")?.connected === true, 30_000);
      expect((await c2.listClients({})).clients.find((c) => c.clientId === "drained")?.draining).toBe(true);
      const q = (await c2.submitCommand({ clientId: "drained", program: { case: "argv", value: { argv: ["echo", "held"] } } })).command!.issueUuid;
      await new Promise((r) => setTimeout(r, 1000));
      const held = (await c2.getCommand({ issueUuid: q })).command!;
      expect(held.state).toBe(L.QUEUED);
      expect(held.waitingReason).toContain("client draining");
      expect(await c2.setClientDraining({ clientId: "drained", draining: false })).toMatchObject({ wasDraining: true });
      await waitFor("ran", async () => (await c2.getCommand({ issueUuid: q })).command!.state === L.SUCCEEDED, 20_000);
    } finally {
      await agent.close({ killProcesses: true });
      await s2?.close();
      await proxy.close();
    }
  }, 60_000);
});
