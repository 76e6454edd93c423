// FollowOutput's read path (issue 11 item 3): many events per response for a
// reader that asks for batches, the original one-event form for one that does
// not, the hand-laid batch encoding equal to protobuf-es's, and a reader that
// stops reading holding the server to one batch (HTTP backpressure).
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { promises as fsp, readFileSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { CommandLifecycle as L, OutputStream, TruncationCause } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { FollowOutputResponseSchema, type FollowOutputResponse } from "../../../protos/gen/rvbox/v1/control_pb.js";
import type { AgentDaemon } from "../../../shells/agent/agent-daemon.js";
import { FOLLOW_BATCH_BYTES, followGauge } from "../../../shells/server/control-service.js";
import { batchEnvelope } from "../../../shells/server/follow-wire.js";
import { followEvents } from "../../../client/model.js";
import { FrameDecoder } from "../../../shells/operator/follow-zstd.js";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ControlService } from "../../../protos/gen/rvbox/v1/control_pb.js";
import { cleanupTemp, OPERATOR_TOKEN, sleep, startAgent, startServer, tempDir, waitFor, type TestServer } from "../e2e/helpers.js";

describe("FollowOutput batches: encoding", () => {
  it("R-O4: a hand-laid batch is byte for byte protobuf-es's encoding of the same events, in a Connect envelope", () => {
    const uuid = "0b7f2c1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b";
    const data = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255);
    const items = [
      {
        issueUuid: uuid,
        eventSeq: 1n,
        commandRevision: 0n,
        time: timestampFromMs(0),
        item: { case: "output" as const, value: { stream: OutputStream.STDOUT, streamOffset: 0n, data: data(300, 1) } },
      },
      {
        issueUuid: uuid,
        eventSeq: 2n,
        commandRevision: 7n,
        time: timestampFromMs(1_796_127_390_816),
        item: { case: "output" as const, value: { stream: OutputStream.STDERR, streamOffset: 2n ** 40n, data: data(65536, 2) } },
      },
      {
        issueUuid: uuid,
        eventSeq: 3n,
        time: timestampFromMs(1_796_127_391_000),
        item: { case: "output" as const, value: { stream: OutputStream.STDOUT, streamOffset: 300n, data: new Uint8Array(0) } },
      },
      {
        issueUuid: uuid,
        eventSeq: 4n,
        time: timestampFromMs(5),
        item: {
          case: "retention" as const,
          value: {
            removedEvents: { firstEventSeq: 4n, lastEventSeq: 9n },
            removedBytes: [{ stream: OutputStream.STDOUT, offset: 300n, length: 99n }],
            cause: TruncationCause.SERVER_RETENTION,
          },
        },
      },
      {
        issueUuid: uuid,
        eventSeq: 10n,
        commandRevision: 3n,
        time: timestampFromMs(99_999),
        item: { case: "lifecycle" as const, value: { state: L.SUCCEEDED, exitCode: 0 } },
      },
    ];
    const env = batchEnvelope(uuid, items);
    expect(env[0]).toBe(0);
    expect(env.readUInt32BE(1)).toBe(env.length - 5);
    const ours = env.subarray(5);
    const theirs = toBinary(FollowOutputResponseSchema, create(FollowOutputResponseSchema, { issueUuid: uuid, eventSeq: 10n, events: items }));
    expect(Buffer.from(ours).equals(Buffer.from(theirs))).toBe(true);
    const back = fromBinary(FollowOutputResponseSchema, ours);
    expect(back.events.length).toBe(5);
    expect(back.item.case).toBeUndefined();
    const o = back.events[1]!;
    expect(o.item.case).toBe("output");
    expect(Buffer.from((o.item.value as { data: Uint8Array }).data).equals(Buffer.from(data(65536, 2)))).toBe(true);
    expect(followEvents(back).map((e) => Number(e.eventSeq))).toEqual([1, 2, 3, 4, 10]);
  });

  it("R-O4: output events carrying stored zstd frames (accept_zstd) are laid out byte for byte as protobuf-es encodes them", () => {
    const uuid = "0b7f2c1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b";
    const frame = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + n) & 255);
    const items = [
      {
        issueUuid: uuid,
        eventSeq: 1n,
        time: timestampFromMs(1_796_127_390_816),
        item: { case: "output" as const, value: { stream: OutputStream.STDOUT, streamOffset: 0n, zstd: frame(1200), originalSize: 65536 } },
      },
      {
        issueUuid: uuid,
        eventSeq: 2n,
        commandRevision: 2n,
        time: timestampFromMs(1_796_127_390_817),
        item: { case: "output" as const, value: { stream: OutputStream.STDERR, streamOffset: 2n ** 33n, zstd: frame(70_000), originalSize: 65536 } },
      },
      {
        issueUuid: uuid,
        eventSeq: 3n,
        time: timestampFromMs(1_796_127_390_818),
        item: { case: "output" as const, value: { stream: OutputStream.STDOUT, streamOffset: 65536n, data: new Uint8Array(0) } },
      },
    ];
    const env = batchEnvelope(uuid, items);
    const theirs = toBinary(FollowOutputResponseSchema, create(FollowOutputResponseSchema, { issueUuid: uuid, eventSeq: 3n, events: items }));
    expect(Buffer.from(env.subarray(5)).equals(Buffer.from(theirs))).toBe(true);
    const back = fromBinary(FollowOutputResponseSchema, env.subarray(5));
    const o = back.events[1]!.item.value as { zstd: Uint8Array; originalSize: number; data: Uint8Array };
    expect(o.originalSize).toBe(65536);
    expect(o.data.length).toBe(0);
    expect(Buffer.from(o.zstd).equals(Buffer.from(frame(70_000)))).toBe(true);
  });
});

