// `rvbox logs ID --tail N` reads back from the end of the stored events
// (shells/operator/follow.ts, `tailStart`): what it prints must be exactly
// what reading every event from the first and keeping the last N lines
// prints, and a long command's tail must cost about its last lines, not the
// whole output. The reference read is the same code with `since: 0` (a time
// filter that keeps everything and turns the read-back off).
import { create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { CommandLifecycle, OutputStream, TruncationCause } from "../../protos/gen/rvbox/v1/common_pb.js";
import { FollowOutputResponseSchema, type FollowOutputResponse } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { ControlClient } from "../../client/control-client.js";
import { followOutput, type FollowOptions } from "../../shells/operator/follow.js";
import { collector } from "./helpers.js";

const U = "11111111-2222-3333-4444-555555555555";
const SCALE = Number(process.env.RVBOX_PROPERTY_SCALE ?? "1");

type Ev = { kind: "out"; stream: "stdout" | "stderr"; text: string } | { kind: "cut"; stream: "stdout" | "stderr"; length: number } | { kind: "exit" };

/** The stored events of a command, as the server sends them from any event on. */
function storedEvents(evs: Ev[]): FollowOutputResponse[] {
  const offset = { stdout: 0, stderr: 0 };
  return evs.map((e, i) => {
    const seq = BigInt(i + 1);
    if (e.kind === "exit")
      return create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: seq,
        item: { case: "lifecycle", value: { state: CommandLifecycle.RUNNING } },
      });
    const stream = e.stream === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR;
    const at = offset[e.stream];
    if (e.kind === "cut") {
      offset[e.stream] += e.length;
      return create(FollowOutputResponseSchema, {
        issueUuid: U,
        eventSeq: seq,
        item: {
          case: "truncation",
          value: { cause: TruncationCause.AGENT_WATERMARK, removedBytes: [{ stream, offset: BigInt(at), length: BigInt(e.length) }] },
        },
      });
    }
    const data = Buffer.from(e.text);
    offset[e.stream] += data.length;
    return create(FollowOutputResponseSchema, { issueUuid: U, eventSeq: seq, item: { case: "output", value: { stream, streamOffset: BigInt(at), data } } });
  });
}

/** A server holding `events`: GetCommand says how many are stored, FollowOutput serves them from any seq in batches. */
function fakeServer(events: FollowOutputResponse[], batch = 7) {
  let served = 0;
  const froms: number[] = [];
  const client = {
    getCommand: async () => ({ command: { storedThroughEventSeq: BigInt(events.length) } }),
    followOutput: (req: { fromEventSeq: bigint }) => {
      froms.push(Number(req.fromEventSeq));
      return (async function* () {
        const rest = events.slice(Math.max(0, Number(req.fromEventSeq) - 1));
        for (let i = 0; i < rest.length; i += batch) {
          served += Math.min(batch, rest.length - i);
          yield create(FollowOutputResponseSchema, { issueUuid: U, events: rest.slice(i, i + batch) });
        }
        yield create(FollowOutputResponseSchema, {
          issueUuid: U,
          item: { case: "finished", value: { issueUuid: U, state: CommandLifecycle.SUCCEEDED, exitCode: 0 } },
        });
      })();
    },
  } as unknown as ControlClient;
  return { client, served: () => served, froms };
}

async function read(events: FollowOutputResponse[], o: Omit<FollowOptions, "uuid" | "follow">, batch?: number) {
  const srv = fakeServer(events, batch);
  const out = collector();
  const err = collector();
  await followOutput(srv.client, { stdout: out.stream, stderr: err.stream }, { uuid: U, follow: false, ...o });
  return { stdout: out.bytes().toString(), stderr: err.bytes().toString(), served: srv.served(), froms: srv.froms };
}

const line = fc.oneof(
  { weight: 8, arbitrary: fc.stringMatching(/^[a-z]{0,12}\n$/) },
  { weight: 3, arbitrary: fc.stringMatching(/^[a-z]{1,9}$/) }, // no newline: the line goes on in a later event
  { weight: 1, arbitrary: fc.constant("\n\n") },
  { weight: 1, arbitrary: fc.integer({ min: 65_000, max: 140_000 }).map((n) => "L".repeat(n)) }, // past the 64 KiB line cut
);
const ev: fc.Arbitrary<Ev> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant("out" as const),
      stream: fc.constantFrom("stdout" as const, "stderr" as const),
      text: fc.array(line, { minLength: 1, maxLength: 4 }).map((l) => l.join("")),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("cut" as const),
      stream: fc.constantFrom("stdout" as const, "stderr" as const),
      length: fc.integer({ min: 1, max: 5000 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "exit" as const }) },
);

