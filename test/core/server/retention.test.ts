import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ByteRangeSchema, OutputStream, OutputTruncationSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { MAX_INCIDENTS_KEPT } from "../../../core/limits.js";
import { testPorts } from "../../support/ports.js";

import { T0, of, output, ServerRig } from "../../support/server-rig.js";

void MAX_INCIDENTS_KEPT;

/** The server retention markers a follower of `uuid` is shown (FollowOutput): their event range and byte ranges. */
const markersOf = (r: ServerRig, uuid: string) =>
  r.outputOf(uuid).items.flatMap((i) => (i.kind === "truncation" && i.cause === "server-retention" ? [{ events: i.events, ranges: i.ranges }] : []));

describe("retention", () => {
  it("R-O5: output segments roll at segmentBytes; past the per-command budget whole old segments go, with one cumulative marker", () => {
    const raw = new Uint8Array(40).fill(7);
    const zlen = testPorts.compress(raw).length;
    const r = new ServerRig({ segmentBytes: 2 * zlen, outputPerCommand: 4 * zlen });
    const c = r.connect();
    r.running(c, "c1");
    let seq = 2;
    let off = 0;
    let errOff = 0;
    const put = (stream = OutputStream.STDOUT) => {
      const out = r.event(c, "c1", seq++, output(stream, stream === OutputStream.STDOUT ? off : errOff, raw));
      if (stream === OutputStream.STDOUT) off += raw.length;
      else errOff += raw.length;
      return out;
    };
    put();
    put();
    // internal: the segment layout (what is dropped together; observed below when the drop comes)
    expect(r.cmd("c1").output.segments).toEqual([{ firstSeq: 2, lastSeq: 3, bytes: 2 * zlen, ranges: [{ stream: "stdout", offset: 0, length: 80 }] }]);
    put(OutputStream.STDERR);
    put();
    expect(r.cmd("c1").output.segments[1]).toEqual({
      firstSeq: 4,
      lastSeq: 5,
      bytes: 2 * zlen,
      ranges: [
        { stream: "stderr", offset: 0, length: 40 },
        { stream: "stdout", offset: 80, length: 40 },
      ],
    });
    expect(r.command("c1").retainedBytes).toBe(4 * zlen); // exactly the budget: nothing dropped
    expect(r.command("c1").retentionMarkers).toBe(0);
    r.now = T0 + 5;
    const drop = put();
    // internal: the layout, as above
    expect(r.cmd("c1").output.segments.map((s) => [s.firstSeq, s.lastSeq])).toEqual([
      [4, 5],
      [6, 6],
    ]);
    expect(markersOf(r, "c1")).toEqual([{ events: { first: 2, last: 3 }, ranges: [{ stream: "stdout", offset: 0, length: 80 }] }]);
    expect(r.command("c1").retentionMarkers).toBe(1);
    expect(r.command("c1").retainedBytes).toBe(3 * zlen);
    expect(of(drop, "drop_output")).toEqual([{ type: "drop_output", uuid: "c1", throughSeq: 3 }]);
    expect(r.disk.durable.get("retention")!.get("c1")).toEqual({
      uuid: "c1",
      firstSeq: 2,
      lastSeq: 3,
      ranges: [{ stream: "stdout", offset: 0, length: 80 }],
      at: T0 + 5,
    });
    put();
    put();
    expect(markersOf(r, "c1")).toEqual([
      {
        events: { first: 2, last: 5 },
        ranges: [
          { stream: "stdout", offset: 0, length: 120 },
          { stream: "stderr", offset: 0, length: 40 },
        ],
      },
    ]);
    expect(r.disk.durable.get("retention")!.get("c1")).toMatchObject({ firstSeq: 2, lastSeq: 5, at: T0 + 5 });
    expect(r.outputOf("c1").gaps).toBe(0);
    expect(r.client("a")!.retainedOutputBytes).toBe(BigInt(r.command("c1").retainedBytes));
  });

  it("R-O5: past the per-client budget the client's oldest output goes first, never a command's only segment", () => {
    const raw = new Uint8Array(40).fill(1);
    const zlen = testPorts.compress(raw).length;
    const r = new ServerRig({ segmentBytes: zlen, outputPerClient: 3 * zlen });
    const c = r.connect();
    r.running(c, "old");
    r.running(c, "new");
    r.event(c, "old", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "new", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "new", 3, output(OutputStream.STDOUT, 40, raw));
    expect(r.client("a")!.retainedOutputBytes).toBe(BigInt(3 * zlen)); // exactly the budget
    r.event(c, "new", 4, output(OutputStream.STDOUT, 80, raw));
    expect(r.command("old").retainedBytes).toBe(0);
    expect(r.command("old").retentionMarkers).toBe(1);
    expect(markersOf(r, "old")).toEqual([{ events: { first: 2, last: 2 }, ranges: [{ stream: "stdout", offset: 0, length: 40 }] }]);
    expect(r.command("new").retainedBytes).toBe(3 * zlen);
    expect(r.command("new").retentionMarkers).toBe(0);
    expect([...r.st.clientOutput.get("a")!.uuids]).toEqual(["new"]); // internal: the client's retention index (ListClients shows only its bytes)
    r.event(c, "new", 5, output(OutputStream.STDOUT, 120, raw));
    // Now the client's oldest output is new's first segment: it goes, the rest stay.
    expect(markersOf(r, "new")).toEqual([{ events: { first: 2, last: 2 }, ranges: [{ stream: "stdout", offset: 0, length: 40 }] }]);
    expect(r.outputOf("new").items.flatMap((i) => (i.kind === "output" ? [i.seq] : []))).toEqual([3, 4, 5]);
    expect(r.command("new").retainedBytes).toBe(3 * zlen);
    expect(r.client("a")!.retainedOutputBytes).toBe(BigInt(3 * zlen));
  });
});

