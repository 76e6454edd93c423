// The CLI's side of FollowOutput's accept_zstd (issue 11 item 3): stored zstd
// frames from the server decoded in the CLI, byte-exact and in order around
// markers, a frame that does not match its declared size refused with a clear
// error (R-T3), and the decompressed form still taken (a server that
// predates the field).
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import zlib from "node:zlib";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { CommandLifecycle, OutputStream, TruncationCause } from "../../protos/gen/rvbox/v1/common_pb.js";
import { FollowOutputResponseSchema, type FollowOutputResponse } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { ControlClient } from "../../client/control-client.js";
import { OperatorError } from "../../client/control-client.js";
import { followOutput, zstdFramesWanted } from "../../shells/operator/follow.js";
import { FrameDecoder } from "../../shells/operator/follow-zstd.js";
import { collector } from "./helpers.js";

const U = "11111111-2222-3333-4444-555555555555";
const CHUNK = 64 * 1024;
const native = typeof (zlib as { zstdCompressSync?: unknown }).zstdCompressSync === "function";

/** Log-like text, `n` bytes. */
function text(n: number): Buffer {
  const line = (i: number) => `2026-12-01T21:00:${String(i % 60).padStart(2, "0")}Z INFO worker-${i % 16} req=${(i * 2654435761) >>> 0} status=200\n`;
  const parts: string[] = [];
  let len = 0;
  for (let i = 0; len < n; i++) {
    const l = line(i);
    parts.push(l);
    len += l.length;
  }
  return Buffer.from(parts.join("")).subarray(0, n);
}

function frame(raw: Uint8Array): Buffer {
  return zlib.zstdCompressSync(raw, {
    pledgedSrcSize: raw.length,
    params: { [zlib.constants.ZSTD_c_compressionLevel]: 1, [zlib.constants.ZSTD_c_contentSizeFlag]: 1 },
  });
}

function zout(seq: number, offset: number, raw: Uint8Array, z = frame(raw), originalSize = raw.length): FollowOutputResponse {
  return create(FollowOutputResponseSchema, {
    issueUuid: U,
    eventSeq: BigInt(seq),
    item: { case: "output", value: { stream: OutputStream.STDOUT, streamOffset: BigInt(offset), zstd: z, originalSize } },
  });
}

function rawOut(seq: number, offset: number, raw: Uint8Array): FollowOutputResponse {
  return create(FollowOutputResponseSchema, {
    issueUuid: U,
    eventSeq: BigInt(seq),
    item: { case: "output", value: { stream: OutputStream.STDOUT, streamOffset: BigInt(offset), data: raw } },
  });
}

const batch = (events: FollowOutputResponse[]): FollowOutputResponse =>
  create(FollowOutputResponseSchema, { issueUuid: U, eventSeq: events[events.length - 1]!.eventSeq, events });
const finished = (): FollowOutputResponse =>
  create(FollowOutputResponseSchema, { issueUuid: U, item: { case: "finished", value: { issueUuid: U, state: CommandLifecycle.SUCCEEDED, exitCode: 0 } } });

function fakeClient(serve: (req: { acceptZstd: boolean; maxBatchBytes: number }) => AsyncGenerator<FollowOutputResponse>): {
  client: ControlClient;
  requests: Array<{ acceptZstd: boolean; maxBatchBytes: number }>;
} {
  const requests: Array<{ acceptZstd: boolean; maxBatchBytes: number }> = [];
  const client = {
    followOutput: (req: { acceptZstd?: boolean; maxBatchBytes?: number }) => {
      const r = { acceptZstd: req.acceptZstd === true, maxBatchBytes: req.maxBatchBytes ?? 0 };
      requests.push(r);
      return serve(r);
    },
  } as unknown as ControlClient;
  return { client, requests };
}

/**
 * A 4 MiB command as a server would send it: 64 KiB chunks in batches of 15,
 * with server retention having removed events 21..30 (their bytes) between
 * two stretches; `form` picks stored frames or decompressed data.
 */
