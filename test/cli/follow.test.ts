import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { CommandLifecycle, OutputStream, TruncationCause } from "../../protos/gen/rvbox/v1/common_pb.js";
import { FollowOutputResponseSchema, type FollowOutputResponse } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { ControlClient } from "../../client/control-client.js";
import { runOperatorCli } from "../../shells/operator/cli.js";
import { followOutput } from "../../shells/operator/follow.js";
import { collector } from "./helpers.js";

const U = "11111111-2222-3333-4444-555555555555";
const out = (seq: number, stream: OutputStream, offset: number, text: string): FollowOutputResponse =>
  create(FollowOutputResponseSchema, {
    issueUuid: U,
    eventSeq: BigInt(seq),
    item: { case: "output", value: { stream, streamOffset: BigInt(offset), data: Buffer.from(text) } },
  });
const finished = (): FollowOutputResponse =>
  create(FollowOutputResponseSchema, { issueUuid: U, item: { case: "finished", value: { issueUuid: U, state: CommandLifecycle.SUCCEEDED, exitCode: 0 } } });

/** A ControlClient whose followOutput serves `script(from)`; records each request's from_event_seq. */
function fakeClient(script: (from: number, call: number) => AsyncGenerator<FollowOutputResponse>): { client: ControlClient; froms: number[] } {
  const froms: number[] = [];
  const client = {
    followOutput: (req: { fromEventSeq: bigint }) => {
      froms.push(Number(req.fromEventSeq));
      return script(Number(req.fromEventSeq), froms.length);
    },
  } as unknown as ControlClient;
  return { client, froms };
}

