// Heartbeats on real sockets (R-H1, R-H2, R-H3): a side that hears nothing
// pings after 10 s and gives the session up after 30 s; then the agent
// reconnects. Takes ~32 s: both directions are tested at once.
import { afterAll, describe, expect, it } from "vitest";
import { cleanupTemp, collect, sleep, startAgent, startServer, waitFor } from "./helpers.js";
import { TcpProxy } from "./tcp-proxy.js";

describe("e2e: heartbeats", () => {
  afterAll(cleanupTemp);

  it("R-H1 R-H2 R-H3 R-H4: silence one way: the deaf side pings at 10 s and declares the session dead at 30 s, on both endpoints; the agent reconnects", async () => {
    const s = await startServer();
    const deafAgent = new TcpProxy(s.daemon.agentAddress.port); // server -> agent held
    const deafServer = new TcpProxy(s.daemon.agentAddress.port); // agent -> server held
    await deafAgent.start();
    await deafServer.start();
    const a = await startAgent(`ws://127.0.0.1:${deafAgent.port}/v1/agent`, "hb-a");
    const b = await startAgent(`ws://127.0.0.1:${deafServer.port}/v1/agent`, "hb-b");
    try {
      await waitFor("connected", () => a.connected && b.connected);
      const pingsBefore = deafAgent.pings.length;
      const t0 = Date.now();
      deafAgent.stallDownstream();
      deafServer.stallUpstream();
      // Agent A hears nothing: it pings after ~10 s (the proxy sees the Ping
      // because agent->server still flows) and gives up after ~30 s.
      await waitFor("A pings", () => deafAgent.pings.length > pingsBefore, 15_000, 100);
      const pingAfter = deafAgent.pings.at(-1)! - t0;
      expect(pingAfter).toBeGreaterThanOrEqual(9_000);
      expect(pingAfter).toBeLessThan(13_000);
      await waitFor("A gives the session up", () => !a.connected, 40_000, 100);
      const aDead = Date.now() - t0;
      // The server hears nothing from B: it closes B's session after ~30 s.
      await waitFor(
        "server drops B",
        async () => !(await s.client.listSessions({})).sessions.some((x) => x.clientId === "hb-b" && x.phase === "ready"),
        40_000,
        100,
      );
      const bDead = Date.now() - t0;
      for (const t of [aDead, bDead]) {
        expect(t).toBeGreaterThanOrEqual(29_000);
        expect(t).toBeLessThan(36_000);
      }
      // Meanwhile the server kept A's session alive: A's Pings were activity.
      expect(s.daemon.fatal).toBeNull();
      deafAgent.resume();
      deafServer.resume();
      deafAgent.cutAll();
      deafServer.cutAll();
      await waitFor("both reconnect", () => a.connected && b.connected, 30_000, 100);
      for (const id of ["hb-a", "hb-b"]) {
        const r = await s.client.submitCommand({ clientId: id, program: { case: "argv", value: { argv: ["echo", id] } } });
        expect((await collect(s.client, r.command!.issueUuid)).stdout.toString()).toBe(`${id}\n`);
      }
      await sleep(10);
    } finally {
      await a.close();
      await b.close();
      await deafAgent.close();
      await deafServer.close();
      await s.close();
    }
  }, 90_000);
});
