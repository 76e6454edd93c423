// Link cuts through a TCP proxy (R-W11, R-H6, R-O2, R-S1, R-D7): the agent
// reconnects after its own jittered backoff, registers again, and resends
// exactly the same event bytes; nothing is lost or duplicated.
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { cleanupTemp, collect, sleep, startAgent, startServer, tempDir, waitFor } from "./helpers.js";
import { TcpProxy } from "./tcp-proxy.js";

describe("e2e: link cuts", () => {
  afterAll(cleanupTemp);

  it("R-W11 R-H6 R-O2 R-S1 R-D7 R-F2: random link cuts mid-stream; reconnect, identical resends, exact output and stdin", async () => {
    const work = await tempDir("rvbox-link-");
    const s = await startServer();
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "flaky");
    try {
      await waitFor("connected", () => agent.connected);
      const mark = path.join(work, "marker");
      const big = await s.client.submitCommand({
        clientId: "flaky",
        program: {
          case: "shell",
          value: { commandLine: `echo start >> ${mark}; i=0; while [ $i -lt 80 ]; do seq $((i*5000+1)) $((i*5000+5000)); i=$((i+1)); sleep 0.05; done` },
        },
      });
      const cat = await s.client.submitCommand({ clientId: "flaky", program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true });
      const catUuid = cat.command!.issueUuid;
      const bigUuid = big.command!.issueUuid;
      const followBig = collect(s.client, bigUuid);
      const followCat = collect(s.client, catUuid);
      let stdinSent = "";
      const writer = (async () => {
        for (let i = 0; i < 40; i++) {
          const line = `stdin line ${i}`;
          await s.client.writeStdin({ issueUuid: catUuid, data: Buffer.from(line), appendNewline: true, requestId: `w-${i}` });
          stdinSent += `${line}\n`;
          await sleep(60);
        }
        await s.client.closeStdin({ issueUuid: catUuid });
      })();
      let seed = 12345;
      const rnd = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      let cuts = 0;
      for (let cut = 0; cut < 4; cut++) {
        await waitFor(
          "reconnected",
          async () =>
            agent.connected &&
            proxy.activeConnections > 0 &&
            (await s.client.listSessions({})).sessions.some((x) => x.clientId === "flaky" && x.phase === "ready"),
          60_000,
        );
        const before = (await s.client.getCommand({ issueUuid: bigUuid })).command!.storedThroughEventSeq;
        await waitFor(
          "progress",
          async () => {
            const c = (await s.client.getCommand({ issueUuid: bigUuid })).command!;
            return c.storedThroughEventSeq > before || c.state === L.SUCCEEDED;
          },
          60_000,
        );
        // Lose what the agent sends for a moment, then cut: the agent must
        // resend exactly the bytes the network swallowed (R-O2).
        proxy.blackholeUpstream();
        await sleep(50 + rnd() * 250);
        if (proxy.activeConnections > 0) cuts++;
        proxy.cutAll();
        proxy.resume();
      }
      await writer;
      const gb = await followBig;
      const gc = await followCat;
      let want = "";
      for (let i = 1; i <= 400000; i++) want += `${i}\n`;
      expect(gb.stdout.toString() === want).toBe(true);
      expect(gb.finished?.state).toBe(L.SUCCEEDED);
      expect(gc.stdout.toString()).toBe(stdinSent);
      expect(gc.finished?.state).toBe(L.SUCCEEDED);
      const acks = gc.items.filter((i) => i.kind === "stdinAck").map((i) => Number((i.value as { writeSeq: bigint }).writeSeq));
      expect(acks).toEqual(Array.from({ length: 41 }, (_, i) => i + 1));
      expect((await fsp.readFile(mark, "utf8")).trim().split("\n")).toEqual(["start"]);
      expect(cuts).toBeGreaterThanOrEqual(3);
      expect(proxy.connections).toBeGreaterThanOrEqual(cuts);
      const resends = proxy.checkIdenticalResends();
      expect(resends).toBeGreaterThan(0);
      console.log(`link cuts: ${cuts} cuts of a live session, ${proxy.connections} connections, ${resends} events resent (all identical)`);
      const cl = (await s.client.listClients({})).clients.find((c) => c.clientId === "flaky")!;
      expect(cl.generation).toBeGreaterThanOrEqual(BigInt(cuts));
      // Every hello after the first carries the same instance id (R-F1).
      const hellos = proxy.envelopes
        .filter((e) => e.payload.case === "clientHello")
        .map((e) => (e.payload.value as { clientInstanceId: string }).clientInstanceId);
      expect(new Set(hellos).size).toBe(1);
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s.close();
    }
  }, 120_000);

  it("R-C3 R-C1 R-W11: a script upload cut mid-way resumes from the agent's durable received_bytes and runs once", async () => {
    const work = await tempDir("rvbox-link-script-");
    const s = await startServer();
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "uploader");
    try {
      await waitFor("connected", () => agent.connected);
      const mark = path.join(work, "ran");
      // ~6 MiB: a comment block and one command; the upload window is 256 KiB.
      const body = Buffer.from(`#!/bin/sh\n${(`#${"x".repeat(1023)}\n`).repeat(6 * 1024)}echo ran >> ${mark}\necho uploaded\n`);
      const r = await s.client.submitCommand({ clientId: "uploader", program: { case: "script", value: { content: body, interpreter: "/bin/sh" } } });
      const uuid = r.command!.issueUuid;
      const progress = async (): Promise<bigint> => {
        let got = 0n;
        for await (const m of s.client.followOutput({ issueUuid: uuid, follow: false })) {
          if (m.item.case === "scriptUpload" && m.item.value.receivedBytes > got) got = m.item.value.receivedBytes;
        }
        return got;
      };
      let cuts = 0;
      for (const frac of [0.2, 0.5]) {
        await waitFor("upload progress", async () => (await progress()) >= BigInt(Math.floor(body.length * frac)), 60_000, 20);
        if (proxy.activeConnections > 0) cuts++;
        proxy.cutAll();
        await waitFor("reconnected", () => agent.connected, 30_000);
      }
      const got = await collect(s.client, uuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      expect(got.stdout.toString()).toBe("uploaded\n");
      const ups = got.items.filter((i) => i.kind === "scriptUpload").map((i) => i.value as { receivedBytes: bigint; complete: boolean });
      for (let i = 1; i < ups.length; i++) expect(ups[i]!.receivedBytes >= ups[i - 1]!.receivedBytes).toBe(true);
      expect(ups.at(-1)).toMatchObject({ receivedBytes: BigInt(body.length), complete: true });
      expect(cuts).toBeGreaterThanOrEqual(1);
      expect((await fsp.readFile(mark, "utf8")).trim().split("\n")).toEqual(["ran"]);
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s.close();
    }
  }, 120_000);

  it("R-W5 R-W3 R-W11: a reconnect that resends a whole window of tiny events at once is admitted, not refused as ingress overflow (no livelock)", async () => {
    const s = await startServer({ checkInvariants: false });
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "tiny", { checkInvariants: false });
    try {
      await waitFor("connected", () => agent.connected);
      // `yes` compresses ~64 KiB to ~30 bytes: a 1 MiB window holds ~10 000 events.
      const r = await s.client.submitCommand({ clientId: "tiny", program: { case: "shell", value: { commandLine: "yes | head -c 450000000" } } });
      const uuid = r.command!.issueUuid;
      await waitFor("streaming", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.storedThroughEventSeq > 10n);
      proxy.blackholeUpstream();
      await waitFor("5000 events unacknowledged", () => (agent.state.outbox.commands.get(uuid)?.pinned.length ?? 0) > 5000, 60_000, 10);
      proxy.cutAll();
      proxy.resume();
      const c = await waitFor(
        "terminal",
        async () => {
          const g = (await s.client.getCommand({ issueUuid: uuid })).command!;
          return g.state === L.SUCCEEDED ? g : null;
        },
        60_000,
        100,
      );
      expect(agent.stats.connects).toBeLessThanOrEqual(3);
      // Every byte once, in order (counted, not kept: 450 MB).
      let next = 0;
      for await (const m of s.client.followOutput({ issueUuid: uuid, follow: false })) {
        if (m.item.case !== "output") continue;
        expect(Number(m.item.value.streamOffset)).toBe(next);
        next += m.item.value.data.length;
      }
      expect(next).toBe(450000000);
      expect(c.state).toBe(L.SUCCEEDED);
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s.close();
    }
  }, 120_000);
});