function scripted(body: Buffer, form: (seq: number, offset: number, raw: Buffer) => FollowOutputResponse) {
  const events: FollowOutputResponse[] = [];
  let removed = { offset: 0, length: 0 };
  for (let seq = 1, off = 0; off < body.length; seq++, off += CHUNK) {
    const raw = body.subarray(off, off + CHUNK);
    if (seq === 21) removed = { offset: off, length: 0 };
    if (seq >= 21 && seq <= 30) {
      removed.length += raw.length;
      if (seq === 30)
        events.push(
          create(FollowOutputResponseSchema, {
            issueUuid: U,
            eventSeq: 21n,
            item: {
              case: "retention",
              value: {
                cause: TruncationCause.SERVER_RETENTION,
                removedEvents: { firstEventSeq: 21n, lastEventSeq: 30n },
                removedBytes: [{ stream: OutputStream.STDOUT, offset: BigInt(removed.offset), length: BigInt(removed.length) }],
              },
            },
          }),
        );
      continue;
    }
    events.push(form(seq, off, raw));
  }
  const kept = Buffer.concat([body.subarray(0, removed.offset), body.subarray(removed.offset + removed.length)]);
  return { events, kept, removed };
}

async function* inBatches(events: FollowOutputResponse[], per = 15): AsyncGenerator<FollowOutputResponse> {
  for (let i = 0; i < events.length; i += per) yield batch(events.slice(i, i + per));
  yield finished();
}