describe("logs / run --follow output streaming", () => {
  it("R-O7: an agent truncation marker is printed on stderr in place; stdout keeps only real bytes", async () => {
    const { client } = fakeClient(async function* () {
      yield out(1, OutputStream.STDOUT, 0, "before\n");
      yield create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: 2n,
        item: {
          case: "truncation",
          value: { cause: TruncationCause.AGENT_WATERMARK, removedBytes: [{ stream: OutputStream.STDOUT, offset: 7n, length: 40_000_000n }] },
        },
      });
      yield out(3, OutputStream.STDOUT, 40_000_007, "after\n");
      yield finished();
    });
    const o = collector();
    const e = collector();
    const r = await followOutput(client, { stdout: o.stream, stderr: e.stream }, { uuid: U, follow: true });
    expect(o.bytes().toString()).toBe("before\nafter\n");
    expect(e.bytes().toString()).toBe(
      "rvbox: [… 38.1 MiB of stdout dropped by the agent (raw-output high watermark): at event 2, never sequenced; stdout bytes 7–40000006 …]\n",
    );
    expect(r.markers).toBe(1);
    expect(r.finished?.state).toBe(CommandLifecycle.SUCCEEDED);
  });

  it("R-O8: an incomplete marker is printed on stderr", async () => {
    const { client } = fakeClient(async function* () {
      yield create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: 4n,
        item: { case: "incomplete", value: { streams: [OutputStream.STDERR], reason: "pipe held by a descendant" } },
      });
      yield finished();
    });
    const e = collector();
    await followOutput(client, { stdout: collector().stream, stderr: e.stream }, { uuid: U, follow: true });
    expect(e.bytes().toString()).toBe(
      "rvbox: [! output incomplete at event 4: stderr not drained to EOF (pipe held by a descendant); nothing after this was captured !]\n",
    );
  });

  it("R-O5: a retention marker is printed with its event and byte ranges", async () => {
    const { client } = fakeClient(async function* () {
      yield create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: 1n,
        item: {
          case: "retention",
          value: {
            cause: TruncationCause.SERVER_RETENTION,
            removedEvents: { firstEventSeq: 1n, lastEventSeq: 12n },
            removedBytes: [{ stream: OutputStream.STDOUT, offset: 0n, length: 786432n }],
          },
        },
      });
      yield out(13, OutputStream.STDOUT, 786432, "tail\n");
      yield finished();
    });
    const e = collector();
    await followOutput(client, { stdout: collector().stream, stderr: e.stream }, { uuid: U, follow: false });
    expect(e.bytes().toString()).toBe("rvbox: [… 768 KiB of stdout removed by server retention: events 1–12; stdout bytes 0–786431 …]\n");
  });

  it("--stream stderr prints only stderr bytes and markers that concern stderr", async () => {
    const { client } = fakeClient(async function* () {
      yield out(1, OutputStream.STDOUT, 0, "o1\n");
      yield out(2, OutputStream.STDERR, 0, "e1\n");
      yield create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: 3n,
        item: { case: "truncation", value: { cause: TruncationCause.AGENT_BUDGET, removedBytes: [{ stream: OutputStream.STDOUT, offset: 3n, length: 10n }] } },
      });
      yield finished();
    });
    const o = collector();
    const e = collector();
    await followOutput(client, { stdout: o.stream, stderr: e.stream }, { uuid: U, follow: true, stream: "stderr" });
    expect(o.bytes().toString()).toBe("");
    expect(e.bytes().toString()).toBe("e1\n");
  });

  it("resumes from the next event after a dropped connection: nothing twice, nothing skipped", async () => {
    const { client, froms } = fakeClient(async function* (from, call) {
      if (call === 1) {
        yield out(1, OutputStream.STDOUT, 0, "one\n");
        yield out(2, OutputStream.STDOUT, 4, "two\n");
        throw new ConnectError("read ECONNRESET", Code.Unavailable);
      }
      // The server resends from what was asked; a stale repeat is ignored too.
      if (from <= 2) yield out(2, OutputStream.STDOUT, 4, "two\n");
      yield out(3, OutputStream.STDOUT, 8, "three\n");
      yield finished();
    });
    const o = collector();
    const e = collector();
    const r = await followOutput(client, { stdout: o.stream, stderr: e.stream }, { uuid: U, follow: true });
    expect(o.bytes().toString()).toBe("one\ntwo\nthree\n");
    expect(froms).toEqual([1, 3]);
    expect(e.bytes().toString()).toContain("lost the output stream");
    expect(e.bytes().toString()).toContain("reconnected; resuming at event 3");
    expect(r.finished).not.toBe(null);
  });

  it("R-O5 R-O7: batched responses (events) print like single ones: stdout and stderr bytes and a marker in stream order, resuming after the batch's last event", async () => {
    const trunc = create(FollowOutputResponseSchema, {
      issueUuid: U,
      eventSeq: 3n,
      item: { case: "truncation", value: { cause: TruncationCause.AGENT_WATERMARK, removedBytes: [{ stream: OutputStream.STDOUT, offset: 4n, length: 10n }] } },
    });
    const batch = (...events: FollowOutputResponse[]) =>
      create(FollowOutputResponseSchema, { issueUuid: U, eventSeq: events[events.length - 1]!.eventSeq, events });
    const { client, froms } = fakeClient(async function* (from, call) {
      if (call === 1) {
        yield batch(
          out(1, OutputStream.STDOUT, 0, "ab"),
          out(2, OutputStream.STDOUT, 2, "cd"),
          trunc,
          out(4, OutputStream.STDERR, 0, "E1"),
          out(5, OutputStream.STDOUT, 14, "ef"),
        );
        throw new ConnectError("reset", Code.Unavailable);
      }
      expect(from).toBe(6);
      yield batch(out(6, OutputStream.STDOUT, 16, "gh"), out(7, OutputStream.STDERR, 2, "E2"));
      yield finished();
    });
    const o = collector();
    const e = collector();
    const r = await followOutput(client, { stdout: o.stream, stderr: e.stream }, { uuid: U, follow: true, reconnectForMs: 10_000 });
    expect(o.bytes().toString()).toBe("abcdefgh");
    expect(e.bytes().toString()).toContain("E1");
    expect(e.bytes().toString().indexOf("dropped by the agent")).toBeLessThan(e.bytes().toString().indexOf("E1"));
    expect(e.bytes().toString().endsWith("E2")).toBe(true);
    expect(froms).toEqual([1, 6]);
    expect(r.markers).toBe(1);
    expect(r.bytes).toEqual({ stdout: 8, stderr: 4 });
  });

  it("R-O3 R-O8: followOutput resolves only once stdout and stderr have taken every byte and marker (a write under the high-water mark may still be queued; the CLI exits next)", async () => {
    const { client } = fakeClient(async function* () {
      yield out(1, OutputStream.STDOUT, 0, "x".repeat(1000));
      yield create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: 2n,
        item: { case: "incomplete", value: { streams: [OutputStream.STDOUT], reason: "drain deadline" } },
      });
      yield out(3, OutputStream.STDOUT, 1000, "tail");
      yield finished();
    });
    // A sink that takes each write only when told to, as a full pipe does (its 16 KiB high-water
    // mark is not reached, so write() returns true for every one of these writes).
    const held: Array<() => void> = [];
    const sink = (taken: Buffer[]) =>
      new Writable({
        highWaterMark: 16 * 1024,
        write(c: Buffer, _e, cb) {
          held.push(() => (taken.push(Buffer.from(c)), cb()));
        },
      });
    const outTaken: Buffer[] = [];
    const errTaken: Buffer[] = [];
    let done = false;
    const p = followOutput(client, { stdout: sink(outTaken), stderr: sink(errTaken) }, { uuid: U, follow: true }).then((r) => ((done = true), r));
    for (let i = 0; i < 50 && !done; i++) {
      await new Promise((r) => setTimeout(r, 5));
      held.shift()?.();
    }
    const r = await p;
    expect(held).toHaveLength(0);
    expect(Buffer.concat(outTaken).toString()).toBe(`${"x".repeat(1000)}tail`);
    expect(Buffer.concat(errTaken).toString()).toContain("output incomplete at event 2");
    expect(r.finished?.state).toBe(CommandLifecycle.SUCCEEDED);
  });

  it("R-O3 R-O8: runOperatorCli returns its exit code (the entry points then call process.exit) only once stdout has taken what it wrote", async () => {
    const held: Array<() => void> = [];
    let taken = "";
    const stdout = new Writable({
      highWaterMark: 1 << 20,
      write(c: Buffer, _e, cb) {
        held.push(() => ((taken += c.toString()), cb()));
      },
    });
    let done = false;
    const p = runOperatorCli(["ls", "--help"], { stdout, stderr: collector().stream, env: {}, onInterrupt: () => () => {} }).then((c) => ((done = true), c));
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    for (let i = 0; i < 50 && !done; i++) {
      held.shift()?.();
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(await p).toBe(0);
    expect(taken).toContain("usage: rvbox ls");
  });

  describe("why a command waits (waiting notes)", () => {
    /** A fake whose GetCommand answers `state`/`reason` and counts calls; its stream ends after `endAfterMs`. */
    function waitingClient(state: CommandLifecycle, reason: string, endAfterMs: number) {
      const gets: number[] = [];
      const client = {
        getCommand: async () => {
          gets.push(Date.now());
          return { command: { state, waitingReason: reason } };
        },
        followOutput: () =>
          (async function* () {
            await new Promise((r) => setTimeout(r, endAfterMs));
            yield finished();
          })(),
      } as unknown as ControlClient;
      return { client, gets };
    }

    it("a command the caller already knows to be running costs no GetCommand (run --follow: the submit reply says so)", async () => {
      const { client, gets } = waitingClient(CommandLifecycle.RUNNING, "", 150);
      const e = collector();
      await followOutput(
        client,
        { stdout: collector().stream, stderr: e.stream },
        { uuid: U, follow: true, waitingPollMs: 50, known: { state: CommandLifecycle.RUNNING, waitingReason: "" } },
      );
      expect(gets).toEqual([]);
      expect(e.bytes().toString()).toBe("");
    });

    it("a known waiting reason is said at once and once; later polls say only a change", async () => {
      const { client, gets } = waitingClient(CommandLifecycle.QUEUED, "client draining", 260);
      const e = collector();
      const t0 = Date.now();
      await followOutput(
        client,
        { stdout: collector().stream, stderr: e.stream },
        { uuid: U, follow: true, waitingPollMs: 100, known: { state: CommandLifecycle.QUEUED, waitingReason: "client draining" } },
      );
      expect(e.bytes().toString()).toBe("rvbox: waiting: client draining\n");
      // The first poll waits a full interval (the reply was the first look).
      expect(gets.length).toBeGreaterThanOrEqual(1);
      expect(gets[0]! - t0).toBeGreaterThanOrEqual(90);
    });

    it("without a known state (logs -f) the first poll is at once and its reason is said", async () => {
      const { client, gets } = waitingClient(CommandLifecycle.QUEUED, "client c is offline", 150);
      const e = collector();
      const t0 = Date.now();
      await followOutput(client, { stdout: collector().stream, stderr: e.stream }, { uuid: U, follow: true, waitingPollMs: 1000 });
      expect(gets.length).toBe(1);
      // At once: well before the 1,000 ms interval (loose, for a loaded machine);
      // one GetCommand also shows it came before the output ended at 150 ms.
      expect(gets[0]! - t0).toBeLessThan(500);
      expect(e.bytes().toString()).toBe("rvbox: waiting: client c is offline\n");
    });
  });

  it("an unknown command is a clear, non-transient error", async () => {
    const { client } = fakeClient(async function* () {
      throw new ConnectError(`NOT_FOUND: no command ${U}`, Code.NotFound);
    });
    await expect(followOutput(client, { stdout: collector().stream, stderr: collector().stream }, { uuid: U, follow: true })).rejects.toMatchObject({
      exitCode: 66,
    });
  });
});
