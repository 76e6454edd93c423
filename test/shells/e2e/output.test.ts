import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { promises as fsp } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { CommandLifecycle as L, ShellType, SignalKind } from "../../../protos/gen/rvbox/v1/common_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { cleanupTemp, collect, describeStores, startAgent, startServer, tempDir, waitFor, type TestServer } from "./helpers.js";

afterAll(cleanupTemp);

// Output rows, stdin writes, script uploads and signal revisions are all stored server state: on each store.
describeStores("e2e: output, stdin, signals, scripts (in-process server and agent, real processes)", (st) => {
  let s: TestServer;
  let a: AgentDaemon;
  let work: string;
  beforeAll(async () => {
    work = await tempDir("rvbox-work-");
    s = await startServer(await st.fresh());
    a = await startAgent(s.url, "host-a", { maxRunning: 8, killGraceMs: 1000 });
    await waitFor("agent connected", () => a.connected);
  });
  afterAll(async () => {
    await a?.close({ killProcesses: true });
    await s?.close();
  });

  it("R-O1 R-O2 R-O3 R-O4 R-O6 R-W3 R-T3: 64 MiB of random output arrives byte-exact (SHA-256)", async () => {
    const file = path.join(work, "random.bin");
    execFileSync("sh", ["-c", `head -c 67108864 /dev/urandom > ${file}`]);
    const want = createHash("sha256")
      .update(await fsp.readFile(file))
      .digest("hex");
    const t0 = Date.now();
    const r = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["cat", file] } } });
    const uuid = r.command!.issueUuid;
    const hash = createHash("sha256");
    let bytes = 0;
    let next = 0;
    let finished: L | undefined;
    let outputs = 0;
    for await (const m of s.client.followOutput({ issueUuid: uuid, follow: true })) {
      if (m.item.case === "output") {
        expect(Number(m.item.value.streamOffset)).toBe(next);
        expect(m.item.value.data.length).toBeLessThanOrEqual(65536);
        next += m.item.value.data.length;
        hash.update(m.item.value.data);
        bytes += m.item.value.data.length;
        outputs++;
      } else if (m.item.case === "truncation" || m.item.case === "retention" || m.item.case === "incomplete") {
        throw new Error(`unexpected ${m.item.case} marker`);
      } else if (m.item.case === "finished") finished = m.item.value.state;
    }
    const secs = (Date.now() - t0) / 1000;
    console.log(`64 MiB through the daemons in ${secs.toFixed(1)} s (${(64 / secs).toFixed(1)} MiB/s), ${outputs} output events`);
    expect(bytes).toBe(67108864);
    expect(hash.digest("hex")).toBe(want);
    expect(finished).toBe(L.SUCCEEDED);
  }, 180_000);

  it("R-S1 R-S2 R-S3: binary stdin through cat is byte-exact, ordered, acknowledged; close is idempotent", async () => {
    const r = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["cat"] } }, stdinOpen: true });
    const uuid = r.command!.issueUuid;
    const follower = collect(s.client, uuid);
    const all = new Uint8Array(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    const chunks = [all.subarray(0, 10), all.subarray(10, 200), all.subarray(200), new Uint8Array([0, 0, 255, 10, 13, 0])];
    const seqs: bigint[] = [];
    for (const c of chunks) seqs.push((await s.client.writeStdin({ issueUuid: uuid, data: c, appendNewline: false })).writeSeq);
    // append_newline is explicit on the wire (R-S2): this one gets "\n".
    seqs.push((await s.client.writeStdin({ issueUuid: uuid, data: Buffer.from("tail"), appendNewline: true })).writeSeq);
    const close1 = await s.client.closeStdin({ issueUuid: uuid, requestId: "close-once" });
    const close2 = await s.client.closeStdin({ issueUuid: uuid, requestId: "close-once" });
    expect(close2.writeSeq).toBe(close1.writeSeq);
    expect(seqs).toEqual([1n, 2n, 3n, 4n, 5n]);
    const got = await follower;
    const want = Buffer.concat([Buffer.from(all), Buffer.from([0, 0, 255, 10, 13, 0]), Buffer.from("tail\n")]);
    expect(got.stdout.equals(want)).toBe(true);
    const acks = got.items.filter((i) => i.kind === "stdinAck").map((i) => i.value as { writeSeq: bigint; closed: boolean; failure: string });
    expect(acks.map((a) => Number(a.writeSeq))).toEqual([1, 2, 3, 4, 5, 6]);
    expect(acks.every((a) => a.failure === "")).toBe(true);
    expect(acks[5]!.closed).toBe(true);
    expect(got.finished?.state).toBe(L.SUCCEEDED);
    // After the command ended, more stdin is refused with a validation error.
    await expect(s.client.writeStdin({ issueUuid: uuid, data: Buffer.from("x") })).rejects.toMatchObject({ code: ConnectCode.InvalidArgument });
  });

  async function running(uuid: string): Promise<void> {
    await waitFor("running", async () => (await s.client.getCommand({ issueUuid: uuid })).command!.state === L.RUNNING);
  }

  it("R-S4 R-S5: SIGTERM to sleep 30 ends it cancelled; the result echoes the request's revision; repeated request_id maps to the same revision", async () => {
    const r = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["sleep", "30"] } } });
    const uuid = r.command!.issueUuid;
    await running(uuid);
    const t0 = Date.now();
    const sig = await s.client.signalCommand({ issueUuid: uuid, signal: SignalKind.TERMINATE, requestId: "term-1" });
    const again = await s.client.signalCommand({ issueUuid: uuid, signal: SignalKind.TERMINATE, requestId: "term-1" });
    expect(again.revision).toBe(sig.revision);
    expect(sig.revision).toBe(2n);
    const got = await collect(s.client, uuid);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(got.finished?.state).toBe(L.CANCELLED);
    expect(got.finished?.signalName).toBe("SIGTERM");
    const res = got.items.find((i) => i.kind === "signalResult");
    expect(res).toBeDefined();
    expect((res!.value as { delivered: boolean }).delivered).toBe(true);
    expect(got.items.find((i) => i.kind === "signalResult")!.seq).toBeGreaterThan(0);
    const end = got.items.filter((i) => i.kind === "lifecycle").at(-1)!;
    expect((end.value as { state: L }).state).toBe(L.CANCELLED);
  });

  it("R-S4: CANCEL of a sleep that ignores SIGTERM escalates to SIGKILL after the grace; cancel of a queued command never launches it", async () => {
    const r = await s.client.submitCommand({
      clientId: "host-a",
      program: { case: "shell", value: { shell: ShellType.SH, commandLine: "trap '' TERM; sleep 30" } },
    });
    const uuid = r.command!.issueUuid;
    await running(uuid);
    const t0 = Date.now();
    await s.client.signalCommand({ issueUuid: uuid, signal: SignalKind.CANCEL });
    const got = await collect(s.client, uuid);
    expect(got.finished?.state).toBe(L.CANCELLED);
    expect(got.finished?.signalName).toBe("SIGKILL");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
    // A command for a client that is not connected stays queued; cancel ends it at the server.
    const q = await s.client.submitCommand({ clientId: "nobody-here", allowUnknownClient: true, program: { case: "argv", value: { argv: ["true"] } } });
    await s.client.signalCommand({ issueUuid: q.command!.issueUuid, signal: SignalKind.CANCEL });
    const g = await s.client.getCommand({ issueUuid: q.command!.issueUuid });
    expect(g.command!.state).toBe(L.CANCELLED);
    expect(g.command!.dispatchAttempts).toBe(0);
  });

  it("R-C1 R-C2 R-C3: an uploaded script (several chunks) is checked and run; a wrong declared checksum is refused before any command exists", async () => {
    const lines = Array.from({ length: 3000 }, (_, i) => `echo "script line ${i} ${"x".repeat(60)}"`).join("\n");
    const body = Buffer.from(`#!/bin/sh\n${lines}\nexit 0\n`);
    expect(body.length).toBeGreaterThan(3 * 65536);
    const r = await s.client.submitCommand({ clientId: "host-a", program: { case: "script", value: { content: body, interpreter: "/bin/sh" } } });
    const got = await collect(s.client, r.command!.issueUuid);
    expect(got.finished?.state).toBe(L.SUCCEEDED);
    expect(got.stdout.toString().split("\n")[2999]).toMatch(/^script line 2999 /);
    const uploads = got.items.filter((i) => i.kind === "scriptUpload").map((i) => i.value as { receivedBytes: bigint; complete: boolean });
    expect(uploads.at(-1)).toMatchObject({ receivedBytes: BigInt(body.length), complete: true });
    // Cumulative, increasing progress.
    for (let i = 1; i < uploads.length; i++) expect(uploads[i]!.receivedBytes >= uploads[i - 1]!.receivedBytes).toBe(true);

    const bad = createHash("sha256").update("something else").digest();
    const err = await s.client
      .submitCommand({
        clientId: "host-a",
        issueUuid: "bad-checksum-1",
        program: { case: "script", value: { content: body, interpreter: "/bin/sh", sha256: bad } },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(ConnectCode.InvalidArgument);
    await expect(s.client.getCommand({ issueUuid: "bad-checksum-1" })).rejects.toMatchObject({ code: ConnectCode.NotFound });
  });

  it("R-D4: a command that cannot launch (missing binary, missing cwd) ends rejected, never failed; a timeout ends failed", async () => {
    const r1 = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["/nonexistent/program"] } } });
    const g1 = await collect(s.client, r1.command!.issueUuid);
    expect(g1.finished?.state).toBe(L.REJECTED);
    const r2 = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["true"] } }, cwd: "/nonexistent/dir" });
    expect((await collect(s.client, r2.command!.issueUuid)).finished?.state).toBe(L.REJECTED);
    const r3 = await s.client.submitCommand({ clientId: "host-a", program: { case: "argv", value: { argv: ["sleep", "30"] } }, timeoutMs: 300n });
    const g3 = await collect(s.client, r3.command!.issueUuid);
    expect(g3.finished?.state).toBe(L.FAILED);
    expect(g3.finished?.reason).toMatch(/timed out/);
    const r4 = await s.client.submitCommand({
      clientId: "host-a",
      program: { case: "shell", value: { shell: ShellType.SH, commandLine: "echo out; echo err >&2; exit 7" } },
      environment: [{ name: "X", value: "1" }],
    });
    const g4 = await collect(s.client, r4.command!.issueUuid);
    expect(g4.finished).toMatchObject({ state: L.FAILED, exitCode: 7 });
    expect(g4.stdout.toString()).toBe("out\n");
    expect(g4.stderr.toString()).toBe("err\n");
  });
});
