// /healthz and /readyz, for load balancers and service managers: answered
// without a token on the control port and the agent port, while every other
// control path still needs one. What /readyz says while the database takes
// no writes is in pg-failures.test.ts.
import { afterAll, describe, expect, it } from "vitest";
import { cleanupTemp, startServer } from "./helpers.js";

afterAll(async () => {
  await cleanupTemp();
});

describe("health probes", () => {
  it("healthz 200 ok and readyz 200 ready without a token, on both ports; other control paths still 401", async () => {
    const s = await startServer();
    try {
      const agentBase = s.url.replace("ws:", "http:").replace("/v1/agent", "");
      for (const base of [s.controlUrl, agentBase]) {
        const h = await fetch(`${base}/healthz`);
        expect([h.status, await h.text()]).toEqual([200, "ok\n"]);
        const r = await fetch(`${base}/readyz`);
        expect([r.status, await r.text()]).toEqual([200, "ready\n"]);
        expect(r.headers.get("cache-control")).toBe("no-store");
      }
      const other = await fetch(`${s.controlUrl}/rvbox.v1.ControlService/ListClients`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      expect(other.status).toBe(401);
      await other.text();
    } finally {
      await s.close();
    }
  });
});
