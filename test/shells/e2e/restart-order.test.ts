// Queued commands keep their submission order across a server restart: the
// store gives rows back in the order first written (kv-store LOAD_ALL), which
// the server's restore keeps as its dispatch order. Before 2026-12-05 a
// rewritten row (INSERT OR REPLACE) moved to the end, so a queued command an
// operator had written stdin to ran after younger ones once the server
// restarted.
import * as path from "node:path";
import { afterAll, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { cleanupTemp, describeStores, startAgent, startServer, tempDir, waitFor } from "./helpers.js";
import { TcpProxy } from "./tcp-proxy.js";

afterAll(cleanupTemp);

describeStores("e2e: dispatch order across a server restart", (st) => {
  it("R-D1: commands queued before a restart are dispatched oldest first after it, also one whose record was rewritten while it waited", async () => {
    const work = await tempDir("rvbox-order-");
    // The same store after the restart: the data directory, or the same database.
    const where = { ...(await st.fresh()), dataDir: path.join(work, "data") };
    const s1 = await startServer(where);
    const proxy = new TcpProxy(s1.daemon.agentAddress.port);
    await proxy.start();
    // One at a time, so the start times give the dispatch order.
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "fifo", { maxRunning: 1 });
    let s2: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      await waitFor("connected", () => agent.connected);
      await s1.client.setClientDraining({ clientId: "fifo", draining: true });
      // The oldest is written to while it waits (its stdin), so its stored row is rewritten after the others'.
      const ids = ["order-z", "order-m", "order-a"];
      await s1.client.submitCommand({ clientId: "fifo", issueUuid: ids[0], stdinOpen: true, program: { case: "argv", value: { argv: ["cat"] } } });
      for (const issueUuid of ids.slice(1))
        await s1.client.submitCommand({ clientId: "fifo", issueUuid, program: { case: "argv", value: { argv: ["sleep", "0.05"] } } });
      await s1.client.writeStdin({ issueUuid: ids[0], data: new TextEncoder().encode("queued input\n") });
      await s1.client.closeStdin({ issueUuid: ids[0] });
      await s1.close();
      s2 = await startServer(where);
      proxy.setTarget(s2.daemon.agentAddress.port);
      proxy.cutAll();
      const c2 = s2.client;
      await waitFor("reconnected", async () => (await c2.listClients({})).clients.find((c) => c.clientId === "fifo")?.connected === true, 30_000);
      await c2.setClientDraining({ clientId: "fifo", draining: false });
      const done = async () => Promise.all(ids.map(async (issueUuid) => (await c2.getCommand({ issueUuid })).command!));
      await waitFor("all ran", async () => (await done()).every((c) => c.state === L.SUCCEEDED), 30_000);
      const started = (await done()).map((c) => [c.issueUuid, timestampMs(c.startedTime!)] as const);
      expect([...started].sort((a, b) => a[1] - b[1]).map(([id]) => id)).toEqual(ids);
    } finally {
      await agent.close({ killProcesses: true });
      await s2?.close();
      await proxy.close();
    }
  }, 60_000);
});
