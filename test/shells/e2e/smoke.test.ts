import { afterAll, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, describeStores, startAgent, startServer, waitFor } from "./helpers.js";

afterAll(cleanupTemp);

describeStores("e2e smoke", (st) => {
  it("R-T1 R-O3: echo runs end to end over real loopback WebSockets", async () => {
    const s = await startServer(await st.fresh());
    const a = await startAgent(s.url, "host-a");
    try {
      await waitFor("agent connected", () => a.connected);
      const r = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["echo", "hello world"] } } });
      const uuid = r.command!.issueUuid;
      const got = await collect(s.client, uuid);
      expect(got.stdout.toString()).toBe("hello world\n");
      expect(got.finished?.state).toBe(L.SUCCEEDED);
    } finally {
      await a.close();
      await s.close();
    }
  });
});