describe("FollowOutput batches: in-process server and agent", () => {
  let s: TestServer;
  let a: AgentDaemon;
  let work: string;
  beforeAll(async () => {
    work = await tempDir("rvbox-work-");
    s = await startServer();
    a = await startAgent(s.url, "host-b", { maxRunning: 4 });
    await waitFor("agent connected", () => a.connected);
  });
  afterAll(async () => {
    await a?.close({ killProcesses: true });
    await s?.close();
    await cleanupTemp();
  });

  async function finished(uuid: string): Promise<void> {
    await waitFor(
      "command finished and stored",
      async () => {
        const c = (await s.client.getCommand({ issueUuid: uuid })).command!;
        return c.state === L.SUCCEEDED && c.storedThroughEventSeq > 0n;
      },
      120_000,
      50,
    );
  }

  it("R-O1 R-O4: a reader that asks for batches gets many events per response, in order and byte-exact; one that does not gets one per response", async () => {
    const file = path.join(work, "log.txt");
    // 4 MiB of text: 64 or more output events of at most 64 KiB.
    execFileSync("sh", [
      "-c",
      `i=0; while [ $i -lt 120000 ]; do echo "line $i of a log that is long enough to count"; i=$((i+1)); done | head -c 4194304 > ${file}`,
    ]);
    const want = createHash("sha256")
      .update(await fsp.readFile(file))
      .digest("hex");
    const r = await s.client.submitCommand({ clientId: "host-b", program: { case: "argv", value: { argv: ["cat", file] } } });
    const uuid = r.command!.issueUuid;
    await finished(uuid);
    // JSON is served by connect-node's handler, the binary form by follow-http.ts: both batch.
    const json = createClient(
      ControlService,
      createConnectTransport({
        baseUrl: s.controlUrl,
        httpVersion: "1.1",
        useBinaryFormat: false,
        interceptors: [(next) => (req) => (req.header.set("Authorization", `Bearer ${OPERATOR_TOKEN}`), next(req))],
      }),
    );
    const read = async (maxBatchBytes: number, client = s.client) => {
      const h = createHash("sha256");
      let responses = 0;
      let events = 0;
      let outputs = 0;
      let seq = 0;
      let maxBytes = 0;
      for await (const m of client.followOutput({ issueUuid: uuid, follow: false, maxBatchBytes })) {
        responses++;
        let bytes = 0;
        for (const e of followEvents(m)) {
          events++;
          expect(Number(e.eventSeq)).toBeGreaterThanOrEqual(seq);
          seq = Number(e.eventSeq);
          if (e.item.case === "output") {
            outputs++;
            h.update(e.item.value.data);
            bytes += e.item.value.data.length;
          }
        }
        maxBytes = Math.max(maxBytes, bytes);
      }
      return { responses, events, outputs, maxBytes, sha: h.digest("hex") };
    };
    const single = await read(0);
    const batched = await read(1024 * 1024);
    expect(single.sha).toBe(want);
    expect(batched.sha).toBe(want);
    expect(single.outputs).toBeGreaterThanOrEqual(64);
    // The original form: exactly one event per response.
    expect(single.responses).toBe(single.events);
    // Batches: the same events, at least 8 per response on average, none above the cap.
    expect(batched.events).toBe(single.events);
    expect(batched.responses * 8).toBeLessThanOrEqual(batched.events);
    expect(batched.maxBytes).toBeLessThanOrEqual(FOLLOW_BATCH_BYTES);
    const viaJson = await read(1024 * 1024, json);
    expect(viaJson.sha).toBe(want);
    expect(viaJson.responses).toBe(batched.responses);
    expect(viaJson.events).toBe(batched.events);
    const singleJson = await read(0, json);
    expect(singleJson.responses).toBe(single.responses);
    // A small max_batch_bytes is honoured (one 64 KiB event is always allowed).
    const small = await read(64 * 1024);
    expect(small.sha).toBe(want);
    expect(small.maxBytes).toBeLessThanOrEqual(64 * 1024);

    // accept_zstd: the stored frames as they are (no data), each with its declared size; decoded
    // by the CLI's decoder they are the file. Both transports; an old reader above got data only.
    const zread = async (client = s.client) => {
      const h = createHash("sha256");
      let responses = 0;
      let events = 0;
      let frames = 0;
      let wire = 0;
      const dec = new FrameDecoder(false, 0);
      for await (const m of client.followOutput({ issueUuid: uuid, follow: false, maxBatchBytes: 1024 * 1024, acceptZstd: true })) {
        responses++;
        const evs = followEvents(m);
        for (const e of evs) {
          events++;
          if (e.item.case === "output" && e.item.value.originalSize > 0) {
            frames++;
            wire += e.item.value.zstd.length;
            expect(e.item.value.data.length).toBe(0);
            expect(e.item.value.zstd.length).toBeGreaterThan(0);
          }
        }
        dec.decode(evs);
        for (const e of evs) if (e.item.case === "output") h.update(e.item.value.data);
      }
      return { responses, events, frames, wire, sha: h.digest("hex") };
    };
    for (const z of [await zread(), await zread(json)]) {
      expect(z.sha).toBe(want);
      expect(z.events).toBe(batched.events);
      expect(z.frames).toBe(batched.outputs);
      expect(z.responses).toBe(batched.responses);
      // Log text: the frames are a fraction of the output.
      expect(z.wire * 2).toBeLessThan(4 * 1024 * 1024);
    }
    // accept_zstd without max_batch_bytes (one event per response) is the original form: data only.
    for await (const m of s.client.followOutput({ issueUuid: uuid, follow: false, acceptZstd: true }))
      if (m.item.case === "output") expect(m.item.value.zstd.length).toBe(0);
  }, 180_000);

  it("R-W3: a reader that stops reading holds the server to one batch: what it reads is bounded by the socket's buffers, not the output", async () => {
    // What the kernel may buffer on a loopback connection: the largest receive and send
    // buffers TCP autotuning may grow to (here 32 MiB and 4 MiB), plus a few batches in
    // the two processes' own streams. The output is larger by 32 MiB, in zeros: cheap to
    // produce and store, all of it to decompress and send.
    const tcpMax = (f: string) => Number(readFileSync(`/proc/sys/net/ipv4/${f}`, "utf8").trim().split(/\s+/)[2] ?? 0);
    const bound = tcpMax("tcp_rmem") + tcpMax("tcp_wmem") + 4 * FOLLOW_BATCH_BYTES;
    const size = Math.max(64 * 1024 * 1024, Math.ceil((bound + 32 * 1024 * 1024) / (1024 * 1024)) * 1024 * 1024);
    const r = await s.client.submitCommand({ clientId: "host-b", program: { case: "shell", value: { commandLine: `head -c ${size} /dev/zero` } } });
    const uuid = r.command!.issueUuid;
    await finished(uuid);
    followGauge.peak = followGauge.held;
    const taken0 = followGauge.taken;
    const it = s.client.followOutput({ issueUuid: uuid, follow: false, maxBatchBytes: 1024 * 1024 })[Symbol.asyncIterator]();
    let got = 0;
    const take = (m: FollowOutputResponse) => {
      for (const e of followEvents(m)) if (e.item.case === "output") got += e.item.value.data.length;
    };
    const first = await it.next();
    take(first.value as FollowOutputResponse);
    // Stop reading: the server goes on only while the socket buffers take more.
    await sleep(1500);
    const stalled = followGauge.taken - taken0;
    await sleep(1000);
    const later = followGauge.taken - taken0;
    // The server ran ahead only by what the socket buffers took, and then stopped.
    expect(later).toBeLessThanOrEqual(bound);
    expect(later - stalled).toBeLessThanOrEqual(FOLLOW_BATCH_BYTES);
    expect(followGauge.peak).toBeLessThanOrEqual(FOLLOW_BATCH_BYTES);
    // Then read the rest: all of it arrives.
    for (let n = await it.next(); !n.done; n = await it.next()) take(n.value);
    expect(got).toBe(size);
    expect(followGauge.peak).toBeLessThanOrEqual(FOLLOW_BATCH_BYTES);
    expect(followGauge.held).toBe(0);
  }, 180_000);

  it("R-W3: with stored zstd frames (accept_zstd) too, a reader that stops reading holds the server to one batch", async () => {
    // Random bytes: the frames are as large as the output, so the socket buffers fill as with data.
    const tcpMax = (f: string) => Number(readFileSync(`/proc/sys/net/ipv4/${f}`, "utf8").trim().split(/\s+/)[2] ?? 0);
    const bound = tcpMax("tcp_rmem") + tcpMax("tcp_wmem") + 4 * FOLLOW_BATCH_BYTES;
    const size = Math.max(48 * 1024 * 1024, Math.ceil((bound + 16 * 1024 * 1024) / (1024 * 1024)) * 1024 * 1024);
    const r = await s.client.submitCommand({ clientId: "host-b", program: { case: "shell", value: { commandLine: `head -c ${size} /dev/urandom` } } });
    const uuid = r.command!.issueUuid;
    await finished(uuid);
    followGauge.peak = followGauge.held;
    const taken0 = followGauge.taken;
    const it = s.client.followOutput({ issueUuid: uuid, follow: false, maxBatchBytes: 1024 * 1024, acceptZstd: true })[Symbol.asyncIterator]();
    let got = 0;
    let declared = 0;
    const dec = new FrameDecoder(true, 1024 * 1024 + 1);
    const take = (m: FollowOutputResponse) => {
      const evs = followEvents(m);
      for (const e of evs) if (e.item.case === "output") declared += e.item.value.originalSize;
      const release = dec.decode(evs);
      for (const e of evs) if (e.item.case === "output") got += e.item.value.data.length;
      release();
    };
    take((await it.next()).value as FollowOutputResponse);
    await sleep(1500);
    const stalled = followGauge.taken - taken0;
    await sleep(1000);
    const later = followGauge.taken - taken0;
    // One batch of stored frames: its decoded budget plus zstd's framing of incompressible
    // blocks (ZSTD_compressBound: under 0.5 %).
    const batchMax = Math.ceil(FOLLOW_BATCH_BYTES * 1.005);
    expect(later).toBeLessThanOrEqual(bound);
    expect(later - stalled).toBeLessThanOrEqual(batchMax);
    expect(followGauge.peak).toBeLessThanOrEqual(batchMax);
    for (let n = await it.next(); !n.done; n = await it.next()) take(n.value);
    expect(declared).toBe(size);
    expect(got).toBe(size);
    expect(followGauge.peak).toBeLessThanOrEqual(batchMax);
    expect(followGauge.held).toBe(0);
  }, 180_000);
});
