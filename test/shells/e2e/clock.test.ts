// Both daemons, in process, with their real clock source and a wall clock
// (Date.now) stepped an hour forward or back while performance.now() runs
// on: heartbeats, session death, redelivery, backoff and queue expiry keep
// their real durations; the timestamps operators see follow the wall clock.
// (Before the two clocks the daemons fed a clamped Date.now() to the cores:
// +1 h killed every session at the next tick; -1 h froze every timer.)
import { timestampMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, FLEET_TOKEN, startAgent, startServer } from "./helpers.js";
import { RawAgent } from "./raw-client.js";
import { TcpProxy } from "./tcp-proxy.js";

const HOUR = 3_600_000;
const realNow = Date.now.bind(Date);
let wallStep = 0;
function stepWallClock(ms: number): void {
  wallStep += ms;
  vi.spyOn(Date, "now").mockImplementation(() => realNow() + wallStep);
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Waits on the monotonic clock (helpers' waitFor reads Date.now, which these tests step). */
async function until<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}
const near = (ms: number | undefined, expected: number, slack = 5_000) => expect(Math.abs((ms ?? 0) - expected), `${ms} vs ${expected}`).toBeLessThan(slack);

describe("e2e: wall clock stepped ±1 h", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    wallStep = 0;
  });
  afterAll(cleanupTemp);

  it("R-H1 R-H2: +1 h: the session survives past a heartbeat interval, a command runs, and createdTime, event times, lastInboundTime and the authorization expiry follow the wall clock", async () => {
    const s = await startServer();
    const a = await startAgent(s.url, "clk-a");
    try {
      await until("connected", () => a.connected);
      const before = (await s.client.listSessions({})).sessions.find((x) => x.clientId === "clk-a")!;
      const connects = a.stats.connects;
      stepWallClock(HOUR);
      const t0 = performance.now();
      const r = await s.client.submitCommand({ clientId: "clk-a", program: { case: "argv", value: { argv: ["echo", "tick"] } } });
      near(timestampMs(r.command!.createdTime!), Date.now());
      const got = await collect(s.client, r.command!.issueUuid, { keepData: true });
      expect(got.stdout.toString()).toBe("tick\n");
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      const events = [];
      for await (const m of s.client.followOutput({ issueUuid: r.command!.issueUuid, fromEventSeq: 1n, follow: false })) events.push(m);
      expect(events.length).toBeGreaterThan(1);
      for (const m of events) if (m.time) near(timestampMs(m.time), Date.now());
      const auth = await s.client.authorizeInstance({ clientId: "clk-a", instanceId: "other", instanceNotYetSeen: true });
      near(timestampMs(auth.expiryTime!), Date.now() + 5 * 60_000);
      // Past the 10 s heartbeat deadline: on both sides the tick finds the
      // session idle for seconds, not for an hour.
      while (performance.now() - t0 < 11_500) await sleep(250);
      const after = (await s.client.listSessions({})).sessions.find((x) => x.clientId === "clk-a")!;
      expect(a.connected).toBe(true);
      expect(a.stats.connects).toBe(connects);
      expect(after.sessionId).toBe(before.sessionId);
      expect(after.generation).toBe(before.generation);
      near(timestampMs(after.lastInboundTime!), Date.now(), 15_000);
      const client = (await s.client.listClients({})).clients.find((c) => c.clientId === "clk-a")!;
      near(timestampMs(client.lastActivityTime!), Date.now(), 15_000);
    } finally {
      await a.close();
      await s.close();
    }
  }, 40_000);

  it("R-H4 R-D1: -1 h: the agent's backoff still reconnects it in seconds, and an operator's queue expiry 3 s ahead passes after 3 s, not at once", async () => {
    const s = await startServer();
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const a = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "clk-b");
    try {
      await until("connected", () => a.connected);
      // A client the server knows, with no agent online: its commands wait queued.
      const ghost = await startAgent(s.url, "clk-ghost");
      await until("ghost connected", () => ghost.connected);
      await ghost.close();
      await until("ghost offline", async () => !(await s.client.listClients({})).clients.find((c) => c.clientId === "clk-ghost")?.connected);
      stepWallClock(-HOUR);
      const t0 = performance.now();
      const q = await s.client.submitCommand({
        clientId: "clk-ghost",
        program: { case: "argv", value: { argv: ["true"] } },
        queueExpiryTime: timestampFromMs(Date.now() + 3_000),
      });
      expect(q.command!.state).toBe(L.QUEUED);
      near(timestampMs(q.command!.queueExpiryTime!), Date.now() + 3_000, 1_000);
      near(timestampMs(q.command!.createdTime!), Date.now());
      // Backoff: cut the link; the first retry is at most 1 s away.
      // (Wait for a new session, not for a.connected to drop: the agent may
      // be back before a poll ever sees it offline.)
      const sessionOf = async () => (await s.client.listSessions({})).sessions.find((x) => x.clientId === "clk-b");
      const before = (await until("session", sessionOf)).sessionId;
      const connects = a.stats.connects;
      proxy.cutAll();
      const cut = performance.now();
      await until("reconnected", async () => a.connected && a.stats.connects > connects && (await sessionOf())?.sessionId !== before, 8_000);
      expect(performance.now() - cut).toBeLessThan(8_000);
      await until("expired", async () => (await s.client.getCommand({ issueUuid: q.command!.issueUuid })).command!.state === L.EXPIRED, 10_000);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(2_900);
      // However slow this run was: the server itself recorded the expiry 3 s after the submit, not at once.
      const ended = (await s.client.getCommand({ issueUuid: q.command!.issueUuid })).command!;
      expect(ended.endedTime).toBeDefined();
      expect(timestampMs(ended.endedTime!) - timestampMs(ended.createdTime!)).toBeGreaterThanOrEqual(2_900);
      expect(timestampMs(ended.endedTime!)).toBeGreaterThanOrEqual(timestampMs(ended.queueExpiryTime!));
    } finally {
      await a.close();
      await proxy.close();
      await s.close();
    }
  }, 40_000);

  for (const step of [HOUR, -HOUR]) {
    it(`R-D1: ${step > 0 ? "+" : "-"}1 h: an unanswered dispatch is redelivered after the 2 s redelivery timeout, neither at once nor never`, async () => {
      const s = await startServer({ limits: { redeliveryMs: 2_000 } });
      const raw = (await RawAgent.connect(s.url, FLEET_TOKEN)) as RawAgent;
      try {
        await raw.register("clk-raw", "raw-1");
        const r = await s.client.submitCommand({ clientId: "clk-raw", program: { case: "argv", value: { argv: ["true"] } } });
        await raw.next("commandDispatch");
        const t0 = performance.now();
        stepWallClock(step);
        // Keep the server stepping (each Ping is an activity step, which runs its pump).
        const keepBusy = setInterval(() => raw.ws.ping(), 200);
        try {
          await until("redelivery", () => raw.inbox.some((e) => e.payload.case === "commandDispatch"), 8_000);
        } finally {
          clearInterval(keepBusy);
        }
        const dt = performance.now() - t0;
        expect(dt).toBeGreaterThanOrEqual(1_500);
        expect(dt).toBeLessThan(6_000);
        void r;
      } finally {
        raw.close();
        await s.close();
      }
    }, 30_000);
  }
});
