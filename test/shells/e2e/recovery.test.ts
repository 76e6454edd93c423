// Recovery paths with real daemons: stale server state after a restore
// (R-D5, R-D9..R-D12), an essential-store incident on the agent (R-D13),
// rolling retention with markers and flat storage (R-O5, on both server
// stores), agent-side truncation when output outruns the link (R-O7, R-W6),
// incomplete capture (R-O8), capacity rejections (R-D3), ingress overflow
// (R-W5, R-W7).
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle as L, ShellType, TruncationCause } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { JOURNAL_FILE } from "../../../shells/store/index.js";
import { cleanupTemp, collect, describeStores, sleep, startAgent, startServer, storedOutputBytes, tempDir, waitFor, fileLines } from "./helpers.js";
import { TcpProxy } from "./tcp-proxy.js";

afterAll(cleanupTemp);

describe("e2e: recovery, retention, truncation", () => {
  it("R-D5 R-D9 R-D10 R-D11 R-D12: a server restored from an older copy: the agent's tombstone suppresses a replay, and a command the server does not know is terminated locally, with incidents", async () => {
    const work = await tempDir("rvbox-restore-");
    const data1 = path.join(work, "data");
    const s1 = await startServer({ dataDir: data1 });
    const proxy = new TcpProxy(s1.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "restored");
    let s2: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      await waitFor("connected", () => agent.connected);
      const markX = path.join(work, "x");
      const x = await s1.client.submitCommand({
        clientId: "restored",
        program: { case: "shell", value: { commandLine: `echo start >> ${markX}; sleep 1.5; echo done` } },
      });
      const xu = x.command!.issueUuid;
      await waitFor("X running", async () => (await s1.client.getCommand({ issueUuid: xu })).command!.state === L.RUNNING);
      // The "backup": the server's state while X was running and before Y existed.
      const data2 = path.join(work, "data-restored");
      await s1.daemon.storage.whenIdle();
      await fsp.cp(data1, data2, { recursive: true });
      const markY = path.join(work, "y");
      const ticks = path.join(work, "y-ticks");
      const y = await s1.client.submitCommand({
        clientId: "restored",
        program: { case: "shell", value: { commandLine: `echo start >> ${markY}; while true; do echo t >> ${ticks}; sleep 0.1; done` } },
      });
      const yu = y.command!.issueUuid;
      await waitFor("Y running", async () => (await s1.client.getCommand({ issueUuid: yu })).command!.state === L.RUNNING);
      expect((await collect(s1.client, xu)).finished?.state).toBe(L.SUCCEEDED);
      await waitFor("X tombstoned at the agent", () => agent.state.tombstones.has(xu));
      await s1.close();
      s2 = await startServer({ dataDir: data2 });
      proxy.setTarget(s2.daemon.agentAddress.port);
      proxy.cutAll();
      // X: the restored server thinks it is running; the agent's tombstone says it ran (R-D5, R-D10).
      const gx = await waitFor(
        "X settled",
        async () => {
          const c = (await s2!.client.getCommand({ issueUuid: xu })).command!;
          return c.state === L.INTERRUPTED ? c : null;
        },
        30_000,
      );
      expect(gx.reason).toMatch(/already executed/);
      expect(await fileLines(markX)).toEqual(["start"]);
      // Y: unknown to the restored server: terminated at the agent after the durable result (R-D11).
      await waitFor("Y terminated locally", () => !agent.state.commands.has(yu) && agent.state.tombstones.has(yu), 30_000);
      const t1 = (await fileLines(ticks)).length;
      await sleep(500);
      expect((await fileLines(ticks)).length).toBe(t1);
      expect(await fileLines(markY)).toEqual(["start"]);
      const incidents = (await s2.client.listIncidents({})).incidents;
      expect(incidents.map((i) => i.kind).sort()).toEqual(expect.arrayContaining(["reconcile_already_executed", "reconcile_terminate_local"]));
      // Incidents can be acknowledged.
      await s2.client.acknowledgeIncident({ incidentId: incidents[0]!.incidentId });
      expect((await s2.client.listIncidents({})).incidents.length).toBe(incidents.length - 1);
      // The session works normally afterwards.
      const z = await s2.client.submitCommand({ clientId: "restored", program: { case: "argv", value: { argv: ["echo", "fine"] } } });
      expect((await collect(s2.client, z.command!.issueUuid)).stdout.toString()).toBe("fine\n");
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s2?.close();
      await s1.close();
    }
  }, 60_000);

  it("R-D13: an agent whose journal is corrupt raises a store incident, accepts no work until repaired, then runs it", async () => {
    const s = await startServer();
    const state = await tempDir("rvbox-corrupt-");
    let agent = await startAgent(s.url, "damaged", { stateDir: state });
    try {
      await waitFor("connected", () => agent.connected);
      for (let i = 0; i < 3; i++) {
        const r = await s.client.submitCommand({ clientId: "damaged", program: { case: "argv", value: { argv: ["echo", `run ${i}`] } } });
        await collect(s.client, r.command!.issueUuid);
      }
      await agent.close();
      // Flip a byte inside an early journal record: valid records follow, so this is corruption, not a torn tail.
      const jf = path.join(state, "store", JOURNAL_FILE);
      const buf = await fsp.readFile(jf);
      expect(buf.length).toBeGreaterThan(2000);
      buf[60] = buf[60]! ^ 0xff;
      await fsp.writeFile(jf, buf);
      agent = await startAgent(s.url, "damaged", { stateDir: state });
      await waitFor(
        "incident at the server",
        async () => (await s.client.listIncidents({})).incidents.some((i) => i.kind === "agent_store_incident" && i.clientId === "damaged"),
        15_000,
      );
      expect(agent.state.storeIncident).not.toBeNull();
      const w = await s.client.submitCommand({ clientId: "damaged", program: { case: "argv", value: { argv: ["echo", "after repair"] } } });
      await sleep(1000);
      expect((await s.client.getCommand({ issueUuid: w.command!.issueUuid })).command!.state).toBe(L.QUEUED);
      await agent.close();
      agent = await startAgent(s.url, "damaged", { stateDir: state, repairStore: true });
      const got = await collect(s.client, w.command!.issueUuid);
      expect(got.stdout.toString()).toBe("after repair\n");
    } finally {
      await agent.close();
      await s.close();
    }
  }, 60_000);

  it("R-O7 R-W6 R-O8: output that outruns a stalled link is summarized into agent truncation markers with byte ranges; a held-open pipe yields OutputIncomplete before the end", async () => {
    const s = await startServer();
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "overflow", {
      pauseRawBytes: Number.MAX_SAFE_INTEGER,
      limits: { rawHigh: 2 * 1024 * 1024, rawLow: 1024 * 1024, outputPerCommand: 3 * 1024 * 1024 },
    });
    try {
      await waitFor("connected", () => agent.connected);
      const r = await s.client.submitCommand({
        clientId: "overflow",
        program: { case: "shell", value: { commandLine: "sleep 0.3; head -c 12000000 /dev/urandom" } },
      });
      const uuid = r.command!.issueUuid;
      await waitFor("running", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.RUNNING);
      proxy.stall();
      await sleep(2500);
      proxy.resume();
      const got = await collect(s.client, uuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      const marks = got.items
        .filter((i) => i.kind === "truncation")
        .map((i) => i.value as { removedEvents?: unknown; removedBytes: Array<{ offset: bigint; length: bigint }>; cause: TruncationCause });
      expect(marks.length).toBeGreaterThan(0);
      expect(marks.every((m) => m.removedEvents === undefined)).toBe(true);
      const dropped = marks.flatMap((m) => m.removedBytes).reduce((n, b) => n + Number(b.length), 0);
      expect(dropped + got.stdout.length).toBe(12_000_000);

      const r2 = await s.client.submitCommand({ clientId: "overflow", program: { case: "shell", value: { commandLine: "sleep 4 & echo parent done" } } });
      const g2 = await collect(s.client, r2.command!.issueUuid);
      expect(g2.stdout.toString()).toBe("parent done\n");
      const kinds = g2.items.map((i) => i.kind);
      const inc = kinds.indexOf("incomplete");
      expect(inc).toBeGreaterThan(0);
      expect(kinds.lastIndexOf("lifecycle")).toBeGreaterThan(inc);
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s.close();
    }
  }, 60_000);

  it("R-O5 R-O7: when retention removes a stretch holding agent truncation markers, FollowOutput still sends every byte range in stream order", async () => {
    // Found by npm run chaos: the cumulative retention marker was sent where it begins with all
    // its ranges, ahead of the agent markers that fill the holes between them, so a reader saw
    // the stream jump forward and then back.
    const s = await startServer({ limits: { outputPerCommand: 1024 * 1024, segmentBytes: 256 * 1024 } });
    const proxy = new TcpProxy(s.daemon.agentAddress.port);
    await proxy.start();
    const agent = await startAgent(`ws://127.0.0.1:${proxy.port}/v1/agent`, "holes", {
      pauseRawBytes: Number.MAX_SAFE_INTEGER,
      limits: { rawHigh: 2 * 1024 * 1024, rawLow: 1024 * 1024, outputPerCommand: 3 * 1024 * 1024 },
    });
    try {
      await waitFor("connected", () => agent.connected);
      const r = await s.client.submitCommand({
        clientId: "holes",
        program: {
          case: "shell",
          value: {
            commandLine:
              "sleep 1.5; head -c 3000000 /dev/urandom | od -An -tx1 -w32 | head -c 8000000; sleep 5; head -c 3000000 /dev/urandom | od -An -tx1 -w32 | head -c 8000000",
          },
        },
      });
      const uuid = r.command!.issueUuid;
      await waitFor("running", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.RUNNING);
      proxy.stall();
      await sleep(4000);
      proxy.resume();
      await waitFor("finished", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.SUCCEEDED, 30_000);
      // Read from `from`; every range must continue the stream (the first may start anywhere a resumed reader left off).
      const read = async (from: bigint) => {
        const kinds = new Set<string>();
        const truncSeqs: bigint[] = [];
        let next = -1;
        const order: string[] = [];
        const take = (what: string, off: number, len: number) => {
          order.push(`${what} ${off}+${len}`);
          if (next >= 0) expect(off, order.slice(-4).join(", ")).toBeLessThanOrEqual(next);
          next = Math.max(next, off + len);
        };
        for await (const m of s.client.followOutput({ issueUuid: uuid, fromEventSeq: from, follow: false })) {
          const it = m.item;
          if (it.case === "output") {
            if (next >= 0) expect(Number(it.value.streamOffset), order.slice(-4).join(", ")).toBe(next);
            take("data", Number(it.value.streamOffset), it.value.data.length);
          } else if (it.case === "retention" || it.case === "truncation") {
            kinds.add(it.case);
            if (it.case === "truncation") truncSeqs.push(m.eventSeq);
            for (const b of it.value.removedBytes) take(it.case, Number(b.offset), Number(b.length));
          }
        }
        return { kinds, truncSeqs, next, first: order[0] };
      };
      const all = await read(1n);
      expect(all.first).toMatch(/ 0\+/);
      expect(all.next).toBe(16_000_000);
      expect([...all.kinds].sort()).toEqual(["retention", "truncation"]);
      // A reader resuming right after the first agent marker continues where that marker ended.
      const resumed = await read(all.truncSeqs[0]! + 1n);
      expect(resumed.next).toBe(16_000_000);
    } finally {
      await agent.close({ killProcesses: true });
      await proxy.close();
      await s.close();
    }
  }, 60_000);

  it("R-D3: a full agent queue rejects with CAPACITY; the server requeues with backoff and everything runs once", async () => {
    const s = await startServer();
    const work = await tempDir("rvbox-cap-");
    const agent = await startAgent(s.url, "small", { maxRunning: 1, maxQueued: 1 });
    try {
      await waitFor("connected", () => agent.connected);
      const mark = path.join(work, "runs");
      const ids = [];
      for (let i = 0; i < 5; i++) {
        const r = await s.client.submitCommand({ clientId: "small", program: { case: "shell", value: { commandLine: `echo ${i} >> ${mark}; sleep 0.2` } } });
        ids.push(r.command!.issueUuid);
      }
      for (const id of ids) expect((await collect(s.client, id)).finished?.state).toBe(L.SUCCEEDED);
      expect((await fileLines(mark)).sort()).toEqual(["0", "1", "2", "3", "4"]);
    } finally {
      await agent.close();
      await s.close();
    }
  }, 60_000);

  it("R-W5 R-W7 R-W1: a full ingress staging queue closes the session without acknowledgement; the agent resends and nothing is lost", async () => {
    const s = await startServer();
    const agent = await startAgent(s.url, "bursty");
    try {
      await waitFor("connected", () => agent.connected);
      // Shrink the server's staging bound so the next burst overflows it once.
      const limits = (s.daemon.loop as unknown as { limits: { maxBytes: number; maxCount: number } }).limits;
      const saved = { ...limits };
      limits.maxCount = 3;
      const r = await s.client.submitCommand({ clientId: "bursty", program: { case: "shell", value: { commandLine: "seq 1 300000" } } });
      const uuid = r.command!.issueUuid;
      await waitFor("session closed by overflow", () => agent.stats.connects >= 2, 15_000);
      Object.assign(limits, saved);
      const got = await collect(s.client, uuid);
      let want = "";
      for (let i = 1; i <= 300000; i++) want += `${i}\n`;
      expect(got.stdout.toString() === want).toBe(true);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
    } finally {
      await agent.close();
      await s.close();
    }
  }, 60_000);
});