// ====================================================================== restart

describe("retention edges", () => {
  const raw = new Uint8Array(40).fill(5);
  const zlen = testPorts.compress(raw).length;

  it("R-O5: a segment's ranges merge only when the same stream continues exactly", () => {
    const r = new ServerRig({ segmentBytes: 1_000_000 });
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, output(OutputStream.STDERR, 0, raw));
    r.event(c, "c1", 3, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "c1", 4, output(OutputStream.STDERR, 40, raw)); // lines up with stdout's end, but another stream
    r.event(c, "c1", 5, output(OutputStream.STDOUT, 40, raw));
    r.event(c, "c1", 6, {
      case: "truncation",
      value: create(OutputTruncationSchema, { removedBytes: [create(ByteRangeSchema, { stream: OutputStream.STDOUT, offset: 80n, length: 60n })], cause: 2 }),
    });
    r.event(c, "c1", 7, output(OutputStream.STDOUT, 140, raw)); // same stream after a gap
    r.event(c, "c1", 8, output(OutputStream.STDOUT, 180, raw)); // continues exactly
    // internal: a segment's ranges (no peer sees them until the segment is dropped; the marker test below shows them then)
    expect(r.cmd("c1").output.segments).toEqual([
      {
        firstSeq: 2,
        lastSeq: 8,
        bytes: 6 * zlen,
        ranges: [
          { stream: "stderr", offset: 0, length: 40 },
          { stream: "stdout", offset: 0, length: 40 },
          { stream: "stderr", offset: 40, length: 40 },
          { stream: "stdout", offset: 40, length: 40 },
          { stream: "stdout", offset: 140, length: 80 },
        ],
      },
    ]);
  });

  it("R-O5: one segment is never dropped, however far over the per-command or per-client budget", () => {
    const r = new ServerRig({ segmentBytes: 1_000_000, outputPerCommand: 2 * zlen, outputPerClient: 2 * zlen });
    const c = r.connect();
    r.running(c, "c1");
    for (let i = 0; i < 4; i++) r.event(c, "c1", 2 + i, output(OutputStream.STDOUT, 40 * i, raw));
    expect(r.cmd("c1").output.segments).toHaveLength(1); // internal: the layout (one segment, whatever the budgets)
    expect(r.command("c1").retainedBytes).toBe(4 * zlen);
    expect(r.command("c1").retentionMarkers).toBe(0);
    expect(of(r.log, "drop_output")).toEqual([]);
  });

  it("R-O5: the retention marker extends each stream's range only where that stream continues exactly", () => {
    const r = new ServerRig({ segmentBytes: zlen, outputPerCommand: zlen });
    const c = r.connect();
    r.running(c, "c1");
    r.event(c, "c1", 2, output(OutputStream.STDOUT, 0, raw));
    r.event(c, "c1", 3, output(OutputStream.STDERR, 0, raw));
    r.event(c, "c1", 4, output(OutputStream.STDERR, 40, raw));
    r.event(c, "c1", 5, {
      case: "truncation",
      value: create(OutputTruncationSchema, { removedBytes: [create(ByteRangeSchema, { stream: OutputStream.STDOUT, offset: 40n, length: 60n })], cause: 2 }),
    });
    r.event(c, "c1", 6, output(OutputStream.STDOUT, 100, raw));
    r.event(c, "c1", 7, output(OutputStream.STDOUT, 140, raw));
    expect(r.outputOf("c1").items.flatMap((i) => (i.kind === "output" ? [i.seq] : []))).toEqual([7]);
    expect(markersOf(r, "c1")).toEqual([
      {
        events: { first: 2, last: 6 },
        ranges: [
          { stream: "stdout", offset: 0, length: 40 },
          { stream: "stderr", offset: 0, length: 80 },
          { stream: "stdout", offset: 100, length: 40 },
        ],
      },
    ]);
    expect(r.disk.durable.get("retention")!.get("c1")).toMatchObject({ firstSeq: 2, lastSeq: 6, at: T0 });
  });
});
