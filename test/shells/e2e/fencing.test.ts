// Session fencing with real daemons (R-F1..R-F7).
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { createLogger } from "../../../shells/runtime/log.js";
import { cleanupTemp, collect, processAlive, sleep, startAgent, startServer, tempDir, waitFor } from "./helpers.js";

describe("e2e: fencing", () => {
  afterAll(cleanupTemp);

  it("R-F1 R-F2 R-F3 R-F7: a clone with the same instance id (copied state dir) fences the older session; never two live sessions", async () => {
    const s = await startServer();
    const stateA = await tempDir("rvbox-clone-a-");
    const linesA: string[] = [];
    const a = await startAgent(s.url, "twin", { stateDir: stateA, log: createLogger("a", "info", (l) => linesA.push(l)) });
    let b: Awaited<ReturnType<typeof startAgent>> | undefined;
    try {
      await waitFor("A connected", () => a.connected);
      const stateB = await tempDir("rvbox-clone-b-");
      await fsp.cp(stateA, stateB, { recursive: true });
      await fsp.rm(path.join(stateB, "store", "LOCK"), { force: true });
      b = await startAgent(s.url, "twin", { stateDir: stateB });
      expect(b.instanceId).toBe(a.instanceId);
      await waitFor("A fenced by the clone", () => linesA.some((l) => /fenced by a newer registration/.test(l)), 15_000);
      // Sample the sessions: at most one registered session for the client at any time.
      let maxLive = 0;
      const gens = new Set<bigint>();
      for (let i = 0; i < 40; i++) {
        const live = (await s.client.listSessions({})).sessions.filter((x) => x.clientId === "twin");
        maxLive = Math.max(maxLive, live.length);
        for (const x of live) gens.add(x.generation);
        await sleep(25);
      }
      expect(maxLive).toBeLessThanOrEqual(1);
      expect(s.daemon.fatal).toBeNull();
      await b.close();
      b = undefined;
      await waitFor("A back", () => a.connected, 30_000);
      const r = await s.client.submitCommand({ clientId: "twin", program: { case: "argv", value: { argv: ["echo", "still me"] } } });
      const got = await collect(s.client, r.command!.issueUuid);
      expect(got.stdout.toString()).toBe("still me\n");
      const cl = (await s.client.listClients({})).clients.find((c) => c.clientId === "twin")!;
      expect(cl.generation).toBeGreaterThanOrEqual(3n);
    } finally {
      await b?.close();
      await a.close();
      await s.close();
    }
  }, 60_000);

  it("R-F4 R-F5 R-F6: a second instance under a live client id is rejected and recorded as a pending claim; authorized once, it is accepted on its next reconnect", async () => {
    const s = await startServer();
    const a = await startAgent(s.url, "shared");
    const linesC: string[] = [];
    let c: Awaited<ReturnType<typeof startAgent>> | undefined;
    try {
      await waitFor("A connected", () => a.connected);
      c = await startAgent(s.url, "shared", { log: createLogger("c", "info", (l) => linesC.push(l)) });
      const claim = await waitFor("pending claim", async () =>
        (await s.client.listClaims({})).claims.find((x) => x.clientId === "shared" && x.instanceId === c!.instanceId),
      );
      expect(claim.currentInstanceId).toBe(a.instanceId);
      expect(c.connected).toBe(false);
      await waitFor("C refused", () => linesC.some((l) => /IDENTITY_CONFLICT/.test(l)));
      // A keeps serving meanwhile (R-F6 does not apply: A is live).
      const r1 = await s.client.submitCommand({ clientId: "shared", program: { case: "argv", value: { argv: ["echo", "from A"] } } });
      expect((await collect(s.client, r1.command!.issueUuid)).stdout.toString()).toBe("from A\n");
      const auth = await s.client.authorizeInstance({ clientId: "shared", instanceId: c.instanceId });
      expect(auth.expiryTime).toBeDefined();
      const expiresInMs = Number(auth.expiryTime!.seconds) * 1000 - Date.now();
      expect(expiresInMs).toBeGreaterThan(4 * 60_000);
      expect(expiresInMs).toBeLessThanOrEqual(5 * 60_000 + 1000);
      await waitFor("C accepted on its next reconnect", () => c!.connected, 30_000);
      await a.close(); // A would otherwise now be the refused one
      const cl = (await s.client.listClients({})).clients.find((x) => x.clientId === "shared")!;
      expect(cl.instanceId).toBe(c.instanceId);
      expect(cl.authorizedInstanceId).toBe(""); // consumed: one shot
      expect((await s.client.listClaims({})).claims.find((x) => x.instanceId === c!.instanceId)).toBeUndefined();
      const r2 = await s.client.submitCommand({ clientId: "shared", program: { case: "argv", value: { argv: ["echo", "from C"] } } });
      expect((await collect(s.client, r2.command!.issueUuid)).stdout.toString()).toBe("from C\n");
      expect((await s.client.getCommand({ issueUuid: r2.command!.issueUuid })).command!.state).toBe(L.SUCCEEDED);
      // With no live session, a brand-new instance is accepted normally (R-F6).
      await c.close();
      c = undefined;
      await waitFor("C gone", async () => !(await s.client.listClients({})).clients.find((x) => x.clientId === "shared")!.connected);
      const d = await startAgent(s.url, "shared");
      try {
        await waitFor("D accepted", () => d.connected);
      } finally {
        await d.close();
      }
    } finally {
      await c?.close();
      await a.close();
      await s.close();
    }
  }, 60_000);

  it("R-F3 R-F5: an authorized takeover kills the old instance's process, words the incident as a takeover, and the old instance stops claiming (CODE_REPLACED)", async () => {
    const s = await startServer();
    const linesA: string[] = [];
    const a = await startAgent(s.url, "web-1", { log: createLogger("a", "info", (l) => linesA.push(l)) });
    const dir = await tempDir("rvbox-takeover-");
    const pidFile = path.join(dir, "pid");
    let b: Awaited<ReturnType<typeof startAgent>> | undefined;
    const alive = processAlive;
    let pid = 0;
    try {
      await waitFor("A connected", () => a.connected);
      const r = await s.client.submitCommand({ clientId: "web-1", program: { case: "shell", value: { commandLine: `echo $$ > ${pidFile}; exec sleep 300` } } });
      const uuid = r.command!.issueUuid;
      pid = Number(await waitFor("pid file", async () => (await fsp.readFile(pidFile, "utf8").catch(() => "")).trim()));
      expect(alive(pid)).toBe(true);
      b = await startAgent(s.url, "web-1");
      const claim = await waitFor("B's pending claim", async () =>
        (await s.client.listClaims({})).claims.find((x) => x.clientId === "web-1" && x.instanceId === b!.instanceId),
      );
      // A prefix of the claimant is refused; the exact id is authorized.
      await expect(s.client.authorizeInstance({ clientId: "web-1", instanceId: claim.instanceId.slice(0, 8) })).rejects.toThrow(/not the pending claimant/);
      await s.client.authorizeInstance({ clientId: "web-1", instanceId: claim.instanceId });
      await waitFor("B took over", () => b!.connected, 45_000);
      const cmd = await waitFor("command interrupted", async () => {
        const c = (await s.client.getCommand({ issueUuid: uuid })).command!;
        return c.state === L.INTERRUPTED ? c : undefined;
      });
      expect(cmd.reason).toBe(`client taken over by instance ${b.instanceId}; the command was running on the previous instance ${a.instanceId}`);
      const inc = (await s.client.listIncidents({})).incidents.filter((i) => i.issueUuid === uuid);
      expect(inc.map((i) => i.kind)).toEqual(["takeover_interrupt"]);
      expect(inc[0]!.detail).toContain(`web-1 was taken over by instance ${b.instanceId}; the command was running on the previous instance ${a.instanceId}`);
      // The old host was told at once and ended its process.
      await waitFor("A's process killed", () => !alive(pid), 15_000);
      await waitFor("A logged that it was replaced", () => linesA.some((l) => /replaced: another instance took over this client id/.test(l)));
      // It does not come back as the next pending claimant (it waits at the backoff cap).
      await sleep(3_000);
      expect((await s.client.listClaims({})).claims).toEqual([]);
      expect(a.connected).toBe(false);
      expect(b.connected).toBe(true);
      expect(s.daemon.fatal).toBeNull();
    } finally {
      if (pid > 0 && alive(pid)) process.kill(pid, "SIGKILL");
      await b?.close();
      await a.close();
      await s.close();
    }
  }, 90_000);
});