// Retention is the store's as much as the core's: the dropped output leaves the
// segment files, or PostgreSQL's output rows, in the batch after the marker.
describeStores("e2e: server retention", (st) => {
  it("R-O5 R-W2: server rolling retention drops whole segments, writes markers with the removed ranges, and deletes what it removed from the store", async () => {
    const s = await startServer({ ...(await st.fresh()), limits: { outputPerCommand: 1024 * 1024, segmentBytes: 256 * 1024 } });
    const agent = await startAgent(s.url, "chatty");
    try {
      await waitFor("connected", () => agent.connected);
      // ~6.9 MB of text, poorly compressible enough to fill segments.
      const r = await s.client.submitCommand({
        clientId: "chatty",
        program: { case: "shell", value: { shell: ShellType.SH, commandLine: "head -c 5000000 /dev/urandom | od -An -tx1 -w32 | head -c 7000000" } },
      });
      const uuid = r.command!.issueUuid;
      const got = await collect(s.client, uuid);
      expect(got.finished?.state).toBe(L.SUCCEEDED);
      const markers = got.items
        .filter((i) => i.kind === "retention")
        .map(
          (i) =>
            i.value as {
              removedEvents: { firstEventSeq: bigint; lastEventSeq: bigint };
              removedBytes: Array<{ offset: bigint; length: bigint }>;
              cause: TruncationCause;
            },
        );
      // A live reader that kept up read every byte before retention dropped it and needed no
      // marker (seen on both stores, about one run in three); one that fell behind got markers.
      // Either way markers and kept bytes account for every byte exactly once (collect() checked
      // contiguity); the read after the fact below always begins with the marker.
      expect(markers.every((m) => m.cause === TruncationCause.SERVER_RETENTION && m.removedEvents.lastEventSeq >= m.removedEvents.firstEventSeq)).toBe(true);
      const removed = markers.flatMap((m) => m.removedBytes).reduce((n, b) => n + Number(b.length), 0);
      expect(removed + got.stdout.length).toBe(7_000_000);
      // Read again after the fact: one marker for the removed prefix, then the kept tail.
      const later = await collect(s.client, uuid);
      expect(later.items[0]!.kind === "retention" || later.items[1]!.kind === "retention").toBe(true);
      const prefix = later.items
        .filter((i) => i.kind === "retention")
        .flatMap((i) => (i.value as { removedBytes: Array<{ offset: bigint; length: bigint }> }).removedBytes);
      expect(Number(prefix[0]!.offset)).toBe(0);
      const firstKept = later.items.find((i) => i.kind === "output")!.value as { offset: number };
      expect(firstKept.offset).toBe(Number(prefix.at(-1)!.offset) + Number(prefix.at(-1)!.length));
      expect(firstKept.offset + later.stdout.length).toBe(7_000_000);
      const c = got.finished!;
      expect(Number(c.retainedOutputBytes)).toBeLessThanOrEqual(1024 * 1024 + 256 * 1024);
      expect(c.retentionMarkers).toBe(1); // the core keeps one cumulative marker per command
      await s.daemon.storage.whenIdle();
      const onDisk = await storedOutputBytes(s);
      // The cap, the segment being written, and at most one file a drop only partly covered
      // (PostgreSQL deletes row by row: the retained frames only).
      expect(onDisk).toBeLessThanOrEqual(1024 * 1024 + 3 * 256 * 1024 + 65536);
      // The tail is intact and identical whichever way it is read.
      expect(later.stdout.equals(got.stdout.subarray(got.stdout.length - later.stdout.length))).toBe(true);
    } finally {
      await agent.close();
      await s.close();
    }
  }, 60_000);
});