describe("rvbox logs --tail reads back from the end", () => {
  it("prints exactly what a read from the first event keeps: any output, markers, both streams, --stream, --events, --timestamps", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(ev, { minLength: 0, maxLength: 80 }),
        fc.integer({ min: 0, max: 15 }),
        fc.constantFrom(undefined, "stdout" as const, "stderr" as const),
        fc.boolean(),
        fc.boolean(),
        fc.integer({ min: 1, max: 9 }),
        async (evs, tail, stream, events, timestamps, batch) => {
          const stored = storedEvents(evs);
          const opts = { stream, events, onlyStreamToStdout: stream === "stderr", acceptZstd: false };
          const got = await read(stored, { ...opts, lines: { tail, timestamps } }, batch);
          const want = await read(stored, { ...opts, lines: { tail, timestamps, since: 0 } }, batch);
          expect(got.stdout).toBe(want.stdout);
          expect(got.stderr).toBe(want.stderr);
        },
      ),
      { numRuns: Math.max(20, Math.round(300 * SCALE)) },
    );
  });

  it("the tail of a long command costs about its last lines: --tail 3 of 5,000 one-line events reads a few dozen of them", async () => {
    const stored = storedEvents(Array.from({ length: 5000 }, (_, i): Ev => ({ kind: "out", stream: "stdout", text: `line ${i + 1}\n` })));
    const r = await read(stored, { lines: { tail: 3 } });
    expect(r.stdout).toBe("line 4998\nline 4999\nline 5000\n");
    expect(r.served).toBeLessThan(40);
    expect(r.froms.every((f) => f > 4900)).toBe(true);
    const whole = await read(stored, { lines: { tail: 3, since: 0 } });
    expect(whole.stdout).toBe(r.stdout);
    expect(whole.served).toBe(5000);
  });

  it("a tail longer than the output reads it all from the first event, and --tail 0 prints nothing from one short window", async () => {
    const stored = storedEvents(Array.from({ length: 50 }, (_, i): Ev => ({ kind: "out", stream: "stdout", text: `${i}\n` })));
    const all = await read(stored, { lines: { tail: 1000 } });
    expect(all.stdout).toBe(Array.from({ length: 50 }, (_, i) => `${i}\n`).join(""));
    expect(all.froms[all.froms.length - 1]).toBe(1);
    const none = await read(stored, { lines: { tail: 0 } });
    expect(none.stdout).toBe("");
    expect(none.served).toBeLessThanOrEqual(4);
  });

  it("a stream's unterminated last line takes its place by its last byte: last when it came last, not when it came first", async () => {
    const early = storedEvents([
      { kind: "out", stream: "stderr", text: "progress: " },
      ...Array.from({ length: 30 }, (_, i): Ev => ({ kind: "out", stream: "stdout", text: `${i}\n` })),
    ]);
    for (const lines of [{ tail: 2 }, { tail: 2, since: 0 }]) {
      const r = await read(early, { lines });
      expect(r.stdout).toBe("28\n29\n");
      expect(r.stderr).toBe("");
    }
    const late = storedEvents([
      ...Array.from({ length: 30 }, (_, i): Ev => ({ kind: "out", stream: "stdout", text: `${i}\n` })),
      { kind: "out", stream: "stderr", text: "done?" },
    ]);
    const r = await read(late, { lines: { tail: 2 } });
    expect(r.stdout).toBe("29\n");
    expect(r.stderr).toBe("done?");
  });

  it("--tail 100000 of many lines is linear: every line kept, in order", async () => {
    const n = 120_000;
    const text = Array.from({ length: n }, (_, i) => `${i}\n`);
    const evs: Ev[] = [];
    for (let i = 0; i < n; i += 1000) evs.push({ kind: "out", stream: "stdout", text: text.slice(i, i + 1000).join("") });
    const r = await read(storedEvents(evs), { lines: { tail: 100_000 } });
    expect(r.stdout).toBe(text.slice(n - 100_000).join(""));
  });
});

describe("shaped lines are written in pieces, not a write per line", () => {
  it("--timestamps and --since of 20,000 lines: every line, stamped once per event time, in a few dozen writes", async () => {
    const lines = Array.from({ length: 20_000 }, (_, i) => `line ${i}\n`);
    const evs: Ev[] = [];
    for (let i = 0; i < lines.length; i += 500) evs.push({ kind: "out", stream: "stdout", text: lines.slice(i, i + 500).join("") });
    const stored = storedEvents(evs).map((m, i) => {
      m.time = { seconds: BigInt(1_700_000_000 + i), nanos: 0, $typeName: "google.protobuf.Timestamp" };
      return m;
    });
    for (const lineOpts of [{ timestamps: true }, { since: 0 }]) {
      let writes = 0;
      const parts: Buffer[] = [];
      const stdout = new Writable({
        writev(chunks, cb) {
          writes++;
          for (const c of chunks) parts.push(Buffer.from(c.chunk));
          cb();
        },
        write(chunk, _e, cb) {
          writes++;
          parts.push(Buffer.from(chunk));
          cb();
        },
      });
      const srv = fakeServer(stored, 4);
      await followOutput(srv.client, { stdout, stderr: collector().stream }, { uuid: U, follow: false, lines: lineOpts, acceptZstd: false });
      const text = Buffer.concat(parts).toString();
      if (lineOpts.timestamps) {
        const want = lines.map((l, i) => `${new Date((1_700_000_000 + Math.floor(i / 500)) * 1000).toISOString()} ${l}`).join("");
        expect(text).toBe(want);
      } else expect(text).toBe(lines.join(""));
      expect(writes).toBeLessThan(60);
    }
  });
});