describe.skipIf(!native)("logs / run --follow with stored zstd frames", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it("R-O5 R-T3: a 4 MiB command sent as stored frames is written byte-exact, in order, with the retention marker in its place", async () => {
    expect(zstdFramesWanted({})).toBe(true);
    expect(zstdFramesWanted({ RVBOX_FOLLOW_ZSTD: "0" })).toBe(false);
    expect(zstdFramesWanted({ RVBOX_ZSTD: "portable" })).toBe(false);
    const body = text(4 * 1024 * 1024);
    const { events, kept, removed } = scripted(body, (seq, off, raw) => zout(seq, off, raw));
    const { client, requests } = fakeClient(() => inBatches(events));
    const o = collector();
    const e = collector();
    const r = await followOutput(client, { stdout: o.stream, stderr: e.stream }, { uuid: U, follow: false });
    expect(requests[0]!.acceptZstd).toBe(true);
    expect(requests[0]!.maxBatchBytes).toBeGreaterThan(0);
    expect(o.bytes().equals(kept)).toBe(true);
    expect(e.bytes().toString()).toBe(
      `rvbox: [… 640 KiB of stdout removed by server retention: events 21–30; stdout bytes ${removed.offset}–${removed.offset + removed.length - 1} …]\n`,
    );
    expect(r.markers).toBe(1);
    expect(r.bytes.stdout).toBe(kept.length);
    expect(r.finished?.state).toBe(CommandLifecycle.SUCCEEDED);
  });

  it("R-O5 R-T3: the same through file descriptors (decode buffers reused once a batch is written) is byte-exact too", async () => {
    const body = text(4 * 1024 * 1024 + 12345);
    const { events, kept } = scripted(body, (seq, off, raw) => zout(seq, off, raw));
    const dir = mkdtempSync(path.join(os.tmpdir(), "rvbox-zstd-"));
    dirs.push(dir);
    const files = { out: path.join(dir, "out"), err: path.join(dir, "err") };
    const fds = { out: openSync(files.out, "w"), err: openSync(files.err, "w") };
    const stdout = fs.createWriteStream("", { fd: fds.out, autoClose: false });
    const stderr = fs.createWriteStream("", { fd: fds.err, autoClose: false });
    try {
      const { client } = fakeClient(() => inBatches(events));
      await followOutput(client, { stdout, stderr }, { uuid: U, follow: false, reuseBuffers: true });
      await new Promise<void>((r) => stdout.end(r));
      await new Promise<void>((r) => stderr.end(r));
    } finally {
      closeSync(fds.out);
      closeSync(fds.err);
    }
    expect(readFileSync(files.out).equals(kept)).toBe(true);
    expect(readFileSync(files.err, "utf8")).toMatch(/^rvbox: \[… 640 KiB of stdout removed by server retention: events 21–30; /);
  });

  it("R-O4: a server that predates accept_zstd (decompressed data), and stored frames mixed with empty data events, read the same", async () => {
    const body = text(2 * 1024 * 1024);
    const old = scripted(body, (seq, off, raw) => rawOut(seq, off, raw));
    const o1 = collector();
    await followOutput(fakeClient(() => inBatches(old.events)).client, { stdout: o1.stream, stderr: collector().stream }, { uuid: U, follow: false });
    expect(o1.bytes().equals(old.kept)).toBe(true);
    const mixed = scripted(body, (seq, off, raw) => (seq % 3 === 0 ? rawOut(seq, off, raw) : zout(seq, off, raw)));
    const o2 = collector();
    await followOutput(fakeClient(() => inBatches(mixed.events, 7)).client, { stdout: o2.stream, stderr: collector().stream }, { uuid: U, follow: false });
    expect(o2.bytes().equals(mixed.kept)).toBe(true);
  });

  it("acceptZstd: false asks for the decompressed form only", async () => {
    const { client, requests } = fakeClient(async function* () {
      yield rawOut(1, 0, Buffer.from("plain\n"));
      yield finished();
    });
    const o = collector();
    await followOutput(client, { stdout: o.stream, stderr: collector().stream }, { uuid: U, follow: false, acceptZstd: false });
    expect(requests[0]!.acceptZstd).toBe(false);
    expect(o.bytes().toString()).toBe("plain\n");
  });

  it("R-T3: a frame that decodes to more or fewer bytes than declared, a corrupt frame and an oversized declaration are refused with a clear error; earlier batches were written", async () => {
    const a = text(CHUNK);
    const b = Buffer.from(text(2 * CHUNK).subarray(CHUNK, CHUNK + 60_000));
    const corrupt = Buffer.from(frame(b));
    corrupt[corrupt.length - 5]! ^= 0xff;
    const cases: Array<{ name: string; bad: FollowOutputResponse; message: RegExp }> = [
      {
        name: "declared one byte more",
        bad: zout(2, CHUNK, b, frame(b), b.length + 1),
        message: /output event 2 .*declares 60000 content bytes but 60001 were declared/,
      },
      {
        name: "declared one byte less",
        bad: zout(2, CHUNK, b, frame(b), b.length - 1),
        message: /output event 2 .*declares 60000 content bytes but 59999 were declared/,
      },
      { name: "corrupt block", bad: zout(2, CHUNK, b, corrupt), message: /output event 2 as a zstd frame that does not decode/ },
      { name: "oversized", bad: zout(2, CHUNK, b, frame(b), 2 ** 31), message: /output event 2 .*exceeds the limit of 65536 bytes/ },
      { name: "not zstd", bad: zout(2, CHUNK, b, Buffer.from("definitely not a zstd frame")), message: /output event 2 .*invalid zstd frame/ },
    ];
    for (const c of cases) {
      const { client } = fakeClient(async function* () {
        yield batch([zout(1, 0, a)]);
        yield batch([c.bad, zout(3, CHUNK + b.length, a)]);
        yield finished();
      });
      const o = collector();
      const err = await followOutput(client, { stdout: o.stream, stderr: collector().stream }, { uuid: U, follow: false }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, c.name).toBeInstanceOf(OperatorError);
      expect((err as OperatorError).message, c.name).toMatch(c.message);
      expect((err as OperatorError).message, c.name).toContain("output before event 2 was written");
      // The batch before the bad one was written, nothing of the bad one's batch.
      expect(o.bytes().equals(a), c.name).toBe(true);
    }
  });

  it("R-T3: the decoder allocates nothing beyond the declared sizes, and reuses its pooled buffers", () => {
    const raw = text(3 * CHUNK);
    const events = [0, 1, 2].map((i) => zout(i + 1, i * CHUNK, raw.subarray(i * CHUNK, (i + 1) * CHUNK)));
    const d = new FrameDecoder(true, 1024 * 1024 + 1);
    const release = d.decode(events);
    const views = events.map((m) => (m.item.value as { data: Uint8Array }).data);
    expect(Buffer.concat(views).equals(raw)).toBe(true);
    expect(new Set(views.map((v) => v.buffer)).size).toBe(1);
    const first = views[0]!.buffer;
    release();
    const again = [0, 1].map((i) => zout(i + 1, i * CHUNK, raw.subarray(i * CHUNK, (i + 1) * CHUNK)));
    d.decode(again);
    expect((again[0]!.item.value as { data: Uint8Array }).data.buffer).toBe(first);
    // Not pooled: a buffer of exactly the declared total + 1 per batch.
    const u = new FrameDecoder(false, 1024 * 1024 + 1);
    const one = [zout(1, 0, raw.subarray(0, 1000))];
    u.decode(one);
    expect((one[0]!.item.value as { data: Uint8Array }).data.buffer.byteLength).toBe(1001);
  });
});
